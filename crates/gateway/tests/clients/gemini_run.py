"""google-genai (Google's Python SDK) against `choicewise serve`'s Gemini endpoints
(`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`, `:countTokens`, and the
model list, `GET /v1beta/models`): runs each case the
Rust test (crates/gateway/tests/gateway/clients.rs, `google_genai`) names and prints, as one
JSON object, what the client library parsed. The Rust test holds the expectations.

Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY.
"""

import json
import os
import sys

from google import genai
from google.genai import errors, types

WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather",
            description="The weather in a city.",
            parameters=types.Schema(
                type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"]
            ),
        )
    ]
)


def candidates(chunks):
    """Each candidate as the chunks build it, by index: its text, calls, finish reason; and
    the order in which the indexes first appeared."""
    out, seen = {}, []
    for chunk in chunks:
        for c in chunk.candidates or []:
            i = c.index or 0
            if i not in out:
                out[i] = {"index": i, "text": "", "calls": [], "finish_reason": None, "after_finish": 0}
                seen.append(i)
            entry = out[i]
            if entry["finish_reason"] is not None:
                entry["after_finish"] += 1
            for part in (c.content.parts if c.content and c.content.parts else []):
                if part.text and not part.thought:
                    entry["text"] += part.text
                if part.function_call:
                    entry["calls"].append({"name": part.function_call.name, "args": part.function_call.args})
            if c.finish_reason is not None:
                entry["finish_reason"] = c.finish_reason.value
    return [out[i] for i in sorted(out)], seen


def usage(metadata):
    if metadata is None:
        return None
    return {
        "prompt": metadata.prompt_token_count,
        "candidates": metadata.candidates_token_count,
        "total": metadata.total_token_count,
    }


def streamed(client, **request):
    chunks = list(client.models.generate_content_stream(**request))
    built, seen = candidates(chunks)
    return {
        "chunks": len(chunks),
        "candidates": built,
        "first_seen": seen,
        "usage": usage(chunks[-1].usage_metadata),
        "model_version": chunks[-1].model_version,
    }


def whole(client, **request):
    response = client.models.generate_content(**request)
    built, seen = candidates([response])
    return {
        "candidates": built,
        "order": seen,
        "text": response.text if response.candidates and response.candidates[0].content else None,
        "function_calls": [{"name": c.name, "args": c.args} for c in response.function_calls or []],
        "usage": usage(response.usage_metadata),
        "model_version": response.model_version,
    }


def error_of(call):
    try:
        call()
    except errors.APIError as e:
        return {"status": e.code, "class": type(e).__name__, "google_status": e.status, "message": e.message}
    return {"status": None}


def round_trip(client, streamed_first):
    """A function call answered: the model's content sent back with its function response."""
    config = types.GenerateContentConfig(tools=[WEATHER])
    contents = [types.Content(role="user", parts=[types.Part(text="What is the weather in Paris?")])]
    if streamed_first:
        chunks = list(client.models.generate_content_stream(model="tools", contents=contents, config=config))
        parts = [p for chunk in chunks for p in (chunk.candidates[0].content.parts or [])]
    else:
        response = client.models.generate_content(model="tools", contents=contents, config=config)
        parts = response.candidates[0].content.parts
    call = next(p.function_call for p in parts if p.function_call)
    follow = contents + [
        types.Content(role="model", parts=parts),
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name=call.name, response={"result": f"sunny in {call.args['city']}"})],
        ),
    ]
    second = client.models.generate_content(model="tools", contents=follow, config=config)
    return {"call": {"name": call.name, "args": call.args}, "second_calls": len(second.function_calls or [])}


def main():
    url, key = os.environ["CHOICEWISE_GATEWAY_URL"], os.environ["CHOICEWISE_GATEWAY_KEY"]
    root = url.removesuffix("/").removesuffix("/v1")
    no_retry = types.HttpRetryOptions(attempts=1)
    options = types.HttpOptions(base_url=root, api_version="v1beta", retry_options=no_retry, timeout=60_000)
    client = genai.Client(api_key=key, http_options=options)
    three = types.GenerateContentConfig(candidate_count=3, max_output_tokens=50)
    results = {"client": f"google-genai {genai.__version__}"}
    results["three_stream"] = streamed(client, model="three", contents="Count.", config=three)
    results["three_whole"] = whole(client, model="three", contents="Count.", config=three)
    # Twenty streams: every run complete, whichever way the records interleave.
    results["three_streams"] = [
        streamed(client, model="three", contents="Count.", config=three)["candidates"] for _ in range(20)
    ]
    vote = types.GenerateContentConfig(
        http_options=types.HttpOptions(
            extra_body={"choicewise": {"samples": 5, "select": "vote", "vote_by": r"Answer: (\d+)"}}
        )
    )
    results["vote_whole"] = whole(client, model="vote", contents="What is 6 x 7?", config=vote)
    results["vote_stream"] = streamed(client, model="vote", contents="What is 6 x 7?", config=vote)
    results["tools_whole"] = whole(
        client, model="tools", contents="Weather in Paris?", config=types.GenerateContentConfig(tools=[WEATHER])
    )
    results["round_trip"] = round_trip(client, streamed_first=False)
    results["round_trip_stream"] = round_trip(client, streamed_first=True)
    results["failing"] = error_of(lambda: client.models.generate_content(model="down", contents="hi"))
    results["cut_stream"] = error_of(lambda: list(client.models.generate_content_stream(model="cut", contents="hi")))
    results["unknown_model"] = error_of(lambda: client.models.generate_content(model="nowhere", contents="hi"))
    results["bad_count"] = error_of(
        lambda: client.models.generate_content(
            model="three", contents="hi", config=types.GenerateContentConfig(candidate_count=99)
        )
    )
    # The token count and the model list, as the SDK reads them.
    results["count"] = client.models.count_tokens(model="three", contents="Hello there.").total_tokens
    results["count_long"] = client.models.count_tokens(model="three", contents="Hello there. " * 50).total_tokens
    results["count_unknown"] = error_of(lambda: client.models.count_tokens(model="nowhere", contents="hi"))
    results["models"] = [
        {"name": m.name, "display_name": m.display_name, "actions": m.supported_actions}
        for m in client.models.list()
    ]
    one = client.models.get(model="team/three")
    results["model"] = {"name": one.name, "actions": one.supported_actions}
    results["model_unknown"] = error_of(lambda: client.models.get(model="nowhere"))
    wrong = genai.Client(api_key="sk-wrong", http_options=options)
    results["wrong_key"] = error_of(lambda: wrong.models.generate_content(model="three", contents="hi"))
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
