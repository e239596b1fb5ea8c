#!/usr/bin/env bash
# decode_cost.sh: issue 29's decode profile as a cost, one ramjet per label on fresh sims, the same
# workload, on a mixed fleet: 2 ramjet-sim MTP_PRESET (speculative MTP decoding; ordinals 0, 1) and
# 2 ramjet-sim PRESET (standard decoding; ordinals 2, 3):
#   cost      RJ_AFFINITY=prefix RJ_ROUTE_DECODE_COST=on: each candidate is charged the expected
#             decode time of the request's output there, learned per engine from the streamed
#             responses relayed from it (no declared profiles)
#   tiebreak  RJ_AFFINITY=prefix RJ_UPSTREAM_PROFILES=mtp,mtp,standard,standard: the declared
#             profiles as a tie-break
#   blind     RJ_AFFINITY=prefix: profile-blind
# The demo's agent workload (bench/lib.sh agent_workload_defaults) with mixed output lengths:
# ramjet-bench --max-tokens MAX_TOKENS_LIST (a list: each request picks one, deterministically from
# --seed) --ignore-eos, streamed; one cell per CONCURRENCY entry (total client concurrency), REPEATS
# runs per label in each, the label order alternating run by run; medians. Each cell's table: the
# median_table columns (against blind, else the first label) plus TPOT p50, the share of requests on
# the MTP engines, the engine split (share of requests per X-Ramjet-Upstream ordinal) and the route
# outcomes (ramjet_route_decisions_total by outcome); then what ramjet learned, every run's
# ramjet_route_decode_* gauges (absent unless RJ_ROUTE_DECODE_COST=on; times in wall-clock seconds,
# the sims' virtual time runs SPEED x faster). About 3 cells x 3 labels x 2 repeats x ~50 s: 15 min.
#
# Usage: bench/decode_cost.sh [--no-build]
# Environment:
#   CONCURRENCY=1,8,32 MAX_TOKENS_LIST=64,128,256,512,1024 APPS=4 PREFIX_KIB=24 TURNS=10 USER_WORDS=2048
#   SESSIONS= (conversations; empty: the concurrency) KV_BLOCKS=384 (empty: the presets' pools)
#   PRESET=qwen3.8-27b-tp4 MTP_PRESET=qwen3.8-27b-tp4-mtp3
#   DURATION=40 REPEATS=2 LABELS="cost tiebreak blind" SPEED=6 BUILD_DIR=build/release BIN_DIR
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args decode_cost "$@"
CONCURRENCY=${CONCURRENCY:-1,8,32}
MAX_TOKENS_LIST=${MAX_TOKENS_LIST:-64,128,256,512,1024}
MTP_PRESET=${MTP_PRESET:-qwen3.8-27b-tp4-mtp3}
SESSIONS=${SESSIONS:-}
DURATION=${DURATION:-40}
REPEATS=${REPEATS:-2}
LABELS=${LABELS:-cost tiebreak blind}
agent_workload_defaults
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
if [[ -z ${COMMIT:-} ]]; then
  COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
  git -C "$ROOT" diff --quiet HEAD -- src sim bench/loadgen 2>/dev/null || COMMIT+=" (+ uncommitted changes in the tree)"
fi
cd "$ROOT"
bench_binaries
bench_workdir decode_cost

[[ -n $KV_BLOCKS ]] && SIM_EXTRA+=(--num-gpu-blocks-override "$KV_BLOCKS")
FLEET=("$MTP_PRESET" "$MTP_PRESET" "$PRESET" "$PRESET")

cell=  # the concurrency of the runs under way
run() {  # run LABEL REPEAT
  local label=$1 rep=$2 env=() name="c$cell-$1-$2"
  start_sims "${FLEET[@]}"
  env=(RJ_UPSTREAM="$(IFS=,; echo "${engines[*]}")" RJ_AFFINITY=prefix)
  case $label in
    cost) env+=(RJ_ROUTE_DECODE_COST=on) ;;
    tiebreak) env+=("RJ_UPSTREAM_PROFILES=mtp,mtp,standard,standard") ;;
    blind) ;;
    *) die "unknown label $label (cost, tiebreak, blind)" ;;
  esac
  local api metrics
  start_ramjet "$WORK/$name.err" "${env[@]}"
  local CONCURRENCY=$cell MAX_TOKENS=$MAX_TOKENS_LIST  # agent_bench_args reads them
  agent_bench_args
  [[ -n $SESSIONS ]] && AGENT_ARGS+=(--sessions "$SESSIONS")
  log "concurrency $cell, repeat $rep: $label"
  nice "$BENCH" --target "http://$api" "${AGENT_ARGS[@]}" --duration "$DURATION" --seed $((11 + rep)) \
    --label "$label" --out-json "$WORK/$name.json" --quiet || true
  [[ -s $WORK/$name.json ]] || die "$label: ramjet-bench wrote no report"
  curl -s "http://$metrics/metrics" >"$WORK/$name.metrics" || true
  stop_pids
}

read -r -a labels <<<"$LABELS"
IFS=, read -r -a cells <<<"$CONCURRENCY"
for cell in "${cells[@]}"; do run_alternating "${labels[@]}"; done

