#!/usr/bin/env bash
# disagg.sh: prefill/decode disaggregation (issue 31): a long-prompt agent workload on
# PREFILL_ENGINES kv_producer + DECODE_ENGINES kv_consumer ramjet-sim engines (RJ_UPSTREAM_ROLE)
# against as many aggregated engines, all behind ramjet; and ramjet's conditional policy against
# always disaggregating. Labels, each on a fresh fleet (cold caches) and a fresh ramjet:
#   aggregated          PREFILL_ENGINES + DECODE_ENGINES plain sims, no RJ_UPSTREAM_ROLE (ramjet's
#                       prefix routing; every engine computes its prompts and decodes)
#   disagg-conditional  PREFILL_ENGINES sims --kv-role kv_producer, DECODE_ENGINES --kv-role
#                       kv_consumer, RJ_UPSTREAM_ROLE=prefill,...,decode,...: a request whose decode
#                       engine would compute more than RJ_DISAGG_MIN_UNCACHED_TOKENS (MIN_UNCACHED;
#                       empty: ramjet's default, 512) prompt tokens goes in two legs (a prefill leg
#                       on a prefill engine, then the decode leg, which pulls the KV), others whole
#                       to the decode engine
#   disagg-always       the same with RJ_DISAGG_MIN_UNCACHED_TOKENS=0 (every request in two legs)
# The workload: two ramjet-bench clients at once, both scripts/demo's shared-prefix agent shape
# (APPS apps x PREFIX_KIB KiB system prompts, TURNS turns per conversation, streamed, ignore_eos,
# max_tokens MAX_TOKENS, a list picks per request) for DURATION s:
#   long    LONG_CONCURRENCY conversations whose every turn adds LONG_WORDS words (a tool result:
#           thousands of prompt tokens to compute per turn)
#   short   SHORT_CONCURRENCY conversations (other apps) whose turns add SHORT_WORDS words (a short
#           follow-up: little to compute beyond the cached conversation; what the conditional
#           policy keeps whole)
# Reported per label and client: requests, errors, TTFT and TPOT p50/p95, output tok/s, cached %;
# per label: ramjet's ramjet_disagg_* counters (choice, prefill legs, mean leg time), the prompt
# tokens each role's engines computed and pulled (the sims' /sim/stats), the mean modelled pull
# (vllm:nixl_xfer_time_seconds) and the sims' lag behind virtual time (a CPU-starved machine).
# Prints Markdown and writes bench/results/disagg-<UTC>.{md,json}.
#
# Usage: bench/disagg.sh [--no-build]
# Environment:
#   PREFILL_ENGINES=2 DECODE_ENGINES=2 PRESET=qwen3.8-27b-tp4 SPEED=6 DURATION=120 SEED=7
#   APPS=4 PREFIX_KIB=32 TURNS=8 MAX_TOKENS=128,256 LONG_CONCURRENCY=16 LONG_WORDS=4096
#   SHORT_CONCURRENCY=8 SHORT_WORDS=64 MIN_UNCACHED (conditional's threshold; empty: ramjet's)
#   KV_BLOCKS (each engine's pool; empty: the preset's) KV_PULL_MS KV_PULL_US_PER_TOKEN (the sims'
#   transfer model; empty: theirs, 1 ms + 0.5 us per token)
#   LABELS="aggregated disagg-conditional disagg-always" BUILD_DIR=build/release BIN_DIR
#   KEEP_WORK=1 keeps the logs, journals and metrics
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args disagg "$@"
PREFILL_ENGINES=${PREFILL_ENGINES:-2}
DECODE_ENGINES=${DECODE_ENGINES:-2}
PRESET=${PRESET:-qwen3.8-27b-tp4}
SPEED=${SPEED:-6}
DURATION=${DURATION:-120}
SEED=${SEED:-7}
APPS=${APPS:-4}
PREFIX_KIB=${PREFIX_KIB:-32}
TURNS=${TURNS:-8}
MAX_TOKENS=${MAX_TOKENS:-128,256}
LONG_CONCURRENCY=${LONG_CONCURRENCY:-16}
LONG_WORDS=${LONG_WORDS:-4096}
SHORT_CONCURRENCY=${SHORT_CONCURRENCY:-8}
SHORT_WORDS=${SHORT_WORDS:-64}
MIN_UNCACHED=${MIN_UNCACHED:-}
KV_BLOCKS=${KV_BLOCKS:-}
KV_PULL_MS=${KV_PULL_MS:-}
KV_PULL_US_PER_TOKEN=${KV_PULL_US_PER_TOKEN:-}
LABELS=${LABELS:-aggregated disagg-conditional disagg-always}
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD)}
cd "$ROOT"
bench_binaries
"$RAMJET" --help-markdown 2>/dev/null | grep -c RJ_UPSTREAM_ROLE >/dev/null || die "$RAMJET has no RJ_UPSTREAM_ROLE (P/D support)"
"$SIM" --help 2>&1 | grep -c -- --kv-role >/dev/null || die "$SIM has no --kv-role"
bench_workdir disagg

