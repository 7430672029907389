#!/usr/bin/env bash
# TensorZero's gateway, built from its source for `choicewise-bench gateway-peers`
# (docs/benchmarks.md, "Beside TensorZero's gateway"):
#
#   scripts/tensorzero-build.sh SOURCE [OUT]
#   target/release/choicewise-bench gateway-peers --tensorzero OUT/gateway
#
# SOURCE is a checkout of github.com/tensorzero/tensorzero (the figures in the docs name its
# commit); OUT (default /tmp/tensorzero-build) receives a copy of its `crates/`, the build's
# target folder (kept: a second run rebuilds its own crates, copied anew, not their
# dependencies) and the `gateway` binary. Two changes to the copy, none to its request path:
#   - the TypeScript judge of its evaluations (`ts-executor-pool`, V8) is left out: V8's build
#     downloads a prebuilt library from GitHub, and the gateway does without it (an
#     evaluation that asks for that judge is refused at run time);
#   - with DURABLE and MIME set (the paths of git clones of github.com/tensorzero/durable and
#     github.com/hyperium/mime holding the commits its Cargo.toml pins), its two git
#     dependencies are fetched from them, still as git dependencies at those commits (so that
#     their lints stay capped): for a machine that reaches crates.io but not GitHub.
# Its own release profile (`cargo build --release -p gateway`); its `performance` profile
# (fat LTO, one codegen unit) takes far longer on two cores. The toolchain is the one on the
# PATH, not its pinned one.
set -euo pipefail

src=${1:?usage: $0 TENSORZERO_SOURCE [OUT]}
out=${2:-/tmp/tensorzero-build}
mkdir -p "$out"
rm -rf "$out/crates"
cp -r "$src/crates" "$out/crates"
cd "$out/crates"
rm -f rust-toolchain.toml
for manifest in gateway/Cargo.toml autopilot-tools/Cargo.toml durable-tools/Cargo.toml; do
  sed -i 's#^evaluations = { path = "../evaluations" }#evaluations = { path = "../evaluations", default-features = false }#' "$manifest"
done
if [ -n "${DURABLE:-}" ]; then
  sed -i "s#^durable = { git = \"https://github.com/tensorzero/durable\",#durable = { git = \"file://$DURABLE\",#" Cargo.toml
fi
if [ -n "${MIME:-}" ]; then
  sed -i "s#^mime = { git = \"https://github.com/hyperium/mime\",#mime = { git = \"file://$MIME\",#" Cargo.toml
fi
if grep -qE '^(v8|ts-executor-pool) ' <(cargo tree -p gateway -e normal --prefix none 2>/dev/null); then
  echo "the gateway still depends on V8: its manifests changed; see this script's comment" >&2
  exit 1
fi
CARGO_TARGET_DIR=$out/target cargo build --release -p gateway
cp "$out/target/release/gateway" "$out/gateway"
echo "$out/gateway"
