"""PartialJson against json.loads on a corpus: every snapshot is consistent with the whole,
and the end equals json.loads."""

import json
import random

import pytest

import choicewise

CORPUS = [
    '{"city": "Paris", "days": 3}',
    '{"steps": [{"n": 1, "say": "hello"}, {"n": 2, "say": "w\\u00f6rld \\ud83d\\ude00"}], "ok": true, "x": null}',
    '[1, -2.5, 3e10, "a\\"b\\\\c", [], {}, [[[]]], {"k": {"k": {"k": false}}}]',
    '"just a string with \\n escapes"',
    '  {"unicode": "Café — 東京 😀", "empty": "", "nums": [0, 0.0, -0, 1E-5, 12345678901234]}  ',
    json.dumps({"rows": [{"id": i, "name": f"row {i}", "tags": ["a", "b"][: i % 3]} for i in range(200)]}),
]


def consistent(partial, whole):
    """Whether `partial` can be a snapshot of `whole`: every closed part equal, open strings
    prefixes, open containers holding a prefix of the elements (or a subset of the keys)."""
    if isinstance(partial, dict):
        return isinstance(whole, dict) and all(k in whole and consistent(v, whole[k]) for k, v in partial.items())
    if isinstance(partial, list):
        return (
            isinstance(whole, list)
            and len(partial) <= len(whole)
            and all(consistent(p, w) for p, w in zip(partial, whole))
        )
    if isinstance(partial, str):
        return isinstance(whole, str) and whole.startswith(partial)
    return partial == whole


@pytest.mark.parametrize("live", [False, True])
@pytest.mark.parametrize("text", CORPUS)
@pytest.mark.parametrize("size", [1, 4, 17])
def test_snapshots_and_the_end_match_json_loads(text, size, live):
    whole = json.loads(text)
    p = choicewise.PartialJson(live=live)
    for i in range(0, len(text), size):
        p.feed(text[i : i + size])
        if p.value is not None:
            assert consistent(p.value, whole), (text[: i + size], p.value)
    assert p.finish() == whole
    if not isinstance(whole, (int, float)):
        assert p.value == whole


def test_a_live_value_is_one_object_updated_in_place():
    text = '{"b": [1, {"x": "he'
    rest = 'llo"}, 2], "a": "z", "c": {}}'
    p = choicewise.PartialJson(live=True)
    p.feed(text)
    first = p.value
    assert first == {"b": [1, {"x": "he"}]}
    p.feed(rest)
    last = p.value
    assert last is first, "the root is the same object"
    assert last == {"b": [1, {"x": "hello"}, 2], "a": "z", "c": {}}
    assert list(last) == ["b", "a", "c"], "members keep their order of arrival, as json.loads"
    # A snapshot parser's values are each their own.
    q = choicewise.PartialJson()
    q.feed(text)
    before = q.value
    q.feed(rest)
    assert before == {"b": [1, {"x": "he"}]} and q.value is not before


def test_a_live_value_follows_a_duplicate_key():
    p = choicewise.PartialJson(live=True)
    for ch in '{"a": "old", "a": "ne':
        p.feed(ch)
        p.value
    assert p.value == {"a": "ne"}
    p.feed('w"}')
    assert p.value == {"a": "new"} == json.loads('{"a": "old", "a": "new"}')


def test_random_cuts_and_bytes():
    rng = random.Random(7)
    for text in CORPUS:
        data = text.encode()
        p = choicewise.PartialJson()
        i = 0
        while i < len(data):
            j = min(len(data), i + rng.randint(1, 9))
            # Fragments are cut on character boundaries (a str); bytes are whole UTF-8.
            while j < len(data) and (data[j] & 0xC0) == 0x80:
                j += 1
            p.feed(data[i:j])
            i = j
        assert p.finish() == json.loads(text)


def test_values_as_they_grow():
    p = choicewise.PartialJson()
    assert p.value is None
    p.feed('{"a": [1, 2')
    assert p.value == {"a": [1]}  # 2 may become 23
    p.feed(", 3")
    assert p.value == {"a": [1, 2]}
    p.feed('], "b": "he')
    assert p.value == {"a": [1, 2, 3], "b": "he"}
    p.feed('llo"}')
    assert p.value == {"a": [1, 2, 3], "b": "hello"} and p.complete


def test_invalid_json_is_caught_like_json_loads():
    for bad in ['{"a": 1,}', "[1 2]", '{"a" 1}', "tru", '{"a": 1} x']:
        p = choicewise.PartialJson()
        with pytest.raises(choicewise.PartialJsonError):
            for ch in bad:
                p.feed(ch)
            p.finish()
        with pytest.raises(json.JSONDecodeError):
            json.loads(bad)
