#!/usr/bin/env bash
# The gateway's soak with faults (issue 29), loopback only: `choicewise serve` in front of the
# bench's synthetic upstream, REQUESTS requests at CONCURRENCY (default: CI's short form, 500
# at 200; the full soak is `scripts/soak.sh 10000`). Exits non-zero when a panic, a choice not
# received intact, an answer cut short, a hung request or an upstream connection left open is
# found, and in its second run (--resilience) when a client sees an upstream's failure (see
# crates/bench/src/soak.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=${1:-500}
CONCURRENCY=${2:-200}
# The bench without its default features (the baselines, and the core's test-only actor
# counts, which the soak does not use), in one command with the CLI: the features of every
# crate they share are then the CLI's own, so the CLI is the very binary
# `cargo run --release -p choicewise-cli` builds (not rebuilt after it), the soak runs what
# users run, and only what the bench adds is compiled. A later
# `cargo build --release -p choicewise-bench` builds the full harness again.
cargo build --release -p choicewise-cli -p choicewise-bench --no-default-features
# Each request holds up to 5 upstream connections besides its own.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
target/release/choicewise-bench soak --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
    --choicewise target/release/choicewise
# Issue 40's run: three upstreams per model, one down and one failing 30% of its tries; no
# client may see a failure.
exec target/release/choicewise-bench soak --resilience --requests "$REQUESTS" \
    --concurrency "$CONCURRENCY" --choicewise target/release/choicewise
