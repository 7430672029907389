#!/usr/bin/env bash
# Builds the cargo-fuzz targets of fuzz/ and runs each for a bounded time.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   # default: 60 s each, every target
#   scripts/fuzz.sh smoke [SECONDS_PER_TARGET]          # CI: 15 s each, no cargo-fuzz needed,
#                                                       # then the answer side's cost fuzzer
#                                                       # (ANSWER_FUZZ_SECONDS, 45 s)
#   scripts/fuzz.sh dump ARTIFACT                       # a merge_interleaving input as the
#                                                       # scenario JSON fuzz/regressions keeps
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a C++ compiler (libFuzzer is built from
# source). cargo-fuzz passes nightly-only flags (-Zsanitizer, sanitizer coverage); on the stable
# toolchain RUSTC_BOOTSTRAP=1 lets it. FUZZ_SANITIZER=none runs without AddressSanitizer (faster;
# use it if the ASan runtime is missing). Extra libFuzzer flags: FUZZ_FLAGS="-max_len=65536".
#
# `smoke` builds the targets with plain cargo and the coverage flags cargo-fuzz would pass (no
# sanitizer, so the stable toolchain needs no RUSTC_BOOTSTRAP), and runs each from its seeds in
# a throwaway corpus: a short run for CI, failing on any crash or broken invariant.
#
# Corpora: fuzz/corpus/<target> (not committed), seeded from fuzz/seeds/<target> (committed,
# replayed by tests/hostile.rs) and from tests/fixtures. Crashes land in fuzz/artifacts/<target>;
# an input that found a bug goes to fuzz/regressions/<target> (merge_interleaving: its `dump`)
# so that `cargo test --test hostile` replays it. Logs: fuzz/logs/<target>.log.
set -euo pipefail
[[ ${1:-} == dump ]] && artifact=$(realpath "$2")
cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1
sanitizer=${FUZZ_SANITIZER:-address}
all=(sse_framing chunk_parse merge_interleaving partial_json pipeline demux)

if [[ ${1:-} == dump ]]; then
  cargo fuzz build --sanitizer "$sanitizer" merge_interleaving >&2
  CHOICEWISE_FUZZ_DUMP=1 "target/x86_64-unknown-linux-gnu/release/merge_interleaving" \
    "$artifact" 2>/dev/null | sed -n '/^{/,/^}/{p;/^}/q}'
  exit 0
fi



seed() {
  local t=$1 dir=${2:-corpus/$1} f name src=$1
  # demux takes the pipeline's inputs (the same layout).
  [[ $t == demux ]] && src=pipeline
  mkdir -p "$dir"
  if [[ -d seeds/$src ]]; then
    cp -n seeds/"$src"/* "$dir"/ 2>/dev/null || true
  fi
  for f in ../tests/fixtures/*.sse; do
    name=$(basename "$f" .sse)
    case $t in
      # Input layout: a limit byte, two split-seed bytes, then the stream.
      sse_framing | pipeline | demux)
        [[ -e $dir/fixture-$name ]] || { printf '\000\007\000'; cat "$f"; } > "$dir/fixture-$name" ;;
      # Every event's data of every fixture, one input each.
      chunk_parse)
        [[ -e $dir/fixture-$name-1 ]] && continue
        local n=0 line
        while IFS= read -r line; do
          line=${line%$'\r'}
          [[ $line == data:* ]] || continue
          n=$((n + 1))
          printf '%s' "${line#data:}" > "$dir/fixture-$name-$n"
        done < "$f" ;;
    esac
  done
}

if [[ ${1:-} == smoke ]]; then
  seconds=${2:-15}
  unset RUSTC_BOOTSTRAP
  triple=$(rustc -vV | sed -n 's/^host: //p')
  flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
  flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
  flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
  flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
  flags+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cdebug-assertions"
  [[ $triple == *-linux-* ]] && flags+=" -Cllvm-args=-sanitizer-coverage-stack-depth"
  # --target keeps the flags off build scripts and proc macros. A smoke run needs no debug
  # info (libFuzzer names the functions from the symbols) and no full optimisation (its 15 s
  # from the seeds are dominated by the build): both shorten the build.
  RUSTFLAGS=$flags CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
    cargo build --release --bins --target "$triple" --target-dir target/smoke
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # One target per core at a time: each libFuzzer run is single-threaded.
  jobs=${FUZZ_JOBS:-$(nproc)}
  smoke_one() {
    local t=$1 rc=0
    "target/smoke/$triple/release/$t" "$work/$t" -max_total_time="$seconds" -timeout=30 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/$t-" > "$work/$t.log" 2>&1 || rc=$?
    echo "$rc" > "$work/$t.rc"
  }
  for t in "${all[@]}"; do seed "$t" "$work/$t"; done
  for ((i = 0; i < ${#all[@]}; i += jobs)); do
    for t in "${all[@]:i:jobs}"; do
      echo "=== smoke $t: ${seconds}s"
      smoke_one "$t" &
    done
    wait
  done
  failed=0
  # The answer side's cost fuzzer (crates/gateway/tests/memory/answer_side.rs): generated
  # upstream answers through a gateway over loopback, each within 4x what the upstream sent
  # plus 4 MiB; its seed is printed (ANSWER_FUZZ_SEED=n repeats a run). --workspace, as CI's
  # tests step: the same features, so the tests' build is reused.
  echo "=== smoke answer-side cost: ${ANSWER_FUZZ_SECONDS:-45}s"
  if ! (cd .. && ANSWER_FUZZ_SECONDS=${ANSWER_FUZZ_SECONDS:-45} cargo test -q --workspace \
      --test memory -- --nocapture --test-threads 1 generated_answers) > "$work/answer-side.log" 2>&1; then
    tail -60 "$work/answer-side.log"
    echo "fuzz smoke: the answer-side cost fuzzer failed; its log is in $work" >&2
    failed=1
  fi
  grep -E '^answer fuzz' "$work/answer-side.log" || true
  for t in "${all[@]}"; do
    echo "--- $t"
    grep -E '^(Done|stat::new_units_added)' "$work/$t.log" || true
    rc=$(cat "$work/$t.rc")
    if [[ $rc -ne 0 ]]; then
      tail -60 "$work/$t.log"
      echo "fuzz smoke: $t failed (exit $rc); its input and log are in $work" >&2
      failed=1
    fi
  done
  if [[ $failed -ne 0 ]]; then
    trap - EXIT
    exit 1
  fi
  exit 0
fi

seconds=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")

mkdir -p logs
echo "building (sanitizer: $sanitizer)"
cargo fuzz build --sanitizer "$sanitizer"

status=0
summary=()
for t in "${targets[@]}"; do
  seed "$t"
  echo "=== $t: ${seconds}s"
  rc=0
  # shellcheck disable=SC2086
  cargo fuzz run --sanitizer "$sanitizer" "$t" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 \
    ${FUZZ_FLAGS:-} > "logs/$t.log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' | tail -1)
  corpus=$(find "corpus/$t" -type f | wc -l)
  crashes=$(find "artifacts/$t" -type f 2>/dev/null | wc -l)
  [[ $rc -eq 0 ]] || { status=1; tail -40 "logs/$t.log"; }
  summary+=("| $t | $seconds | ${execs:-?} | $corpus | $crashes | $rc |")
done

echo
echo "| target | seconds | execs | corpus files | artifacts | exit |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
exit $status
