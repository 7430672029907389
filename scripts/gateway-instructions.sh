#!/usr/bin/env bash
# The gateway's instructions a request, counted by callgrind: a figure that does not move
# with the machine's load, for pairing two builds whose requests/s differ by less than
# `gateway-rate` resolves (about 2%). Each binary serves the request-rate workload's
# streamed request (one choice, 16 content events, unpaced) from the harness's synthetic
# upstream, REQUESTS times over 4 keep-alive connections after 100 not counted; the
# instructions of the counted ones, divided by REQUESTS, and the heaviest functions.
#
#   cargo build --release -p choicewise-bench
#   scripts/gateway-instructions.sh ../before/target/release/choicewise target/release/choicewise
#
# Needs valgrind and python3. REQUESTS (default 1000), HARNESS (default
# target/release/choicewise-bench), KEEP=1 keeps the callgrind files (in a temporary
# directory, named). LIMITS=memory serves with a named key whose limits of requests, samples
# and tokens never bind, counted in the process (docs/keys.md), and the clients send its key:
# what the limits cost a request, paired with the same binary without them (LIMITS=redis://HOST:PORT
# counts them in that Redis: the gateway's own instructions, Redis's not counted):
#
#   scripts/gateway-instructions.sh target/release/choicewise
#   LIMITS=memory scripts/gateway-instructions.sh target/release/choicewise
#
# N is the request's `n` (default 1, the pass-through path; N=3 a native `n`, relayed too
# since f27fab8, docs/gateway.md):
#
#   N=3 scripts/gateway-instructions.sh target/release/choicewise
#
# The upstream reports its usage when asked (`stream_options.include_usage`, which the gateway
# sends), as model servers do; NO_USAGE=1 makes it report none, so that the gateway counts
# each request's prompt and completion itself (its estimate).
#
# CONSOLE=1 serves the console too (`[console]`, on the gateway's listener, with `[admin]`'s
# operator key): what it costs a request that does not use it.
#
# A BINARY named `proxy` counts the harness's HTTP proxy instead (`choicewise-bench
# gateway-proxy`: axum on hyper, hyper-util's pooled client, the body streamed through, nothing
# parsed): the floor of the gateway's own HTTP stack, beside which the gateway's own share shows:
#
#   scripts/gateway-instructions.sh proxy target/release/choicewise
#
# RECORDS=sqlite writes every request's row to a SQLite file (docs/records.md), and
# RECORDS=sqlite-samples each sample's too (`samples = true`): what the records cost a
# request, the writer's thread and SQLite's counted with the rest of the process;
# RECORDS=postgres://USER@HOST:PORT/DB writes them to that PostgreSQL (the gateway's own
# instructions, PostgreSQL's not counted).
set -euo pipefail

