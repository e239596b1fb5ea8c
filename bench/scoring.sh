#!/usr/bin/env bash
# scoring.sh: issue 29's scoring terms, one ramjet per label on fresh sims, the same workload:
#   absolute          today's defaults
#   relative          RJ_ROUTE_CREDIT_BASIS=relative: credit measured down from the warmest engine
#   horizon           RJ_ROUTE_HORIZON=auto: no credit past an engine's eviction horizon
#   relative-horizon  both
# The workload is where they matter: one app's sessions share a system prompt longer than the
# affinity cap (PREFIX_KIB KiB at the default 2 KiB chunks is more than RJ_ROUTE_MAX_OVERLAP_BLOCKS=32
# blocks: under absolute credit every engine holding it earns the full cap and load alone places
# each turn), and long sessions overflow the engines' KV pools (KV_BLOCKS), so the index remembers
# prefixes the engines evicted.
# ENGINES ramjet-sim engines (KV_BLOCKS each: conversations overflow the GPU pool), the demo's
# agent workload otherwise (bench/lib.sh agent_workload_defaults), REPEATS runs per label, the
# label order alternating run by run; medians.
#
# Usage: bench/scoring.sh [--no-build]
# Environment:
#   ENGINES=4 APPS=1 PREFIX_KIB=96 CONCURRENCY=16 SESSIONS=64 TURNS=8 USER_WORDS=1024 MAX_TOKENS=64 KV_BLOCKS=128
#   DURATION=40 REPEATS=2 LABELS="absolute relative horizon relative-horizon" SPEED=6 BUILD_DIR=build/release BIN_DIR
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args scoring "$@"
ENGINES=${ENGINES:-4}
APPS=${APPS:-1} PREFIX_KIB=${PREFIX_KIB:-96} CONCURRENCY=${CONCURRENCY:-16} SESSIONS=${SESSIONS:-64} TURNS=${TURNS:-8}
USER_WORDS=${USER_WORDS-1024} KV_BLOCKS=${KV_BLOCKS-128}
DURATION=${DURATION:-40}
REPEATS=${REPEATS:-2}
LABELS=${LABELS:-absolute relative horizon relative-horizon}
agent_workload_defaults
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD)}
cd "$ROOT"
bench_binaries
bench_workdir scoring

[[ -n $KV_BLOCKS ]] && SIM_EXTRA+=(--num-gpu-blocks-override "$KV_BLOCKS")
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done

run() {  # run LABEL REPEAT
  local label=$1 rep=$2 env=()
  start_sims "${FLEET[@]}"
  local upstreams
  upstreams=$(IFS=,; echo "${engines[*]}")
  env=(RJ_UPSTREAM="$upstreams")
  case $label in
    absolute) ;;
    relative) env+=(RJ_ROUTE_CREDIT_BASIS=relative) ;;
    horizon) env+=(RJ_ROUTE_HORIZON=auto) ;;
    relative-horizon) env+=(RJ_ROUTE_CREDIT_BASIS=relative RJ_ROUTE_HORIZON=auto) ;;
    *) die "unknown label $label (absolute, relative, horizon, relative-horizon)" ;;
  esac
  local api metrics
  start_ramjet "$WORK/$label-$rep.err" "${env[@]}"
  agent_bench_args
  AGENT_ARGS+=(--sessions "$SESSIONS")  # more conversations than in flight: a turn's engine is not the idlest by default
  log "repeat $rep: $label"
  nice "$BENCH" --target "http://$api" "${AGENT_ARGS[@]}" --duration "$DURATION" --seed $((11 + rep)) \
    --label "$label" --out-json "$WORK/$label-$rep.json" --quiet || true
  [[ -s $WORK/$label-$rep.json ]] || die "$label: ramjet-bench wrote no report"
  curl -s "http://$metrics/metrics" >"$WORK/$label-$rep.metrics" || true
  stop_pids
}

read -r -a labels <<<"$LABELS"
for ((rep = 1; rep <= REPEATS; rep++)); do
  order=("${labels[@]}")
  if ((rep % 2 == 0)); then order=(); for ((k = ${#labels[@]} - 1; k >= 0; k--)); do order+=("${labels[k]}"); done; fi
  for label in "${order[@]}"; do run "$label" "$rep"; done
done

median_table scoring label "# Scoring terms (issue 29): credit basis (RJ_ROUTE_CREDIT_BASIS) and fingerprint horizon (RJ_ROUTE_HORIZON)" \
  "commit $COMMIT; $ENGINES ramjet-sim $PRESET at ${SPEED}x (KV pool ${KV_BLOCKS:-full} blocks); workload: ramjet-bench shared-prefix, $APPS app(s) x $PREFIX_KIB KiB system prompt (over the 32-block cap at 2 KiB chunks), $TURNS turns, $USER_WORDS user words, max_tokens $MAX_TOKENS, $SESSIONS conversations at concurrency $CONCURRENCY, ${DURATION}s; $REPEATS repeat(s), medians" \
  "${labels[@]}"
