#!/usr/bin/env python3
"""Confidence-guided voting (DeepConf online) on a real model, against the plain and windowed votes.

    scripts/llama-server.sh install
    cargo build --release -p choicewise-cli       # or pass --choicewise target/debug/choicewise
    python3 scripts/confidence-eval.py [--samples 16] [--questions 50] [--seed 42] > table.md
    python3 scripts/confidence-eval.py --arith --server "$CHOICEWISE_ARITH_URL" > table.md

Starts a private llama.cpp server (xllamacpp and SmolLM2-135M-Instruct from PyPI, as installed
by scripts/llama-server.sh) with one slot per sample, log-probabilities served on request. Each
question is asked four times, one after the other, with
`choicewise chat --fan-out K --vote-by 'Answer: (\\d+)' --temperature 0.8 --json`:

- plain: a plain vote over all K samples (decided early, the rest closed);
- window: `--vote-window W` (early-stopping self-consistency);
- conf 0.9 and conf 0.1: `--confidence --warmup N --keep 0.9|0.1 --group-tokens G` (the CLI
  asks every upstream for `logprobs: true, top_logprobs: 5`).

The runs are sequential, so the server's own counter of generated tokens
(`llamacpp:tokens_predicted_total` on /metrics; it counts the tokens of a cancelled request too)
tells each run's cost exactly. Prints a Markdown table: per method, the samples started, the
tokens generated, the right answers with a 95% Wilson interval, and on how many questions the
answer differs from the plain vote's; then whether the methods' confidence tracked correctness
(mean confidence weight of the winning key when right and when wrong).

`--arith` asks the arithmetic model instead (models/arith-6m-f16.gguf; pass its server, e.g.
`--server "$CHOICEWISE_ARITH_URL"` after `eval "$(scripts/llama-server.sh start)"`): the held-out
problems of tests/fixtures/arith-set-a-50.json, each prompt the bare expression (the model's chat
template makes it `EXPR=\n`), keyed by `#### (\d+)`, at temperature 1.0 with `top_k: 0, top_p: 1,
min_p: 0` (the model's own distribution), `max_tokens` 175, and by default warmup 8 and
group_tokens 16 (the window of DeepConf's reference figures for this model).

`--reasoning` asks two-step questions instead (`a + b * c`, `b * c - a`), after a worked
few-shot prompt (`First the product: … Then the sum: … Answer: N`), for models that reason
before they answer; pair it with a larger `--max-tokens` and `--group-tokens`. `--server URL`
uses a llama.cpp server already running (started with `--metrics`; a base URL ending in `/v1` is
taken as the server's), whatever its model, instead of the private one. With fewer slots than
`--samples`, the samples beyond them wait in the server's queue (hence `--idle-timeout`).

The questions are generated with a fixed seed (`random.Random(seed)`), in turn: a sum `a + b`
(a in 2..30, b in 2..20), a difference `a - b` (a in 10..40, b in 2..9) and a product `a * b`
(both in 2..9); the small model gets them right only sometimes. The prompt is few-shot so that
the model answers `Answer: N` and nothing else: a handful of tokens per sample, which keeps the
run short on a CPU (hence group_tokens 2). Standard library only.
"""

import argparse
import json
import math
import os
import pathlib
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
LLAMA_DIR = pathlib.Path(os.environ.get("CHOICEWISE_LLAMA_DIR", REPO / ".llama"))
KEY = r"Answer: (\d+)"
ARITH_KEY = r"#### (\d+)"
ARITH_FIXTURE = REPO / "tests" / "fixtures" / "arith-set-a-50.json"

FEW_SHOT = [
    {"role": "system", "content": "Answer the arithmetic question with 'Answer: N' only."},
    {"role": "user", "content": "What is 3 + 4?"},
    {"role": "assistant", "content": "Answer: 7"},
    {"role": "user", "content": "What is 12 - 5?"},
    {"role": "assistant", "content": "Answer: 7"},
    {"role": "user", "content": "What is 6 * 3?"},
    {"role": "assistant", "content": "Answer: 18"},
]


# --reasoning: two-step questions, answered after worked steps (longer samples, for models that
# reason before they answer).
FEW_SHOT_REASONING = [
    {"role": "system",
     "content": "Solve the arithmetic problem step by step, then give the result as 'Answer: N'."},
    {"role": "user", "content": "What is 3 + 4 * 5?"},
    {"role": "assistant",
     "content": "First the product: 4 * 5 = 20. Then the sum: 3 + 20 = 23. Answer: 23"},
    {"role": "user", "content": "What is 6 * 7 - 9?"},
    {"role": "assistant",
     "content": "First the product: 6 * 7 = 42. Then the difference: 42 - 9 = 33. Answer: 33"},
]