ENGINES=$((PREFILL_ENGINES + DECODE_ENGINES))
roles=()  # aggregated: both x ENGINES; disagg: prefill..., decode...
start_fleet() {  # start_fleet ROLE... (both | prefill | decode) -> engines=(URL...), one fresh sim each
  local i=0 role port args
  engines=()
  for role in "$@"; do
    args=(--host 127.0.0.1 --port 0 --served-model-name qwen3.8-27b --preset "$PRESET" --speed "$SPEED"
          --enable-prompt-tokens-details --seed $((i + 1)))
    [[ -n $KV_BLOCKS ]] && args+=(--num-gpu-blocks-override "$KV_BLOCKS")
    case $role in
      both) ;;
      prefill) args+=(--kv-role kv_producer --kv-side-channel-host 127.0.0.1 --kv-engine-id "prefill-$i") ;;
      decode) args+=(--kv-role kv_consumer --kv-side-channel-host 127.0.0.1 --kv-engine-id "decode-$i") ;;
      *) die "unknown role $role" ;;
    esac
    if [[ $role != both ]]; then
      [[ -n $KV_PULL_MS ]] && args+=(--kv-pull-ms "$KV_PULL_MS")
      [[ -n $KV_PULL_US_PER_TOKEN ]] && args+=(--kv-pull-us-per-token "$KV_PULL_US_PER_TOKEN")
    fi
    "$SIM" "${args[@]}" >"$WORK/$label-sim$i.log" 2>&1 &
    pids+=($!)
    port=$(wait_grep "$WORK/$label-sim$i.log" 'listening port=[0-9]+' | cut -d= -f2) || die "sim $i ($role) did not start"
    engines+=("http://127.0.0.1:$port")
    i=$((i + 1))
  done
}

run() {  # run LABEL
  local label=$1 env=() upstreams api metrics i e
  roles=()
  case $label in
    aggregated) for ((i = 0; i < ENGINES; i++)); do roles+=(both); done ;;
    disagg-conditional | disagg-always)
      for ((i = 0; i < PREFILL_ENGINES; i++)); do roles+=(prefill); done
      for ((i = 0; i < DECODE_ENGINES; i++)); do roles+=(decode); done ;;
    *) die "unknown label $label (aggregated, disagg-conditional, disagg-always)" ;;
  esac
  start_fleet "${roles[@]}"
  upstreams=$(IFS=,; echo "${engines[*]}")
  env=(RJ_UPSTREAM="$upstreams" RJ_PROBE_INTERVAL_MS=500
       RJ_ROUTE_JOURNAL=true RJ_ROUTE_JOURNAL_FILE="$WORK/$label.journal")
  case $label in
    disagg-conditional)
      env+=(RJ_UPSTREAM_ROLE="$(IFS=,; echo "${roles[*]}")")
      [[ -n $MIN_UNCACHED ]] && env+=(RJ_DISAGG_MIN_UNCACHED_TOKENS="$MIN_UNCACHED") ;;
    disagg-always) env+=(RJ_UPSTREAM_ROLE="$(IFS=,; echo "${roles[*]}")" RJ_DISAGG_MIN_UNCACHED_TOKENS=0) ;;
  esac
  printf '%s\n' "${env[@]}" >"$WORK/$label.env"
  start_ramjet "$WORK/$label.err" "${env[@]}"
  log "$label: $(IFS=,; echo "${roles[*]}"), ${DURATION}s"
  local common=(--target "http://$api" --workload shared-prefix --apps "$APPS" --prefix-kib "$PREFIX_KIB"
                --turns "$TURNS" --max-tokens "$MAX_TOKENS" --ignore-eos --duration "$DURATION" --quiet)
  uptime >"$WORK/$label.load"
  "$BENCH" "${common[@]}" --concurrency "$LONG_CONCURRENCY" --user-words "$LONG_WORDS" --seed "$SEED" \
    --label "$label long" --out-json "$WORK/$label-long.json" >"$WORK/$label-long.bench.md" 2>&1 &
  local b_long=$!
  pids+=($b_long)
  "$BENCH" "${common[@]}" --concurrency "$SHORT_CONCURRENCY" --user-words "$SHORT_WORDS" --seed $((SEED + 1000)) \
    --label "$label short" --out-json "$WORK/$label-short.json" >"$WORK/$label-short.bench.md" 2>&1 &
  local b_short=$!
  pids+=($b_short)
  wait "$b_long" || log "$label: the long client exited $?"
  wait "$b_short" || log "$label: the short client exited $?"
  local keep=() p
  for p in "${pids[@]}"; do [[ $p == "$b_long" || $p == "$b_short" ]] || keep+=("$p"); done
  pids=("${keep[@]}")
  uptime >>"$WORK/$label.load"
  [[ -s $WORK/$label-long.json && -s $WORK/$label-short.json ]] || die "$label: ramjet-bench wrote no report"
  curl -s "http://$metrics/metrics" >"$WORK/$label.metrics" || true
  i=0
  for e in "${engines[@]}"; do
    curl -s "$e/sim/stats" >"$WORK/$label-sim$i.stats" || true
    curl -s "$e/metrics" >"$WORK/$label-sim$i.metrics" || true
    i=$((i + 1))
  done
  printf '%s\n' "${roles[@]}" >"$WORK/$label.roles"
  sleep 0.5  # (the journal's writer flushes every 200 ms)
  stop_pids
}