mkdir -p "$RESULTS_DIR"
out=$RESULTS_DIR/decode_cost-$(date -u +%Y-%m-%d-%H%M%S).md
description="commit $COMMIT ($("$RAMJET" --version 2>/dev/null | head -n1)); 2 ramjet-sim $MTP_PRESET (ordinals 0, 1) + 2 $PRESET (2, 3) at ${SPEED}x (KV pool ${KV_BLOCKS:-full} blocks); workload: ramjet-bench shared-prefix, $APPS app(s) x $PREFIX_KIB KiB system prompt, $TURNS turns, $USER_WORDS user words, max_tokens $MAX_TOKENS_LIST (one per request) with ignore_eos, streamed, ${SESSIONS:-as many conversations as the concurrency}${SESSIONS:+ conversations}, ${DURATION}s; $REPEATS repeat(s), medians"
python3 - "$WORK" "$REPEATS" "$out" "$description" "$CONCURRENCY" "$SPEED" "${labels[@]}" <<'PY'
import json, re, statistics, sys
work, repeats, out, description, cells, speed = sys.argv[1], int(sys.argv[2]), *sys.argv[3:7]
labels = sys.argv[7:]
cells = cells.split(",")
base = "blind" if "blind" in labels else labels[0]
med = statistics.median

def samples(text, family):  # {the value of the sample's one label (or ""): value} of a family's samples
    return {(re.sub(r'^\w+="(.*)"$', r"\1", m.group(1)) if m.group(1) else ""): float(m.group(2))
            for m in re.finditer(r"^" + family + r"(?:\{([^}]*)\})? (\S+)$", text, re.M)}

lines = ["# Decode profile as a cost (issue 29): RJ_ROUTE_DECODE_COST", "", description, "",
         "Labels: cost = RJ_AFFINITY=prefix RJ_ROUTE_DECODE_COST=on; tiebreak = RJ_AFFINITY=prefix "
         "RJ_UPSTREAM_PROFILES=mtp,mtp,standard,standard; blind = RJ_AFFINITY=prefix. Engine split: share of "
         "requests per X-Ramjet-Upstream ordinal (0, 1 MTP; 2, 3 standard), medians; route outcomes: "
         "ramjet_route_decisions_total by outcome, medians."]
gauges = ["", "## What ramjet learned (RJ_ROUTE_DECODE_COST)", "",
          f"Every run's ramjet_route_decode_* gauges at its end (wall-clock seconds: the sims run {speed}x virtual "
          "time; ordinals 0, 1 MTP, 2, 3 standard); absent where the setting is off or nothing was fitted.", ""]
for c in cells:
    steps = {l: [json.load(open(f"{work}/c{c}-{l}-{r}.json"))["runs"][0]["steps"][0] for r in range(1, repeats + 1)]
             for l in labels}
    def m(l, k): return med(s[k] for s in steps[l])
    lines += ["", f"## Concurrency {c}", "",
              f"| label | ok | errors | out tok/s | vs {base} | TTFT p50 ms | TTFT p95 ms | TPOT p50 ms | cached % "
              "| MTP share % | engine split | route outcomes |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for l in labels:
        shares = []  # per repeat: {ordinal: share}
        for s in steps[l]:
            e = s.get("engines", {})
            tot = sum(e.values()) or 1
            shares.append({k: 100.0 * v / tot for k, v in e.items()})
        keys = sorted({k for sh in shares for k in sh}, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))
        split = " ".join(f"{k}:{med(sh.get(k, 0.0) for sh in shares):.0f}%" for k in keys) or "-"
        mtp = med(sum(v for k, v in sh.items() if k in ("0", "1")) for sh in shares)
        outcomes = [samples(open(f"{work}/c{c}-{l}-{r}.metrics").read(), "ramjet_route_decisions_total")
                    for r in range(1, repeats + 1)]
        okeys = sorted({k for o in outcomes for k in o})
        route = " ".join(f"{k}:{med(o.get(k, 0.0) for o in outcomes):.0f}"
                         for k in okeys if med(o.get(k, 0.0) for o in outcomes) > 0) or "-"
        t = m(l, "output_tok_s")
        lines.append(f"| {l} | {m(l, 'ok'):.0f} | {m(l, 'errors'):.0f} | {t:.0f} | {t / m(base, 'output_tok_s'):.2f}x "
                     f"| {m(l, 'ttft_p50_ms'):.1f} | {m(l, 'ttft_p95_ms'):.1f} | {m(l, 'tpot_p50_ms'):.2f} "
                     f"| {m(l, 'cached_pct'):.1f} | {mtp:.0f} | {split} | {route} |")
        for r in range(1, repeats + 1):
            text = open(f"{work}/c{c}-{l}-{r}.metrics").read()
            parts = []
            for fam, short in (("ramjet_route_decode_seconds_per_token", "s/token"),
                               ("ramjet_route_decode_seconds_per_token_per_request", "s/token per request in flight")):
                got = samples(text, fam)
                if got:
                    parts.append(f"{short} " + " ".join(f"{k}:{v:.4g}"
                                                        for k, v in sorted(got.items())))
            share = samples(text, "ramjet_route_decode_output_share")
            if share:
                parts.append(f"output share {share.get('', 0.0):.3f}")
            gauges.append(f"- c{c} {l}-{r}: " + ("; ".join(parts) if parts else "(no ramjet_route_decode_* series)"))
lines += gauges
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print(f"\n(written to {out})")
PY
