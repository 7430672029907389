"""openai-python against `choicewise serve`'s Responses endpoint (`/v1/responses`): runs each
case the Rust test (crates/gateway/tests/gateway/clients.rs, `openai_python_responses`) names and
prints, as one JSON object, what the client library parsed. The Rust test holds the
expectations.

Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY.
"""

import json
import os
import sys

import openai
from openai import OpenAI

QUESTION = "What is the weather in Paris?"
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    }
]
SELECT = {"choicewise": {"samples": 3, "select": "first_finished"}}


def extra(model, name):
    """An extension field the client library kept on its model object."""
    return (getattr(model, "model_extra", None) or {}).get(name)


def items(response):
    out = []
    for item in response.output:
        if item.type == "message":
            out.append({"type": "message", "text": "".join(c.text for c in item.content if c.type == "output_text")})
        elif item.type == "function_call":
            out.append({"type": "function_call", "call_id": item.call_id, "name": item.name, "arguments": item.arguments})
        else:
            out.append({"type": item.type})
    return out


def whole(response):
    assert response.object == "response", response.object
    return {
        "status": response.status,
        "model": response.model,
        "output": items(response),
        "output_text": response.output_text,
        "usage": {"input_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens},
        "choicewise": extra(response, "choicewise"),
    }


def create_stream(client, **request):
    """`responses.create(stream=True)`: the events as the client typed them."""
    events, text, sequence, final, summary = [], "", [], None, None
    for event in client.responses.create(stream=True, **request):
        events.append(event.type)
        sequence.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type in ("response.completed", "response.incomplete"):
            final = whole(event.response)
            summary = extra(event, "choicewise") or final["choicewise"]
    return {"events": events, "text": text, "in_order": sequence == list(range(len(sequence))), "final": final, "choicewise": summary}


def helper_stream(client, **request):
    """`responses.stream(...)`: the argument deltas and `get_final_response()`."""
    arguments = ""
    with client.responses.stream(**request) as stream:
        for event in stream:
            if event.type == "response.function_call_arguments.delta":
                arguments += event.delta
        final = stream.get_final_response()
    return {"arguments_streamed": arguments, "final": whole(final)}


def round_trip(client, streamed):
    """A function call answered: the call sent back with its `function_call_output`."""
    question = [{"role": "user", "content": QUESTION}]
    request = {"model": "tools", "tools": TOOLS}
    if streamed:
        first = helper_stream(client, input=question, **request)
    else:
        first = create_stream(client, input=question, **request)
    calls = [i for i in first["final"]["output"] if i["type"] == "function_call"]
    assert calls, first
    call = calls[0]
    args = json.loads(call["arguments"])
    followed = question + [
        {"type": "function_call", "call_id": call["call_id"], "name": call["name"], "arguments": call["arguments"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": f"sunny in {args['city']}"},
    ]
    if streamed:
        second = helper_stream(client, input=followed, **request)
    else:
        second = create_stream(client, input=followed, **request)
    return {"first": first, "second": second}


def error_of(call):
    try:
        call()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "class": type(e).__name__, "message": body.get("message"),
                "type": body.get("type"), "param": body.get("param")}
    return {"status": None}


def main():
    url, key = os.environ["CHOICEWISE_GATEWAY_URL"], os.environ["CHOICEWISE_GATEWAY_KEY"]
    client = OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)
    basic = {"model": "echo", "instructions": "Be brief.", "input": QUESTION}
    results = {"client": f"openai-python {openai.__version__}"}
    results["create_stream"] = create_stream(client, **basic)
    results["create_whole"] = whole(client.responses.create(**basic))
    results["helper_stream"] = helper_stream(client, **basic)
    results["tool_round_trip"] = round_trip(client, streamed=False)
    results["tool_round_trip_helper"] = round_trip(client, streamed=True)
    selected = {**basic, "model": "select", "extra_body": SELECT}
    results["select_stream"] = create_stream(client, **selected)
    results["select_whole"] = whole(client.responses.create(**selected))
    results["failing"] = error_of(lambda: create_stream(client, **{**basic, "model": "failing"}))
    results["stored"] = error_of(lambda: client.responses.create(**basic, store=True))
    if os.environ.get("CHOICEWISE_LLAMA_URL"):
        # A real model behind the gateway (llama.cpp): its own text and counts.
        llama = {"model": "llama", "instructions": "Be brief.", "input": QUESTION, "max_output_tokens": 24}
        results["llama_whole"] = whole(client.responses.create(**llama))
        results["llama_stream"] = create_stream(client, **llama)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
