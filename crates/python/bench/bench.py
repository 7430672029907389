"""The Python package's two figures (docs/python.md), medians of three runs, as ratios.

1. Per-choice iteration of a large n = 4 recording: choicewise (every content delta of every
   choice handed to Python, choice by choice) against openai-python's own parsing of the same
   bytes (its Stream over an httpx response: SSE decoding and a ChatCompletionChunk per
   event) with a hand-written per-choice accumulator. Both read the same bytes from memory
   in 64 KiB pieces.
2. Partial JSON: a ~100 KB function-call argument in 4-byte fragments, a snapshot after each:
   choicewise.PartialJson (feed, then .value; as fresh snapshots, and live=True) against
   jiter re-parsing the whole buffer in partial mode after each fragment, and against one
   json.loads of the whole; feeding alone (no value read) is printed as the floor.

    python bench.py [--mb 50] [--kb 100] [--runs 3]
"""

import argparse
import json
import random
import statistics
import time

try:
    import httpx2 as httpx  # what openai 3 is built on
except ImportError:
    import httpx
import jiter
import openai

import choicewise

WORDS = (
    "the a of to and in is it you that he was for on are with as I his they be at one have "
    "this from or had by hot word but what some we can out other were all there when up use "
    "your how said an each she which do their time if will way about many then them write "
    "would like so these her long make thing see him two has look more day could go come "
    "did number sound no most people my over know water than call first who may down side "
    "been now find café 東京 😀"
).split()


def recording(megabytes: float, n: int = 4, seed: int = 1) -> bytes:
    """An OpenAI-style streamed completion with `n` choices: one choice per chunk, the
    choices interleaved at random (each first appearing at its own time, out of order), a
    few words per delta, each choice finishing with `stop`, then `[DONE]`."""
    rng = random.Random(seed)
    head = '{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1732282000,"model":"gpt-4o-mini","system_fingerprint":"fp_0c271002b7","choices":['
    out = []
    size = 0
    target = int(megabytes * 1e6)
    started = set()
    order = list(range(n))
    rng.shuffle(order)
    while size < target:
        index = rng.choice(order[: max(1, min(n, len(started) + 1))])
        if index not in started:
            started.add(index)
            delta = '{"role":"assistant","content":""}'
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
            delta = json.dumps({"content": " " + text}, ensure_ascii=False)
        line = f'data: {head}{{"index":{index},"delta":{delta},"logprobs":null,"finish_reason":null}}],"usage":null}}\n\n'
        out.append(line)
        size += len(line.encode())
    for index in range(n):
        out.append(f'data: {head}{{"index":{index},"delta":{{}},"logprobs":null,"finish_reason":"stop"}}],"usage":null}}\n\n')
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


def reads(data: bytes, size: int = 65536):
    return [data[i : i + size] for i in range(0, len(data), size)]


def with_choicewise(data: bytes):
    completions = choicewise.Completions(reads(data))
    texts = {}
    for choice in completions.choices():
        parts = []
        for delta in choice.content():
            parts.append(delta)
        texts[choice.index] = "".join(parts)
    return texts


def with_openai(data: bytes):
    pieces = reads(data)

    def handler(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=IterStream(pieces))

    client = openai.OpenAI(api_key="sk-bench", base_url="http://bench.invalid/v1", http_client=httpx.Client(transport=httpx.MockTransport(handler)), max_retries=0)
    stream = client.chat.completions.create(model="gpt-4o-mini", n=4, stream=True, messages=[])
    # The hand-written accumulator: each choice's deltas by index.
    parts = {}
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                parts.setdefault(choice.index, []).append(choice.delta.content)
            else:
                parts.setdefault(choice.index, [])
    return {i: "".join(p) for i, p in parts.items()}


class IterStream(httpx.SyncByteStream):
    def __init__(self, pieces):
        self.pieces = pieces

    def __iter__(self):
        yield from self.pieces


