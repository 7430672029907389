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
# CHOICEWISE_SOAK_PROFILE: `dev` (default) soaks the binaries of the workspace's test build,
# which CI has built already: `--workspace` with the two test-only features that the tests'
# dev-dependencies turn on gives every crate the test build's features, so only the bench's
# own binary is compiled; `release` soaks what `cargo install` gives users: the CLI and the bench
# without its default features (the baselines, and the core's test-only actor counts, which
# the soak does not use) in one command, so that the features of every crate they share are
# the CLI's own.
profile=${CHOICEWISE_SOAK_PROFILE:-dev}
case $profile in
  dev)
    cargo build --workspace --bin choicewise --bin choicewise-bench \
      --features choicewise-core/fault-injection,choicewise-test-support/fault-injection
    bin=target/debug ;;
  release)
    cargo build --release -p choicewise-cli -p choicewise-bench --no-default-features
    bin=target/release ;;
  *)
    echo "soak.sh: CHOICEWISE_SOAK_PROFILE is dev or release, not $profile" >&2
    exit 2 ;;
esac
# Each request holds up to 5 upstream connections besides its own.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
"$bin"/choicewise-bench soak --requests "$REQUESTS" --concurrency "$CONCURRENCY" \
    --choicewise "$bin"/choicewise
# Issue 40's run: three upstreams per model, one down and one failing 30% of its tries; no
# client may see a failure.
exec "$bin"/choicewise-bench soak --resilience --requests "$REQUESTS" \
    --concurrency "$CONCURRENCY" --choicewise "$bin"/choicewise