requests=${REQUESTS:-1000}
harness=${HARNESS:-target/release/choicewise-bench}
[ $# -ge 1 ] || { echo "usage: $0 CHOICEWISE_BINARY..." >&2; exit 2; }
command -v valgrind >/dev/null || { echo "$0: valgrind is not installed" >&2; exit 2; }
[ -x "$harness" ] || { echo "$0: no harness at $harness (cargo build --release -p choicewise-bench)" >&2; exit 2; }

work=$(mktemp -d)
[ "${KEEP:-}" = 1 ] || trap 'rm -rf "$work"' EXIT

cat > "$work/load.py" <<'PY'
import http.client, json, os, sys, threading
port, n, threads = int(sys.argv[1]), int(sys.argv[2]), 4
key = sys.argv[3] if len(sys.argv) > 3 else None
headers = {"content-type": "application/json"}
if key:
    headers["authorization"] = "Bearer " + key
body = json.dumps({"model": "native", "n": int(os.environ.get("N", "1")), "stream": True, "messages": [{"role": "user",
    "content": "cwbench tag=0 ticks=16 spread=0 first_us=0 interval_us=0 stamp=0 fault=none tick_writes=0"}]})
failed = []
def run(k):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    for _ in range(k):
        c.request("POST", "/v1/chat/completions", body, headers)
        r = c.getresponse()
        data = r.read()
        if r.status != 200 or b"[DONE]" not in data:
            failed.append(r.status)
ts = [threading.Thread(target=run, args=(n // threads,)) for _ in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
if failed:
    sys.exit(f"{len(failed)} requests failed: {failed[:5]}")
PY

wait_for() { # FILE PATTERN
  for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.2; done
  echo "$0: no '$2' in $1" >&2; cat "$1" >&2; return 1
}

i=0
for bin in "$@"; do
  i=$((i + 1)); d="$work/$i"; mkdir -p "$d"
  "$harness" gateway-upstream --listen 127.0.0.1:0 ${NO_USAGE:+--no-usage} > "$d/upstream.log" 2>&1 &
  up=$!
  wait_for "$d/upstream.log" "listening on"
  upstream=$(grep -o 'http://[0-9.:]*' "$d/upstream.log" | head -1)
  printf 'listen = "127.0.0.1:0"\nshutdown_grace_s = 1\n\n[limits]\nmax_concurrent_requests = 4096\n\n[[models]]\nname = "native"\n[[models.upstreams]]\napi = "chat"\nbase_url = "%s/v1"\nmodel = "m"\nn = "native"\n' \
    "$upstream" > "$d/gateway.toml"
  key=""
  if [ "${LIMITS:-none}" != none ]; then
    key="sk-instructions-bench"
    case "$LIMITS" in
      memory) ;;
      redis://*) printf '\n[state]\nredis_url = "%s"\non_state_error = "refuse"\nstate_timeout_ms = 5000\n' "$LIMITS" >> "$d/gateway.toml" ;;
      *) echo "$0: LIMITS=${LIMITS}: none, memory or redis://HOST:PORT" >&2; exit 2 ;;
    esac
    printf '\n[auth]\n[[auth.keys]]\nname = "bench"\nkey_env = "CHOICEWISE_BENCH_KEY"\n[auth.keys.limits]\nrequests_per_minute = 1000000000\nsamples_per_minute = 1000000000\ntokens_per_minute = 1000000000000\n' >> "$d/gateway.toml"
  fi
  case "${RECORDS:-none}" in
    none) ;;
    sqlite) printf '\n[records]\nurl = "sqlite://%s/records.db"\nspool_path = "%s/records.spool"\n' "$d" "$d" >> "$d/gateway.toml" ;;
    sqlite-samples) printf '\n[records]\nurl = "sqlite://%s/records.db"\nsamples = true\nspool_path = "%s/records.spool"\n' "$d" "$d" >> "$d/gateway.toml" ;;
    postgres://*) printf '\n[records]\nurl = "%s"\nspool_path = "%s/records.spool"\n' "$RECORDS" "$d" >> "$d/gateway.toml" ;;
    *) echo "$0: RECORDS=${RECORDS}: none, sqlite, sqlite-samples or postgres://USER@HOST:PORT/DB" >&2; exit 2 ;;
  esac
  if [ "${CONSOLE:-}" = 1 ]; then
    printf '\n[admin]\nkey_env = "CHOICEWISE_BENCH_ADMIN_KEY"\n[console]\nenabled = true\n' >> "$d/gateway.toml"
  fi
  serve=("$bin" serve --config "$d/gateway.toml")
  if [ "$bin" = proxy ]; then
    serve=("$harness" gateway-proxy --listen 127.0.0.1:0 --upstream "$upstream")
  fi
  CHOICEWISE_BENCH_ADMIN_KEY="sk-instructions-operator" CHOICEWISE_BENCH_KEY="$key" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$d/callgrind.out" \
    "${serve[@]}" > "$d/gateway.log" 2>&1 &
  gw=$!
  wait_for "$d/gateway.log" "listening on"
  port=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$d/gateway.log" | sed 's/.*://')
  python3 "$work/load.py" "$port" 100 $key
  callgrind_control -i on "$gw" > /dev/null 2>&1
  python3 "$work/load.py" "$port" "$requests" $key
  callgrind_control -d "$gw" > /dev/null 2>&1
  kill -9 "$gw" "$up" 2>/dev/null || true
  wait "$gw" "$up" 2>/dev/null || true
  out=$(ls "$d"/callgrind.out.* | head -1)
  total=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  memcpy=$(callgrind_annotate "$out" 2>/dev/null | awk '/__mem(cpy|move)/ {gsub(",", "", $1); s += $1} END {print s + 0}')
  echo "$bin: $((total / requests)) instructions a request (memcpy $((memcpy / requests)))"
  callgrind_annotate --auto=no "$out" 2>/dev/null | awk '/file:function/ {p = 1; next} p && NF && n++ < 12' \
    | sed -E 's/ \[[^]]*\]$//; s#  (\./|/)[^ ]*\.(rs|S|c|h):#  #' | cut -c1-150
  if [ "${KEEP:-}" = 1 ]; then echo "kept: $out"; fi
done
