"""Recorded fixtures through Completions: each choice's text, calls and finish match the
OpenAI SDK's own per-choice results (tests/fixtures/expected), whatever the cuts."""

import asyncio
import json

import pytest

import choicewise
from conftest import FIXTURES, fixture_bytes, pieces

WITH_GOLDEN = sorted(p.stem for p in (FIXTURES / "expected").glob("*.json"))


def golden(name):
    return {c["index"]: c for c in json.loads((FIXTURES / "expected" / f"{name}.json").read_text())["choices"]}


@pytest.mark.parametrize("name", WITH_GOLDEN)
@pytest.mark.parametrize("size", [1, 7, 4096])
def test_each_choice_matches_the_sdk_sync(name, size):
    expected = golden(name)
    completions = choicewise.Completions(pieces(fixture_bytes(f"{name}.sse"), size))
    seen = {}
    for choice in completions.choices():
        seen[choice.index] = "".join(choice.content())
    assert seen.keys() == expected.keys()
    for index, text in seen.items():
        assert text == (expected[index]["content"] or ""), index
    whole = completions.collect()
    for c in whole.choices:
        assert c.finish_reason == expected[c.index]["finish_reason"]
        calls = expected[c.index]["tool_calls"]
        if calls:
            assert [t.function.arguments for t in c.message.tool_calls] == [
                t["function"]["arguments"] for t in calls
            ]


def test_out_of_order_first_appearance():
    # openai_n3_tools: choice 2 speaks first, then 0, then 1.
    completions = choicewise.Completions(fixture_bytes("openai_n3_tools.sse"))
    assert [c.index for c in completions.choices()] == [2, 0, 1]
    assert [c.index for c in completions.collect().choices] == [0, 1, 2]


def test_several_choices_in_one_chunk_async():
    expected = golden("multi_choice_chunk")

    async def main():
        completions = choicewise.Completions(pieces(fixture_bytes("multi_choice_chunk.sse"), 13))

        async def read(choice):
            return choice.index, "".join([d async for d in choice.content()])

        tasks = [asyncio.create_task(read(c)) async for c in completions.choices()]
        results = dict(await asyncio.gather(*tasks))
        whole = await completions.collect()
        return results, whole

    results, whole = asyncio.run(main())
    assert results == {i: c["content"] for i, c in expected.items()}
    assert whole.object == "chat.completion"


def test_tool_call_fragments_merge_by_their_own_index():
    expected = golden("openai_n2_interleaved_tools")
    completions = choicewise.Completions(pieces(fixture_bytes("openai_n2_interleaved_tools.sse"), 5))
    for choice in completions.choices():
        events = list(choice.function_calls())
        finished = [e for e in events if e["type"] == "finished"]
        want = expected[choice.index]["tool_calls"] or []
        assert [(e["name"], e["arguments"]) for e in finished] == [
            (t["function"]["name"], t["function"]["arguments"]) for t in want
        ]
        for e in finished:
            assert e["value"] == json.loads(e["arguments"])
        # The fragments of each call add up to its arguments.
        for e in finished:
            fragments = [f["fragment"] for f in events if f["type"] == "arguments" and f["call"] == e["call"]]
            assert "".join(fragments) == e["arguments"]


def test_sources_of_every_kind():
    data = fixture_bytes("demo.sse")
    expected = golden("demo")

    def texts(completions):
        return {c.index: "".join(c.content()) for c in completions.choices()}

    want = {i: c["content"] or "" for i, c in expected.items()}
    assert texts(choicewise.Completions(data)) == want
    assert texts(choicewise.Completions(bytearray(data))) == want
    assert texts(choicewise.Completions(iter(pieces(data, 100)))) == want  # a generator, on a thread
    assert texts(choicewise.Completions(tuple(pieces(data, 3)))) == want
    with open(FIXTURES / "demo.sse", "rb") as f:  # a file: its lines
        assert texts(choicewise.Completions(f)) == want

    async def from_async():
        async def chunks():
            for p in pieces(data, 64):
                await asyncio.sleep(0)
                yield p

        completions = choicewise.Completions(chunks())
        return {c.index: "".join([d async for d in c.content()]) async for c in completions.choices()}

    assert asyncio.run(from_async()) == want


def test_dual_methods_outside_and_inside_a_loop():
    data = fixture_bytes("demo.sse")
    completions = choicewise.Completions(data)
    whole = completions.collect()  # no loop: the result
    assert whole.object == "chat.completion"
    message = completions.choice(0).message()
    assert message["index"] == 0 and message["finish_reason"] == whole.choices[0].finish_reason
    assert completions.choice(9) is None

    async def main():
        c = choicewise.Completions(data)
        awaitable = c.collect()
        assert not isinstance(awaitable, dict) and hasattr(awaitable, "__await__")
        return await awaitable

    assert asyncio.run(main()).choices == whole.choices


def test_threads_read_choices_side_by_side():
    import threading

    completions = choicewise.Completions(pieces(fixture_bytes("vllm_n4_reasoning.sse"), 11))
    expected = golden("vllm_n4_reasoning")
    results = {}

    def read(choice):
        results[choice.index] = "".join(choice.content())

    threads = [threading.Thread(target=read, args=(c,)) for c in completions.choices()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: c["content"] or "" for i, c in expected.items()}


def test_collect_without_openai_gives_a_dict(monkeypatch):
    import choicewise._compat as compat

    monkeypatch.setattr(compat, "_ChatCompletion", None)
    whole = choicewise.Completions(fixture_bytes("demo.sse")).collect()
    assert isinstance(whole, dict) and whole["object"] == "chat.completion"


def test_a_blocking_for_inside_a_loop_raises_rather_than_stalls_it():
    async def main():
        async def later():
            await asyncio.sleep(0.2)
            yield b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'

        completions = choicewise.Completions(later())
        with pytest.raises(RuntimeError, match="async for"):
            next(completions.choices())
        # The loop was not blocked: the async source still feeds the completion.
        choice = await completions.choice(0)
        return [d async for d in choice.content()]

    assert asyncio.run(main()) == ["hi"]
