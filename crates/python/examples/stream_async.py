"""In a coroutine: one request with n = 3 made with openai's AsyncOpenAI, one task per
choice, then the whole completion and its usage. The waiting methods' ``a`` twins
(``acollect()``, ``ausage()``, ``avote()``...) are the awaitable ones.

    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python stream_async.py

``mypy --strict`` checks this file (scripts/python.sh test).
"""

import asyncio
import os
import sys
from typing import Dict, List

import openai

import choicewise


async def show(choice: choicewise.Choice, texts: Dict[int, str]) -> None:
    parts: List[str] = []
    async for delta in choice.content():  # this choice's text only
        parts.append(delta)
    texts[choice.index] = "".join(parts)
    async for event in choice.function_calls():
        if event.get("type") == "finished":
            print(f"[choice {choice.index}] call {event.get('name')}: {event.get('value')}")


async def main() -> int:
    client = openai.AsyncOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", "unused-on-loopback"),
        max_retries=0,
    )
    texts: Dict[int, str] = {}
    try:
        async with choicewise.stream(
            client, model="gpt-4o-mini", n=3, messages=[{"role": "user", "content": "Hi!"}]
        ) as completions:
            tasks = [asyncio.create_task(show(c, texts)) async for c in completions.choices()]
            await asyncio.gather(*tasks)
            whole = await completions.acollect()  # openai's ChatCompletion
            usage = await completions.ausage()  # choicewise.Usage: openai's CompletionUsage
    except (choicewise.TransportError, choicewise.IdleTimeoutError) as e:
        print(f"the connection failed ({e.kind}, retryable: {e.retryable}): {e}", file=sys.stderr)
        return 1
    for choice in whole.choices:
        print(f"[choice {choice.index}] {choice.finish_reason}: {texts.get(choice.index, '')!r}")
    print(f"usage ({usage.source}): prompt {usage.prompt_tokens}, completion {usage.completion_tokens}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
