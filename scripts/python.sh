#!/usr/bin/env bash
# The Python package (crates/python): a venv with the wheel built from this checkout, its
# tests, and its two figures.
#
#   scripts/python.sh install   # .venv-python/: maturin, pytest, openai, jiter, mypy from PyPI, then the wheel
#   scripts/python.sh test      # mypy --strict on the examples (crates/python/examples), then pytest
#                               # (crates/python/tests); fails on a failure, or if no test ran
#   scripts/python.sh bench     # the figures of docs/python.md: medians of three runs, as ratios
#
# Environment: PYTHON (default python3) makes the venv; CHOICEWISE_PY_PROFILE (default
# release) is the cargo profile of the wheel (`pip install` builds with `wheel`, set in
# pyproject.toml): `dev`, the profile of the workspace's tests,
# reuses their build (crates/python is a member of the workspace) and is what CI tests; the
# figures of docs/python.md use `release`. CHOICEWISE_TESTSERVER, the test server binary
# (default: built here with cargo, in $CARGO_TARGET_DIR or target/).
# Builds run under `nice`, so they leave room to whatever else runs on the machine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/retry.sh
. "$repo/scripts/retry.sh"
venv=${CHOICEWISE_PY_VENV:-$repo/.venv-python}
profile=${CHOICEWISE_PY_PROFILE:-release}

# Pinned, so that a new release changes nothing here until someone moves the pin.
MATURIN=maturin==1.16.0
PYTEST=pytest==9.2.0
OPENAI=openai==3.54.0
JITER=jiter==0.19.0
MYPY=mypy==2.4.1
target=${CARGO_TARGET_DIR:-$repo/target}

testserver() {
  if [[ -n ${CHOICEWISE_TESTSERVER:-} ]]; then
    echo "$CHOICEWISE_TESTSERVER"
    return
  fi
  # --workspace: the features of the workspace's own test build, so it reuses that build.
  (cd "$repo" && nice -n 10 cargo build --quiet --workspace --bin choicewise-testserver >&2)
  echo "$target/debug/choicewise-testserver"
}

case "${1:-}" in
  install)
    if [[ ! -x $venv/bin/python ]]; then
      "${PYTHON:-python3}" -m venv "$venv"
    fi
    retry 3 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      "$MATURIN" "$PYTEST" "$OPENAI" "$JITER" "$MYPY"
    wheels=$target/wheels
    rm -rf "$wheels"
    # maturin builds the wheel as `pip install ./crates/python` would (same backend), with the
    # profile chosen, in the workspace's target directory.
    (cd "$repo/crates/python" && nice -n 10 "$venv/bin/maturin" build --quiet --profile "$profile" \
      --interpreter "$venv/bin/python" --out "$wheels")
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall \
      --no-deps "$wheels"/choicewise-*.whl
    printf 'python.sh: installed %s into %s (%s, profile %s)\n' \
      "$(basename "$wheels"/choicewise-*.whl)" "$venv" \
      "$("$venv/bin/python" --version)" "$profile" >&2
    ;;
  test)
    shift
    # The public API's types: the examples use it as users would, and the installed package
    # itself, under --strict.
    "$venv/bin/python" -m mypy --strict --no-incremental "$repo/crates/python/examples"
    "$venv/bin/python" -m mypy --strict --no-incremental -p choicewise
    server=$(testserver)
    status=0
    CHOICEWISE_TESTSERVER=$server CHOICEWISE_FIXTURES=$repo/tests/fixtures \
      "$venv/bin/python" -m pytest -q -p no:cacheprovider "$repo/crates/python/tests" "$@" || status=$?
    if [[ $status -eq 5 ]]; then
      echo "python.sh: pytest ran no test" >&2
      exit 1
    fi
    exit "$status"
    ;;
  bench)
    shift
    CHOICEWISE_FIXTURES=$repo/tests/fixtures "$venv/bin/python" "$repo/crates/python/bench/bench.py" "$@"
    ;;
  *)
    echo "usage: scripts/python.sh install|test|bench" >&2
    exit 2
    ;;
esac
