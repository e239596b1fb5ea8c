#!/usr/bin/env bash
# metrics_cost.sh: what do metrics cost on the request path?
#
#  1. ramjet-micro-metrics (Google Benchmark, pinned to CPU 1): the metric updates forward.cc
#     makes for one request (JSON; SSE relayed in 10 batches), only the updates added with the
#     observability work, and rendering /metrics with 1..256 upstreams.
#  2. Metrics on vs off, end to end: the same ramjet built twice, normally and with
#     -DRAMJET_METRICS_OFF=ON (counter increments and histogram observations compiled out; the
#     gauges stay, they are routing state). Both run with RJ_THREADS=1 next to ramjet-responder
#     on CPU 1; wrk (-t2 -c16, bench/wrk/chat_{json,sse}.lua) on CPU 0 drives one at a time,
#     alternating on/off REPEATS times. Reported: wrk's req/s and ramjet's CPU time per request
#     (utime+stime from /proc/<pid>/stat over wrk's request count), medians.
#
# Usage: bench/metrics_cost.sh
#   RAMJET_BIN       default build/release/src/app/ramjet
#   RAMJET_OFF_BIN   default build/release-metrics-off/src/app/ramjet, e.g. from
#                    cmake --preset release -B build/release-metrics-off -DRAMJET_METRICS_OFF=ON
#                    cmake --build build/release-metrics-off --target ramjet
#   RESPONDER_BIN, MICRO_BIN (build/release/bench/...), DURATION=5s per run, REPEATS=5
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RAMJET_BIN=${RAMJET_BIN:-$ROOT/build/release/src/app/ramjet}
RAMJET_OFF_BIN=${RAMJET_OFF_BIN:-$ROOT/build/release-metrics-off/src/app/ramjet}
RESPONDER_BIN=${RESPONDER_BIN:-$ROOT/build/release/bench/ramjet-responder}
MICRO_BIN=${MICRO_BIN:-$ROOT/build/release/bench/ramjet-micro-metrics}
DURATION=${DURATION:-5s}
REPEATS=${REPEATS:-5}

die() { echo "metrics_cost: $*" >&2; exit 1; }
for b in "$RAMJET_BIN" "$RAMJET_OFF_BIN" "$RESPONDER_BIN" "$MICRO_BIN"; do [[ -x $b ]] || die "not found: $b"; done
command -v wrk >/dev/null || die "wrk not found (scripts/setup)"
[[ $(nproc) -ge 2 ]] || die "needs 2 CPUs (wrk on CPU 0, the servers on CPU 1)"

WORK=$(mktemp -d /tmp/ramjet-metrics-cost.XXXXXX)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do ((SECONDS < deadline)) || return 1; sleep 0.1; done
}

echo "## micro benchmark (CPU 1, median of 3)"
echo
echo '```'
taskset -c 1 "$MICRO_BIN" --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
  grep -E '^(Benchmark|BM_.*_median)'
echo '```'

taskset -c 1 "$RESPONDER_BIN" --port 0 --threads 1 --sse-chunks 8 >"$WORK/responder.out" 2>"$WORK/responder.err" &
pids+=($!)
wait_for 10 grep -q '^listening port=' "$WORK/responder.out" || die "responder did not start"
RESP_PORT=$(sed -n 's/^listening port=\([0-9]*\).*/\1/p' "$WORK/responder.out")
declare -A PID API
start_ramjet() {  # start_ramjet <name> <binary>
  local log="$WORK/ramjet.$1.err"
  RJ_UPSTREAM="http://127.0.0.1:$RESP_PORT" RJ_LISTEN=127.0.0.1:0 RJ_METRICS_LISTEN=127.0.0.1:0 RJ_THREADS=1 \
    RJ_ENGINE_SCRAPE_INTERVAL_MS=0 taskset -c 1 "$2" >"$WORK/ramjet.$1.out" 2>"$log" &
  PID[$1]=$!
  pids+=($!)
  wait_for 15 grep -q 'listening api=' "$log" || die "ramjet ($1) did not start"
  API[$1]=$(grep -o 'listening api=[^ "]*' "$log" | head -1 | sed 's/.*:\([0-9]*\)$/\1/')
}
start_ramjet on "$RAMJET_BIN"
start_ramjet off "$RAMJET_OFF_BIN"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

echo
echo "## metrics on vs off (ramjet RJ_THREADS=1 + responder on CPU 1, wrk -t2 -c16 on CPU 0, $DURATION x $REPEATS, alternating)"
echo
echo "| mode | on req/s | off req/s | on/off | on CPU/request | off CPU/request | CPU delta |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for mode in json sse; do
  for which in on off; do
    taskset -c 0 wrk -t2 -c16 -d1s -s "$ROOT/bench/wrk/chat_$mode.lua" "http://127.0.0.1:${API[$which]}" >/dev/null
  done
  : >"$WORK/rps.on"; : >"$WORK/rps.off"; : >"$WORK/cpu.on"; : >"$WORK/cpu.off"
  for ((r = 0; r < REPEATS; r++)); do
    for which in on off; do
      c0=$(cpu_ticks "${PID[$which]}")
      out=$(taskset -c 0 wrk -t2 -c16 -d"$DURATION" -s "$ROOT/bench/wrk/chat_$mode.lua" "http://127.0.0.1:${API[$which]}")
      c1=$(cpu_ticks "${PID[$which]}")
      grep -q 'Non-2xx' <<<"$out" && die "non-2xx answers from ramjet ($which, $mode)"
      n=$(awk '/requests in/ {print $1}' <<<"$out")
      awk '/^Requests\/sec:/ {print $2}' <<<"$out" >>"$WORK/rps.$which"
      awk -v c="$((c1 - c0))" -v n="$n" -v t="$TICK" 'BEGIN {printf "%.3f\n", c / t / n * 1e6}' >>"$WORK/cpu.$which"
    done
  done
  on_rps=$(median <"$WORK/rps.on"); off_rps=$(median <"$WORK/rps.off")
  on_cpu=$(median <"$WORK/cpu.on"); off_cpu=$(median <"$WORK/cpu.off")
  awk -v m="$mode" -v a="$on_rps" -v b="$off_rps" -v x="$on_cpu" -v y="$off_cpu" \
    'BEGIN {printf "| %s | %.0f | %.0f | %.3f | %.2f µs | %.2f µs | %+.1f %% |\n", m, a, b, a / b, x, y, (x - y) / y * 100}'
done
