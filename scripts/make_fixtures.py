#!/usr/bin/env python3
"""Generate the recorded-looking SSE fixtures for choicewise.

Usage:
    python3 scripts/make_fixtures.py            # (re)write every fixture + README
    python3 scripts/make_fixtures.py --check    # regenerate in memory, fail if any file differs
    python3 scripts/make_fixtures.py --dump-truth FILE   # also write the intended per-choice
                                                         # outcome of every fixture as JSON

Outputs (all deterministic: every fixture has its own seeded RNG, seed = crc32(name)):
    tests/fixtures/*.sse            one stream per file, see tests/fixtures/README.md
    tests/fixtures/README.md        what each file exercises + expected per-choice outcome
    crates/cli/assets/demo.sse      the CLI's offline demo stream (n=3)
    tests/fixtures/demo.sse         byte-identical copy of the demo stream

The streams imitate what real servers send (see the "field facts" in the README):
OpenAI sends one choice per chunk in no fixed order, a choice's role chunk appears when
that choice first produces output, tool-call id/type/name only on the first fragment;
vLLM sends role chunks for every index first and puts the last text and finish_reason in
the same chunk (plus a non-standard stop_reason); Azure sends a prompt-filter chunk with
choices [] and id "" first, per-choice content_filter_results, and annotation chunks
without delta; and so on.  Every JSON payload is validated after writing (json parse of
every `data:` payload, except the deliberately cut last line of missing_done_truncated).

Only the Python standard library is needed.  After regenerating, run
`python3 scripts/sdk_reference.py` to refresh tests/fixtures/expected/*.json.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random
import re
import string
import sys
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ASSETS = ROOT / "crates" / "cli" / "assets"

ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"

# --------------------------------------------------------------------------- helpers


def rng_for(name: str) -> random.Random:
    return random.Random(zlib.crc32(name.encode("utf-8")))


def rand_str(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def dumps(obj, *, ascii: bool = False, sort: bool = False) -> str:
    return json.dumps(obj, ensure_ascii=ascii, separators=(",", ":"), sort_keys=sort)


def data_event(obj, **kw) -> str:
    return f"data: {dumps(obj, **kw)}\n\n"


DONE = "data: [DONE]\n\n"

# Rough imitation of BPE token boundaries: words carry their leading space,
# punctuation and non-ASCII symbols are their own tokens ("caf" + "é"),
# numbers come in groups of up to three digits, newlines are their own token.
_TOKEN_RE = re.compile(r"\n+|'(?:s|t|re|ve|m|ll|d)\b| ?[A-Za-z]+| ?\d{1,3}| ?[^\sA-Za-z\d]| +")


def tokenize(rng: random.Random, text: str) -> list[str]:
    toks: list[str] = []
    pos = 0
    for m in _TOKEN_RE.finditer(text):
        assert m.start() == pos, (text, pos)
        pos = m.end()
        tok = m.group(0)
        word = tok.lstrip(" ")
        if word.isalpha() and word.isascii() and len(word) > 7 and rng.random() < 0.5:
            cut = len(tok) - len(word) + rng.randint(3, len(word) - 3)
            toks.extend([tok[:cut], tok[cut:]])
        else:
            toks.append(tok)
    assert pos == len(text)
    assert "".join(toks) == text
    return toks


def interleave(
    rng: random.Random,
    seqs: dict[int, list],
    start_order: list[int],
    *,
    lead: tuple[int, int] = (2, 5),
    burst_max: int = 4,
    long_burst_p: float = 0.0,
    long_burst: tuple[int, int] = (15, 19),
    burst_max_for: dict[int, int] | None = None,
    hold_finish: bool = False,
    finish_order: list[int] | None = None,
) -> list:
    """Interleave per-choice sequences the way OpenAI does for n > 1: one choice per
    chunk, bursts of varying length, choices starting in `start_order` (each one after
    the previously started one has produced `lead` items).  With hold_finish, the last
    item of every sequence (its finish chunk) is held back and all finishes are emitted
    together at the end, in finish_order."""
    pos = {i: 0 for i in seqs}
    limit = {i: len(seqs[i]) - (1 if hold_finish else 0) for i in seqs}
    started = [start_order[0]]
    need = rng.randint(*lead)
    out: list = []
    while True:
        while len(started) < len(start_order):
            active_now = [i for i in started if pos[i] < limit[i]]
            if pos[started[-1]] >= need or not active_now:
                started.append(start_order[len(started)])
                need = rng.randint(*lead)
            else:
                break
        active = [i for i in started if pos[i] < limit[i]]
        if not active:
            break
        i = rng.choice(active)
        if burst_max_for and i in burst_max_for:
            k = rng.randint(1, burst_max_for[i])
        elif long_burst_p and rng.random() < long_burst_p:
            k = rng.randint(*long_burst)
        else:
            k = rng.randint(1, burst_max)
        for _ in range(k):
            if pos[i] >= limit[i]:
                break
            out.append(seqs[i][pos[i]])
            pos[i] += 1
    if hold_finish:
        order = list(finish_order) if finish_order else rng.sample(sorted(seqs), len(seqs))
        for i in order:
            out.append(seqs[i][-1])
    return out


def tool(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def truth_choice(index, *, content=None, refusal=None, tool_calls=None, function_call=None,
                 finish_reason=None, role="assistant", **extra) -> dict:
    d = {
        "index": index,
        "role": role,
        "content": content,
        "refusal": refusal,
        "tool_calls": tool_calls,
        "function_call": function_call,
        "finish_reason": finish_reason,
    }
    d.update(extra)
    return d


# --------------------------------------------------------------------------- OpenAI style


class OpenAI:
    """Envelope of api.openai.com chat.completion.chunk objects."""

    def __init__(self, rng, *, model="gpt-4o-mini-2024-07-18", created=1732282000,
                 include_usage=True, obfuscation=True, service_tier="default",
                 fingerprint: str | None | bool = True, logprobs_field=True):
        self.rng = rng
        self.id = "chatcmpl-" + rand_str(rng, 29)
        self.model = model
        self.created = created
        self.include_usage = include_usage
        self.obfuscation = obfuscation
        self.service_tier = service_tier
        if fingerprint is True:
            fingerprint = "fp_" + rand_str(rng, 10, HEX)
        self.fingerprint = fingerprint
        self.logprobs_field = logprobs_field

    def entry(self, index, delta, finish_reason=None) -> dict:
        e = {"index": index, "delta": delta}
        if self.logprobs_field:
            e["logprobs"] = None
        e["finish_reason"] = finish_reason
        return e

    def chunk(self, choices: list) -> dict:
        d = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
             "model": self.model}
        if self.service_tier is not None:
            d["service_tier"] = self.service_tier
        d["system_fingerprint"] = self.fingerprint
        d["choices"] = choices
        if self.include_usage:
            d["usage"] = None
        if self.obfuscation:
            d["obfuscation"] = rand_str(self.rng, self.rng.randint(2, 14))
        return d

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> dict:
        d = self.chunk([])
        obf = d.pop("obfuscation", None)
        d["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0},
        }
        if obf is not None:
            d["obfuscation"] = obf
        return d

    def call_id(self) -> str:
        return "call_" + rand_str(self.rng, 24)

    # ---- per-choice sequences (lists of choice entries) ----

    def text_seq(self, index, text, finish="stop", tokens=None) -> list[dict]:
        seq = [self.entry(index, {"role": "assistant", "content": "", "refusal": None})]
        for tok in tokens or tokenize(self.rng, text):
            seq.append(self.entry(index, {"content": tok}))
        if finish is not None:
            seq.append(self.entry(index, {}, finish))
        return seq

    def tools_seq(self, index, calls, finish="tool_calls") -> list[dict]:
        """calls: list of (id, name, [argument fragments]).  The first chunk of the choice
        carries the role together with the first call's header, as OpenAI does when a
        choice goes straight to tool calls."""
        seq = []
        for k, (cid, name, frags) in enumerate(calls):
            header = {"index": k, "id": cid, "type": "function",
                      "function": {"name": name, "arguments": ""}}
            if k == 0:
                seq.append(self.entry(index, {"role": "assistant", "content": None,
                                              "tool_calls": [header], "refusal": None}))
            else:
                seq.append(self.entry(index, {"tool_calls": [header]}))
            for frag in frags:
                seq.append(self.entry(index, {"tool_calls": [{"index": k, "function": {"arguments": frag}}]}))
        if finish is not None:
            seq.append(self.entry(index, {}, finish))
        return seq


def count_tokens(seqs: dict[int, list]) -> int:
    # one completion token per content-bearing delta, plus one per finished choice
    return sum(len(s) for s in seqs.values())


def render(events: list[dict], *, ascii=False, sort=False, done=True) -> str:
    out = "".join(data_event(e, ascii=ascii, sort=sort) for e in events)
    return out + (DONE if done else "")


def args_frags(rng, args: str) -> list[str]:
    """Split compact JSON arguments into token-sized fragments."""
    pieces = re.findall(r'\{"|":"|","|"\}|":|,"|[A-Za-z]+|\d+|/|_| |.', args)
    assert "".join(pieces) == args
    out: list[str] = []
    for p in pieces:
        if out and len(out[-1]) + len(p) <= 4 and rng.random() < 0.3:
            out[-1] += p
        else:
            out.append(p)
    return out


# --------------------------------------------------------------------------- fixtures

FIXTURE_DOCS: dict[str, dict] = {}


def register(name, *, provider, exercises, sdk, truth, notes=""):
    FIXTURE_DOCS[name] = {"provider": provider, "exercises": exercises, "sdk": sdk,
                          "truth": truth, "notes": notes}


def fx_openai_n3_tools():
    name = "openai_n3_tools"
    rng = rng_for(name)
    oa = OpenAI(rng, include_usage=True, obfuscation=True)
    text2 = ("I can't check live conditions, but here's the usual picture: Paris in late "
             "November is cool — around 8 °C and often grey, perfect café weather. Tokyo is "
             "milder, about 14 °C and mostly sunny 😀 Want me to look up the current forecast?")
    text0 = ("I don't have real-time data, but Paris is usually chilly and damp this time of "
             "year (6–10 °C), while Tokyo tends to be crisp and clear. For the café terraces "
             "in Paris bring a scarf — for Tokyo, a light jacket 😀")
    c_paris, c_tokyo = oa.call_id(), oa.call_id()
    calls = [(c_paris, "get_weather", ['{"ci', 'ty": "Pa', 'ris"}']),
             (c_tokyo, "get_weather", ['{"', 'city": "', 'Tok', 'yo"}'])]
    seqs = {2: oa.text_seq(2, text2), 0: oa.text_seq(0, text0), 1: oa.tools_seq(1, calls)}
    entries = interleave(rng, seqs, [2, 0, 1], lead=(3, 6), burst_max=3,
                         long_burst_p=0.06, long_burst=(15, 17), burst_max_for={1: 2},
                         hold_finish=True, finish_order=[2, 1, 0])
    events = [oa.chunk([e]) for e in entries]
    events.append(oa.usage_chunk(97, count_tokens(seqs)))
    register(name, provider="OpenAI (gpt-4o-mini, n=3, stream_options.include_usage, obfuscation)",
             exercises="Choice 2 appears first, then 0, then 1 (role chunk at each choice's first "
                       "output); one choice per chunk in bursts (one burst of 15+ chunks); choice 1 "
                       "makes two parallel get_weather calls whose argument fragments are interleaved "
                       "with the other choices' text; multi-byte UTF-8 (é, —, –, °, 😀); finish "
                       "chunks bunched at the end; every chunk has \"usage\": null and an "
                       "\"obfuscation\" pad; final usage chunk with \"choices\": [].",
             sdk=True,
             truth=[truth_choice(0, content=text0, finish_reason="stop"),
                    truth_choice(1, tool_calls=[tool(c_paris, "get_weather", '{"city": "Paris"}'),
                                                tool(c_tokyo, "get_weather", '{"city": "Tokyo"}')],
                                 finish_reason="tool_calls"),
                    truth_choice(2, content=text2, finish_reason="stop")],
             notes=f"Usage: prompt 97, completion {count_tokens(seqs)}.")
    return render(events)


def fx_openai_n2_interleaved_tools():
    name = "openai_n2_interleaved_tools"
    rng = rng_for(name)
    oa = OpenAI(rng, include_usage=False, obfuscation=True)
    a0 = [(oa.call_id(), "get_weather", '{"city":"Berlin","unit":"celsius"}'),
          (oa.call_id(), "get_time", '{"timezone":"Europe/Berlin"}')]
    a1 = [(oa.call_id(), "get_time", '{"timezone":"Europe/Berlin"}'),
          (oa.call_id(), "get_weather", '{"city":"Berlin"}')]
    seqs = {0: oa.tools_seq(0, [(c, n, args_frags(rng, a)) for c, n, a in a0]),
            1: oa.tools_seq(1, [(c, n, args_frags(rng, a)) for c, n, a in a1])}
    entries = interleave(rng, seqs, [0, 1], lead=(1, 2), burst_max=2)
    events = [oa.chunk([e]) for e in entries]
    register(name, provider="OpenAI (gpt-4o-mini, n=2, no include_usage, obfuscation)",
             exercises="Both choices make two parallel tool calls, so both have a tool-call index 0 "
                       "and 1 (tool indexes are per choice); fragments alternate between the choices "
                       "in bursts of 1-2 chunks, so a merger keyed by tool index alone (ignoring the "
                       "choice index) mixes them up. Choice 1 calls the same functions in the opposite "
                       "order. No usage field at all (include_usage not requested).",
             sdk=True,
             truth=[truth_choice(0, tool_calls=[tool(c, n, a) for c, n, a in a0], finish_reason="tool_calls"),
                    truth_choice(1, tool_calls=[tool(c, n, a) for c, n, a in a1], finish_reason="tool_calls")])
    return render(events)


def fx_openai_legacy_function_call():
    name = "openai_legacy_function_call"
    rng = rng_for(name)
    oa = OpenAI(rng, model="gpt-3.5-turbo-0613", created=1699300000, include_usage=False,
                obfuscation=False, service_tier=None, fingerprint=None, logprobs_field=False)
    args = {0: '{\n  "location": "Boston, MA"\n}',
            1: '{\n  "location": "Boston, MA",\n  "unit": "fahrenheit"\n}'}
    frags = {0: ["{\n", " ", " \"", "location", "\":", " \"", "Boston", ",", " MA", "\"\n", "}"],
             1: ["{\n", " ", " \"", "location", "\":", " \"", "Boston", ",", " MA", "\",\n", " ",
                 " \"", "unit", "\":", " \"", "f", "ahrenheit", "\"\n", "}"]}
    seqs = {}
    for i in (0, 1):
        assert "".join(frags[i]) == args[i]
        seq = [oa.entry(i, {"role": "assistant", "content": None,
                            "function_call": {"name": "get_current_weather", "arguments": ""}})]
        seq += [oa.entry(i, {"function_call": {"arguments": f}}) for f in frags[i]]
        seq.append(oa.entry(i, {}, "function_call"))
        seqs[i] = seq
    entries = interleave(rng, seqs, [1, 0], lead=(3, 4), burst_max=3)
    events = [oa.chunk([e]) for e in entries]
    register(name, provider="OpenAI 2023 (gpt-3.5-turbo-0613, legacy `functions`, n=2)",
             exercises="Legacy delta.function_call: the first chunk of each choice has role, "
                       "content null and function_call {name, arguments: \"\"}; then arguments-only "
                       "fragments (pretty-printed JSON with newlines, as gpt-3.5 emitted); "
                       "finish_reason \"function_call\". Choice 1 appears first. Older envelope: "
                       "system_fingerprint null, no service_tier, no logprobs key, no usage key.",
             sdk=True,
             truth=[truth_choice(i, function_call={"name": "get_current_weather", "arguments": args[i]},
                                 finish_reason="function_call") for i in (0, 1)])
    return render(events)


def fx_openai_refusal():
    name = "openai_refusal"
    rng = rng_for(name)
    oa = OpenAI(rng, model="gpt-4o-2024-08-06", include_usage=True, obfuscation=True)
    refusal = "I'm sorry, but I can't help with getting into someone else's home."
    answer = ("If you're locked out of your own place, the safest option is to call a licensed "
              "locksmith or your landlord — they can verify that you live there and open the "
              "door without damaging it.")
    seq0 = [oa.entry(0, {"role": "assistant", "content": None, "refusal": ""})]
    seq0 += [oa.entry(0, {"refusal": t}) for t in tokenize(rng, refusal)]
    seq0.append(oa.entry(0, {}, "stop"))
    seqs = {0: seq0, 1: oa.text_seq(1, answer)}
    entries = interleave(rng, seqs, [0, 1], lead=(2, 3), burst_max=4)
    events = [oa.chunk([e]) for e in entries]
    events.append(oa.usage_chunk(31, count_tokens(seqs)))
    register(name, provider="OpenAI (gpt-4o-2024-08-06, n=2, include_usage)",
             exercises="Choice 0 refuses: role chunk {role, content: null, refusal: \"\"}, then "
                       "delta.refusal fragments, content stays null; choice 1 answers in text. Both "
                       "finish with \"stop\".",
             sdk=True,
             truth=[truth_choice(0, refusal=refusal, finish_reason="stop"),
                    truth_choice(1, content=answer, finish_reason="stop")],
             notes=f"Usage: prompt 31, completion {count_tokens(seqs)}.")
    return render(events)


def fx_vllm_n4_reasoning():
    name = "vllm_n4_reasoning"
    rng = rng_for(name)
    cid = "chatcmpl-" + rand_str(rng, 32, HEX)
    model, created = "Qwen/Qwen3-8B", 1751000000

    def chunk(entry):
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [entry], "usage": None}

    plan = {
        0: ("Is 221 prime? It is odd and the digit sum is 5. Then 13 × 17 = 221, so composite.",
            "\n\nNo: 221 = 13 × 17, so it is not prime.", "stop", None),
        1: ("Let me check divisibility. Not by 2, 3 or 5. For 7, remainder 4; for 11, "
            "remainder 1; for 13, 13 × 17 = 221. So it is composite.",
            "\n\nNo, 221 is not prime. It factors as", "length", None),
        2: ("√221 is about 14.9, so test primes up to 13: 13 × 17 = 221.",
            "\n\n221 is not prime: 13 × 17 = 221.", "stop", "###"),
        3: ("13 × 17 = 221. Composite.", "\n\nNo — 221 = 13 × 17.", "stop", None),
    }
    seqs: dict[int, list] = {}
    for i, (reasoning, content, finish, stop_reason) in plan.items():
        items = [{"index": i, "delta": {"reasoning": t}, "logprobs": None, "finish_reason": None}
                 for t in tokenize(rng, reasoning)]
        ctoks = tokenize(rng, content)
        items += [{"index": i, "delta": {"content": t}, "logprobs": None, "finish_reason": None}
                  for t in ctoks]
        last = items[-1]
        last["finish_reason"] = finish
        last["stop_reason"] = stop_reason
        seqs[i] = items
    # role chunks for every index first
    events = [chunk({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                     "finish_reason": None}) for i in range(4)]
    # engine steps: each step every unfinished choice may emit (in index order); detokenizer
    # hold-back and per-sequence speed make the schedules diverge
    speed = {0: 0.8, 1: 0.65, 2: 0.75, 3: 0.9}
    pos = {i: 0 for i in seqs}
    while any(pos[i] < len(seqs[i]) for i in seqs):
        for i in range(4):
            if pos[i] < len(seqs[i]) and rng.random() < speed[i]:
                events.append(chunk(seqs[i][pos[i]]))
                pos[i] += 1
    completion = sum(len(s) for s in seqs.values())
    events.append({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": {"prompt_tokens": 18, "total_tokens": 18 + completion,
                                            "completion_tokens": completion}})
    truth = []
    for i, (reasoning, content, finish, stop_reason) in plan.items():
        truth.append(truth_choice(i, content=content, finish_reason=finish,
                                  message_extra={"reasoning": reasoning}, stop_reason=stop_reason))
    register(name, provider="vLLM >= 0.9 (Qwen/Qwen3-8B with reasoning parser, n=4, include_usage)",
             exercises="Role chunks ({role, content: \"\"}) for all four indexes first; then "
                       "delta.reasoning fragments followed by delta.content; each choice on its own "
                       "schedule (choice 3 finishes long before choice 1); the last text and "
                       "finish_reason in the same chunk, with the non-standard stop_reason (null, or "
                       "the matched stop string \"###\" for choice 2); choice 1 is cut off by "
                       "max_tokens (finish_reason \"length\"); every chunk has \"usage\": null and a "
                       "final usage-only chunk with \"choices\": [] follows. No system_fingerprint.",
             sdk=True,
             truth=truth,
             notes=f"Usage: prompt 18, completion {completion}. The SDK's get_final_completion() "
                   "raises LengthFinishReasonError for choice 1 (finish_reason length); "
                   "sdk_reference.py then reads the accumulated snapshot instead.")
    return render(events)


def fx_deepseek_reasoning_content():
    name = "deepseek_reasoning_content"
    rng = rng_for(name)
    cid = "-".join(rand_str(rng, n, HEX) for n in (8, 4, 4, 4, 12))
    created, model = 1738000000, "deepseek-reasoner"
    fp = "fp_" + rand_str(rng, 10, HEX) + "_prod0820_fp8_kvcache"
    reasoning = ("Okay, the user wants to compare 9.11 and 9.8. Write 9.8 as 9.80 so both have two "
                 "decimal places. 0.80 is larger than 0.11, so 9.8 is greater. The trap is reading "
                 "them like version numbers.")
    content = ("**9.8** is greater. Written with the same number of decimals, 9.80 > 9.11 — "
               "9.11 only looks bigger if you read it like a version number.")

    def chunk(delta, finish=None, usage=False):
        d = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
             "system_fingerprint": fp,
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        return d

    events = [chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
    rtoks = tokenize(rng, reasoning)
    ctoks = tokenize(rng, content)
    events += [chunk({"content": None, "reasoning_content": t}) for t in rtoks]
    events += [chunk({"content": t, "reasoning_content": None}) for t in ctoks]
    last = chunk({"content": "", "reasoning_content": None}, "stop")
    completion = len(rtoks) + len(ctoks) + 1
    last["usage"] = {"prompt_tokens": 24, "completion_tokens": completion,
                     "total_tokens": 24 + completion,
                     "prompt_tokens_details": {"cached_tokens": 0},
                     "completion_tokens_details": {"reasoning_tokens": len(rtoks)},
                     "prompt_cache_hit_tokens": 0, "prompt_cache_miss_tokens": 24}
    events.append(last)
    register(name, provider="DeepSeek API (deepseek-reasoner, n=1)",
             exercises="delta.reasoning_content fragments (content: null) then content fragments "
                       "(reasoning_content: null); role chunk has content null and reasoning_content "
                       "\"\"; UUID-style id; the finish chunk has an empty content delta and carries "
                       "the usage (with DeepSeek's prompt_cache_hit/miss_tokens) - no separate usage "
                       "chunk and no usage key on the other chunks.",
             sdk=True,
             truth=[truth_choice(0, content=content, finish_reason="stop",
                                 message_extra={"reasoning_content": reasoning})],
             notes=f"Usage: prompt 24, completion {completion} (reasoning {len(rtoks)}).")
    return render(events)


SAFE = {"filtered": False, "severity": "safe"}


def azure_filter_results(rng, protected=False):
    r = {"hate": dict(SAFE), "self_harm": dict(SAFE), "sexual": dict(SAFE), "violence": dict(SAFE)}
    if protected:
        r["protected_material_code"] = {"filtered": False, "detected": False}
        r["protected_material_text"] = {"filtered": False, "detected": False}
    return r


def fx_azure_filters():
    name = "azure_filters"
    rng = rng_for(name)
    cid = "chatcmpl-" + rand_str(rng, 29)
    created, model, fp = 1733000000, "gpt-4o-2024-11-20", "fp_" + rand_str(rng, 10, HEX)
    texts = {0: "Write small programs every day and let the compiler's error messages teach you — "
                "they're unusually helpful.",
             1: "Work through the Rust Book, then rewrite a tool you already use; ownership clicks "
                "faster with real code."}

    def chunk(entry):
        return {"choices": [entry], "created": created, "id": cid, "model": model,
                "object": "chat.completion.chunk", "system_fingerprint": fp}

    seqs = {}
    for i, text in texts.items():
        seq = [{"content_filter_results": {}, "delta": {"content": "", "refusal": None, "role": "assistant"},
                "finish_reason": None, "index": i, "logprobs": None}]
        for t in tokenize(rng, text):
            seq.append({"content_filter_results": azure_filter_results(rng), "delta": {"content": t},
                        "finish_reason": None, "index": i, "logprobs": None})
        seq.append({"content_filter_results": {}, "delta": {}, "finish_reason": "stop", "index": i,
                    "logprobs": None})
        seqs[i] = seq
    entries = interleave(rng, seqs, [0, 1], lead=(3, 5), burst_max=4)
    prompt_filter = {"choices": [], "created": 0, "id": "", "model": "", "object": "",
                     "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {
                         "hate": dict(SAFE), "jailbreak": {"filtered": False, "detected": False},
                         "self_harm": dict(SAFE), "sexual": dict(SAFE), "violence": dict(SAFE)}}]}
    events = [prompt_filter]
    fin1 = next(k for k, e in enumerate(entries) if e["index"] == 1 and e["finish_reason"])
    mid0 = next(k for k, e in enumerate(entries) if e["index"] == 0 and k > 10)

    def annotation(i, start, end):
        return {"choices": [{"content_filter_offsets": {"check_offset": start, "start_offset": start,
                                                        "end_offset": end},
                             "content_filter_results": azure_filter_results(rng, protected=True),
                             "finish_reason": None, "index": i}],
                "created": 0, "id": "", "model": "", "object": ""}

    for k, e in enumerate(entries):
        events.append(chunk(e))
        if k == mid0:
            events.append(annotation(0, 0, 48))
        if k == fin1:
            events.append(annotation(1, 0, len(texts[1].encode("utf-8"))))
    register(name, provider="Azure OpenAI (gpt-4o-2024-11-20, n=2, asynchronous content filter)",
             exercises="First event is the prompt-filter chunk: choices [], id \"\", object \"\", "
                       "created 0, prompt_filter_results. Every choice entry carries "
                       "content_filter_results ({} on role and finish entries). Two annotation chunks "
                       "(id \"\", object \"\", a choice entry with content_filter_results and "
                       "content_filter_offsets but NO delta): one for choice 0 mid-stream and one for "
                       "choice 1 right after choice 1's finish chunk. Keys are sorted alphabetically "
                       "as Azure sends them.",
             sdk=True,
             truth=[truth_choice(i, content=t, finish_reason="stop") for i, t in texts.items()],
             notes="Annotation chunks carry no delta and must not reopen or alter a finished choice. "
                   "(The SDK's stream wrapper drops chunks whose object is not "
                   "\"chat.completion.chunk\", which removes the prompt-filter and annotation chunks.)")
    return render(events, sort=True)


def fx_multi_choice_chunk():
    name = "multi_choice_chunk"
    rng = rng_for(name)
    cid = "chatcmpl-" + rand_str(rng, 32, HEX)
    created, model = 1720000000, "meta-llama/Llama-3.1-8B-Instruct"
    texts = {0: "Mango — a sweet, juicy stone fruit with golden flesh and a big flat pit 😀",
             1: "A pear: crisp when fresh, buttery when ripe, grainy, and mildly sweet.",
             2: "Lychee: fragrant, translucent white flesh with a floral, grape-like taste."}
    seqs = {}
    for i, text in texts.items():
        toks = tokenize(rng, text)
        seq = [{"index": i, "delta": {"content": t}, "logprobs": None, "finish_reason": None} for t in toks]
        seq[-1]["finish_reason"] = "stop"
        seq[-1]["stop_reason"] = None
        seqs[i] = seq

    def role(i):
        return {"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                "finish_reason": None}

    def chunk(entries):
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": entries}

    events = [chunk([role(1), role(0)]), chunk([role(2), seqs[0][0], seqs[1][0]])]
    pos = {0: 1, 1: 1, 2: 0}
    forced = False
    while any(pos[i] < len(seqs[i]) for i in seqs):
        ready = [i for i in seqs if pos[i] < len(seqs[i]) and rng.random() < 0.6]
        if not ready:
            continue
        rng.shuffle(ready)
        if not forced and 0 in ready and 1 in ready:
            # the first batch that has both lists index 1 before index 0
            forced = True
            ready.remove(1)
            ready.insert(0, 1)
            ready.remove(0)
            ready.insert(1, 0)
        batch = []
        for i in ready:
            batch.append(seqs[i][pos[i]])
            pos[i] += 1
        events.append(chunk(batch))
    # make sure "index 1 listed before 0" happens inside at least one content batch too
    assert any([e["index"] for e in ev["choices"]][:2] == [1, 0] for ev in events[2:])
    register(name, provider="vLLM-style batching (Llama-3.1-8B-Instruct, n=3); JSON written with "
                            "\\u escapes (ensure_ascii)",
             exercises="Chunks that carry several choices at once, in arbitrary order inside the "
                       "chunk (index 1 before 0, 2 before 0, ...). The first chunk has only the role "
                       "entries for 1 and 0; choice 2's role arrives in the second chunk together "
                       "with the first text of 0 and 1. Non-ASCII is \\u-escaped, the emoji as a "
                       "surrogate pair (\\ud83d\\ude00). Last text and finish_reason \"stop\" share an "
                       "entry (with stop_reason null). No usage.",
             sdk=True,
             truth=[truth_choice(i, content=t, finish_reason="stop") for i, t in texts.items()])
    return render(events, ascii=True)


def fx_error_mid_stream():
    name = "error_mid_stream"
    rng = rng_for(name)
    oa = OpenAI(rng, include_usage=True, obfuscation=True)
    t0 = "Sourdough needs three things: flour, water, and a lively starter. Feed the starter"
    t1 = "The short answer: keep your starter warm (24–26 °C) and feed it twice a"
    seqs = {0: oa.text_seq(0, t0, finish=None), 1: oa.text_seq(1, t1, finish=None)}
    entries = interleave(rng, seqs, [1, 0], lead=(2, 4), burst_max=5)
    events = [oa.chunk([e]) for e in entries]
    err = {"error": {"message": "The server had an error while processing your request.",
                     "type": "server_error", "param": None, "code": "internal_error"}}
    body = render(events, done=False)
    body += "data: " + json.dumps(err, ensure_ascii=False) + "\n\n" + DONE
    register(name, provider="OpenAI-style chunks (gpt-4o-mini, n=2) with an in-band error event",
             exercises="Both choices stream some text (choice 1 first), then a "
                       "`data: {\"error\": {...}}` event (message, type server_error, code "
                       "internal_error) followed by `data: [DONE]`. No choice ever gets a "
                       "finish_reason and no usage chunk is sent.",
             sdk=False,
             truth=[truth_choice(0, content=t0, finish_reason=None),
                    truth_choice(1, content=t1, finish_reason=None)],
             notes="Expected: the error is surfaced to the consumer (stream-level error, and each "
                   "still-open choice ends with that error rather than a finish_reason); the partial "
                   "texts above are what was received before it. The OpenAI SDK raises "
                   "APIError(\"The server had an error while processing your request.\") when it "
                   "reads the error event.")
    return body


def fx_missing_done_truncated():
    name = "missing_done_truncated"
    rng = rng_for(name)
    oa = OpenAI(rng, include_usage=False, obfuscation=False)
    text = "Sure — here's the forecast lookup for both cities."
    cid_a, cid_b = oa.call_id(), oa.call_id()
    calls = [(cid_a, "get_weather", args_frags(rng, '{"city":"Oslo"}')),
             (cid_b, "get_weather", args_frags(rng, '{"city":"Bergen"}'))]
    seq1 = oa.tools_seq(1, calls, finish=None)
    # the stream dies while choice 1's second call is streaming its arguments
    cut_at = len(seq1) - 3
    seq1 = seq1[:cut_at]
    seqs = {0: oa.text_seq(0, text), 1: seq1}
    entries = interleave(rng, seqs, [0, 1], lead=(2, 3), burst_max=3)
    # make sure choice 1's partial call is the last thing on the wire
    last1 = max(k for k, e in enumerate(entries) if e["index"] == 1)
    tail = entries[last1 + 1:]
    entries = entries[:last1] + tail + [entries[last1]]
    events = [oa.chunk([e]) for e in entries]
    body = render(events, done=False)
    # then one more event cut mid-line, no trailing newline
    nxt = oa.chunk([oa.entry(1, {"tool_calls": [{"index": 1, "function": {"arguments": "gen"}}]})])
    line = "data: " + dumps(nxt)
    cut = line.index('"arguments"') + 6
    body += line[:cut]
    # arguments actually sent before the cut
    args_sent = {0: "", 1: ""}
    for e in seq1:
        for tc in e["delta"].get("tool_calls", []):
            args_sent[tc["index"]] += tc["function"]["arguments"]
    register(name, provider="OpenAI-style chunks (gpt-4o-mini, n=2), connection dropped",
             exercises="Choice 0 finishes (\"stop\"); choice 1 is in the middle of its second "
                       "parallel tool call when the stream stops: no [DONE], and the last event is "
                       "cut mid-line (`...\"argum`, no trailing newline) so it is not valid JSON.",
             sdk=False,
             truth=[truth_choice(0, content=text, finish_reason="stop"),
                    truth_choice(1, tool_calls=[tool(cid_a, "get_weather", args_sent[0]),
                                                tool(cid_b, "get_weather", args_sent[1])],
                                 finish_reason=None)],
             notes="Expected: choice 0 is complete; choice 1 ends without a finish_reason (stream "
                   "truncated / unexpected EOF), its second call's arguments are the incomplete JSON "
                   "shown. The partial last line must be reported (or dropped), never parsed as a "
                   "chunk.")
    return body


def fx_missing_done_finished():
    name = "missing_done_finished"
    rng = rng_for(name)
    oa = OpenAI(rng, include_usage=True, obfuscation=True)
    t = {0: "Yes — a haiku has three lines of five, seven and five syllables.",
         1: "A haiku is 5-7-5: three short lines, often about a season."}
    seqs = {i: oa.text_seq(i, s) for i, s in t.items()}
    entries = interleave(rng, seqs, [0, 1], lead=(2, 4), burst_max=4)
    events = [oa.chunk([e]) for e in entries]
    events.append(oa.usage_chunk(22, count_tokens(seqs)))
    register(name, provider="OpenAI-style chunks (gpt-4o-mini, n=2, include_usage)",
             exercises="Every choice has finished and the usage chunk was sent, but the stream ends "
                       "(cleanly, after a blank line) without `data: [DONE]`.",
             sdk=True,
             truth=[truth_choice(i, content=s, finish_reason="stop") for i, s in t.items()],
             notes=f"Usage: prompt 22, completion {count_tokens(seqs)}. Expected: both choices "
                   "complete; a missing [DONE] after all choices finished is at most a warning.")
    return render(events, done=False)


def fx_quirks_ids_repeated():
    name = "quirks_ids_repeated"
    rng = rng_for(name)
    cid = "-".join(rand_str(rng, n, HEX) for n in (8, 4, 4, 4, 12))
    created, model = 1730000000, "accounts/fireworks/models/llama-v3p1-70b-instruct"

    def chunk(entry):
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [entry], "usage": None}

    calls = [("call_" + rand_str(rng, 24), "get_weather", '{"city": "Madrid"}'),
             ("call_" + rand_str(rng, 24), "get_weather", '{"city": "Seville"}')]
    seq0 = [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": ""}]
    for k, (call_id, fname, args) in enumerate(calls):
        for j, frag in enumerate(args_frags(rng, args)):
            if j == 0 or rng.random() < 0.6:
                tc = {"index": k, "id": call_id, "type": "function",
                      "function": {"name": fname, "arguments": frag}}
            else:
                tc = {"index": k, "id": None, "type": None,
                      "function": {"name": None, "arguments": frag}}
            seq0.append({"index": 0, "delta": {"tool_calls": [tc]}, "finish_reason": ""})
    seq0.append({"index": 0, "delta": {}, "finish_reason": "tool_calls"})
    text = "I'd check a weather service for Madrid and Seville; both are usually sunny in spring."
    seq1 = [{"index": 1, "delta": {"role": "assistant", "content": ""}, "finish_reason": ""}]
    seq1 += [{"index": 1, "delta": {"content": t}, "finish_reason": ""} for t in tokenize(rng, text)]
    seq1.append({"index": 1, "delta": {}, "finish_reason": "stop"})
    entries = interleave(rng, {0: seq0, 1: seq1}, [0, 1], lead=(2, 3), burst_max=3)
    events = [chunk(e) for e in entries]
    register(name, provider="Fireworks / DeepSeek-style tool calls + SGLang-style finish_reason",
             exercises="Every tool-call fragment repeats id, type and function.name (the first "
                       "fragment of each call always; later fragments either repeat them or send "
                       "explicit nulls); every non-final entry has finish_reason \"\" instead of "
                       "null. Choice 0 makes two parallel calls, choice 1 answers in text.",
             sdk=False,
             truth=[truth_choice(0, tool_calls=[tool(c, n, a) for c, n, a in calls],
                                 finish_reason="tool_calls"),
                    truth_choice(1, content=text, finish_reason="stop")],
             notes="Expected: repeated id/type/name are not concatenated (id stays "
                   "\"call_…\", not \"call_…call_…\"); nulls do not erase them; \"\" is treated "
                   "as no finish_reason. (The OpenAI SDK's accumulator concatenates repeated "
                   "id/name strings and fails with AssertionError on the explicit \"type\": null, "
                   "which is why this fixture has no SDK golden file.)")
    return render(events)


def fx_quirks_index_zero():
    name = "quirks_index_zero"
    rng = rng_for(name)
    created, model = 1734000000, "qwen2.5:7b"
    cid = "chatcmpl-" + str(rng.randint(100, 999))

    def chunk(entry):
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "system_fingerprint": "fp_ollama", "choices": [entry]}

    calls = [("call_" + rand_str(rng, 8, HEX + "xyz"), "get_weather", '{"city":"Rome"}'),
             ("call_" + rand_str(rng, 8, HEX + "xyz"), "get_time", '{"timezone":"Europe/Rome"}')]
    seq0 = []
    for call_id, fname, args in calls:
        seq0.append({"index": 0, "delta": {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "index": 0, "type": "function", "function": {"name": fname, "arguments": ""}}]},
            "finish_reason": None})
        for frag in args_frags(rng, args):
            seq0.append({"index": 0, "delta": {"role": "assistant", "content": "", "tool_calls": [
                {"index": 0, "function": {"arguments": frag}}]}, "finish_reason": None})
    seq0.append({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": "tool_calls"})
    text = "Rome is usually mild in October, around 20 °C."
    seq1 = [{"index": 1, "delta": {"role": "assistant", "content": t}, "finish_reason": None}
            for t in tokenize(rng, text)]
    seq1.append({"index": 1, "delta": {"role": "assistant", "content": ""}, "finish_reason": "stop"})
    entries = interleave(rng, {0: seq0, 1: seq1}, [0, 1], lead=(3, 5), burst_max=3)
    events = [chunk(e) for e in entries]
    register(name, provider="Ollama / SGLang-style parallel tool calls",
             exercises="Choice 0 makes two parallel calls that BOTH use tool-call index 0 but have "
                       "distinct ids: each call's first fragment has id + type + name (arguments "
                       "\"\"), then argument fragments with index 0 and no id. Ollama-style envelope: "
                       "short id (chatcmpl-NNN), system_fingerprint fp_ollama, no logprobs key, and "
                       "role \"assistant\" repeated on every delta (content \"\" on tool deltas).",
             sdk=False,
             truth=[truth_choice(0, content="", tool_calls=[tool(c, n, a) for c, n, a in calls],
                                 finish_reason="tool_calls"),
                    truth_choice(1, content=text, finish_reason="stop")],
             notes="Expected: two separate calls (a new id at the same index starts a new call; "
                   "the OpenAI SDK instead merges them into one call with id \"call_Acall_B\", "
                   "name \"get_weatherget_time\" and both argument strings back to back); "
                   "repeated role is not an error. Choice 0's content is \"\" (only empty strings "
                   "were sent), which a consumer may report as null/absent.")
    return render(events)


def fx_quirks_no_index():
    name = "quirks_no_index"
    rng = rng_for(name)
    created, model = 1745000000, "gemini-2.5-flash"
    cid = rand_str(rng, 22, ALNUM + "-_")

    def chunk(entry):
        return {"choices": [entry], "created": created, "id": cid, "model": model,
                "object": "chat.completion.chunk"}

    calls = [("call_" + rand_str(rng, 20), "get_weather", '{"city":"Kyoto"}'),
             ("call_" + rand_str(rng, 20), "get_weather", '{"city":"Osaka"}')]
    seq0 = []
    for call_id, fname, args in calls:
        frags = args_frags(rng, args)
        seq0.append({"delta": {"role": "assistant", "tool_calls": [
            {"function": {"arguments": frags[0], "name": fname}, "id": call_id, "type": "function"}]},
            "finish_reason": None, "index": 0})
        for frag in frags[1:]:
            seq0.append({"delta": {"role": "assistant", "tool_calls": [
                {"function": {"arguments": frag}, "type": "function"}]},
                "finish_reason": None, "index": 0})
    seq0.append({"delta": {"role": "assistant"}, "finish_reason": "tool_calls", "index": 0})
    text = "Kyoto and Osaka are close together, so their weather is usually similar."
    seq1 = [{"delta": {"content": t, "role": "assistant"}, "finish_reason": None, "index": 1}
            for t in tokenize(rng, text)]
    seq1.append({"delta": {"role": "assistant"}, "finish_reason": "stop", "index": 1})
    entries = interleave(rng, {0: seq0, 1: seq1}, [1, 0], lead=(2, 3), burst_max=3)
    events = [chunk(e) for e in entries]
    register(name, provider="Gemini OpenAI-compatibility style (gemini-2.5-flash, n=2)",
             exercises="tool_calls fragments WITHOUT an \"index\" key: the first fragment of each call "
                       "has id + name (+ the first piece of arguments), continuation fragments have "
                       "neither id nor index. Choice 0 makes two such calls back to back; choice 1 "
                       "answers in text and appears first. Keys sorted alphabetically, role repeated "
                       "on every delta, no system_fingerprint.",
             sdk=False,
             truth=[truth_choice(0, tool_calls=[tool(c, n, a) for c, n, a in calls],
                                 finish_reason="tool_calls"),
                    truth_choice(1, content=text, finish_reason="stop")],
             notes="Expected: fragments without index attach to the most recent call of that choice; "
                   "a fragment with a new id starts the next call. (The OpenAI SDK raises "
                   "TypeError: list indices must be integers or slices, not NoneType.)")
    return render(events, sort=True)


def fx_quirks_wire():
    name = "quirks_wire"
    rng = rng_for(name)
    oa = OpenAI(rng, model="openai/gpt-4o-mini", include_usage=False, obfuscation=False,
                service_tier=None)
    oa.created = 1740000000 + rng.randint(0, 99999)
    oa.id = f"gen-{oa.created}-{rand_str(rng, 20)}"
    t = {0: "Line one of the answer.\nLine two — with an em dash.",
         1: "Short and sweet 😀"}
    seqs = {i: oa.text_seq(i, s) for i, s in t.items()}
    entries = interleave(rng, seqs, [0, 1], lead=(2, 3), burst_max=3)
    objs = [oa.chunk([e]) for e in entries]
    for o in objs:
        o["provider"] = "OpenAI"
    n = len(objs)
    multi_line_at, concat_at, fields_at = n // 3, n // 2, 2 * n // 3
    nospace = {3, 7, n - 2}
    CRLF = "\r\n"
    out = ["\ufeff", ": OPENROUTER PROCESSING", CRLF, CRLF, "retry: 3000", CRLF, CRLF]
    k = 0
    while k < n:
        o = objs[k]
        if k == 5 or k == n - 4:
            out += [": OPENROUTER PROCESSING", CRLF, CRLF]
        if k == multi_line_at:
            s = dumps(o)
            split = s.index(',"created"') + 1  # split between members: joined with \n = whitespace
            out += ["data: ", s[:split], CRLF, "data: ", s[split:], CRLF, CRLF]
        elif k == concat_at:
            out += ["data: ", dumps(o), dumps(objs[k + 1]), CRLF, CRLF]
            k += 1
        elif k == fields_at:
            out += ["event: message", CRLF, f"id: {k}", CRLF, "data: ", dumps(o), CRLF, CRLF]
        elif k in nospace:
            out += ["data:", dumps(o), CRLF, CRLF]
        else:
            out += ["data: ", dumps(o), CRLF, CRLF]
        k += 1
    out += ["data:[DONE]", CRLF, CRLF]
    register(name, provider="OpenRouter-ish wire format (openai/gpt-4o-mini, n=2)",
             exercises="SSE framing quirks: a UTF-8 BOM at the very start; CRLF line endings "
                       "throughout; `: OPENROUTER PROCESSING` comment lines; a `retry: 3000` field; "
                       "`data:` without the space on some lines (and on the final `data:[DONE]`); "
                       "one event whose JSON object is split across two `data:` lines (valid once "
                       "the lines are joined with \"\\n\"); one event with `event: message` and `id:` "
                       "fields; one `data:` line holding two concatenated JSON chunk objects. Choice 0's "
                       "text contains a real newline.",
             sdk=False,
             truth=[truth_choice(i, content=s, finish_reason="stop") for i, s in t.items()],
             notes="Expected: identical to a clean stream - every chunk is delivered once, "
                   "including both objects from the concatenated line (a strict parser may instead "
                   "report that one event as malformed; if so, the texts lose the two deltas it "
                   "holds). Blocks without any data line (the retry-only block, comment-only blocks) "
                   "dispatch no event, per the SSE spec. (The OpenAI SDK's SSE decoder does dispatch "
                   "them, with empty data, and then fails on json.loads(\"\").)")
    return "".join(out)


def fx_openrouter_error_finish():
    name = "openrouter_error_finish"
    rng = rng_for(name)
    oa = OpenAI(rng, model="openai/gpt-4o", include_usage=False, obfuscation=False,
                service_tier=None, fingerprint="fp_" + rand_str(rng, 10, HEX))
    oa.created = 1741000000 + rng.randint(0, 99999)
    oa.id = f"gen-{oa.created}-{rand_str(rng, 20)}"
    text = ("Here are three ideas for a rainy afternoon: bake a loaf of bread, start a jigsaw "
            "puzzle, or")
    seq = [{"index": 0, "delta": {"role": "assistant", "content": t}, "finish_reason": None,
            "native_finish_reason": None, "logprobs": None} for t in tokenize(rng, text)]

    def chunk(entries):
        d = oa.chunk(entries)
        return {"id": d["id"], "provider": "OpenAI", "model": d["model"], "object": d["object"],
                "created": d["created"], "choices": entries, "system_fingerprint": d["system_fingerprint"]}

    body = ": OPENROUTER PROCESSING\n\n"
    body += "".join(data_event(chunk([e])) for e in seq)
    err = {"id": oa.id, "object": "chat.completion.chunk", "created": oa.created, "model": oa.model,
           "provider": "OpenAI",
           "error": {"code": 502, "message": "Provider returned error",
                     "metadata": {"provider_name": "OpenAI", "raw": "upstream connect error"}},
           "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error",
                        "native_finish_reason": "error"}]}
    body += data_event(err) + DONE
    register(name, provider="OpenRouter (openai/gpt-4o, n=1)",
             exercises="Mid-stream provider failure reported OpenRouter's way: a normal-looking chunk "
                       "with choices [{index 0, delta {content: \"\"}, finish_reason \"error\"}] and a "
                       "top-level \"error\": {code: 502, message}; then [DONE]. Also: "
                       "`: OPENROUTER PROCESSING` comment first, role repeated on every delta, "
                       "native_finish_reason.",
             sdk=False,
             truth=[truth_choice(0, content=text, finish_reason="error")],
             notes="Expected: choice 0 ends with finish_reason \"error\" (not a success) and the "
                   "error {code 502, message \"Provider returned error\"} is surfaced. (The OpenAI "
                   "SDK raises APIError on any chunk with a top-level error.)")
    return body


def fx_answer_question():
    name = "answer_question"
    rng = rng_for(name)
    oa = OpenAI(rng, include_usage=True, obfuscation=True)
    answers = {
        0: {"answer": "Bread rises because yeast eats sugars and releases CO\u2082 gas, which the "
                      "gluten network traps.\nKnead well, proof somewhere warm (24\u201326 \u00b0C) "
                      "and bake once it has roughly doubled \u2014 the \"poke test\" helps.",
            "confidence": 0.92,
            "sources": [{"title": "On Food and Cooking", "page": 516}]},
        1: {"answer": "Yeast ferments the flour's sugars into carbon dioxide and alcohol; the gas "
                      "inflates the dough and the oven's heat sets the structure \U0001F35E.",
            "confidence": 0.85,
            "sources": []},
    }
    calls = {i: [(oa.call_id(), "answer_question", args_frags(rng, json.dumps(a, ensure_ascii=False)))]
             for i, a in answers.items()}
    seqs = {1: oa.tools_seq(1, calls[1]), 0: oa.tools_seq(0, calls[0])}
    entries = interleave(rng, seqs, [1, 0], lead=(2, 4), burst_max=3)
    events = [oa.chunk([e]) for e in entries]
    events.append(oa.usage_chunk(121, count_tokens(seqs)))
    register(name, provider="OpenAI (gpt-4o-mini, n=2, tool_choice answer_question, include_usage)",
             exercises="Both choices call answer_question({answer, confidence, sources}); the "
                       "arguments arrive in small fragments that split keys, escapes (\\n, \\\", "
                       "\\u-less non-ASCII) and numbers; choice 1 appears first. Used by "
                       "examples/partial_answer.rs and the argument-text tests.",
             sdk=True,
             truth=[truth_choice(i, tool_calls=[tool(calls[i][0][0], "answer_question",
                                                    json.dumps(answers[i], ensure_ascii=False))],
                                 finish_reason="tool_calls") for i in (0, 1)])
    return render(events)


def fx_demo():
    name = "demo"
    rng = rng_for(name)
    oa = OpenAI(rng, include_usage=True, obfuscation=True, created=1732287000)
    text2 = ("Lisbon in late autumn is usually mild but changeable, so pack in layers. Bring a light "
             "waterproof jacket, a warm sweater for the evenings, and comfortable shoes with good grip "
             "— the cobbled streets and steep hills around Alfama get slippery when it rains. A compact "
             "umbrella, sunglasses and a reusable water bottle are worth the space too. If you like, I "
             "can check the live forecast and the current local time for you.")
    text0 = ("For three days in Lisbon I'd pack a few breathable tops you can layer, one warm jumper or "
             "fleece, a packable rain jacket, and comfortable walking shoes (the calçada pavements are "
             "beautiful but slick when wet). Add a small day bag, a Type F plug adapter, and a light "
             "scarf for breezy evenings by the river. I can't see the weather or the clock from here, "
             "but I'm happy to look both up with the weather and time tools.")
    c_w, c_t = oa.call_id(), oa.call_id()
    a_w, a_t = '{"city":"Lisbon","country":"PT"}', '{"timezone":"Europe/Lisbon"}'
    calls = [(c_w, "get_weather", args_frags(rng, a_w)), (c_t, "get_time", args_frags(rng, a_t))]
    seqs = {2: oa.text_seq(2, text2), 0: oa.text_seq(0, text0), 1: oa.tools_seq(1, calls)}
    entries = interleave(rng, seqs, [2, 0, 1], lead=(5, 9), burst_max=5,
                         long_burst_p=0.1, long_burst=(15, 22))
    events = [oa.chunk([e]) for e in entries]
    events.append(oa.usage_chunk(148, count_tokens(seqs)))
    register(name, provider="OpenAI (gpt-4o-mini, n=3, include_usage) - the CLI's offline demo",
             exercises="Same as crates/cli/assets/demo.sse. Choices start in the order 2, 0, 1; "
                       "choices 0 and 2 answer a packing question in a paragraph each (token-sized "
                       "deltas); choice 1 makes two parallel tool calls (get_weather, get_time); "
                       "bursts of up to 22 chunks from one choice; final usage chunk; [DONE].",
             sdk=True,
             truth=[truth_choice(0, content=text0, finish_reason="stop"),
                    truth_choice(1, tool_calls=[tool(c_w, "get_weather", a_w), tool(c_t, "get_time", a_t)],
                                 finish_reason="tool_calls"),
                    truth_choice(2, content=text2, finish_reason="stop")],
             notes=f"Usage: prompt 148, completion {count_tokens(seqs)}. "
                   f"Text deltas: choice 0 {len(seqs[0]) - 2}, choice 2 {len(seqs[2]) - 2}.")
    return render(events)


GENERATORS = [
    ("openai_n3_tools", fx_openai_n3_tools),
    ("openai_n2_interleaved_tools", fx_openai_n2_interleaved_tools),
    ("openai_legacy_function_call", fx_openai_legacy_function_call),
    ("openai_refusal", fx_openai_refusal),
    ("vllm_n4_reasoning", fx_vllm_n4_reasoning),
    ("deepseek_reasoning_content", fx_deepseek_reasoning_content),
    ("azure_filters", fx_azure_filters),
    ("multi_choice_chunk", fx_multi_choice_chunk),
    ("error_mid_stream", fx_error_mid_stream),
    ("missing_done_truncated", fx_missing_done_truncated),
    ("missing_done_finished", fx_missing_done_finished),
    ("quirks_ids_repeated", fx_quirks_ids_repeated),
    ("quirks_index_zero", fx_quirks_index_zero),
    ("quirks_no_index", fx_quirks_no_index),
    ("quirks_wire", fx_quirks_wire),
    ("openrouter_error_finish", fx_openrouter_error_finish),
    ("demo", fx_demo),
    ("answer_question", fx_answer_question),
]

# --------------------------------------------------------------------------- validation


def sse_events(raw: bytes):
    """Minimal spec-following SSE parser: yields (fields dict, data str) per dispatched
    event and finally ("eof", pending_line) information.  Used only for validation."""
    text = raw.decode("utf-8")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = re.split(r"\r\n|\r|\n", text)
    complete = bool(re.search(r"(\r\n|\r|\n)$", text))
    trailing = None if complete else lines[-1]
    if complete:
        lines = lines[:-1]
    else:
        lines = lines[:-1]
    data: list[str] = []
    fields: dict = {}
    events = []
    for line in lines:
        if line == "":
            if data:
                events.append((fields, "\n".join(data)))
            data, fields = [], {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        else:
            fields[name] = value
    return events, trailing, data


def parse_payload(s: str) -> list:
    dec = json.JSONDecoder()
    objs, i = [], 0
    while i < len(s):
        while i < len(s) and s[i] in " \t\r\n":
            i += 1
        if i >= len(s):
            break
        obj, i = dec.raw_decode(s, i)
        objs.append(obj)
    return objs


def validate(name: str, raw: bytes) -> dict:
    events, trailing, pending = sse_events(raw)
    n_chunks, saw_done, indexes = 0, False, set()
    for fields, data in events:
        if data == "[DONE]":
            saw_done = True
            continue
        objs = parse_payload(data)
        if name != "quirks_wire":
            assert len(objs) == 1, (name, data[:80])
        for o in objs:
            n_chunks += 1
            for c in o.get("choices", []):
                indexes.add(c["index"])
    if name == "missing_done_truncated":
        assert trailing and not saw_done
        try:
            json.loads(trailing.partition(":")[2])
        except json.JSONDecodeError:
            pass
        else:
            raise AssertionError("truncated line unexpectedly parses")
    else:
        assert trailing is None and not pending, name
    return {"events": len(events), "chunks": n_chunks, "done": saw_done, "indexes": sorted(indexes)}


def build_all() -> dict[str, bytes]:
    FIXTURE_DOCS.clear()
    out = {}
    for name, fn in GENERATORS:
        out[name] = fn().encode("utf-8")
    return out


def readme(stats: dict[str, dict]) -> str:
    lines = [
        "# Stream fixtures",
        "",
        "Recorded-looking `text/event-stream` bodies of streamed chat completions with n > 1",
        "choices (a few n = 1 ones for provider quirks). **Generated** by",
        "`python3 scripts/make_fixtures.py` (deterministic, seeded) - edit the generator, not the",
        "`.sse` files. `python3 scripts/sdk_reference.py` then writes `expected/<name>.json`: the",
        "per-choice result of the official OpenAI Python SDK's own chunk accumulator",
        "(`ChatCompletionStreamState`) for the well-formed fixtures (SDK column below).",
        "",
        "Field facts these imitate: OpenAI with n > 1 sends one choice per chunk in no fixed order",
        "(one choice may send 15+ chunks in a row); a choice's role chunk appears when that choice",
        "first produces output, so choice 2 can come before choice 0; finish chunks may bunch at",
        "the end; with `stream_options.include_usage` every chunk has `\"usage\": null` and a final",
        "`\"choices\": []` chunk carries the usage of all choices; tool-call `id`/`type`/`name` only",
        "on a call's first fragment; tool indexes are per choice. vLLM sends role chunks for every",
        "index first, then each choice on its own schedule, last text + `finish_reason` in one",
        "chunk plus `stop_reason`. Azure sends a prompt-filter chunk first and annotation chunks",
        "without `delta`. Each event is `data: <json>\\n\\n`; a stream ends with `data: [DONE]`.",
        "",
        "## Files",
        "",
        "| file | events | chunk objects | [DONE] | choice indexes | SDK golden |",
        "| --- | ---: | ---: | --- | --- | --- |",
    ]
    for name, _ in GENERATORS:
        s, d = stats[name], FIXTURE_DOCS[name]
        lines.append(f"| `{name}.sse` | {s['events']} | {s['chunks']} | {'yes' if s['done'] else 'no'} "
                     f"| {', '.join(map(str, s['indexes']))} | {'`expected/' + name + '.json`' if d['sdk'] else '-'} |")
    lines += [
        "",
        "*events* = dispatched SSE events (blocks with at least one `data:` line, `[DONE]`",
        "included); *chunk objects* = JSON objects in them (`quirks_wire` has one data line",
        "with two objects). `demo.sse` is a byte-identical copy of `crates/cli/assets/demo.sse`.",
        "",
        "Where a choice goes straight to tool calls, its first chunk carries the role together",
        "with the first call's header (`{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[...],",
        "\"refusal\":null}`), as OpenAI sends it; text choices start with",
        "`{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}`.",
        "",
        "## Golden files (`expected/<name>.json`)",
        "",
        "Written by `scripts/sdk_reference.py` with the official `openai` Python SDK:",
        "`{sdk_version, fixture, flattened_feed_error, flattened_feed_matches, notes, choices}`,",
        "where `choices` is sorted by index and each entry is `{index, role, content, refusal,",
        "tool_calls: [{id, type, function: {name, arguments}}] | null, function_call: {name,",
        "arguments} | null, finish_reason, message_extra}` (`message_extra` holds non-standard",
        "message fields the SDK accumulated, e.g. `reasoning`, `reasoning_content`). The",
        "choices are computed by feeding the SDK's `ChatCompletionStreamState` one choice at a",
        "time (entries of that index only, renumbered to 0), because the SDK treats the choice",
        "index as a list position. `flattened_feed_error` records what the SDK does with the",
        "stream as is: with openai 3.54.0 it raises `IndexError: list assignment index out of",
        "range` on `openai_n3_tools`, `openai_legacy_function_call` and `demo` (first chunk is",
        "not choice 0) and matches the per-choice result on the others. Comparisons should",
        "ignore `sdk_version` and `notes`. Fixtures without a golden file are described below.",
        "",
    ]
    for name, _ in GENERATORS:
        d = FIXTURE_DOCS[name]
        lines += [f"## `{name}.sse`", "", f"*Source style:* {d['provider']}", "",
                  f"*Exercises:* {d['exercises']}", "", "*Expected per choice:*", ""]
        for c in d["truth"]:
            lines.append("- " + describe_choice(c))
        if d["notes"]:
            lines += ["", d["notes"]]
        lines.append("")
    return "\n".join(lines)


def describe_choice(c: dict) -> str:
    parts = [f"choice {c['index']}:"]
    extra = c.get("message_extra") or {}
    for k, v in extra.items():
        parts.append(f"{k} {json.dumps(v, ensure_ascii=False)};")
    if c["refusal"] is not None:
        parts.append(f"refusal {json.dumps(c['refusal'], ensure_ascii=False)}, content null;")
    if c["content"] is not None:
        parts.append(f"text {json.dumps(c['content'], ensure_ascii=False)};")
    if c["tool_calls"]:
        calls = ", ".join(f"[{k}] `{t['function']['name']}` id `{t['id']}` arguments "
                          f"`{t['function']['arguments']}`" for k, t in enumerate(c["tool_calls"]))
        parts.append(f"{len(c['tool_calls'])} tool call(s): {calls};")
    if c["function_call"]:
        parts.append(f"function_call `{c['function_call']['name']}` arguments "
                     f"{json.dumps(c['function_call']['arguments'])};")
    fr = c["finish_reason"]
    parts.append(f"finish_reason {json.dumps(fr)}" + ("" if fr else " (never finished)"))
    if "stop_reason" in c:
        parts.append(f"(stop_reason {json.dumps(c['stop_reason'])})")
    return " ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if any output file would change")
    ap.add_argument("--dump-truth", metavar="FILE", help="write intended per-choice outcomes as JSON")
    args = ap.parse_args()

    bodies = build_all()
    stats = {name: validate(name, raw) for name, raw in bodies.items()}
    files = {FIXTURES / f"{name}.sse": raw for name, raw in bodies.items()}
    files[ASSETS / "demo.sse"] = bodies["demo"]
    files[FIXTURES / "README.md"] = readme(stats).encode("utf-8")

    changed = []
    for path, raw in files.items():
        if not path.exists() or path.read_bytes() != raw:
            changed.append(path)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(raw)
    if args.dump_truth:
        pathlib.Path(args.dump_truth).write_text(json.dumps(
            {n: d["truth"] for n, d in FIXTURE_DOCS.items()}, ensure_ascii=False, indent=2))
    for name, s in stats.items():
        print(f"{name:30s} events={s['events']:4d} chunks={s['chunks']:4d} done={s['done']!s:5s} "
              f"indexes={s['indexes']}")
    if args.check and changed:
        print("out of date:", *[str(p.relative_to(ROOT)) for p in changed], sep="\n  ")
        return 1
    print(f"{len(changed)} file(s) {'would change' if args.check else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
