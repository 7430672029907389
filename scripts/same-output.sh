#!/usr/bin/env bash
# Checks that two builds of the `choicewise` command give byte-identical results: stdout,
# stderr and exit code of `replay FILE --json` on every fixture and on generated n = 1, 4
# and 16 streams. For a change that must not change behaviour:
#
#   git stash; cargo build --release -p choicewise-cli -p choicewise-bench
#   cp target/release/choicewise /tmp/choicewise-before; git stash pop
#   cargo build --release -p choicewise-cli -p choicewise-bench
#   scripts/same-output.sh /tmp/choicewise-before target/release/choicewise
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1
after=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gen" "$work/a" "$work/b"
for n in 1 4 16; do
  target/release/choicewise-bench gen --mb 3 --n "$n" --seed 7 --out "$work/gen/g$n.sse" > /dev/null
done
files=(tests/fixtures/*.sse "$work"/gen/*.sse)
for f in "${files[@]}"; do
  name=$(basename "$f" .sse)
  for side in a b; do
    bin=$before
    [[ $side == b ]] && bin=$after
    rc=0
    "$bin" replay "$f" --json > "$work/$side/$name.json" 2> "$work/$side/$name.err" || rc=$?
    echo "$rc" > "$work/$side/$name.rc"
  done
done
if diff -r "$work/a" "$work/b" > "$work/diff"; then
  echo "same output: ${#files[@]} streams (stdout, stderr, exit code)"
else
  head -50 "$work/diff"
  echo "different output" >&2
  exit 1
fi
