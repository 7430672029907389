"""openai-python against `choicewise serve` over a scripted Gemini upstream: `n = 3` streamed
(the candidates come interleaved and out of order upstream), the same not streamed, and a vote
of three samples. Prints, as one JSON object, what the client library parsed; the Rust test
(crates/gateway/tests/gateway/clients.rs, `openai_python_from_gemini`) holds the expectations.

Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY.
"""

import json
import os

from openai import OpenAI

MESSAGES = [{"role": "user", "content": "What is 6 times 7?"}]


def streamed(client, **request):
    choices, usage = {}, None
    stream = client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, messages=MESSAGES, **request
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for c in chunk.choices:
            out = choices.setdefault(c.index, {"index": c.index, "content": "", "finish_reason": None})
            if c.delta.content:
                out["content"] += c.delta.content
            if c.finish_reason:
                out["finish_reason"] = c.finish_reason
    return {"choices": [choices[i] for i in sorted(choices)], "usage": usage}


def whole(client, **request):
    completion = client.chat.completions.create(stream=False, messages=MESSAGES, **request)
    choices = [
        {"index": c.index, "content": c.message.content or "", "finish_reason": c.finish_reason}
        for c in completion.choices
    ]
    return {"choices": choices, "usage": completion.usage.model_dump() if completion.usage else None}


def main():
    client = OpenAI(
        base_url=os.environ["CHOICEWISE_GATEWAY_URL"],
        api_key=os.environ["CHOICEWISE_GATEWAY_KEY"],
        max_retries=0,
    )
    out = {
        "stream": streamed(client, model="gemini", n=3),
        "whole": whole(client, model="gemini", n=3),
        "vote": whole(
            client, model="gemini", extra_body={"choicewise": {"samples": 3, "select": "vote"}}
        ),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
