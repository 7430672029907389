#!/usr/bin/env bash
# The gateway's fixed cost a request at saturation, beside a byte relay of the same stream:
# h2load (50 connections, HTTP/1.1) sends the request-rate workload's streamed request (one
# choice, 16 content events, unpaced) from the harness's synthetic upstream
#   - through `choicewise serve` (BINARY), counting under `strace -c -f` its system calls a
#     request and the upstream connections it opened after a warm-up;
#   - then, without strace, ROUNDS rounds alternating the gateway and a byte relay (a Python
#     asyncio relay copying bytes both ways, one upstream connection per client connection,
#     parsing nothing), each run REQUESTS requests: requests/s and the gateway ÷ relay ratio
#     of each round, and their median; and each server's CPU time a request over its runs
#     (user and system, all its threads, from /proc/PID/stat), and the relay's ÷ the
#     gateway's: a figure that moves far less with a shared machine's load than requests/s,
#     where h2load, the upstream and both servers share the same cores.
#     Then the same CPU split into user and system time, and each server's context switches
#     a request (its threads', voluntary and involuntary): the system time is where the
#     scheduling of the shared cores shows (docs/benchmarks.md).
#   - in the same rounds, the harness's HTTP proxy (`choicewise-bench gateway-proxy`: axum on
#     hyper serving, hyper-util's pooled client calling the upstream, as the gateway does, the
#     body streamed through frame by frame, nothing parsed): the floor of the gateway's own
#     HTTP stack, so that the gateway's distance from the byte relay splits into the stack's
#     and its own.
#
#   cargo build --release -p choicewise-cli -p choicewise-bench
#   scripts/gateway-fixed-cost.sh target/release/choicewise
#
# Needs h2load (Debian's nghttp2-client), strace and python3. REQUESTS (default 20000),
# ROUNDS (default 3), HARNESS (default target/release/choicewise-bench), CONNECTIONS (50).
# The upstream reports its usage when asked, as model servers do; NO_USAGE=1 makes it report
# none, so that the gateway counts every request's tokens itself (its estimate). N (default 1)
# is the request's `n`: one choice is the pass-through path (docs/gateway.md); N=3 a native
# `n` with no pick, relayed too since f27fab8 (before it, the general path's figure).
set -euo pipefail

