#!/usr/bin/env bash
# parking.sh: engine-seconds awake over a day-shaped trace, with ramjet's idle drain (engine
# parking, RJ_IDLE_DRAIN_*) and without, and what the wakes cost in TTFT (issue 30).
# A day of traffic is replayed in DAY_SECONDS (an "hour" is DAY_SECONDS/24 s): arrivals are a
# Poisson process whose rate follows a working day (TROUGH_RPS through the night, rising from 06:00
# to PEAK_RPS in the afternoon, back down by 22:00); each request's shape and shared prefix blocks
# come, in order, from the Mooncake conversation trace (../shared/traces, input capped at
# MAX_INPUT tokens, output at MAX_OUTPUT). ENGINES ramjet-sim engines in vLLM sleep mode
# (--enable-sleep-mode, wake time WAKE_MS virtual ms). Labels:
#   parking     RJ_IDLE_DRAIN_MODE=drain, release=utilization: an engine quiet for IDLE_AFTER s
#               is drained and put to sleep (level 1), down to one warm engine; woken when the
#               requests in flight per warm engine pass RESUME_LOAD, or when a request finds its
#               pool with no warm engine
#   always-on   the same ramjet without the idle drain
# Engine-seconds awake: each engine's GET /is_sleeping sampled every 0.5 s. TTFT per "hour" from
# ramjet-bench's --timeline. Requests that waited for a wake: the journal's queue_reason=wake.
# Prints Markdown and writes bench/results/parking-<UTC>.{md,json}.
#
# Usage: bench/parking.sh [--no-build]
# Environment:
#   ENGINES=4 PRESET=qwen3.8-27b-tp4 SPEED=6 DAY_SECONDS=240 PEAK_RPS=3 TROUGH_RPS=0.05
#   MAX_INPUT=4096 MAX_OUTPUT=64 WAKE_MS=6000 IDLE_AFTER=5 RESUME_LOAD=2 SEED=1
#   LABELS="parking always-on" BUILD_DIR=build/release BIN_DIR (ramjet, ramjet-sim, ramjet-bench)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args parking "$@"
ENGINES=${ENGINES:-4}
PRESET=${PRESET:-qwen3.8-27b-tp4}
SPEED=${SPEED:-6}
DAY_SECONDS=${DAY_SECONDS:-240}
PEAK_RPS=${PEAK_RPS:-3}
TROUGH_RPS=${TROUGH_RPS:-0.05}
MAX_INPUT=${MAX_INPUT:-4096}
MAX_OUTPUT=${MAX_OUTPUT:-64}
WAKE_MS=${WAKE_MS:-6000}
IDLE_AFTER=${IDLE_AFTER:-5}
RESUME_LOAD=${RESUME_LOAD:-2}
SEED=${SEED:-1}
LABELS=${LABELS:-parking always-on}
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
TRACE_SRC=${TRACE_SRC:-$ROOT/../shared/traces/mooncake_conversation_trace.jsonl}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD)}
cd "$ROOT"
[[ -r $TRACE_SRC ]] || die "no trace at $TRACE_SRC (TRACE_SRC)"
bench_binaries
bench_workdir parking

# The day: arrivals by thinning a Poisson process at the peak rate; shapes from the source trace.
python3 - "$TRACE_SRC" "$WORK/day.jsonl" "$DAY_SECONDS" "$PEAK_RPS" "$TROUGH_RPS" "$MAX_INPUT" "$MAX_OUTPUT" "$SEED" <<'EOF'
import json, math, random, sys
src, out, day_s, peak, trough, max_in, max_out, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
    float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
shapes = [json.loads(l) for l in open(src) if l.strip()]
rnd = random.Random(seed)
def rate(t):  # requests per second at t seconds into the compressed day
    h = 24.0 * t / day_s
    if 6.0 <= h <= 22.0:
        return trough + (peak - trough) * math.sin(math.pi * (h - 6.0) / 16.0) ** 2
    return trough
t, k, lines = 0.0, 0, []
while True:
    t += rnd.expovariate(peak)
    if t >= day_s:
        break
    if rnd.random() * peak > rate(t):
        continue
    s = shapes[k % len(shapes)]
    k += 1
    n_in = min(s["input_length"], max_in)
    blocks = max(1, math.ceil(n_in / 512))
    lines.append(json.dumps({"timestamp": round(t * 1000.0, 1), "input_length": n_in,
                             "output_length": max(1, min(s["output_length"], max_out)),
                             "hash_ids": s["hash_ids"][:blocks]}))