def document(kilobytes: float, seed: int = 2) -> str:
    """Function-call arguments of about `kilobytes`: an object with a list of records
    (strings, numbers, nested lists) and a long text field."""
    rng = random.Random(seed)
    rows = []
    doc = {"query": "monthly report", "rows": rows, "summary": ""}
    while len(json.dumps(doc)) < kilobytes * 1000 * 0.8:
        rows.append(
            {
                "id": len(rows),
                "name": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))),
                "score": round(rng.random() * 100, 3),
                "tags": [rng.choice(WORDS) for _ in range(rng.randint(0, 4))],
                "ok": rng.random() < 0.5,
            }
        )
    doc["summary"] = " ".join(rng.choice(WORDS) for _ in range(int(kilobytes * 1000 * 0.2 / 5)))
    return json.dumps(doc, ensure_ascii=False)


def fragments(text: str, size: int = 4):
    return [text[i : i + size] for i in range(0, len(text), size)]


def partial_choicewise(frags, live=False):
    p = choicewise.PartialJson(live=live)
    value = None
    for f in frags:
        p.feed(f)
        value = p.value
    return value


def partial_feed_only(frags):
    """The floor of any snapshot: the fragments fed, no value read."""
    p = choicewise.PartialJson()
    for f in frags:
        p.feed(f)
    return p.finish()


def partial_jiter(frags):
    buf = ""
    value = None
    for f in frags:
        buf += f
        value = jiter.from_json(buf.encode(), partial_mode="trailing-strings")
    return value


def median_time(fn, *args, runs=3):
    times = []
    result = None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50.0, help="size of the n = 4 recording")
    parser.add_argument("--kb", type=float, default=100.0, help="size of the partial-JSON document")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    data = recording(args.mb)
    chunks = data.count(b"\ndata: ") + 1
    t_cw, texts_cw = median_time(with_choicewise, data, runs=args.runs)
    t_oa, texts_oa = median_time(with_openai, data, runs=args.runs)
    assert texts_cw == texts_oa, "the two readings differ"
    print(f"per-choice iteration, {len(data) / 1e6:.1f} MB n = 4 recording ({chunks} chunks), median of {args.runs}:")
    print(f"  choicewise             {t_cw:8.3f} s  ({len(data) / 1e6 / t_cw:6.1f} MB/s)")
    print(f"  openai-python + dict   {t_oa:8.3f} s  ({len(data) / 1e6 / t_oa:6.1f} MB/s)")
    print(f"  ratio: choicewise is {t_oa / t_cw:.1f}x faster (target: at least 5x)")

    text = document(args.kb)
    frags = fragments(text)
    whole = json.loads(text)
    t_p, v_p = median_time(partial_choicewise, frags, runs=args.runs)
    t_v, v_v = median_time(partial_choicewise, frags, True, runs=args.runs)
    t_f, v_f = median_time(partial_feed_only, frags, runs=args.runs)
    t_j, v_j = median_time(partial_jiter, frags, runs=args.runs)
    t_l, _ = median_time(json.loads, text, runs=max(args.runs, 5))
    assert v_p == whole and v_v == whole and v_f == whole and v_j == whole, "the partial parsers differ from json.loads at the end"
    print(f"partial JSON, {len(text.encode()) / 1e3:.0f} KB in {len(frags)} fragments of 4 bytes, a snapshot after each, median of {args.runs}:")
    print(f"  choicewise.PartialJson {t_p:8.4f} s  (a fresh snapshot each time)")
    print(f"  PartialJson(live=True) {t_v:8.4f} s  (one object updated in place)")
    print(f"  feeding alone          {t_f:8.4f} s  (no value read: the floor)")
    print(f"  jiter partial re-parse {t_j:8.4f} s")
    print(f"  one json.loads         {t_l:8.4f} s")
    print(f"  ratio: {t_j / t_p:.1f}x faster than jiter (target: at least 20x); {t_p / t_l:.1f}x one json.loads (target: at most 3x)")
    print(f"  live:  {t_j / t_v:.1f}x faster than jiter; {t_v / t_l:.1f}x one json.loads")
    print(f"  feeding alone: {t_f / t_l:.1f}x one json.loads")


if __name__ == "__main__":
    main()
