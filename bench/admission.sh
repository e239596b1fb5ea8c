#!/usr/bin/env bash
# admission.sh: goodput against offered load, with and without ramjet's waiting room (issue 30).
# ENGINES ramjet-sim engines, each running at most MAX_NUM_SEQS sequences. First the fleet's
# capacity C (requests per second, closed loop at twice the fleet's sequence slots, through a
# plain ramjet); then, for each label, fresh engines and a fresh ramjet, and an open-loop ladder of
# Poisson arrival rates FACTORS x C, each for DURATION seconds:
#   room          RJ_ADMISSION_ENGINE_MAX_INFLIGHT=MAX_NUM_SEQS and RJ_ADMISSION_QUEUE_TIMEOUT_MS=
#                 TARGET_MS: excess requests wait in ramjet, and one that could not start within the
#                 target is refused (429) at once instead of waiting in an engine's queue
#   no-room       ramjet as it is by default (prefix routing, no waiting room)
#   round-robin   RJ_AFFINITY=round_robin, no waiting room: a plain proxy
# Goodput: requests whose first token came within TARGET_MS, per second (ramjet-bench
# --ttft-target-ms); a refusal counts as a miss. Prints Markdown and writes
# bench/results/admission-<UTC>.{md,svg,json}.
#
# Usage: bench/admission.sh [--no-build]
# Environment:
#   ENGINES=2 MAX_NUM_SEQS=8 PRESET=qwen3.8-27b-tp4 SPEED=6 PROMPT_KIB=4 MAX_TOKENS=128
#   FACTORS="0.5 1 1.5 2 3" DURATION=20 TARGET_MS=1000 LABELS="room no-room round-robin"
#   BUILD_DIR=build/release   BIN_DIR (a folder with ramjet, ramjet-sim, ramjet-bench)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args admission "$@"
ENGINES=${ENGINES:-2}
MAX_NUM_SEQS=${MAX_NUM_SEQS:-8}
PRESET=${PRESET:-qwen3.8-27b-tp4}
SPEED=${SPEED:-6}
PROMPT_KIB=${PROMPT_KIB:-4}
MAX_TOKENS=${MAX_TOKENS:-128}
FACTORS=${FACTORS:-0.5 1 1.5 2 3}
DURATION=${DURATION:-20}
TARGET_MS=${TARGET_MS:-1000}
LABELS=${LABELS:-room no-room round-robin}
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD)}
cd "$ROOT"
bench_binaries
bench_workdir admission

SIM_EXTRA=(--max-num-seqs "$MAX_NUM_SEQS")
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done
WORKLOAD=(--workload unique --prompt-kib "$PROMPT_KIB" --max-tokens "$MAX_TOKENS" --ignore-eos)

start_ramjet() {  # start_ramjet NAME ENV... -> api
  local name=$1
  shift
  local upstreams
  upstreams=$(IFS=,; echo "${engines[*]}")
  env RJ_UPSTREAM="$upstreams" RJ_LISTEN=127.0.0.1:0 RJ_METRICS_LISTEN=127.0.0.1:0 "$@" "$RAMJET" \
    2>"$WORK/$name.err" &
  pids+=($!)
  api=$(wait_grep "$WORK/$name.err" 'api=[0-9.]+:[0-9]+' | cut -d= -f2) || die "$name: ramjet did not start"
  metrics=$(wait_grep "$WORK/$name.err" 'metrics=[0-9.]+:[0-9]+' | cut -d= -f2)
  wait_ramjet_ready "$api" || die "$name: engines not healthy within 15 s"
}

# The fleet's capacity: closed loop at twice its sequence slots.
start_sims "${FLEET[@]}"
start_ramjet capacity
slots=$((ENGINES * MAX_NUM_SEQS))
log "capacity: closed loop at $((2 * slots)) in flight, ${DURATION}s"
nice "$BENCH" --target "http://$api" "${WORKLOAD[@]}" --concurrency $((2 * slots)) --duration "$DURATION" \
  --label capacity --out-json "$WORK/capacity.json" --quiet || true
[[ -s $WORK/capacity.json ]] || die "capacity: ramjet-bench wrote no report"
stop_pids
CAPACITY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["steps"][0]["req_s"])' "$WORK/capacity.json")
RATES=$(python3 -c 'import sys; c=float(sys.argv[1]); print(",".join(f"{c*float(f):.2f}" for f in sys.argv[2:]))' "$CAPACITY" $FACTORS)
log "capacity $CAPACITY req/s; rates $RATES"

read -r -a labels <<<"$LABELS"
for label in "${labels[@]}"; do
  start_sims "${FLEET[@]}"
  case $label in
    room) start_ramjet "$label" RJ_ADMISSION_ENGINE_MAX_INFLIGHT="$MAX_NUM_SEQS" RJ_ADMISSION_QUEUE_TIMEOUT_MS="$TARGET_MS" ;;
    no-room) start_ramjet "$label" ;;
    round-robin) start_ramjet "$label" RJ_AFFINITY=round_robin ;;
    *) die "unknown label $label (room, no-room, round-robin)" ;;
  esac
  log "$label: rates $RATES, ${DURATION}s each"
  nice "$BENCH" --target "http://$api" "${WORKLOAD[@]}" --rate "$RATES" --duration "$DURATION" \
    --ttft-target-ms "$TARGET_MS" --label "$label" --out-json "$WORK/all.json" --append --quiet || true
  curl -s "http://$metrics/metrics" >"$WORK/$label.metrics" || true
  stop_pids
done

mkdir -p "$RESULTS_DIR"
stem=$RESULTS_DIR/admission-$(date -u +%Y-%m-%d-%H%M%S)
cp "$WORK/all.json" "$stem.json"
"$BENCH" compare "$stem.json" --out-md "$WORK/compare.md" --out-svg "$stem.svg" >/dev/null
python3 - "$stem.json" "$stem.md" "$CAPACITY" "$WORK/compare.md" <<EOF
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
capacity = float(sys.argv[3])
lines = ["# Goodput against offered load: ramjet's waiting room (issue 30)", "",
         "commit $COMMIT; $ENGINES ramjet-sim $PRESET at ${SPEED}x, --max-num-seqs $MAX_NUM_SEQS each; workload: unique "
         "$PROMPT_KIB KiB prompts, max_tokens $MAX_TOKENS (ignore_eos), Poisson arrivals, ${DURATION}s per rate; "
         f"capacity {capacity:.2f} req/s (closed loop); TTFT target $TARGET_MS ms", "",
         "| load | " + " | ".join(f"{r['label']} goodput req/s (TTFT met %)" for r in runs) + " | "
         + " | ".join(f"{r['label']} TTFT p95 ms" for r in runs) + " | " + " | ".join(f"{r['label']} errors" for r in runs) + " |",
         "|---:|" + "---:|" * (3 * len(runs))]
for i, step in enumerate(runs[0]["steps"]):
    cells = [f"{step['x'] / capacity:.1f}x ({step['x']:.1f}/s)"]
    cells += [f"{r['steps'][i]['goodput_req_s']:.2f} ({r['steps'][i]['attainment_pct']:.0f} %)" for r in runs]
    cells += [f"{r['steps'][i]['ttft_p95_ms']:.0f}" for r in runs]
    cells += [str(r['steps'][i]['errors']) for r in runs]
    lines.append("| " + " | ".join(cells) + " |")
text = "\n".join(lines) + "\n\n" + open(sys.argv[4]).read()
open(sys.argv[2], "w").write(text)
print("\n".join(lines))
print(f"\n(written to {sys.argv[2]}, plot {sys.argv[2][:-3]}.svg)")
EOF