open(out, "w").write("\n".join(lines) + "\n")
print(f"day trace: {len(lines)} requests over {day_s:.0f} s", file=sys.stderr)
EOF

export VLLM_SERVER_DEV_MODE=1  # the sims' sleep endpoints, as vLLM's
SIM_EXTRA=(--enable-sleep-mode --wake-ms "$WAKE_MS")
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done
HOUR=$(python3 -c "print($DAY_SECONDS / 24)")

start_ramjet() {  # start_ramjet NAME ENV... -> api, metrics
  local name=$1
  shift
  local upstreams
  upstreams=$(IFS=,; echo "${engines[*]}")
  env RJ_UPSTREAM="$upstreams" RJ_LISTEN=127.0.0.1:0 RJ_METRICS_LISTEN=127.0.0.1:0 RJ_PROBE_INTERVAL_MS=500 \
    RJ_ROUTE_JOURNAL=true RJ_ROUTE_JOURNAL_FILE="$WORK/$name.journal" "$@" "$RAMJET" 2>"$WORK/$name.err" &
  pids+=($!)
  api=$(wait_grep "$WORK/$name.err" 'api=[0-9.]+:[0-9]+' | cut -d= -f2) || die "$name: ramjet did not start"
  metrics=$(wait_grep "$WORK/$name.err" 'metrics=[0-9.]+:[0-9]+' | cut -d= -f2)
  wait_ramjet_ready "$api" || die "$name: engines not healthy within 15 s"
}

sample_awake() {  # sample_awake FILE: one line per 0.5 s: the number of engines awake
  local out=$1 e n
  while :; do
    n=0
    for e in "${engines[@]}"; do
      curl -s -m 0.4 "$e/is_sleeping" | grep -q '"is_sleeping": *false' && n=$((n + 1))
    done
    echo "$n" >>"$out"
    sleep 0.5
  done
}

read -r -a labels <<<"$LABELS"
for label in "${labels[@]}"; do
  start_sims "${FLEET[@]}"
  case $label in
    parking)
      start_ramjet "$label" RJ_IDLE_DRAIN_MODE=drain RJ_IDLE_DRAIN_RELEASE=utilization \
        RJ_IDLE_DRAIN_UPSTREAM_IDLE_AFTER_SECONDS="$IDLE_AFTER" RJ_IDLE_DRAIN_MIN_WARM=1 \
        RJ_IDLE_DRAIN_MAX_PARKED=$((ENGINES - 1)) RJ_IDLE_DRAIN_COOLDOWN_SECONDS=1 RJ_IDLE_DRAIN_GRACE_SECONDS=1 \
        RJ_IDLE_DRAIN_INTERVAL_SECONDS=0.25 RJ_IDLE_DRAIN_RESUME_LOAD_PER_REPLICA="$RESUME_LOAD" \
        RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS=30 ;;
    always-on) start_ramjet "$label" ;;
    *) die "unknown label $label (parking, always-on)" ;;
  esac
  : >"$WORK/$label.awake"
  sample_awake "$WORK/$label.awake" &
  pids+=($!)
  log "$label: the day in ${DAY_SECONDS}s"
  nice "$BENCH" --target "http://$api" --workload trace --trace "$WORK/day.jsonl" --timeline "$HOUR" \
    --label "$label" --out-json "$WORK/all.json" --append --quiet || true
  curl -s "http://$metrics/metrics" >"$WORK/$label.metrics" || true
  sleep 0.5  # (the journal's writer flushes every 200 ms)
  stop_pids
done

