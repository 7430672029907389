"""openai-python's AsyncOpenAI and OpenAI against the loopback test server, through
choicewise.stream(): real HTTP to 127.0.0.1, the client's own request."""

import asyncio
import json
import os

import openai
import pytest

import choicewise
from conftest import FIXTURES, serving


def golden(name):
    return {c["index"]: c for c in json.loads((FIXTURES / "expected" / f"{name}.json").read_text())["choices"]}


def test_async_client_streams_each_choice():
    expected = golden("openai_n3_tools")

    async def main(url):
        client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
        order, texts = [], {}

        async def show(choice):
            texts[choice.index] = "".join([d async for d in choice.content()])

        async with choicewise.stream(
            client, model="gpt-4o-mini", n=3, messages=[{"role": "user", "content": "hi"}]
        ) as completions:
            tasks = []
            async for choice in completions.choices():
                order.append(choice.index)
                tasks.append(asyncio.create_task(show(choice)))
            await asyncio.gather(*tasks)
            whole = await completions.collect()
            usage = await completions.usage()
        return order, texts, whole, usage

    with serving("openai_n3_tools.sse", "--writes", "1-30", "--seed", "3") as url:
        order, texts, whole, usage = asyncio.run(main(url))
    assert order == [2, 0, 1]
    assert texts == {i: c["content"] or "" for i, c in expected.items()}
    assert isinstance(whole, openai.types.chat.ChatCompletion)
    assert [c.finish_reason for c in whole.choices] == [expected[i]["finish_reason"] for i in range(3)]
    assert usage["total_tokens"] > 0


def test_sync_client_outside_any_loop():
    expected = golden("demo")
    with serving("demo.sse", "--writes", "1-50") as url:
        client = openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0)
        with choicewise.stream(client, model="m", n=3, messages=[]) as completions:
            texts = {c.index: "".join(c.content()) for c in completions.choices()}
            whole = completions.collect()
    assert texts == {i: c["content"] or "" for i, c in expected.items()}
    assert whole.choices[0].message.content == expected[0]["content"]


def test_an_error_status_is_openais_own_exception():
    with serving("demo.sse", "--status", "401") as url:
        client = openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            with choicewise.stream(client, model="m", n=3, messages=[]):
                pass


def test_cancelling_the_task_cancels_the_request():
    # The server stalls after a few events: the task reading is cancelled, the block exits,
    # every choice ends cancelled and the response is closed.
    async def main(url):
        client = openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0)
        seen = {}

        async def read():
            async with choicewise.stream(client, model="m", n=3, messages=[]) as completions:
                seen["completions"] = completions
                choice = await completions.choice(0)
                seen["choice"] = choice
                async for _ in choice.content():
                    pass

        task = asyncio.create_task(read())
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        whole = await asyncio.wait_for(seen["completions"].collect(), 5)
        return seen["choice"], whole

    with serving("demo.sse", "--stall-after", "3000") as url:
        choice, whole = asyncio.run(main(url))
    assert choice.cancelled
    assert all(c.finish_reason in (None, "stop", "tool_calls") for c in whole.choices)


@pytest.mark.skipif(
    not os.environ.get("CHOICEWISE_LLAMA_URL"),
    reason="needs the real llama.cpp server (CI starts it: scripts/llama-server.sh)",
)
def test_a_real_llama_server_streams_n_choices():
    """llama.cpp's own server (CHOICEWISE_LLAMA_URL, on 127.0.0.1): n = 3 per-choice
    streams through openai-python, each choice whole and finished."""
    url = os.environ["CHOICEWISE_LLAMA_URL"]

    async def main():
        client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
        async with choicewise.stream(
            client,
            model="smollm2",
            n=3,
            max_tokens=16,
            temperature=0.8,
            seed=7,
            messages=[{"role": "user", "content": "Name a colour."}],
        ) as completions:
            texts = {}
            async for choice in completions.choices():
                texts[choice.index] = "".join([d async for d in choice.content()])
            whole = await completions.collect()
            usage = await completions.usage()
        return texts, whole, usage

    texts, whole, usage = asyncio.run(main())
    # The server's own count, asked for as the CLI and the Rust client ask for it.
    assert usage["source"] == "reported", usage
    assert usage["prompt_tokens"] > 0, usage
    assert sorted(texts) == [0, 1, 2]
    assert all(texts.values()), texts
    assert all(c.finish_reason in ("stop", "length") for c in whole.choices), whole
    assert [c.message.content for c in sorted(whole.choices, key=lambda c: c.index)] == [
        texts[i] for i in range(3)
    ]
