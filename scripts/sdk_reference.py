#!/usr/bin/env python3
"""Golden per-choice results for the well-formed SSE fixtures, computed by the official
OpenAI Python SDK's own chunk accumulator.

    pip install openai          # the official SDK, from PyPI
    python3 scripts/sdk_reference.py            # regenerate tests/fixtures/expected/*.json
    python3 scripts/sdk_reference.py --check    # fail if any golden file would change
    python3 scripts/sdk_reference.py NAME ...   # only these fixtures (names without .sse)

What it does, for each fixture in WELL_FORMED:

1. Reads tests/fixtures/<name>.sse and splits it into SSE events in the simplest way
   (lines, `data:` payloads joined per event, comments/other fields ignored, stop at
   `[DONE]`).  As a cross-check, the SDK's own SSE decoder (`openai._streaming.SSEDecoder`)
   must yield the same payloads.
2. Turns every payload into a `ChatCompletionChunk` the way the SDK's `Stream` does
   (`openai._models.construct_type`) and, like `ChatCompletionStream`, drops chunks whose
   `object` is not "chat.completion.chunk" (Azure's prompt-filter / annotation chunks).
3. Flattened feed: feeds every chunk, as is, to one
   `openai.lib.streaming.chat.ChatCompletionStreamState` (`handle_chunk()`, then
   `get_final_completion()`).  The SDK treats a choice's `index` as a list position, so
   this raises IndexError whenever a choice shows up before all lower indexes have
   ("list assignment index out of range" when the very first chunk is not choice 0,
   "list index out of range" when e.g. index 2 comes after 0 but before 1).
   The outcome is recorded: `flattened_feed_error` ("ExceptionType: message" or null) and
   `flattened_feed_matches` (whether its result equals the per-choice result below; null
   when it raised).
4. Per-choice feed (the golden data): for every choice index i, a fresh
   ChatCompletionStreamState is fed only the chunks that carry index i, with all other
   choices' entries removed and the entry renumbered to index 0.  The data itself is
   never changed otherwise.  If get_final_completion() refuses (it raises
   LengthFinishReasonError for finish_reason "length"), the accumulated
   `current_completion_snapshot` is used instead and a note is recorded.

Output: tests/fixtures/expected/<name>.json =
    {"sdk_version": "...", "fixture": "<name>.sse",
     "flattened_feed_error": null | "IndexError: ...", "flattened_feed_matches": bool | null,
     "notes": [...],
     "choices": [{"index", "role", "content", "refusal",
                  "tool_calls": [{"id", "type", "function": {"name", "arguments"}}] | null,
                  "function_call": {"name", "arguments"} | null,
                  "finish_reason",
                  "message_extra": {non-standard message fields the SDK accumulated,
                                    e.g. "reasoning" / "reasoning_content"}}, ...]}
choices sorted by index.

Fixtures NOT run through the SDK (see EXCLUDED for why) have their expected outcome
described in prose in tests/fixtures/README.md.
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import sys

try:
    import openai
    from openai._models import construct_type
    from openai._streaming import SSEDecoder
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk
    from openai import LengthFinishReasonError
except ImportError as exc:  # pragma: no cover
    sys.exit(f"needs the official OpenAI SDK: pip install openai ({exc})")

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
EXPECTED = FIXTURES / "expected"

# Well-formed fixtures: every chunk is valid JSON, no error events, no provider quirks.
WELL_FORMED = [
    "openai_n3_tools",
    "openai_n2_interleaved_tools",
    "openai_legacy_function_call",
    "openai_refusal",
    "vllm_n4_reasoning",
    "deepseek_reasoning_content",
    "azure_filters",
    "multi_choice_chunk",
    "missing_done_finished",  # complete data, only the [DONE] line is missing
    "demo",
    "answer_question",
]

EXCLUDED = {
    "error_mid_stream": "in-band error event: the SDK raises APIError, there is no final result",
    "missing_done_truncated": "truncated mid-line: the last event is not valid JSON",
    "quirks_ids_repeated": "repeated id/type/name fragments: the SDK concatenates them "
                           "(\"call_xcall_x\") and fails on \"type\": null (AssertionError)",
    "quirks_index_zero": "two calls at tool index 0: the SDK merges them into one call",
    "quirks_no_index": "tool-call fragments without index: the SDK raises TypeError",
    "quirks_wire": "SSE framing quirks (BOM, CRLF, two JSON objects on one data line): "
                   "not handled by the simple splitter; the SDK fails on json.loads(\"\") for "
                   "the data-less retry-only block",
    "openrouter_error_finish": "top-level error field: the SDK raises APIError",
}

STANDARD_MESSAGE_FIELDS = {"role", "content", "refusal", "tool_calls", "function_call",
                           "parsed", "annotations", "audio"}


# --------------------------------------------------------------------------- SSE


def simple_payloads(raw: bytes) -> list[str]:
    """Simplest SSE split: lines, `data:` payloads joined per event, stop at [DONE]."""
    payloads, data = [], []
    for line in raw.decode("utf-8").split("\n"):
        line = line.rstrip("\r")
        if line == "":
            if data:
                payload = "\n".join(data)
                if payload == "[DONE]":
                    return payloads
                payloads.append(payload)
            data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        payloads.append("\n".join(data))
    return payloads


def sdk_payloads(raw: bytes) -> list[str]:
    """The same split done by the SDK's own SSE decoder (as openai.Stream uses it)."""
    out = []
    for sse in SSEDecoder().iter_bytes(iter([raw])):
        if sse.data.startswith("[DONE]"):
            break
        out.append(sse.data)
    return out