def reasoning_questions(count, seed):
    """`count` two-step questions (`a + b * c`, `b * c - a`) and their answers."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        a, b, c = rng.randint(2, 20), rng.randint(2, 9), rng.randint(2, 9)
        if i % 2:
            out.append((f"{b} * {c} - {a}", b * c - a))
        else:
            out.append((f"{a} + {b} * {c}", a + b * c))
    return out


def questions(count, seed):
    """`count` questions and their answers, the same for the same seed."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = i % 3
        if kind == 0:
            a, b = rng.randint(2, 30), rng.randint(2, 20)
            out.append((f"{a} + {b}", a + b))
        elif kind == 1:
            a, b = rng.randint(10, 40), rng.randint(2, 9)
            out.append((f"{a} - {b}", a - b))
        else:
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            out.append((f"{a} * {b}", a * b))
    return out


def arith_questions(count):
    """The first `count` held-out problems of the arithmetic fixture: expression, answer."""
    problems = json.loads(ARITH_FIXTURE.read_text())["problems"]
    return [(p["prompt"].strip(), p["answer"]) for p in problems[:count]]


def wilson(right, n, z=1.96):
    """The 95% Wilson score interval of a proportion, as (low, high)."""
    if n == 0:
        return (0.0, 1.0)
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def metrics(base):
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
        text = r.read().decode()
    return int(float(re.search(r"^llamacpp:tokens_predicted_total (\S+)", text, re.M).group(1)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(python, model, slots):
    port = free_port()
    log = open(LLAMA_DIR / "confidence-server.log", "w")
    server = subprocess.Popen(
        [python, str(REPO / "scripts" / "llama_server.py"), "--model", model, "--port", str(port),
         "--parallel", str(slots), "--ctx", str(slots * 512)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the llama.cpp server exited; see {log.name}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return server, port
        except OSError:
            time.sleep(0.3)
    server.kill()
    sys.exit("the llama.cpp server did not become healthy in 120 s")


def ask(args, base, request_file, question, extra):
    """One vote: its JSON and the tokens the server generated for it."""
    before = metrics(base)
    command = [
        args.choicewise, "chat", "--base-url", f"{base}/v1", "--api-key", "unused",
        "--request", str(request_file), "--fan-out", str(args.samples), "--vote-by", args.key,
        "--temperature", str(args.temperature), "--max-tokens", str(args.max_tokens),
        "--idle-timeout", str(args.idle_timeout), "--json", *extra,
        question if args.arith else f"What is {question}?",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    # Exit 1: no key won (the tally says why); anything else is a failure of the run.
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(command)}\nexit {done.returncode}: {done.stderr}")
    out = json.loads(done.stdout)
    time.sleep(0.3)  # a cancelled request's last tokens reach the counter
    return out, metrics(base) - before


def winner(out):
    """The winning key, or None."""
    vote = out.get("vote") or {}
    return vote.get("key") if out.get("selected") else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16, help="K, samples per vote")
    parser.add_argument("--window", type=int, default=4, help="W of the windowed vote")
    parser.add_argument("--warmup", type=int, help="warmup samples of --confidence [4; --arith 8]")
    parser.add_argument("--group-tokens", type=int,
                        help="tokens per group [2; --arith 16]")
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-tokens", type=int, help="[12; --arith 175]")
    parser.add_argument("--temperature", type=float, help="[0.8; --arith 1.0]")
    parser.add_argument("--idle-timeout", type=int, default=300,
                        help="seconds a sample may wait for its first byte (queued beyond the slots)")
    release = REPO / "target" / "release" / "choicewise"
    parser.add_argument("--choicewise", default=str(release))
    parser.add_argument("--rows", help="also write each question's results to this JSON-lines file")
    parser.add_argument("--reasoning", action="store_true",
                        help="two-step questions after a worked few-shot prompt (longer samples); "
                             "pair with a larger --max-tokens and --group-tokens")
    parser.add_argument("--server", metavar="URL",
                        help="a running llama.cpp server (http://HOST:PORT, started with --metrics "
                             "and at least --samples slots) instead of a private one with SmolLM2")
    parser.add_argument("--arith", action="store_true",
                        help="the arithmetic model's held-out problems (tests/fixtures/"
                             "arith-set-a-50.json) on its server, given with --server")
    args = parser.parse_args()
    if args.arith and args.reasoning:
        sys.exit("--arith and --reasoning: one or the other")
    if args.arith and not args.server:
        sys.exit("--arith needs --server: the arithmetic model's server "
                 "(eval \"$(scripts/llama-server.sh start)\"; --server \"$CHOICEWISE_ARITH_URL\")")
    defaults = (8, 16, 175, 1.0) if args.arith else (4, 2, 12, 0.8)
    for name, value in zip(("warmup", "group_tokens", "max_tokens", "temperature"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.key = ARITH_KEY if args.arith else KEY

    venv_python = LLAMA_DIR / "venv" / "bin" / "python"
    if not args.server and not venv_python.exists():
        sys.exit("run scripts/llama-server.sh install first, or pass --server")
    if not pathlib.Path(args.choicewise).exists():
        sys.exit(f"no {args.choicewise}: cargo build --release -p choicewise-cli, or --choicewise")
    model = None
    if not args.server:
        model = subprocess.run(
            [str(REPO / "scripts" / "llama-server.sh"), "model"], capture_output=True, text=True
        ).stdout.strip()
        if not model:
            sys.exit("scripts/llama-server.sh model printed no model path")
    LLAMA_DIR.mkdir(exist_ok=True)
    request_file = LLAMA_DIR / "confidence-request.json"
    if args.arith:
        # The model's own distribution (the server's defaults are top_k 40, top_p 0.95, min_p 0.05).
        request = {"messages": [], "top_k": 0, "top_p": 1, "min_p": 0}
    else:
        request = {"messages": FEW_SHOT_REASONING if args.reasoning else FEW_SHOT}
    request_file.write_text(json.dumps(request))

    confidence = ["--confidence", "--warmup", str(args.warmup),
                  "--group-tokens", str(args.group_tokens)]
    methods = [
        (f"plain vote, K = {args.samples}", []),
        (f"windowed vote, W = {args.window}", ["--vote-window", str(args.window)]),
        ("confidence, keep 0.9", confidence + ["--keep", "0.9"]),
        ("confidence, keep 0.1", confidence + ["--keep", "0.1"]),
    ]
    if args.server:
        server, port = None, None
    else:
        server, port = start_server(str(venv_python), model, args.samples)
    base = args.server.rstrip("/").removesuffix("/v1") if args.server else f"http://127.0.0.1:{port}"
    if args.arith:
        asked = arith_questions(args.questions)
    else:
        asked = (reasoning_questions if args.reasoning else questions)(args.questions, args.seed)
    rows = []
    began = time.monotonic()
    rows_file = open(args.rows, "w") if args.rows else None
    try:
        for question, truth in asked:
            row = {"question": question, "truth": str(truth), "runs": []}
            for name, extra in methods:
                out, tokens = ask(args, base, request_file, question, extra)
                report = out.get("confidence") or {}
                key = winner(out)
                row["runs"].append({
                    "method": name, "answer": key, "tokens": tokens,
                    "started": out.get("started", args.samples),
                    "stopped": len(report.get("stopped", [])),
                    "weight": (report.get("weights") or {}).get(key) if key else None,
                    "weight_total": sum((report.get("weights") or {}).values()),
                    "unavailable": report.get("unavailable"),
                })
            rows.append(row)
            line = json.dumps(row)
            print(line, file=sys.stderr, flush=True)
            if rows_file:
                print(line, file=rows_file, flush=True)
    finally:
        if server:
            server.terminate()
            server.wait(timeout=30)
    elapsed = time.monotonic() - began

    n = len(rows)
    plain_tokens = sum(r["runs"][0]["tokens"] for r in rows)
    what = "held-out arithmetic problems" if args.arith else f"questions (seed {args.seed})"
    print(f"{n} {what}, K = {args.samples} samples at most, max_tokens "
          f"{args.max_tokens}, temperature {args.temperature}; confidence: warmup {args.warmup}, group_tokens "
          f"{args.group_tokens}, top_logprobs 5, consensus 0.95; {elapsed / 60:.1f} min in all.")
    print()
    print("| method | samples started | stopped for low confidence | tokens generated | vs plain | "
          "right | accuracy (95% Wilson) | answer differs from plain |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for m, (name, _) in enumerate(methods):
        runs = [r["runs"][m] for r in rows]
        started = sum(x["started"] for x in runs)
        stopped = sum(x["stopped"] for x in runs)
        tokens = sum(x["tokens"] for x in runs)
        right = sum(x["answer"] == r["truth"] for x, r in zip(runs, rows))
        low, high = wilson(right, n)
        differs = sum(x["answer"] != r["runs"][0]["answer"] for x, r in zip(runs, rows))
        saved = "—" if m == 0 else f"{100 * (tokens / plain_tokens - 1):+.0f}%"
        print(f"| {name} | {started} | {stopped if m >= 2 else '—'} | {tokens} | {saved} | "
              f"{right}/{n} | {100 * right / n:.0f}% ({100 * low:.0f}–{100 * high:.0f}%) | "
              f"{differs if m else '—'} |")
    print()
    # Does confidence track correctness? The winning key's share of the weight, right vs wrong.
    for m, (name, _) in list(enumerate(methods))[2:]:
        runs = [(r["runs"][m], r["truth"]) for r in rows]
        fell_back = sum(1 for x, _ in runs if x["unavailable"])
        share = {True: [], False: []}
        for x, truth in runs:
            if x["answer"] is not None and x["weight"] and x["weight_total"]:
                share[x["answer"] == truth].append(x["weight"] / x["weight_total"])
        mean = lambda v: f"{sum(v) / len(v):.2f} (n = {len(v)})" if v else "—"
        print(f"- {name}: the winner's share of the confidence weight {mean(share[True])} when "
              f"right, {mean(share[False])} when wrong; fell back to the plain vote on "
              f"{fell_back} questions.")


if __name__ == "__main__":
    main()
