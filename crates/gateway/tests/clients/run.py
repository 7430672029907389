"""openai-python against `choicewise serve`: runs each case the Rust test
(crates/gateway/tests/gateway/clients.rs) names and prints, as one JSON object, what the client
library parsed. The Rust test holds the expectations, the same for every client.

Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY.
"""

import json
import os
import sys

import openai
from openai import OpenAI

MESSAGES = [{"role": "user", "content": "What is 6 times 7? End with 'Answer: N'."}]


def extra(model, name):
    """An extension field the client library kept on its model object."""
    return (getattr(model, "model_extra", None) or {}).get(name)


def streamed(client, **request):
    """Each choice assembled from the chunks, the usage and the final `choicewise`."""
    choices, usage, summary = {}, None, None
    stream = client.chat.completions.create(stream=True, messages=MESSAGES, **request)
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk", chunk.object
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        if extra(chunk, "choicewise") is not None:
            summary = extra(chunk, "choicewise")
        for c in chunk.choices:
            out = choices.setdefault(
                c.index,
                {"index": c.index, "content": "", "finish_reason": None, "tool_calls": {}, "error": None},
            )
            if c.delta.content:
                out["content"] += c.delta.content
            for tc in c.delta.tool_calls or []:
                call = out["tool_calls"].setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                if tc.id:
                    call["id"] = tc.id
                if tc.function and tc.function.name:
                    call["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    call["arguments"] += tc.function.arguments
            if c.finish_reason:
                out["finish_reason"] = c.finish_reason
            cw = extra(c, "choicewise")
            if cw and cw.get("error"):
                out["error"] = cw["error"]
    for out in choices.values():
        out["tool_calls"] = [out["tool_calls"][i] for i in sorted(out["tool_calls"])]
    return {"choices": [choices[i] for i in sorted(choices)], "usage": usage, "choicewise": summary}


def whole(client, **request):
    completion = client.chat.completions.create(stream=False, messages=MESSAGES, **request)
    assert completion.object == "chat.completion", completion.object
    choices = []
    for c in completion.choices:
        calls = [
            {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
            for tc in c.message.tool_calls or []
        ]
        choices.append(
            {
                "index": c.index,
                "content": c.message.content or "",
                "finish_reason": c.finish_reason,
                "tool_calls": calls,
                "error": None,
            }
        )
    usage = completion.usage.model_dump() if completion.usage else None
    return {"choices": choices, "usage": usage, "choicewise": extra(completion, "choicewise")}


def helper_runs(client, runs, **request):
    """openai-python's own stream helper (`chat.completions.stream`), `runs` times: it indexes
    choices by position, so a choice first heard after a later one raised IndexError before
    the gateway opened every choice in index order. Each run's final choices, or its error."""
    out = []
    for _ in range(runs):
        try:
            with client.chat.completions.stream(messages=MESSAGES, **request) as stream:
                for _event in stream:
                    pass
                final = stream.get_final_completion()
            out.append(
                {
                    "choices": [
                        {
                            "index": c.index,
                            "content": c.message.content or "",
                            "finish_reason": c.finish_reason,
                            "tool_calls": [tc.function.name for tc in c.message.tool_calls or []],
                        }
                        for c in final.choices
                    ]
                }
            )
        except Exception as e:  # noqa: BLE001: the error is the result
            out.append({"error": f"{type(e).__name__}: {e}"})
    return out


def error_of(call):
    try:
        call()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "message": body.get("message"), "type": body.get("type"), "class": type(e).__name__}
    return {"status": None}


def main():
    url, key = os.environ["CHOICEWISE_GATEWAY_URL"], os.environ["CHOICEWISE_GATEWAY_KEY"]
    client = OpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)
    usage = {"stream_options": {"include_usage": True}}
    vote = {"samples": 5, "select": "vote", "vote_by": r"Answer: (\d+)"}
    results = {"client": f"openai-python {openai.__version__}"}
    results["models"] = [m.id for m in client.models.list()]
    results["native_stream"] = streamed(client, model="native", n=3, **usage)
    results["native_whole"] = whole(client, model="native", n=3)
    results["stream_helper"] = helper_runs(client, 20, model="native", n=3)
    results["mixed_stream"] = streamed(client, model="mixed", n=3, **usage)
    results["mixed_whole"] = whole(client, model="mixed", n=3)
    results["failing"] = error_of(lambda: streamed(client, model="failing", n=2))
    results["cut_stream"] = streamed(client, model="cut", n=3)
    results["resilient_stream"] = streamed(client, model="resilient", n=3, **usage)
    results["resilient_whole"] = whole(client, model="resilient", n=3)
    results["vote_stream"] = streamed(client, model="vote", extra_body={"choicewise": vote}, **usage)
    results["vote_whole"] = whole(client, model="vote", extra_body={"choicewise": vote})
    results["first_finished_stream"] = streamed(
        client, model="race", extra_body={"choicewise": {"samples": 2, "select": "first_finished"}}
    )
    wrong_key = OpenAI(base_url=url, api_key="sk-wrong", max_retries=0, timeout=60)
    results["wrong_key"] = error_of(lambda: whole(wrong_key, model="native"))
    results["unknown_model"] = error_of(lambda: whole(client, model="nope"))
    results["n_too_large"] = error_of(lambda: whole(client, model="native", n=17))
    if "llama" in results["models"]:
        sampling = {"max_tokens": 24, "temperature": 0.8, "seed": 7}
        results["llama_stream"] = streamed(client, model="llama", n=3, **usage, **sampling)
        results["llama_whole"] = whole(client, model="llama-fan-out", n=2, **sampling)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
