#!/usr/bin/env bash
# The picks replay with its gateway kept off the CPU now and then, as a loaded machine does:
# `choicewise-bench picks ARGS...` runs, and while it does, its gateway (`choicewise serve`,
# the harness's child) is stopped (SIGSTOP) for 0 to 390 ms at random moments, then let go.
# Prints the picks that differed from their reference, by problem (`--json`'s `differing`).
#
#   cargo build --release -p choicewise-cli -p choicewise-bench
#   scripts/picks-stalls.sh --traces ../shared/data/arith-traces/set-a --problems 30 --only vote-4,vote-8
#
# A stall longer than the trace upstream's gap between two finishes (`--finish-gap-ms`, 100
# by default) lets the finishes of several samples wait in the gateway's sockets at once.
# Needs python3. HARNESS (default target/release/choicewise-bench).
set -euo pipefail

harness=${HARNESS:-target/release/choicewise-bench}
[ -x "$harness" ] || { echo "$0: no harness at $harness (cargo build --release -p choicewise-bench)" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$harness" picks --json "$@" > "$out" 2> /dev/null &
bench=$!
stalls=0
while kill -0 "$bench" 2> /dev/null; do
  gateway=$(pgrep -P "$bench" -f "choicewise serve" | head -1 || true)
  if [ -n "$gateway" ]; then
    kill -STOP "$gateway" 2> /dev/null || true
    sleep "0.$((RANDOM % 4))$((RANDOM % 10))"
    kill -CONT "$gateway" 2> /dev/null || true
    stalls=$((stalls + 1))
  fi
  sleep "0.0$((RANDOM % 10))"
done
wait "$bench"
python3 - "$out" "$stalls" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]} stalls of the gateway")
for p in d["picks"]:
    print(f"{p['name']:<20} differing {p['differing']}  tokens {p['tokens']} (reference {p['reference']['tokens']})")
PY
