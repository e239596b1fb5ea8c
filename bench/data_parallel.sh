#!/usr/bin/env bash
# data_parallel.sh: does routing to each data-parallel rank beat leaving the ranks to the engine?
# (issue 28). ENGINES ramjet-sim engines, each with --data-parallel-size RANKS (one URL, RANKS
# independent schedulers and prefix caches, vLLM's own load balancer over the ranks when a request
# names none: docs/sim.md §8.2), in front of them one ramjet:
#   blind   RJ_UPSTREAM lists the engines only: ramjet places each request on an engine and the
#           engine's balancer picks the rank (least loaded, blind to prefixes), as any router that
#           does not know the ranks
#   aware   RJ_UPSTREAM_DP_SIZE=RANKS: every rank is an ordinal; ramjet places each request on a
#           rank by prefix affinity and load and pins it there (X-Data-Parallel-Rank)
#   aware-exact   aware, and every rank's KV events (discovered per rank): exact placement
# Each label runs on fresh engines (cold caches) with scripts/demo's cache-pressured agent workload.
# Target (issue 28): aware >= 1.3x blind's output throughput. Prints Markdown and writes
# bench/results/data_parallel-<UTC>.md.
#
# Usage: bench/data_parallel.sh [--no-build]
# Environment:
#   ENGINES=2 RANKS=4 DURATION=30 REPEATS=1 LABELS="blind aware aware-exact"
#   SPEED=6 CONCURRENCY=32 APPS=4 PREFIX_KIB=24 TURNS=10 USER_WORDS=2048 MAX_TOKENS=64 KV_BLOCKS=384
#   PRESET=qwen3.8-27b-tp4 (KV_BLOCKS: each rank's pool)   BUILD_DIR=build/release   BIN_DIR
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args data_parallel "$@"
ENGINES=${ENGINES:-2}
RANKS=${RANKS:-4}
DURATION=${DURATION:-30}
REPEATS=${REPEATS:-1}
LABELS=${LABELS:-blind aware aware-exact}
agent_workload_defaults
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD)}
cd "$ROOT"
bench_binaries
bench_workdir data_parallel

SIM_EXTRA=(--data-parallel-size "$RANKS")
[[ -n $KV_BLOCKS ]] && SIM_EXTRA+=(--num-gpu-blocks-override "$KV_BLOCKS")
KV_EVENTS=1
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done

run() {  # run LABEL REPEAT
  local label=$1 rep=$2 env=()
  start_sims "${FLEET[@]}"
  local upstreams
  upstreams=$(IFS=,; echo "${engines[*]}")
  env=(RJ_UPSTREAM="$upstreams")
  case $label in
    blind) ;;
    aware) env+=(RJ_UPSTREAM_DP_SIZE="$(printf "$RANKS,%.0s" $(seq "$ENGINES") | sed 's/,$//')") ;;
    aware-exact)
      env+=(RJ_UPSTREAM_DP_SIZE="$(printf "$RANKS,%.0s" $(seq "$ENGINES") | sed 's/,$//')"
            RJ_KV_EVENT_LIVE_ENDPOINTS="$(printf 'discover,%.0s' $(seq "$ENGINES") | sed 's/,$//')"
            RJ_EXACT_ROUTE_MODE=on RJ_EXACT_ROUTE_MIN_BYTES="$EXACT_MIN_BYTES") ;;
    *) die "unknown label $label (blind, aware, aware-exact)" ;;
  esac
  local api metrics
  start_ramjet "$WORK/$label-$rep.err" "${env[@]}"
  agent_bench_args
  log "repeat $rep: $label ($ENGINES engines x $RANKS ranks)"
  nice "$BENCH" --target "http://$api" "${AGENT_ARGS[@]}" --duration "$DURATION" --seed $((7 + rep)) \
    --label "$label" --out-json "$WORK/$label-$rep.json" --quiet || true
  [[ -s $WORK/$label-$rep.json ]] || die "$label: ramjet-bench wrote no report"
  curl -s "http://$metrics/metrics" >"$WORK/$label-$rep.metrics" || true
  stop_pids
}

read -r -a labels <<<"$LABELS"
for ((rep = 1; rep <= REPEATS; rep++)); do
  for label in "${labels[@]}"; do run "$label" "$rep"; done
done

median_table data_parallel run "# Data-parallel ranks (issue 28): rank-aware ramjet vs rank-blind" \
  "commit $COMMIT; $ENGINES ramjet-sim $PRESET at ${SPEED}x, --data-parallel-size $RANKS each (KV pool ${KV_BLOCKS:-full} blocks per rank); workload: ramjet-bench shared-prefix, $APPS apps x $PREFIX_KIB KiB, $TURNS turns, $USER_WORDS user words, max_tokens $MAX_TOKENS, concurrency $CONCURRENCY, ${DURATION}s; $REPEATS repeat(s), medians" \
  "${labels[@]}"
