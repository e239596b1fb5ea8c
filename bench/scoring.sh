#!/usr/bin/env bash
# scoring.sh: issue 29's scoring terms, one ramjet per label on fresh sims, the same workload:
#   absolute          RJ_ROUTE_CREDIT_BASIS=absolute (the default until 2026-12-05)
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
# On a tiered fleet (the same workload), every sim also keeps a CPU offload tier of CPU_BLOCKS
# blocks (vLLM's OffloadingConnector, KV events with medium CPU; 4x the GPU pool by default, so it
# holds most of what the pools evict) and ramjet routes on the engines' KV events (exact routing:
# RJ_KV_EVENT_LIVE/REPLAY_ENDPOINTS, RJ_EXACT_ROUTE_MODE=on, RJ_EXACT_ROUTE_MIN_BYTES=EXACT_MIN_BYTES);
# every ramjet setting of these labels is spelled out, so a changed default does not move them:
#   tiers             the shipped defaults: RJ_KV_TIER_WEIGHT_CPU=0.8 (DISK 0.3), RJ_ROUTE_CREDIT_BASIS=
#                     relative, RJ_ROUTE_HORIZON=off
#   tiers-off         RJ_KV_TIER_WEIGHT_CPU=0 RJ_KV_TIER_WEIGHT_DISK=0: CPU-held tokens earn no affinity
#   tiers-absolute    RJ_ROUTE_CREDIT_BASIS=absolute
#   tiers-horizon     RJ_ROUTE_HORIZON=auto
#   exact             the tiers settings on sims without the CPU tier (what the tier adds)
# With a tiered label in LABELS, each run also keeps every sim's /sim/stats ($label-$rep.simN.json)
# and the results file gets a second table: ramjet's CPU-tier blocks stored (ramjet_kv_tier_blocks_
# total), exact decisions (ramjet_exact_route_total), the sims' GPU prefix hits and the rest of the
# cached tokens (cached % - GPU %: loaded from the CPU tier).
#
# Usage: bench/scoring.sh [--no-build]
# Environment:
#   ENGINES=4 APPS=1 PREFIX_KIB=96 CONCURRENCY=16 SESSIONS=64 TURNS=8 USER_WORDS=1024 MAX_TOKENS=64 KV_BLOCKS=128
#   DURATION=40 REPEATS=2 LABELS="absolute relative horizon relative-horizon" SPEED=6 BUILD_DIR=build/release BIN_DIR
#   CPU_BLOCKS=512 EXACT_MIN_BYTES=8192 (tiered labels), e.g. LABELS="tiers tiers-off tiers-absolute tiers-horizon exact"
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args scoring "$@"
ENGINES=${ENGINES:-4}
APPS=${APPS:-1} PREFIX_KIB=${PREFIX_KIB:-96} CONCURRENCY=${CONCURRENCY:-16} SESSIONS=${SESSIONS:-64} TURNS=${TURNS:-8}
USER_WORDS=${USER_WORDS-1024} KV_BLOCKS=${KV_BLOCKS-128}
DURATION=${DURATION:-40}
CPU_BLOCKS=${CPU_BLOCKS:-512}
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
BASE_SIM_EXTRA=(${SIM_EXTRA[@]+"${SIM_EXTRA[@]}"})
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done

run() {  # run LABEL REPEAT
  local label=$1 rep=$2 env=() tiered=0
  SIM_EXTRA=(${BASE_SIM_EXTRA[@]+"${BASE_SIM_EXTRA[@]}"}) KV_EVENTS=0
  case $label in tiers*) tiered=1 SIM_EXTRA+=(--cpu-offload-blocks "$CPU_BLOCKS") ;; esac
  [[ $label == tiers* || $label == exact ]] && KV_EVENTS=1
  start_sims "${FLEET[@]}"
  local upstreams
  upstreams=$(IFS=,; echo "${engines[*]}")
  env=(RJ_UPSTREAM="$upstreams")
  if ((KV_EVENTS)); then
    env+=(RJ_KV_EVENT_LIVE_ENDPOINTS="$(IFS=,; echo "${kv_live[*]}")"
          RJ_KV_EVENT_REPLAY_ENDPOINTS="$(IFS=,; echo "${kv_replay[*]}")"
          RJ_EXACT_ROUTE_MODE=on RJ_EXACT_ROUTE_MIN_BYTES="$EXACT_MIN_BYTES")
  fi
  local shipped=(RJ_KV_TIER_WEIGHT_CPU=0.8 RJ_KV_TIER_WEIGHT_DISK=0.3 RJ_ROUTE_CREDIT_BASIS=relative RJ_ROUTE_HORIZON=off)
  case $label in
    absolute) env+=(RJ_ROUTE_CREDIT_BASIS=absolute) ;;
    relative) env+=(RJ_ROUTE_CREDIT_BASIS=relative) ;;
    horizon) env+=(RJ_ROUTE_HORIZON=auto) ;;
    relative-horizon) env+=(RJ_ROUTE_CREDIT_BASIS=relative RJ_ROUTE_HORIZON=auto) ;;
    tiers | exact) env+=("${shipped[@]}") ;;
    tiers-off) env+=("${shipped[@]}" RJ_KV_TIER_WEIGHT_CPU=0 RJ_KV_TIER_WEIGHT_DISK=0) ;;
    tiers-absolute) env+=("${shipped[@]}" RJ_ROUTE_CREDIT_BASIS=absolute) ;;
    tiers-horizon) env+=("${shipped[@]}" RJ_ROUTE_HORIZON=auto) ;;
    *) die "unknown label $label (absolute, relative, horizon, relative-horizon, tiers, tiers-off, tiers-absolute, tiers-horizon, exact)" ;;
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
  if ((KV_EVENTS)); then
    local i
    for i in "${!engines[@]}"; do curl -s "${engines[i]}/sim/stats" >"$WORK/$label-$rep.sim$i.json" || true; done
    ((tiered)) && ! grep -q 'tier="cpu",op="stored"' "$WORK/$label-$rep.metrics" && log "$label: ramjet saw no CPU-tier block (ramjet_kv_tier_blocks_total)"
  fi
  stop_pids
}

