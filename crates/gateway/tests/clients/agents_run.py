"""The OpenAI Agents SDK (openai-agents) against `choicewise serve`'s Responses endpoint
(`/v1/responses`): one agent with one function tool, run as the SDK runs it by default
(OpenAIResponsesModel), plainly and streamed; then a selection, a failing upstream and a bad
request; and the Chat model (OpenAIChatCompletionsModel) on a stream cut mid-answer. Prints, as one JSON object, what the SDK gave; the Rust test
(crates/gateway/tests/gateway/clients.rs, `openai_agents`) holds the expectations.

Environment: CHOICEWISE_GATEWAY_URL (base URL, .../v1), CHOICEWISE_GATEWAY_KEY.
"""

import asyncio
import importlib.metadata
import json
import os
import sys

import openai
from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                    function_tool, set_tracing_disabled)
from agents.exceptions import ModelBehaviorError
from openai import AsyncOpenAI

CALLS = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    CALLS.append(city)
    return f"sunny in {city}"


def agent(client, model, settings=None, tools=True):
    return Agent(
        name="weather",
        instructions="Answer with the tool's help.",
        tools=[get_weather] if tools else [],
        model=OpenAIResponsesModel(model=model, openai_client=client),
        model_settings=settings or ModelSettings(),
    )


def items(result):
    return [type(item).__name__ for item in result.new_items]


async def error_of(call):
    try:
        await call()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "class": type(e).__name__, "message": body.get("message"),
                "param": body.get("param")}
    return {"status": None}


async def main():
    set_tracing_disabled(True)
    url, key = os.environ["CHOICEWISE_GATEWAY_URL"], os.environ["CHOICEWISE_GATEWAY_KEY"]
    client = AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=60)
    question = "What is the weather in Paris?"
    results = {"client": f"openai-agents {importlib.metadata.version('openai-agents')} (openai {openai.__version__})"}

    run = await Runner.run(agent(client, "tools"), question)
    results["run"] = {"final_output": run.final_output, "items": items(run), "tool_calls": list(CALLS)}
    CALLS.clear()

    streamed = Runner.run_streamed(agent(client, "tools"), question)
    deltas = ""
    async for event in streamed.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            deltas += event.data.delta
    results["run_streamed"] = {"final_output": streamed.final_output, "deltas": deltas,
                               "items": items(streamed), "tool_calls": list(CALLS)}

    select = ModelSettings(extra_body={"choicewise": {"samples": 3, "select": "first_finished"}})
    selected = await Runner.run(agent(client, "select", select, tools=False), question)
    raw = selected.raw_responses[-1]
    results["select"] = {"final_output": selected.final_output,
                         "response_id": raw.response_id}

    results["failing"] = await error_of(lambda: Runner.run(agent(client, "failing"), question))
    results["stored"] = await error_of(lambda: Runner.run(agent(client, "tools", ModelSettings(store=True)), question))
    # The Chat model, streamed, on an upstream that cuts every answer: the gateway's mid-stream
    # error event is raised, not a truncated answer returned.
    chat_agent = Agent(name="cut", instructions="Answer.",
                       model=OpenAIChatCompletionsModel(model="cut", openai_client=client))
    try:
        cut = Runner.run_streamed(chat_agent, question)
        async for _ in cut.stream_events():
            pass
        results["cut"] = {"raised": None, "final_output": cut.final_output}
    except openai.APIError as e:
        results["cut"] = {"raised": type(e).__name__, "message": e.message}
    if os.environ.get("CHOICEWISE_LLAMA_URL"):
        # A real model behind the gateway (llama.cpp): an agent without tools, its own words;
        # or, cut at max_tokens, the SDK's own error for a `response.incomplete`.
        short = ModelSettings(max_tokens=64)
        try:
            llama = await Runner.run(agent(client, "llama", short, tools=False), "Say hello.")
            results["llama"] = {"final_output": llama.final_output, "items": items(llama)}
        except ModelBehaviorError as e:
            results["llama"] = {"incomplete": str(e)}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
