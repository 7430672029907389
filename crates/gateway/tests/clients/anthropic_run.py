"""anthropic-python against `choicewise serve`'s Messages endpoint (`/v1/messages`): runs each
case the Rust test (crates/gateway/tests/gateway/clients.rs, `anthropic_python`) names and prints, as
one JSON object, what the client library parsed. The Rust test holds the expectations.

Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY.
"""

import json
import os
import sys

import anthropic
from anthropic import Anthropic

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
SELECT = {"choicewise": {"samples": 3, "select": "first_finished"}}


def extra(model, name):
    """An extension field the client library kept on its model object."""
    return (getattr(model, "model_extra", None) or {}).get(name)


def blocks(message):
    out = []
    for b in message.content:
        if b.type == "text":
            out.append({"type": "text", "text": b.text})
        elif b.type == "tool_use":
            out.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        else:
            out.append({"type": b.type})
    return out


def whole(message):
    assert isinstance(message, anthropic.types.Message), type(message)
    return {
        "type": message.type,
        "role": message.role,
        "model": message.model,
        "content": blocks(message),
        "stop_reason": message.stop_reason,
        "usage": {"input_tokens": message.usage.input_tokens, "output_tokens": message.usage.output_tokens},
        "choicewise": extra(message, "choicewise"),
    }


def raw_stream(client, **request):
    """`messages.create(stream=True)`: the events as the client typed them."""
    events, text, stop, usage, summary, model = [], "", None, None, None, None
    with client.messages.create(stream=True, **request) as stream:
        for event in stream:
            events.append(event.type)
            if event.type == "message_start":
                model = event.message.model
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                text += event.delta.text
            elif event.type == "message_delta":
                stop = event.delta.stop_reason
                usage = {"output_tokens": event.usage.output_tokens}
                summary = extra(event, "choicewise")
    return {"events": events, "text": text, "stop_reason": stop, "usage": usage, "choicewise": summary, "model": model}


def helper_stream(client, **request):
    """`messages.stream(...)`: the text stream and `get_final_message()`."""
    with client.messages.stream(**request) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    return {"text_stream": text, "final": whole(final)}


def round_trip(client, streamed):
    """A tool call answered: the tool_use block sent back with its tool_result."""
    request = {"model": "tools", "max_tokens": 200, "tools": TOOLS}
    if streamed:
        first = helper_stream(client, messages=MESSAGES, **request)["final"]
    else:
        first = whole(client.messages.create(messages=MESSAGES, **request))
    calls = [b for b in first["content"] if b["type"] == "tool_use"]
    assert calls, first
    call = calls[0]
    assistant = [
        {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["input"]}
        if b["type"] == "tool_use"
        else b
        for b in first["content"]
    ]
    followed = MESSAGES + [
        {"role": "assistant", "content": assistant},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": f"sunny in {call['input']['city']}"}],
        },
    ]
    if streamed:
        second = helper_stream(client, messages=followed, **request)["final"]
    else:
        second = whole(client.messages.create(messages=followed, **request))
    return {"first": first, "second": second}


def error_of(call):
    try:
        call()
    except anthropic.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        error = body.get("error") or {}
        return {
            "status": e.status_code,
            "class": type(e).__name__,
            "shape": body.get("type"),
            "type": error.get("type"),
            "message": error.get("message"),
        }
    return {"status": None}


def main():
    url, key = os.environ["CHOICEWISE_GATEWAY_URL"], os.environ["CHOICEWISE_GATEWAY_KEY"]
    # The SDK appends /v1/messages to its base URL.
    root = url.removesuffix("/").removesuffix("/v1")
    client = Anthropic(base_url=root, api_key=key, max_retries=0, timeout=60)
    basic = {"model": "echo", "max_tokens": 100, "system": "Be brief.", "messages": MESSAGES}
    results = {"client": f"anthropic-python {anthropic.__version__}"}
    results["create_whole"] = whole(client.messages.create(**basic))
    results["create_stream"] = raw_stream(client, **basic)
    results["stream_helper"] = helper_stream(client, **basic)
    results["tool_round_trip"] = round_trip(client, streamed=False)
    results["tool_round_trip_stream"] = round_trip(client, streamed=True)
    results["count_tokens"] = client.messages.count_tokens(model="echo", messages=MESSAGES, system="Be brief.").input_tokens
    selected = {**basic, "model": "select", "extra_body": SELECT}
    results["select_whole"] = whole(client.messages.create(**selected))
    results["select_stream"] = raw_stream(client, **selected)
    results["failing"] = error_of(lambda: client.messages.create(**{**basic, "model": "failing"}))
    results["failing_stream"] = error_of(lambda: raw_stream(client, **{**basic, "model": "failing"}))
    # The SDK checks that max_tokens is passed; NOT_GIVEN passes that check and sends none.
    results["no_max_tokens"] = error_of(
        lambda: client.messages.create(model="echo", messages=MESSAGES, max_tokens=anthropic.NOT_GIVEN)
    )
    wrong_key = Anthropic(base_url=root, api_key="sk-wrong", max_retries=0, timeout=60)
    results["wrong_key"] = error_of(lambda: wrong_key.messages.create(**basic))
    if os.environ.get("CHOICEWISE_LLAMA_URL"):
        # A real model behind the gateway (llama.cpp): its own text, stop reason and counts.
        llama = {"model": "llama", "max_tokens": 24, "system": "Be brief.", "messages": MESSAGES}
        results["llama_whole"] = whole(client.messages.create(**llama))
        results["llama_stream"] = raw_stream(client, **llama)
        picked = {**llama, "extra_body": {"choicewise": {"samples": 2, "select": "first_token"}}}
        results["llama_select"] = whole(client.messages.create(**picked))
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
