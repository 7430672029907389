#!/usr/bin/env bash
# Checks that the README's main command (`cargo run -p choicewise-cli`) and its test command
# (`cargo test --workspace`) build every crate with the same features, so that the tests reuse
# the main command's build instead of compiling those crates a second time.
#
#   scripts/shared-build.sh     # exit 1, naming each crate whose features differ
#
# A crate listed needs a pin in crates/cli/Cargo.toml (the "Feature pins" there). The
# workspace's own crates are checked too: a feature the tests turn on in core (its test hooks)
# would otherwise compile every crate above it twice.
set -euo pipefail
cd "$(dirname "$0")/.."
features() {
  # One line per crate: "name version|features" (a workspace crate's path left out).
  cargo tree "$@" -f '{p}|{f}' --prefix none 2>/dev/null | sed 's/ (\*)//; s/ (proc-macro)//' \
    | sed 's| (/[^)]*)||' | sort -u
}
main=$(mktemp); tests=$(mktemp)
trap 'rm -f "$main" "$tests"' EXIT
features -p choicewise-cli -e normal,build > "$main"
features --workspace -e normal,build,dev > "$tests"
# A crate built for the host (a build script's or a proc macro's dependency) and for the
# target may appear twice with two feature sets: compare the sets of lines per crate.
differ=$(join -t'|' <(cut -d'|' -f1 "$main" | sort -u) <(cut -d'|' -f1 "$tests" | sort -u) \
  | while read -r crate; do
      a=$(grep -F "$crate|" "$main" | sort)
      b=$(grep -F "$crate|" "$tests" | sort)
      [[ $a == "$b" ]] || printf '%s\n  main command: %s\n  tests:        %s\n' "$crate" \
        "$(echo "$a" | cut -d'|' -f2 | paste -sd' ')" "$(echo "$b" | cut -d'|' -f2 | paste -sd' ')"
    done)
if [[ -n $differ ]]; then
  echo "shared-build.sh: these crates are built with other features by the tests than by the main command:" >&2
  echo "$differ" >&2
  exit 1
fi
echo "shared-build.sh: the main command and the tests build every dependency alike"
