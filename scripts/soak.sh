#!/usr/bin/env bash
# The gateway's soak with faults (issue 29), loopback only: `choicewise serve` in front of the
# bench's synthetic upstream, REQUESTS requests at CONCURRENCY (default: CI's short form, 500
# at 200; the full soak is `scripts/soak.sh 10000`). Exits non-zero when a panic, a choice not
# received intact, an answer cut short, a hung request or an upstream connection left open is
# found (see crates/bench/src/soak.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-500}
CONCURRENCY=${2:-200}
# Two builds, not one: the bench turns on a test-only feature of the core, which one build of
# both would give the CLI too. Built alone, the CLI is the README's binary (no rebuild after
# `cargo run --release -p choicewise-cli`), and the soak runs what users run.
cargo build --release -p choicewise-cli
cargo build --release -p choicewise-bench
# Each request holds up to 5 upstream connections besides its own.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
exec target/release/choicewise-bench soak --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
    --choicewise target/release/choicewise