mkdir -p "$RESULTS_DIR"
stem=$RESULTS_DIR/parking-$(date -u +%Y-%m-%d-%H%M%S)
python3 - "$WORK" "$stem" "$ENGINES" "$DAY_SECONDS" "$LABELS" <<EOF
import json, re, statistics, sys
work, stem, engines, day_s, labels = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5].split()
runs = {r["label"]: r for r in json.load(open(f"{work}/all.json"))["runs"]}
def metric(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        m = re.match(r'^' + re.escape(name) + r'(\{[^}]*\})? (\S+)$', line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            total += float(m.group(2))
    return total
def pct(xs, p):
    xs = sorted(xs)
    if not xs: return float("nan")
    i = (len(xs) - 1) * p / 100.0
    lo = int(i); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)
rows, out = [], {}
for label in labels:
    if label not in runs: continue
    step = runs[label]["steps"][0]
    samples = [int(l) for l in open(f"{work}/{label}.awake") if l.strip()]
    awake_s = sum(samples) * 0.5
    span_s = len(samples) * 0.5
    text = open(f"{work}/{label}.metrics").read()
    wakes = metric(text, "ramjet_engine_park_actions_total", action="wake", outcome="ok")
    sleeps = metric(text, "ramjet_engine_park_actions_total", action="sleep", outcome="ok")
    wake_sum = metric(text, "ramjet_engine_park_action_seconds_sum", action="wake")
    finishes = [json.loads(l) for l in open(f"{work}/{label}.journal") if '"finish"' in l]
    waited = [f["queue_ms"] for f in finishes if f.get("queue_reason") == "wake"]
    out[label] = {"awake_engine_s": awake_s, "span_s": span_s, "awake_share": awake_s / (engines * span_s) if span_s else None,
                  "ok": step["ok"], "errors": step["errors"], "ttft_p50_ms": step["ttft_p50_ms"],
                  "ttft_p95_ms": step["ttft_p95_ms"], "ttft_p99_ms": step["ttft_p99_ms"],
                  "wakes": wakes, "sleeps": sleeps, "wake_s_mean": wake_sum / wakes if wakes else None,
                  "waited_for_wake": len(waited), "wake_wait_p95_ms": pct(waited, 95) if waited else None,
                  "timeline": step.get("timeline", [])}
    o = out[label]
    rows.append(f"| {label} | {awake_s:.0f} of {engines * span_s:.0f} ({100 * o['awake_share']:.0f} %) | {o['ok']} / {o['errors']} | "
                f"{o['ttft_p50_ms']:.0f} / {o['ttft_p95_ms']:.0f} / {o['ttft_p99_ms']:.0f} | {int(sleeps)} / {int(wakes)} | "
                + (f"{o['wake_s_mean']:.2f}" if o['wake_s_mean'] else "—") + f" | {len(waited)}"
                + (f" (p95 {o['wake_wait_p95_ms']:.0f} ms)" if waited else "") + " |")
lines = ["# Engine-seconds awake over a day-shaped trace: ramjet's idle drain (issue 30)", "",
         "commit $COMMIT; $ENGINES ramjet-sim $PRESET at ${SPEED}x in sleep mode (wake $WAKE_MS virtual ms); a day in "
         "${DAY_SECONDS} s (Poisson arrivals, $TROUGH_RPS req/s at night to $PEAK_RPS req/s in the afternoon; Mooncake "
         "conversation shapes, input <= $MAX_INPUT, output <= $MAX_OUTPUT tokens); parking: idle after ${IDLE_AFTER} s, "
         "min warm 1, resume at $RESUME_LOAD in flight per warm engine", "",
         "| label | engine-seconds awake | ok / errors | TTFT p50 / p95 / p99 ms | sleeps / wakes | wake s (mean) | requests that waited for a wake |",
         "|---|---:|---:|---:|---:|---:|---:|"] + rows
if all(l in out for l in ("parking", "always-on")):
    p, a = out["parking"], out["always-on"]
    lines += ["", f"parking / always-on: engine-seconds awake {p['awake_engine_s'] / a['awake_engine_s']:.2f}x, "
              f"TTFT p95 {p['ttft_p95_ms'] / a['ttft_p95_ms']:.2f}x, p99 {p['ttft_p99_ms'] / a['ttft_p99_ms']:.2f}x"]
    lines += ["", "TTFT p95 ms by hour of the day (by completion time):", "",
              "| hour | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
    n = max(len(out[l]["timeline"]) for l in labels)
    for h in range(n):
        cells = []
        for l in labels:
            tl = out[l]["timeline"]
            w = tl[h] if h < len(tl) else None
            cells.append("—" if not w or w["ttft_p95_ms"] is None else f"{w['ttft_p95_ms']:.0f} ({w['ok']})")
        lines.append(f"| {h:02d} | " + " | ".join(cells) + " |")
open(stem + ".md", "w").write("\n".join(lines) + "\n")
json.dump(out, open(stem + ".json", "w"), indent=1)
print("\n".join(lines))
print(f"\n(written to {stem}.md)")
EOF
