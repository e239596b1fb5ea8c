#!/usr/bin/env bash
# adapters.sh: issue 29's adapter term, one ramjet per label on fresh sims, the same workload:
#   aware   RJ_ROUTE_ADAPTER_LOAD_UNITS=2 (the default): an adapter request is charged where its
#           adapter is not active (2 load units with a free slot, 4 where every slot is taken)
#   blind   RJ_ROUTE_ADAPTER_LOAD_UNITS=0: adapters placed as base-model requests
# ENGINES ramjet-sim engines each serve ADAPTERS LoRA adapters of one base model with MAX_LORAS
# slots (--max-loras: a waiting request of another adapter while every slot holds a running
# adapter waits until one drains, as vLLM's scheduler skips it); the demo's agent workload
# (bench/lib.sh agent_workload_defaults), each conversation on one adapter (ramjet-bench --model
# with the adapters' names: the k-th conversation takes the (k mod ADAPTERS)-th). REPEATS runs per
# label, the label order alternating run by run; medians.
#
# Usage: bench/adapters.sh [--no-build]
# Environment:
#   ENGINES=4 ADAPTERS=8 MAX_LORAS=2 APPS=4 PREFIX_KIB=24 CONCURRENCY=32 TURNS=10 USER_WORDS=2048 MAX_TOKENS=64
#   DURATION=40 REPEATS=2 LABELS="aware blind" SPEED=6 BUILD_DIR=build/release BIN_DIR
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args adapters "$@"
ADAPTERS=${ADAPTERS:-8} MAX_LORAS=${MAX_LORAS:-2}
DURATION=${DURATION:-40}
REPEATS=${REPEATS:-2}
LABELS=${LABELS:-aware blind}
agent_workload_defaults
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD)}
cd "$ROOT"
bench_binaries
bench_workdir adapters

names=()
for ((a = 0; a < ADAPTERS; a++)); do names+=("lora$a"); done
modules=()
for n in "${names[@]}"; do modules+=("$n=/adapters/$n"); done
[[ -n $KV_BLOCKS ]] && SIM_EXTRA+=(--num-gpu-blocks-override "$KV_BLOCKS")
SIM_EXTRA+=(--max-loras "$MAX_LORAS" --lora-modules "${modules[@]}")
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done
MODELS=$(IFS=,; echo "${names[*]}")

run() {  # run LABEL REPEAT
  local label=$1 rep=$2 env=()
  start_sims "${FLEET[@]}"
  env=(RJ_UPSTREAM="$(IFS=,; echo "${engines[*]}")" RJ_ENGINE_SCRAPE_INTERVAL_MS=500)
  case $label in
    aware) env+=(RJ_ROUTE_ADAPTER_LOAD_UNITS=2) ;;
    blind) env+=(RJ_ROUTE_ADAPTER_LOAD_UNITS=0) ;;
    *) die "unknown label $label (aware, blind)" ;;
  esac
  local api metrics
  start_ramjet "$WORK/$label-$rep.err" "${env[@]}"
  # ramjet learns the adapters from the engines' GET /v1/models (every 5 s).
  for _ in $(seq 100); do
    curl -s "http://$api/v1/models" | grep -q "\"${names[-1]}\"" && break
    sleep 0.1
  done
  agent_bench_args
  log "repeat $rep: $label"
  nice "$BENCH" --target "http://$api" --model "$MODELS" "${AGENT_ARGS[@]}" --duration "$DURATION" \
    --seed $((11 + rep)) --label "$label" --out-json "$WORK/$label-$rep.json" --quiet || true
  [[ -s $WORK/$label-$rep.json ]] || die "$label: ramjet-bench wrote no report"
  curl -s "http://$metrics/metrics" >"$WORK/$label-$rep.metrics" || true
  stop_pids
}

read -r -a labels <<<"$LABELS"
run_alternating "${labels[@]}"

median_table adapters label "# LoRA adapters as a score term (issue 29): RJ_ROUTE_ADAPTER_LOAD_UNITS" \
  "commit $COMMIT; $ENGINES ramjet-sim $PRESET at ${SPEED}x (KV pool ${KV_BLOCKS:-full} blocks), each serving $ADAPTERS LoRA adapters with --max-loras $MAX_LORAS; workload: ramjet-bench shared-prefix, $APPS app(s) x $PREFIX_KIB KiB system prompt, $TURNS turns, $USER_WORDS user words, max_tokens $MAX_TOKENS, concurrency $CONCURRENCY, each conversation on one of the $ADAPTERS adapters, ${DURATION}s; $REPEATS repeat(s), medians" \
  "${labels[@]}"

# What the charge did: decisions by outcome (aware: `adapter` where the charge moved one).
for label in "${labels[@]}"; do
  for ((rep = 1; rep <= REPEATS; rep++)); do
    printf '%s-%s: ' "$label" "$rep"
    grep '^ramjet_route_decisions_total' "$WORK/$label-$rep.metrics" | sed 's/ramjet_route_decisions_total//' | tr '\n' ' '
    echo
  done
done | tee -a "$(ls -t "$RESULTS_DIR"/adapters-*.md | head -n1)"
