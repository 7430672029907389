#!/usr/bin/env python3
"""Writes the arithmetic model's held-out problems for the live test (tests/fixtures/arith-set-a-50.json).

    python scripts/arith-fixture.py --traces DIR/set-a [--count 50] [--out tests/fixtures/arith-set-a-50.json]

Reads the set's `.npz` files with numpy (`scripts/llama-server.sh tools` installs it into the
venv), takes the `count` problems with the lowest problem ids, and writes for each its id, level,
prompt (`EXPR=\\n`), answer, and what the set's 64 recorded samples of it say: the share of them
that is right and their majority answer (ties: the smaller answer). The live test
(crates/gateway/tests/gateway/arith.rs) asks the prompts through the gateway and prints these figures
beside its own. The same set writes the same bytes.
"""

import argparse
import collections
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent


def main():
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", required=True, help="a set's directory of traces_*.npz")
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "arith-set-a-50.json"))
    args = parser.parse_args()

    traces = pathlib.Path(args.traces)
    files = sorted(traces.glob("traces_*.npz"))
    if not files:
        sys.exit(f"{traces}: no traces_*.npz")
    problems = []
    for path in files:
        with np.load(path) as d:
            for i, pid in enumerate(d["problem_ids"]):
                answer = str(d["answers"][i])
                preds = [str(p) for p in d["pred_answers"][i]]
                tally = collections.Counter(p for p in preds if p)
                best = max(tally.values()) if tally else 0
                majority = min((k for k, v in tally.items() if v == best), key=int, default="")
                problems.append({
                    "id": int(pid),
                    "level": int(d["levels"][i]),
                    "prompt": str(d["prompts"][i]),
                    "answer": answer,
                    "samples_right": round(float(np.mean(d["correct"][i])), 6),
                    "majority_of_64": majority,
                })
    problems.sort(key=lambda p: p["id"])
    if len(problems) < args.count:
        sys.exit(f"{traces}: {len(problems)} problems, fewer than {args.count}")
    chosen = problems[:args.count]
    out = {
        "source": f"arith-traces/{traces.name}, the {args.count} lowest problem ids",
        "samples_per_problem": 64,
        "samples_right": round(sum(p["samples_right"] for p in chosen) / len(chosen), 6),
        "majority_of_64_right": sum(p["majority_of_64"] == p["answer"] for p in chosen) / len(chosen),
        "problems": chosen,
    }
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: {len(chosen)} problems; of the recorded samples "
          f"{out['samples_right']:.3f} right, majority of 64 right {out['majority_of_64_right']:.2f}")


if __name__ == "__main__":
    main()
