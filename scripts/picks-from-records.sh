#!/usr/bin/env bash
# The picks measured on production traffic, live (docs/records.md): `choicewise serve` with
# `[records] samples = true` in front of the arithmetic model's llama.cpp server serves a vote
# of 8 (`vote_by = "#### (\d+)"`) to N held-out problems asked as a client would (with
# `logprobs: true`); then `choicewise picks record --from-records` exports the recorded
# samples and `choicewise picks report` measures every pick against the vote of all of a
# request's samples, replayed through a gateway of its own and beside the offline reference;
# three in five requests are graded over `POST /v1/feedback` (by the fixture's answers), and
# the report measures accuracy on those apart from agreement on the rest.
#
#   eval "$(scripts/llama-server.sh start)"
#   scripts/picks-from-records.sh [N]            # N problems (default 20) of the fixture
#
# Needs CHOICEWISE_ARITH_URL, or CHOICEWISE_ARITH_URLS for several servers (both set by
# scripts/llama-server.sh start), and a built target/debug/choicewise (CHOICEWISE default).
# Writes into WORK (default /tmp/choicewise-from-records).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
bin=${CHOICEWISE:-target/debug/choicewise}
work=${WORK:-/tmp/choicewise-from-records}
: "${CHOICEWISE_ARITH_URL:?is not set: start the arithmetic model server first (scripts/llama-server.sh start)}"
rm -rf "$work"
mkdir -p "$work"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/gateway.toml" <<TOML
listen = "127.0.0.1:$port"
shutdown_grace_s = 5

[records]
url = "sqlite://$work/records.db"
samples = true
spool_path = "$work/records.spool"

[[models]]
name = "arith"
[models.choicewise]
select = "vote"
samples = 8
vote_by = '#### (\d+)'
TOML
# Every arithmetic server (CHOICEWISE_ARITH_URLS), the samples spread over them in turn.
for url in ${CHOICEWISE_ARITH_URLS:-$CHOICEWISE_ARITH_URL}; do
  cat >> "$work/gateway.toml" <<TOML
[[models.upstreams]]
api = "chat"
base_url = "$url"
model = "arith-6m"
n = "fan-out"
TOML
done
"$bin" serve --config "$work/gateway.toml" 2> "$work/serve.log" &
gateway=$!
trap 'kill "$gateway" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do grep -q 'listening on' "$work/serve.log" && break; sleep 0.1; done
grep -q 'listening on' "$work/serve.log" || { cat "$work/serve.log" >&2; exit 1; }

# The traffic: each problem once, as a client of the gateway would ask it.
python3 - "$port" "$n" <<'PY'
import json, re, sys, urllib.request
port, n = int(sys.argv[1]), int(sys.argv[2])
graded = 0
problems = json.load(open("tests/fixtures/arith-set-a-50.json"))["problems"][:n]
for p in problems:
    body = {"model": "arith", "messages": [{"role": "user", "content": p["prompt"]}],
            "temperature": 1.0, "max_tokens": 175, "logprobs": True, "top_logprobs": 5,
            "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(), headers={"content-type": "application/json",
        "x-request-id": f"arith-{p['id']}"})
    with urllib.request.urlopen(req, timeout=600) as r:
        assert r.status == 200, r.status
        answer = json.load(r)
    # Three in five graded from production, as a test suite would: right or wrong by the
    # known answer (POST /v1/feedback); the rest measured against the vote of all samples.
    if graded < 3 * len(problems) // 5:
        said = re.search(r"#### (\d+)", answer["choices"][0]["message"]["content"] or "")
        outcome = "right" if said and said.group(1) == str(p["answer"]) else "wrong"
        grade = urllib.request.Request(f"http://127.0.0.1:{port}/v1/feedback",
            data=json.dumps({"request_id": f"arith-{p['id']}", "outcome": outcome,
                             "source": "the fixture's answers"}).encode(),
            headers={"content-type": "application/json"})
        with urllib.request.urlopen(grade, timeout=30) as r:
            assert r.status == 200, r.status
        graded += 1
print(f"{len(problems)} requests answered by the vote of 8, {graded} graded", file=sys.stderr)
PY
kill -TERM "$gateway"
wait "$gateway" || true
trap - EXIT

"$bin" usage --records "sqlite://$work/records.db" --by model
"$bin" picks record --from-records "sqlite://$work/records.db" --model arith --out "$work/set"
"$bin" picks report "$work/set" --answer '#### (\d+)' | tee "$work/report.txt"
grep -q '^Graded by feedback (POST /v1/feedback): ' "$work/report.txt"
grep -q 'items without a grade' "$work/report.txt"
# A recommendation, or an honest "cannot be told apart" on so few items.
grep -qE '^(Recommendation: |No recommendation: .* cannot be told apart)' "$work/report.txt"