read -r -a labels <<<"$LABELS"
for label in "${labels[@]}"; do run "$label"; done

mkdir -p "$RESULTS_DIR"
PULL_DESC="${KV_PULL_MS:-1} ms + ${KV_PULL_US_PER_TOKEN:-0.5} µs/token"
POOL_DESC="the preset's" THRESHOLD_DESC="512 (ramjet's default)"
[[ -n $KV_BLOCKS ]] && POOL_DESC=$KV_BLOCKS
[[ -n $MIN_UNCACHED ]] && THRESHOLD_DESC=$MIN_UNCACHED
stem=$RESULTS_DIR/disagg-$(date -u +%Y-%m-%d-%H%M%S)
python3 - "$WORK" "$stem" "${labels[@]}" <<EOF
import json, re, sys
work, stem, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
def metric(text, name, **want):
    total = 0.0
    for line in text.splitlines():
        m = re.match(r'^' + re.escape(name) + r'(\{[^}]*\})? (\S+)$', line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in want.items()):
            total += float(m.group(2))
    return total
def label_values(text, name, key):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^' + re.escape(name) + r'\{[^}]*' + key + r'="([^"]+)"[^}]*\} (\S+)$', line)
        if m: out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
    return out
def f0(x): return "—" if x is None else f"{x:,.0f}"
def f1(x): return "—" if x is None else f"{x:,.1f}"
out, rows, rows2 = {}, [], []
for label in labels:
    roles = open(f"{work}/{label}.roles").read().split()
    text = open(f"{work}/{label}.metrics").read()
    o = {"roles": roles, "clients": {}, "load": open(f"{work}/{label}.load").read().strip().splitlines()}
    total_tok_s = 0.0
    for client in ("long", "short"):
        s = json.load(open(f"{work}/{label}-{client}.json"))["runs"][0]["steps"][0]
        o["clients"][client] = s
        total_tok_s += s["output_tok_s"] or 0
        rows.append(f"| {label} | {client} | {s['ok']:,} | {s['errors']:,} | {f1(s['ttft_p50_ms'])} / {f1(s['ttft_p95_ms'])} | "
                    f"{f1(s['tpot_p50_ms'])} / {f1(s['tpot_p95_ms'])} | {f0(s['output_tok_s'])} | {f1(s['cached_pct'])} |")
    o["output_tok_s"] = total_tok_s
    rows.append(f"| {label} | **both** | {sum(c['ok'] for c in o['clients'].values()):,} | "
                f"{sum(c['errors'] for c in o['clients'].values()):,} | | | **{total_tok_s:,.0f}** | |")
    o["choices"] = label_values(text, "ramjet_disagg_requests_total", "choice")
    o["prefill_legs"] = label_values(text, "ramjet_disagg_prefill_legs_total", "outcome")
    n, tot = metric(text, "ramjet_disagg_prefill_leg_seconds_count"), metric(text, "ramjet_disagg_prefill_leg_seconds_sum")
    o["prefill_leg_mean_ms"] = 1000 * tot / n if n else None
    # Each engine's prompt work (/sim/stats): computed = queried - local hits - pulled (external hits).
    per_role, lag, xfer_n, xfer_s, kv = {}, 0.0, 0.0, 0.0, {}
    for i, role in enumerate(roles):
        try:
            st = json.load(open(f"{work}/{label}-sim{i}.stats"))
        except (OSError, ValueError):
            continue
        ext = st.get("kv_transfer", {})
        pulled = ext.get("external_prefix_cache_hits", 0)
        r = per_role.setdefault(role, {"engines": 0, "prompt_tokens_computed": 0, "pulled_tokens": 0, "generation_tokens": 0})
        r["engines"] += 1
        r["prompt_tokens_computed"] += st["prefix_cache_queries"] - st["prefix_cache_hits"] - pulled
        r["pulled_tokens"] += pulled
        r["generation_tokens"] += st["generation_tokens"]
        lag = max(lag, st.get("max_lag_seconds", 0.0))
        for k in ("loads_ok", "loads_failed", "loads_stale", "expired", "notifications_after_expiry", "pulls_served"):
            kv[k] = kv.get(k, 0) + ext.get(k, 0)
        mt = open(f"{work}/{label}-sim{i}.metrics").read()
        xfer_n += metric(mt, "vllm:nixl_xfer_time_seconds_count")
        xfer_s += metric(mt, "vllm:nixl_xfer_time_seconds_sum")
    o["per_role"], o["sim_max_lag_s"], o["kv_transfer"] = per_role, lag, kv
    o["pull_mean_virtual_ms"] = 1000 * xfer_s / xfer_n if xfer_n else None
    c = o["choices"]
    legs = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(o["prefill_legs"].items()) if v) or "—"
    work_cells = "; ".join(f"{k} {v['prompt_tokens_computed'] / 1e6:.2f}M" for k, v in per_role.items())
    pulled = sum(v["pulled_tokens"] for v in per_role.values())
    disagg = "prefill" in roles
    rows2.append(f"| {label} | " + " | ".join(f0(c.get(k)) if disagg else "—" for k in ("remote", "cached", "no_prefill", "prefill_busy", "fallback"))
                 + f" | {legs} | {f1(o['prefill_leg_mean_ms'])} | {work_cells} | {pulled / 1e6:.2f}M | "
                 + (f"{o['pull_mean_virtual_ms']:.2f}" if o['pull_mean_virtual_ms'] is not None else "—")
                 + f" | {lag:.2f} |")
    out[label] = o