def load_chunks(name: str) -> list[dict]:
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    simple, sdk = simple_payloads(raw), sdk_payloads(raw)
    if simple != sdk:
        raise SystemExit(f"{name}: simple SSE split and SDK SSEDecoder disagree")
    chunks = []
    for payload in simple:
        data = json.loads(payload)
        if isinstance(data, dict) and data.get("error"):
            raise SystemExit(f"{name}: error event in a fixture listed as well-formed")
        # ChatCompletionStream skips what is not a chat.completion.chunk (Azure filters)
        if data.get("object") != "chat.completion.chunk":
            continue
        chunks.append(data)
    return chunks


def to_chunk(data: dict) -> ChatCompletionChunk:
    return construct_type(type_=ChatCompletionChunk, value=copy.deepcopy(data))


# --------------------------------------------------------------------------- accumulation


def accumulate(chunks: list[dict]):
    """Feed chunks to one ChatCompletionStreamState; return (completion, note|None)."""
    state = ChatCompletionStreamState()
    for data in chunks:
        state.handle_chunk(to_chunk(data))
    try:
        return state.get_final_completion(), None
    except LengthFinishReasonError:
        return state.current_completion_snapshot, (
            "get_final_completion() raised LengthFinishReasonError; "
            "used current_completion_snapshot")


def record(index: int, choice) -> dict:
    msg = choice.message
    tool_calls = None
    if msg.tool_calls:
        tool_calls = [{"id": tc.id, "type": tc.type,
                       "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
                      for tc in msg.tool_calls]
    function_call = None
    if msg.function_call is not None:
        function_call = {"name": msg.function_call.name, "arguments": msg.function_call.arguments}
    extra = {k: v for k, v in (msg.model_extra or {}).items() if k not in STANDARD_MESSAGE_FIELDS}
    return {
        "index": index,
        "role": msg.role,
        "content": msg.content,
        "refusal": msg.refusal,
        "tool_calls": tool_calls,
        "function_call": function_call,
        "finish_reason": choice.finish_reason,
        "message_extra": extra,
    }


def per_choice(chunks: list[dict]) -> tuple[list[dict], list[str]]:
    indexes = sorted({c["index"] for d in chunks for c in d.get("choices") or []})
    results, notes = [], []
    for i in indexes:
        feed = []
        for data in chunks:
            entries = [dict(c, index=0) for c in data.get("choices") or [] if c["index"] == i]
            if entries:
                feed.append(dict(data, choices=entries))
        completion, note = accumulate(feed)
        if note:
            notes.append(f"choice {i}: {note}")
        assert len(completion.choices) == 1
        results.append(record(i, completion.choices[0]))
    return results, notes


def flattened(chunks: list[dict], expected: list[dict]) -> tuple[str | None, bool | None, list[str]]:
    try:
        completion, note = accumulate(chunks)
    except Exception as exc:  # noqa: BLE001 - recording whatever the SDK raises
        return f"{type(exc).__name__}: {exc}", None, []
    notes = [f"flattened feed: {note}"] if note else []
    got = sorted((record(c.index, c) for c in completion.choices), key=lambda r: r["index"])
    if got == expected:
        return None, True, notes
    by_index = {r["index"]: r for r in got}
    for exp in expected:
        have = by_index.get(exp["index"])
        if have != exp:
            diff = "missing" if have is None else ", ".join(
                k for k in exp if have.get(k) != exp[k])
            notes.append(f"flattened feed differs from per-choice feed for choice "
                         f"{exp['index']}: {diff}")
            break
    return None, False, notes


def reference(name: str) -> dict:
    chunks = load_chunks(name)
    choices, notes = per_choice(chunks)
    err, matches, flat_notes = flattened(chunks, choices)
    return {
        "sdk_version": openai.__version__,
        "fixture": f"{name}.sse",
        "flattened_feed_error": err,
        "flattened_feed_matches": matches,
        "notes": notes + flat_notes,
        "choices": choices,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description="regenerate tests/fixtures/expected/*.json")
    ap.add_argument("names", nargs="*", help="fixture names (default: all well-formed ones)")
    ap.add_argument("--check", action="store_true", help="fail if any golden file would change")
    args = ap.parse_args()
    names = args.names or WELL_FORMED
    for n in names:
        if n not in WELL_FORMED:
            why = EXCLUDED.get(n, "unknown fixture")
            raise SystemExit(f"{n}: not a well-formed fixture ({why})")

    EXPECTED.mkdir(parents=True, exist_ok=True)
    stale = []
    for name in names:
        ref = reference(name)
        text = json.dumps(ref, ensure_ascii=False, indent=2) + "\n"
        path = EXPECTED / f"{name}.json"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
        flat = ref["flattened_feed_error"] or (
            "ok" if ref["flattened_feed_matches"] else "WRONG RESULT (no exception)")
        print(f"{name:30s} choices={len(ref['choices'])}  flattened feed: {flat}")
    print(f"openai {openai.__version__}; not run through the SDK: {', '.join(EXCLUDED)}")
    if args.check and stale:
        print("out of date:", *[str(p.relative_to(ROOT)) for p in stale], sep="\n  ")
        return 1
    print(f"{len(stale)} file(s) {'would change' if args.check else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