bin=${1:?usage: $0 CHOICEWISE_BINARY}
requests=${REQUESTS:-20000}
rounds=${ROUNDS:-3}
conns=${CONNECTIONS:-50}
harness=${HARNESS:-target/release/choicewise-bench}
for tool in h2load strace python3; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is not installed" >&2; exit 2; }
done
[ -x "$harness" ] || { echo "$0: no harness at $harness" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# The address a server prints on its first line ("listening on http://ADDR").
address() {
  local log=$1
  for _ in $(seq 100); do
    if grep -q 'listening on http://' "$log" 2>/dev/null; then
      grep -o 'http://[0-9.:]*' "$log" | head -1
      return
    fi
    sleep 0.1
  done
  echo "$0: no address in $log" >&2
  exit 1
}

"$harness" gateway-upstream --listen 127.0.0.1:0 ${NO_USAGE:+--no-usage} >"$work/upstream.log" 2>&1 &
pids+=($!)
upstream=$(address "$work/upstream.log")

cat >"$work/gateway.toml" <<EOF
listen = "127.0.0.1:0"
shutdown_grace_s = 1

[limits]
max_concurrent_requests = 4096
upstream_idle_timeout_s = 300

[[models]]
name = "native"
[[models.upstreams]]
api = "chat"
base_url = "$upstream/v1"
model = "m"
n = "native"
EOF
"$bin" serve --config "$work/gateway.toml" >"$work/gateway.out" 2>"$work/gateway.log" &
gateway_pid=$!
pids+=($gateway_pid)
gateway=$(address "$work/gateway.log")

cat >"$work/relay.py" <<'PY'
import asyncio, socket, sys

host, port = sys.argv[1].rsplit(":", 1)

async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()

async def relay(client_reader, client_writer):
    upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
    for w in (client_writer, upstream_writer):
        w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.gather(pipe(client_reader, upstream_writer),
                         pipe(upstream_reader, client_writer), return_exceptions=True)

async def main():
    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    print("listening on http://127.0.0.1:%d" % server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
PY
python3 "$work/relay.py" "${upstream#http://}" >"$work/relay.log" 2>&1 &
relay_pid=$!
pids+=($relay_pid)
relay=$(address "$work/relay.log")

"$harness" gateway-proxy --listen 127.0.0.1:0 --upstream "$upstream" >"$work/proxy.log" 2>&1 &
proxy_pid=$!
pids+=($proxy_pid)
proxy=$(address "$work/proxy.log")

python3 - "$work/body.json" "${N:-1}" <<'PY'
import json, sys
open(sys.argv[1], "w").write(json.dumps({"model": "native", "n": int(sys.argv[2]), "stream": True,
    "messages": [{"role": "user", "content": "cwbench tag=0 ticks=16 spread=0 first_us=0 "
                  "interval_us=0 stamp=0 fault=none tick_writes=0"}]}))
PY

# Requests/s of one h2load run against $1 ($2 requests); fails unless every one succeeded.
rate() {
  local out
  out=$(h2load --h1 -c "$conns" -n "$2" -d "$work/body.json" \
    -H 'content-type: application/json' "$1/v1/chat/completions" 2>&1)
  if ! grep -q "$2 succeeded" <<<"$out"; then
    echo "$0: not every request to $1 succeeded:" >&2
    echo "$out" >&2
    exit 1
  fi
  grep -o 'finished in [^,]*, [0-9.]* req/s' <<<"$out" | grep -o '[0-9.]* req/s' | cut -d' ' -f1
}

# A process's CPU time so far, all its threads, in clock ticks: user, then system; then its
# threads' context switches, voluntary (a wait) and involuntary (preempted).
ticks() {
  local v=0 n=0 t
  for t in /proc/"$1"/task/*/status; do
    v=$((v + $(awk '/^voluntary_ctxt_switches/ { print $2 }' "$t" 2>/dev/null || echo 0)))
    n=$((n + $(awk '/^nonvoluntary_ctxt_switches/ { print $2 }' "$t" 2>/dev/null || echo 0)))
  done
  echo "$(awk '{ print $14, $15 }' "/proc/$1/stat") $v $n"
}

# Warm-up: the gateway's upstream connections opened, the relay's Python warm.
rate "$gateway" 5000 >/dev/null
rate "$relay" 5000 >/dev/null
rate "$proxy" 5000 >/dev/null

# System calls a request, and upstream connections opened, over the counted requests.
strace -c -f -p "$gateway_pid" -o "$work/strace.txt" 2>/dev/null &
strace_pid=$!
sleep 1
rate "$gateway" "$requests" >/dev/null
sleep 0.5
kill -INT "$strace_pid"
wait "$strace_pid" 2>/dev/null || true
python3 - "$work/strace.txt" "$requests" <<'PY'
import sys
calls, by = 0, {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 5 and f[0][0].isdigit() and f[-1] not in ("total",):
        n = int(f[3])
        calls += n
        by[f[-1]] = n
n = int(sys.argv[2])
top = ", ".join("%s %.2f" % (k, v / n) for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:6])
print("system calls a request: %.2f (%s)" % (calls / n, top))
print("upstream connections opened after the warm-up: %d (connect calls)" % by.get("connect", 0))
PY

ratios=()
proxy_ratios=()
gateway_ticks=(0 0 0 0)
relay_ticks=(0 0 0 0)
proxy_ticks=(0 0 0 0)
# One run against the gateway, the relay or the stack's proxy: its requests/s in g, b or p,
# its CPU ticks added to the server's.
run() {
  local pid url t0 t1 i rate_of
  local -n into=$1_ticks
  case "$1" in
    gateway) pid=$gateway_pid url=$gateway ;;
    relay) pid=$relay_pid url=$relay ;;
    proxy) pid=$proxy_pid url=$proxy ;;
  esac
  t0=($(ticks "$pid")); rate_of=$(rate "$url" "$requests"); t1=($(ticks "$pid"))
  for i in 0 1 2 3; do into[i]=$((into[i] + t1[i] - t0[i])); done
  case "$1" in
    gateway) g=$rate_of ;;
    relay) b=$rate_of ;;
    proxy) p=$rate_of ;;
  esac
}
for r in $(seq "$rounds"); do
  # Each server goes first, second and last in turn.
  case $((r % 3)) in
    1) run gateway; run relay; run proxy ;;
    2) run relay; run proxy; run gateway ;;
    0) run proxy; run gateway; run relay ;;
  esac
  ratio=$(python3 -c "print('%.3f' % ($g / $b))")
  ratios+=("$ratio")
  proxy_ratio=$(python3 -c "print('%.3f' % ($p / $b))")
  proxy_ratios+=("$proxy_ratio")
  echo "round $r: gateway $g requests/s, byte relay $b requests/s: ${ratio}x; the stack's proxy $p requests/s: ${proxy_ratio}x"
done
median() { python3 -c "import statistics, sys; print('%.3f' % statistics.median(map(float, sys.argv[1:])))" "$@"; }
echo "gateway / byte relay, median of ${#ratios[@]}: $(median "${ratios[@]}")x"
echo "the stack's proxy / byte relay, median of ${#proxy_ratios[@]}: $(median "${proxy_ratios[@]}")x"
python3 - "${gateway_ticks[*]}" "${relay_ticks[*]}" "${proxy_ticks[*]}" "$((rounds * requests))" "$(getconf CLK_TCK)" <<'PY'
import sys
g, b, p = ([int(x) for x in a.split()] for a in sys.argv[1:4])
n, hz = int(sys.argv[4]), int(sys.argv[5])
us = lambda t: t * 1e6 / hz / n
gc, bc, pc = g[0] + g[1], b[0] + b[1], p[0] + p[1]
print("CPU a request (user + system, every round): gateway %.1f us, byte relay %.1f us: "
      "relay / gateway %.3fx" % (us(gc), us(bc), bc / gc if gc else float("nan")))
print("CPU a request, user and system: gateway %.1f and %.1f us, byte relay %.1f and %.1f us; "
      "context switches a request (voluntary, involuntary): gateway %.2f, %.2f, byte relay "
      "%.2f, %.2f" % (us(g[0]), us(g[1]), us(b[0]), us(b[1]), g[2] / n, g[3] / n, b[2] / n, b[3] / n))
print("the stack's proxy: CPU a request %.1f us (user %.1f, system %.1f), %.2fx the byte relay's, "
      "the gateway's %.2fx its; context switches a request %.2f, %.2f"
      % (us(pc), us(p[0]), us(p[1]), pc / bc if bc else float("nan"),
         gc / pc if pc else float("nan"), p[2] / n, p[3] / n))
PY
