#!/usr/bin/env bash
# router_restart.sh: what a router restart costs (issue 27, "Restarts"). scripts/demo's
# cache-pressured agent workload through one ramjet; RESTART_AT seconds in, the ramjet is killed
# (SIGKILL: a crash, nothing flushed) and started again on the same port with the same settings.
# ramjet-bench reports the run in TIMELINE-second windows by completion time (--timeline), so the
# Markdown shows the cached share before, across and after the restart:
#   fingerprints  RJ_AFFINITY=prefix: the restarted router's approximate index is empty, so every
#                 session's next turn is placed without it
#   exact         the same plus the engines' KV events (RJ_KV_EVENT_LIVE/REPLAY_ENDPOINTS): the
#                 restarted router replays each engine's buffered events and is exact again as
#                 soon as its index is trusted (engines within their replay window)
# Prints Markdown and writes bench/results/router_restart-<UTC>.md.
#
# Usage: bench/router_restart.sh [--no-build]
# Environment:
#   DURATION=40 RESTART_AT=15 TIMELINE=2 SPEED=6 ENGINES=4   seconds, restart time, window seconds
#   CONCURRENCY=32 APPS=4 PREFIX_KIB=24 TURNS=10 USER_WORDS=2048 MAX_TOKENS=64 KV_BLOCKS=384
#   PRESET=qwen3.8-27b-tp4  EXACT_MIN_BYTES=8192  BUILD_DIR=build/release  RESULTS_DIR=bench/results
#   BIN_DIR   a folder with ramjet, ramjet-sim and ramjet-bench to use instead (no build)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args router_restart "$@"
DURATION=${DURATION:-40}
RESTART_AT=${RESTART_AT:-15}
TIMELINE=${TIMELINE:-2}
agent_workload_defaults
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}

((RESTART_AT > 0 && RESTART_AT < DURATION)) || die "RESTART_AT must be inside the run (0 < RESTART_AT < DURATION)"
for tool in curl python3; do command -v $tool >/dev/null || die "$tool not found (run scripts/setup as root)"; done

bench_binaries

bench_workdir ramjet-restart

KV_EVENTS=1
SIM_PREFIX=(nice)
[[ -n $KV_BLOCKS ]] && SIM_EXTRA=(--num-gpu-blocks-override "$KV_BLOCKS")
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done

router_env=()
router_pid=""
start_router() {  # start_router LOG PORT: ramjet with router_env on 127.0.0.1:PORT, ready when every engine is healthy (and trusted, with events)
  env RJ_UPSTREAM="$(IFS=,; echo "${engines[*]}")" RJ_LISTEN="127.0.0.1:$2" RJ_METRICS_LISTEN=127.0.0.1:0 \
    RJ_AFFINITY=prefix RJ_THREADS=2 ${router_env[@]+"${router_env[@]}"} nice "$RAMJET" >/dev/null 2>"$1" &
  router_pid=$!
  pids+=("$router_pid")
  wait_ramjet_ready "127.0.0.1:$2" 0.05 || die "ramjet did not become ready"
}

run() {  # run LABEL: fresh engines, a ramjet, the workload, and the restart in the middle of it
  local label=$1 port t0 ready
  start_sims "${FLEET[@]}"
  router_env=()
  if [[ $label == exact ]]; then
    router_env=(RJ_KV_EVENT_LIVE_ENDPOINTS="$(IFS=,; echo "${kv_live[*]}")"
                RJ_KV_EVENT_REPLAY_ENDPOINTS="$(IFS=,; echo "${kv_replay[*]}")"
                RJ_EXACT_ROUTE_MODE=on RJ_EXACT_ROUTE_MIN_BYTES="$EXACT_MIN_BYTES")
  fi
  port=$(free_port)
  start_router "$WORK/$label-before.log" "$port"
  log "$label: ${DURATION}s through ramjet on port $port, killed and restarted at ${RESTART_AT}s"
  agent_bench_args
  nice "$BENCH" --target "http://127.0.0.1:$port" "${AGENT_ARGS[@]}" --duration "$DURATION" --seed 7 \
    --timeline "$TIMELINE" --connect-timeout 2 --label "$label" --out-json "$WORK/$label.json" --quiet &
  local bench_pid=$!
  sleep "$RESTART_AT"
  kill -KILL "$router_pid"
  wait "$router_pid" 2>/dev/null || true
  t0=$(date +%s.%N)
  start_router "$WORK/$label-after.log" "$port"
  ready=$(python3 -c "import time; print(f'{time.time() - $t0:.2f}')")
  echo "$ready" >"$WORK/$label.ready"
  log "$label: restarted, ready (engines healthy$([[ $label == exact ]] && echo ", indexes trusted")) in ${ready}s"
  wait "$bench_pid" || true  # (it exits non-zero when some requests failed: the restart makes some)
  [[ -s $WORK/$label.json ]] || die "$label: ramjet-bench wrote no report"
  stop_pids
}

run fingerprints
run exact

mkdir -p "$RESULTS_DIR"
out=$RESULTS_DIR/router_restart-$(date -u +%Y-%m-%d-%H%M%S).md
python3 - "$WORK" "$out" <<EOF
import json, math, sys
work, out = sys.argv[1], sys.argv[2]
runs = {l: json.load(open(f"{work}/{l}.json"))["runs"][0]["steps"][0] for l in ("fingerprints", "exact")}
ready = {l: open(f"{work}/{l}.ready").read().strip() for l in runs}
lines = []
p = lines.append
p("# Router restart (issue 27): one ramjet killed (SIGKILL) and started again mid-run")
p("")
p("commit $COMMIT; $(nproc) CPUs; $ENGINES ramjet-sim $PRESET at ${SPEED}x with KV events; workload: ramjet-bench shared-prefix, $APPS apps x $PREFIX_KIB KiB, $TURNS turns, $USER_WORDS user words, max_tokens $MAX_TOKENS, concurrency $CONCURRENCY, ${DURATION}s, KV pool ${KV_BLOCKS:-full} blocks per sim; restart at ${RESTART_AT}s; windows of ${TIMELINE}s by completion time")
p("")
for l, s in runs.items():
    p(f"- {l}: restarted ramjet ready in {ready[l]} s; whole run {s['ok']} ok, {s['errors']} errors ({', '.join(f'{k} {v}' for k, v in sorted(s['error_reasons'].items())) or 'none'}), cached {s['cached_pct']:.1f} %")
p("")
p("| from s | fingerprints ok | fingerprints cached % | fingerprints TTFT p95 ms | exact ok | exact cached % | exact TTFT p95 ms |")
p("|---:|---:|---:|---:|---:|---:|---:|")
f, e = runs["fingerprints"]["timeline"], runs["exact"]["timeline"]
def cell(v, fmt):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)
for i in range(max(len(f), len(e))):
    a = f[i] if i < len(f) else {}
    b = e[i] if i < len(e) else {}
    t = (a or b)["t_s"]
    mark = " (restart)" if t <= $RESTART_AT < t + $TIMELINE else ""
    p(f"| {t:g}{mark} | {a.get('ok', '-')} | {cell(a.get('cached_pct'), '{:.1f}')} | {cell(a.get('ttft_p95_ms'), '{:.0f}')} | {b.get('ok', '-')} | {cell(b.get('cached_pct'), '{:.1f}')} | {cell(b.get('ttft_p95_ms'), '{:.0f}')} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
log "wrote $out"