read -r -a labels <<<"$LABELS"
run_alternating "${labels[@]}"

heading="# Scoring terms (issue 29): credit basis (RJ_ROUTE_CREDIT_BASIS) and fingerprint horizon (RJ_ROUTE_HORIZON)"
pool="KV pool ${KV_BLOCKS:-full} blocks"
tiers=0
for label in "${labels[@]}"; do [[ $label == tiers* || $label == exact ]] && tiers=1; done
if ((tiers)); then
  heading+=", with offload tiers (RJ_KV_TIER_WEIGHT_CPU/DISK)"
  pool+="; tiers* labels: CPU offload tier $CPU_BLOCKS blocks; tiers* and exact: KV events, RJ_EXACT_ROUTE_MODE=on from $EXACT_MIN_BYTES bytes"
fi
median_table scoring label "$heading" \
  "commit $COMMIT; $ENGINES ramjet-sim $PRESET at ${SPEED}x ($pool); workload: ramjet-bench shared-prefix, $APPS app(s) x $PREFIX_KIB KiB system prompt (over the 32-block cap at 2 KiB chunks), $TURNS turns, $USER_WORDS user words, max_tokens $MAX_TOKENS, $SESSIONS conversations at concurrency $CONCURRENCY, ${DURATION}s; $REPEATS repeat(s), medians" \
  "${labels[@]}"

# The tiered runs' use of the tier, medians over the repeats, appended to the results file.
if ((tiers)); then
  out=$(ls -t "$RESULTS_DIR"/scoring-*.md | head -n1)
  python3 - "$WORK" "$REPEATS" "$out" "${labels[@]}" <<'PY'
import glob, json, re, statistics, sys
work, repeats, out, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def metric(text, name, **want):  # the sum of a family's samples whose labels include `want`
    total = 0.0
    for m in re.finditer(r"^" + name + r"\{([^}]*)\} (\S+)$", text, re.M):
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(got.get(k) == v for k, v in want.items()): total += float(m.group(2))
    return total
rows = ["", "Tier use (medians): ramjet's CPU-tier blocks stored / removed (ramjet_kv_tier_blocks_total), "
        "exact decisions (ramjet_exact_route_total outcome exact or exact_partial, of all), the sims' GPU prefix "
        "hits (prefix_cache_hits / prefix_cache_queries), and cached % less GPU %: what the CPU tier loaded back.", "",
        "| label | CPU blocks stored | CPU blocks removed | exact decisions % | GPU hit % | cached % | CPU-loaded % (cached - GPU) |",
        "|---|---:|---:|---:|---:|---:|---:|"]
for l in labels:
    if not (l.startswith("tiers") or l == "exact"): continue
    per = []
    for r in range(1, repeats + 1):
        text = open(f"{work}/{l}-{r}.metrics").read()
        step = json.load(open(f"{work}/{l}-{r}.json"))["runs"][0]["steps"][0]
        sims = [json.load(open(f)) for f in sorted(glob.glob(f"{work}/{l}-{r}.sim*.json"))]
        q = sum(s["prefix_cache_queries"] for s in sims)
        gpu = 100.0 * sum(s["prefix_cache_hits"] for s in sims) / q if q else 0.0
        routed = metric(text, "ramjet_exact_route_total")
        exact = metric(text, "ramjet_exact_route_total", outcome="exact") + metric(text, "ramjet_exact_route_total", outcome="exact_partial")
        per.append((metric(text, "ramjet_kv_tier_blocks_total", tier="cpu", op="stored"),
                    metric(text, "ramjet_kv_tier_blocks_total", tier="cpu", op="removed"),
                    100.0 * exact / routed if routed else 0.0, gpu, step["cached_pct"], step["cached_pct"] - gpu))
    m = [statistics.median(x[i] for x in per) for i in range(6)]
    rows.append(f"| {l} | {m[0]:.0f} | {m[1]:.0f} | {m[2]:.1f} | {m[3]:.1f} | {m[4]:.1f} | {m[5]:.1f} |")
open(out, "a").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
fi
