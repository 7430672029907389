"""Hostile streams: a clear exception of the package, and nothing received lost."""

import asyncio
import json

import pytest

import choicewise
from conftest import fixture_bytes, pieces, serving


def test_error_mid_stream_keeps_what_arrived():
    data = fixture_bytes("error_mid_stream.sse")
    completions = choicewise.Completions(pieces(data, 9))
    # What the stream said for choice 0 before its error, by a plain reading of the chunks.
    before = data.split(b'data: {"error"')[0]
    sent = ""
    for line in before.decode().splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:])["choices"]:
                if c["index"] == 0:
                    sent += c["delta"].get("content") or ""
    choice = completions.choice(0)
    received = []
    with pytest.raises(choicewise.ChoicewiseError) as info:
        for delta in choice.content():
            received.append(delta)
    assert "".join(received) == sent and sent
    e = info.value
    assert e.kind == "upstream"
    error_at = data.index(b'data: {"error"')
    assert e.line == data[:error_at].count(b"\n") + 1 and e.choice is None
    assert "server had an error" in str(e)
    with pytest.raises(choicewise.ChoicewiseError) as info:
        completions.collect()
    partial = info.value.partial
    assert partial.choices[0].message.content == sent


def test_malformed_chunk_names_its_line():
    data = b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\ndata: {"choices": [\n\n'
    completions = choicewise.Completions(data)
    choice = completions.choice(0)
    got = []
    with pytest.raises(choicewise.ChoicewiseError) as info:
        for d in choice.content():
            got.append(d)
    assert got == ["ok"]
    assert (info.value.kind, info.value.line, info.value.choice) == ("chunk", 3, None)


def test_a_bad_update_fails_only_its_choice():
    data = (
        b'data: {"choices":[{"index":0,"delta":{"content":5}}]}\n\n'
        b'data: {"choices":[{"index":1,"delta":{"content":"fine"},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    completions = choicewise.Completions(data)
    errors = completions.choice_errors()
    assert [(i, e.kind, e.choice, e.line) for i, e in errors] == [(0, "update", 0, 1)]
    assert "".join(completions.choice(1).content()) == "fine"


def test_an_iterable_that_raises_or_yields_junk():
    def chunks():
        yield b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        raise OSError("the socket broke")

    completions = choicewise.Completions(chunks())
    choice = completions.choice(0)
    with pytest.raises(choicewise.ChoicewiseError) as info:
        assert list(choice.content()) == ["a"]
    assert info.value.kind == "transport" and "the socket broke" in str(info.value)
    with pytest.raises(TypeError, match="must be bytes"):
        choicewise.Completions([b'data: {"choices":[]}\n\n', 42])

    def junk():
        yield b'data: {"choices":[]}\n\n'
        yield 42

    with pytest.raises(choicewise.ChoicewiseError, match="must be bytes") as info:
        choicewise.Completions(junk()).collect()
    assert info.value.kind == "transport"


def texts_of(events: bytes):
    """Each choice's text in these complete SSE events."""
    texts = {}
    for line in events.decode().splitlines():
        if line.startswith("data: {"):
            for c in json.loads(line[6:]).get("choices", []):
                texts.setdefault(c["index"], "")
                texts[c["index"]] += c.get("delta", {}).get("content") or ""
    return texts


def test_connection_cut_by_the_server_async():
    from openai import AsyncOpenAI

    data = fixture_bytes("openai_n3_tools.sse")
    # Cut 10 bytes into an event past the middle: every event before it arrived whole.
    event = data.index(b"data: ", len(data) // 2)
    cut = event + 10

    async def main(url):
        client = AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
        texts, errors = {}, []
        async with choicewise.stream(client, model="m", n=3, messages=[]) as completions:
            async for choice in completions.choices():
                texts[choice.index] = ""
                try:
                    async for delta in choice.content():
                        texts[choice.index] += delta
                except choicewise.ChoicewiseError as e:
                    errors.append(e)
        return texts, errors

    with serving("openai_n3_tools.sse", "--writes", "1-40", "--close-after", str(cut)) as url:
        texts, errors = asyncio.run(main(url))
    assert errors and all(e.kind in ("transport", "truncated") for e in errors), errors
    want = texts_of(data[:event])
    assert texts == {i: want.get(i, "") for i in texts} and set(want) <= set(texts)


def test_partial_json_errors():
    p = choicewise.PartialJson()
    p.feed('{"a": [1, 2')
    with pytest.raises(choicewise.PartialJsonError) as info:
        p.feed("}")
    assert info.value.offset == 11 and info.value.kind == "partial_json"
    assert isinstance(info.value, choicewise.ChoicewiseError)
    assert p.value == {"a": [1, 2]}  # the last good value: "}" ended the number
    with pytest.raises(TypeError):
        p.feed(5)
