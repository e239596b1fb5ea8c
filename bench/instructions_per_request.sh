#!/usr/bin/env bash
# instructions_per_request.sh: what one proxied request costs ramjet, in CPU instructions — the
# deterministic comparison between two builds on a noisy machine (wall-clock ratios move by
# ±10 % here; instruction counts by well under 1 %).
#
# For each ramjet binary and each request kind (json: a ~1 KB chat request answered with JSON;
# sse: the same request streamed, 8 events plus usage), starts ramjet-responder and ramjet
# (RJ_THREADS=1) under `valgrind --tool=callgrind`, sends N1 and then N2 requests on one
# keep-alive connection in two separate runs, and reports (I(N2) - I(N1)) / (N2 - N1): startup,
# shutdown and warm-up cancel out. Prints a Markdown table (and a ratio column against the
# first binary).
#
# Usage: bench/instructions_per_request.sh BIN [BIN...]
#   N1=300 N2=1300   request counts    RESPONDER_BIN=build/release/bench/ramjet-responder
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RESPONDER_BIN=${RESPONDER_BIN:-$ROOT/build/release/bench/ramjet-responder}
N1=${N1:-300}
N2=${N2:-1300}
(($# >= 1)) || { echo "usage: $0 RAMJET_BIN [RAMJET_BIN...]" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
[[ -x $RESPONDER_BIN ]] || { echo "responder not found at $RESPONDER_BIN" >&2; exit 1; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$RESPONDER_BIN" --port 0 --threads 1 --sse-chunks 8 >"$WORK/responder.out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^listening port=' "$WORK/responder.out" 2>/dev/null && break; sleep 0.1; done
RESP_PORT=$(sed -n 's/^listening port=\([0-9]*\).*/\1/p' "$WORK/responder.out")
[[ -n $RESP_PORT ]] || { echo "responder did not start" >&2; exit 1; }

# Sends n requests of one kind on one keep-alive connection; every response must be a 200.
client() {
  /usr/bin/python3 - "$1" "$2" "$3" <<'EOF'
import http.client, json, sys
port, kind, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
body = json.dumps({"model": "m", "stream": kind == "sse",
                   "messages": [{"role": "system", "content": "You are a helpful assistant. " * 20},
                                {"role": "user", "content": "Say something about routers. " * 10}]})
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for _ in range(n):
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"status {r.status}")
EOF
}

# Total instructions of one ramjet run that serves n requests of `kind`.
instructions() {
  local bin=$1 kind=$2 n=$3 out=$WORK/cg.$RANDOM
  local port
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  RJ_UPSTREAM=http://127.0.0.1:$RESP_PORT RJ_LISTEN=127.0.0.1:$port RJ_METRICS_LISTEN=127.0.0.1:0 RJ_THREADS=1 \
    RJ_LOG_LEVEL=warn RJ_ENGINE_SCRAPE_INTERVAL_MS=0 \
    valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" 2>"$WORK/valgrind.err" &
  local pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
  client "$port" "$kind" "$n"
  kill -TERM "$pid"
  wait "$pid" || true
  sed -n 's/^summary: *\([0-9]*\).*/\1/p;s/^totals: *\([0-9]*\).*/\1/p' "$out" | head -1
}

echo "| binary | request | instructions/request | ratio to the first |"
echo "|---|---|---:|---:|"
declare -A first
for bin in "$@"; do
  for kind in json sse; do
    a=$(instructions "$bin" "$kind" "$N1")
    b=$(instructions "$bin" "$kind" "$N2")
    per=$(( (b - a) / (N2 - N1) ))
    [[ -n ${first[$kind]:-} ]] || first[$kind]=$per
    ratio=$(/usr/bin/python3 -c "print(f'{$per / ${first[$kind]}:.3f}')")
    echo "| $bin | $kind | $per | $ratio |"
  done
done