mt = "$MAX_TOKENS"
lines = ["# Prefill/decode disaggregation (issue 31): $PREFILL_ENGINES prefill + $DECODE_ENGINES decode vs $((PREFILL_ENGINES + DECODE_ENGINES)) aggregated, conditional vs always", "",
         f"commit $COMMIT; ramjet-sim $PRESET at ${SPEED}x: aggregated $((PREFILL_ENGINES + DECODE_ENGINES)) plain engines; disagg "
         f"$PREFILL_ENGINES kv_producer + $DECODE_ENGINES kv_consumer (pull $PULL_DESC, virtual), "
         f"KV pool $POOL_DESC blocks per engine; conditional threshold $THRESHOLD_DESC uncached tokens. "
         f"Workload: ramjet-bench shared-prefix, two clients at once for ${DURATION} s: long = $LONG_CONCURRENCY conversations "
         f"(apps $APPS x $PREFIX_KIB KiB, $TURNS turns, $LONG_WORDS words per turn), short = $SHORT_CONCURRENCY conversations "
         f"(other apps, $SHORT_WORDS words per turn); max_tokens {mt} (ignore_eos), streamed", "",
         "| label | client | ok | errors | TTFT p50 / p95 ms | TPOT p50 / p95 ms | out tok/s | cached % |",
         "|---|---|---:|---:|---:|---:|---:|---:|"] + rows + ["",
         "| label | remote | cached | no_prefill | prefill_busy | fallback | prefill legs | leg mean ms | prompt tokens computed | pulled | pull mean ms (virtual) | sims' max lag s |",
         "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|"] + rows2
if "aggregated" in out:
    a = out["aggregated"]
    for l in labels:
        if l == "aggregated": continue
        b = out[l]
        def ratio(client, key):
            x, y = b["clients"][client][key], a["clients"][client][key]
            return f"{x / y:.2f}x" if x and y else "—"
        lines += ["", f"{l} / aggregated: out tok/s {b['output_tok_s'] / a['output_tok_s']:.2f}x; "
                  + "; ".join(f"{c}: TTFT p50 {ratio(c, 'ttft_p50_ms')}, p95 {ratio(c, 'ttft_p95_ms')}, "
                              f"TPOT p50 {ratio(c, 'tpot_p50_ms')}, p95 {ratio(c, 'tpot_p95_ms')}" for c in ("long", "short"))]
open(stem + ".md", "w").write("\n".join(lines) + "\n")
json.dump(out, open(stem + ".json", "w"), indent=1)
print("\n".join(lines))
print(f"\n(written to {stem}.md)")
EOF
