#!/usr/bin/env bash
# routing.sh: does ramjet's routing pay off? The routing benchmarks of the routing-core issue, on
# simulated Qwen3.8-27B TP4 engines (ramjet-sim), policies side by side in one run.
#
#   A  shared prefix: 4 apps x 24 KiB system prompt, multi-turn sessions, on 4 standard sims, at
#      each CONCURRENCY: RJ_AFFINITY=prefix, load, round_robin, and ramjet-bench's oracle (the
#      bench asks every sim which one holds most of the prompt). Targets: prefix >= 1.5x
#      round_robin output tok/s; prefix cached % >= 95 % of the oracle's.
#   B  same-app concurrency: B_SESSIONS sessions of ONE app at concurrency B_SESSIONS on 4
#      standard sims: prefix (alpha 4), a load-blind sticky baseline (prefix with
#      RJ_ROUTE_ALPHA=0: everything follows the cached prefix) and round_robin. Target: prefix
#      spreads, and beats the sticky baseline by more than 1.57x (the earlier Rust version's mark).
#   C  decode profiles: 2 MTP sims + 2 standard sims, short (C_SHORT_TOKENS) and long
#      (C_LONG_TOKENS) outputs, C_CONCURRENCY/2 sessions of each, run as two ramjet-bench
#      processes at once so each class is measured on its own: prefix with
#      RJ_UPSTREAM_PROFILES=mtp,mtp,standard,standard vs the same without profiles. Target:
#      profile routing > profile-blind.
#   D  preparation cost: ramjet-micro-canonical (parse + shims + canonical bytes + fingerprints
#      against a bare simdjson parse of the same 256 KiB and 2 MiB bodies).
#   E  exact routing under eviction pressure: sims that publish vLLM KV events, a KV pool small
#      enough to evict, two workloads — (trace) the first E_TRACE_REQUESTS requests of the Mooncake
#      conversation trace (ramjet-bench --workload trace, replayed whole at E_TIME_SCALE) on 4
#      standard sims, (agent) scripts/demo's cache-pressured agent workload on its fleet (2 MTP +
#      2 standard, RJ_UPSTREAM_PROFILES) — one run each of round_robin, approximate prefix
#      (fingerprints), exact (RJ_EXACT_ROUTE_MODE=on, tokens from the engine's /tokenize) and the
#      oracle. Every run, the oracle's included, has a ramjet subscribed to the sims' KV events
#      (RJ_EXACT_ROUTE_MODE=off except for exact), so the blocks the sims evicted are counted
#      (ramjet_kv_blocks_applied_total{op="removed"}) and the event-apply CPU is paid alike.
#      Targets: exact >= approximate on cached % and TTFT p95; exact cached >= 95 % of the oracle's.
#
# Every run starts fresh sims (cold prefix caches) and a fresh ramjet; the policy order rotates
# from cell to cell so background noise hits every policy alike. Prints Markdown and writes
# bench/results/routing-<UTC date-time>.md.
#
# Usage (from anywhere, after scripts/setup):
#   bench/routing.sh [--no-build] [--sections A,B,C,D[,E]]   (default A,B,C,D)
# Environment:
#   DURATION=30        seconds of issuing per run (in-flight requests then finish)
#   SPEED=6            sim --speed (virtual time runs SPEED x wall time; tok/s are wall-clock,
#                      divide by SPEED for the modelled engines, multiply times by SPEED)
#   CONCURRENCY=8,32,64  section A ladder (one run per policy and concurrency)
#   B_SESSIONS=12      section B sessions (= concurrency) of the one app
#   C_CONCURRENCY=16   section C total concurrency (half short, half long)
#   C_SHORT_TOKENS=128 C_LONG_TOKENS=1024   section C output lengths
#   PRESET=qwen3.8-27b-tp4  MTP_PRESET=qwen3.8-27b-tp4-mtp   sim presets
#   APPS=4 PREFIX_KIB=24 TURNS=4 USER_WORDS=48 MAX_TOKENS=128 SEED=7   the shared-prefix workload
#                      (A, B, C; B uses one app, C its own output lengths)
#   A_KV_BLOCKS=       section A's KV pool per sim (--num-gpu-blocks-override): empty = the preset's
#                      pool; one number for every cell; or a list, one per CONCURRENCY entry
#   MICRO_REPS=3 MICRO_MIN_TIME=0.5   section D repetitions (median) and min time per benchmark
#   E_WORKLOADS=trace,agent   section E's workloads (either or both)
#   E_POLICIES=approx,exact,round_robin,oracle   section E's runs, in the first workload's order
#                      (rotated for the next); exact_nowithdraw adds exact with RJ_EXACT_MISS_LIMIT=0
#                      (exact trust never withdrawn after cached_tokens contradicts a prediction)
#   E_TRACE=../shared/traces/mooncake_conversation_trace.jsonl (relative to the repository root)
#   E_TRACE_REQUESTS=2000 E_TIME_SCALE=0.15   trace slice (head -n) and --time-scale; the slice is
#                      replayed whole (no --duration), so every policy gets the same requests
#   E_TRACE_KV_BLOCKS=3126   trace: KV pool per sim in 784-token blocks (the preset's own pool: the
#                      slice's ~5 M distinct prompt tokens per engine overflow its 2.45 M; empty =
#                      the preset's)
#   E_TRACE_MIN_BYTES=8192   trace: RJ_EXACT_ROUTE_MIN_BYTES of the exact run (as scripts/demo;
#                      empty = ramjet's default, 32 KiB, which leaves ~45 % of the trace ineligible)
#   E_AGENT_DURATION=20 E_AGENT_CONCURRENCY=32 E_AGENT_PREFIX_KIB=24 E_AGENT_TURNS=10
#   E_AGENT_USER_WORDS=2048 E_AGENT_MAX_TOKENS=64 E_AGENT_KV_BLOCKS=384 E_AGENT_MIN_BYTES=8192
#                      agent: scripts/demo's defaults (4 apps, seed 7, --ignore-eos)
#   BUILD_DIR=build/release   where the binaries are (built there unless --no-build)
#   COMMIT             what the report names as the code measured (default: the tree's HEAD)
#   RESULTS_DIR=bench/results
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=1
SECTIONS=A,B,C,D
DURATION=${DURATION:-30}
SPEED=${SPEED:-6}
CONCURRENCY=${CONCURRENCY:-8,32,64}
B_SESSIONS=${B_SESSIONS:-12}
C_CONCURRENCY=${C_CONCURRENCY:-16}
C_SHORT_TOKENS=${C_SHORT_TOKENS:-128}
C_LONG_TOKENS=${C_LONG_TOKENS:-1024}
PRESET=${PRESET:-qwen3.8-27b-tp4}
MTP_PRESET=${MTP_PRESET:-qwen3.8-27b-tp4-mtp}
APPS=${APPS:-4}
PREFIX_KIB=${PREFIX_KIB:-24}
TURNS=${TURNS:-4}
USER_WORDS=${USER_WORDS:-48}
MAX_TOKENS=${MAX_TOKENS:-128}
SEED=${SEED:-7}
A_KV_BLOCKS=${A_KV_BLOCKS:-}
MICRO_REPS=${MICRO_REPS:-3}
MICRO_MIN_TIME=${MICRO_MIN_TIME:-0.5}
E_WORKLOADS=${E_WORKLOADS:-trace,agent}
E_POLICIES=${E_POLICIES:-approx,exact,round_robin,oracle}
E_TRACE=${E_TRACE:-../shared/traces/mooncake_conversation_trace.jsonl}
E_TRACE_REQUESTS=${E_TRACE_REQUESTS:-2000}
E_TIME_SCALE=${E_TIME_SCALE:-0.15}
E_TRACE_KV_BLOCKS=${E_TRACE_KV_BLOCKS-3126}
E_TRACE_MIN_BYTES=${E_TRACE_MIN_BYTES-8192}
E_AGENT_DURATION=${E_AGENT_DURATION:-20}
E_AGENT_CONCURRENCY=${E_AGENT_CONCURRENCY:-32}
E_AGENT_PREFIX_KIB=${E_AGENT_PREFIX_KIB:-24}
E_AGENT_TURNS=${E_AGENT_TURNS:-10}
E_AGENT_USER_WORDS=${E_AGENT_USER_WORDS:-2048}
E_AGENT_MAX_TOKENS=${E_AGENT_MAX_TOKENS:-64}
E_AGENT_KV_BLOCKS=${E_AGENT_KV_BLOCKS-384}
E_AGENT_MIN_BYTES=${E_AGENT_MIN_BYTES:-8192}
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
[[ $E_TRACE == /* ]] || E_TRACE=$ROOT/$E_TRACE

die() { echo "routing: $*" >&2; exit 1; }
log() { echo "routing: $*" >&2; }

while (($#)); do
  case $1 in
    --no-build) BUILD=0; shift ;;
    --sections) SECTIONS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
has_section() { [[ ",$SECTIONS," == *",$1,"* ]]; }
IFS=, read -ra concs <<<"$CONCURRENCY"
for c in "${concs[@]}"; do [[ $c =~ ^[1-9][0-9]*$ ]] || die "bad concurrency: $c"; done
for v in DURATION SPEED B_SESSIONS C_CONCURRENCY C_SHORT_TOKENS C_LONG_TOKENS APPS TURNS USER_WORDS MAX_TOKENS MICRO_REPS; do
  [[ ${!v} =~ ^[0-9]+([.][0-9]+)?$ ]] || die "$v must be a number (got '${!v}')"
done
for v in E_TRACE_REQUESTS E_TIME_SCALE E_AGENT_DURATION E_AGENT_CONCURRENCY E_AGENT_PREFIX_KIB E_AGENT_TURNS \
  E_AGENT_MAX_TOKENS E_AGENT_MIN_BYTES; do
  [[ ${!v} =~ ^[0-9]+([.][0-9]+)?$ ]] || die "$v must be a number (got '${!v}')"
done
for v in E_TRACE_KV_BLOCKS E_TRACE_MIN_BYTES E_AGENT_KV_BLOCKS E_AGENT_USER_WORDS; do
  [[ -z ${!v} || ${!v} =~ ^[0-9]+$ ]] || die "$v must be empty or an integer (got '${!v}')"
done
((C_CONCURRENCY >= 2)) || die "C_CONCURRENCY must be >= 2 (half short, half long)"
IFS=, read -ra a_blocks <<<"$A_KV_BLOCKS"
for b in "${a_blocks[@]}"; do [[ $b =~ ^[1-9][0-9]*$ ]] || die "bad A_KV_BLOCKS entry: $b"; done
((${#a_blocks[@]} <= 1 || ${#a_blocks[@]} == ${#concs[@]})) || die "A_KV_BLOCKS: one number, or one per CONCURRENCY entry"
for tool in curl python3; do command -v $tool >/dev/null || die "$tool not found (run scripts/setup as root)"; done

# ---------------------------------------------------------------- build
if ((BUILD)); then
  log "building ramjet ramjet-sim ramjet-bench ramjet-micro-canonical in $BUILD_DIR"
  (cd "$ROOT" && cmake --preset release -B "$BUILD_DIR" -DRAMJET_BUILD_BENCH=ON >/dev/null &&
    cmake --build "$BUILD_DIR" -j "$(nproc)" --target ramjet ramjet-sim ramjet-bench ramjet-micro-canonical)
fi
RAMJET=$BUILD_DIR/src/app/ramjet
SIM=$BUILD_DIR/sim/server/ramjet-sim
BENCH=$BUILD_DIR/bench/loadgen/ramjet-bench
MICRO=$BUILD_DIR/src/request/prepare/ramjet-micro-canonical
for b in "$RAMJET" "$SIM" "$BENCH"; do [[ -x $b ]] || die "$b not found (build it or set BUILD_DIR)"; done
if has_section E && [[ ,$E_WORKLOADS, == *,trace,* ]]; then [[ -r $E_TRACE ]] || die "E_TRACE $E_TRACE not readable"; fi
if has_section D; then [[ -x $MICRO ]] || die "$MICRO not found (needs RAMJET_BUILD_BENCH=ON and libbenchmark)"; fi
if ldd "$RAMJET" 2>/dev/null | grep -Eq 'lib(asan|tsan|ubsan)'; then
  log "warning: $RAMJET is a sanitizer build; use the release preset for real numbers"
fi

# ---------------------------------------------------------------- processes and cleanup
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_workdir ramjet-routing
trap 'log "failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

api="" metrics=""
start_ramjet() {  # start_ramjet NAME [VAR=VALUE...] -> api, metrics (host:port)
  local name=$1; shift
  env RJ_UPSTREAM="$(IFS=,; echo "${engines[*]}")" RJ_LISTEN=127.0.0.1:0 RJ_METRICS_LISTEN=127.0.0.1:0 "$@" \
    "$RAMJET" >"$WORK/$name.ramjet.out" 2>"$WORK/$name.ramjet.err" &
  pids+=($!)
  api=$(wait_grep "$WORK/$name.ramjet.err" 'api=[0-9.]+:[0-9]+' | cut -d= -f2) || die "ramjet ($name) did not start"
  metrics=$(wait_grep "$WORK/$name.ramjet.err" 'metrics=[0-9.]+:[0-9]+' | cut -d= -f2) || die "ramjet ($name): no metrics address"
  # every engine healthy before the clock starts
  local h
  for _ in $(seq 100); do
    h=$(curl -s "http://$api/health" 2>/dev/null || true)
    # with KV events: every engine's exact index trusted too (else exact falls back: untrusted)
    if [[ $h == *'"status":"ok"'* ]] && { ((!KV_EVENTS)) || [[ $h != *'"kv_trusted":false'* ]]; }; then return 0; fi
    sleep 0.1
  done
  die "ramjet ($name): /health never answered ok (with KV events: every kv_trusted): $(curl -s "http://$api/health")"
}

collect() {  # collect NAME: sim stats and ramjet's routing counters, for the report
  local name=$1 i=0 e
  for e in "${engines[@]}"; do
    curl -s -XPOST "$e/sim/stats" -d '{}' >"$WORK/$name.sim$i.json" || echo '{}' >"$WORK/$name.sim$i.json"
    curl -s "$e/metrics" | grep -E '^vllm:(num_preemptions_total|cache_config_info)' >"$WORK/$name.sim$i.metrics.txt" || true
    i=$((i + 1))
  done
  if [[ -n $metrics ]]; then
    curl -s "http://$metrics/metrics" | grep -E '^ramjet_route_decisions_total' >"$WORK/$name.route.txt" || true
    if ((KV_EVENTS)); then
      curl -s "http://$metrics/metrics" | grep -E '^ramjet_(kv_blocks_applied_total|exact_route_total|exact_predictions_total|exact_prediction_error_tokens|kv_fence_transitions_total|kv_state|exact_provisional_hits_total|exact_withdrawn)' \
        >"$WORK/$name.kv.txt" || true
    fi
  fi
}

# bench_run NAME TARGET-ARGS... -- BENCH-ARGS...: one ramjet-bench process, --out-json NAME.json
bench_args_common=(--ignore-eos --quiet)
shared_prefix() {  # the shared-prefix workload arguments: shared_prefix APPS SEED MAX_TOKENS
  echo --workload shared-prefix --apps "$1" --prefix-kib "$PREFIX_KIB" --turns "$TURNS" --user-words "$USER_WORDS" \
    --seed "$2" --max-tokens "$3"
}

# run_policy NAME POLICY... : POLICY is "oracle" or a list of RJ_* settings; fleet already set in
# FLEET; workload args in WL (array); concurrency in CONC. One fresh fleet + ramjet per run.
run_policy() {
  local name=$1; shift
  start_sims "${FLEET[@]}"
  metrics=""
  local target
  if [[ $1 == oracle ]]; then
    target=(--target oracle --engines "$(IFS=,; echo "${engines[*]}")")
  else
    start_ramjet "$name" "$@"
    target=(--target "http://$api")
  fi
  log "  $name: ${*} (c=$CONC, ${DURATION}s)"
  "$BENCH" "${target[@]}" "${WL[@]}" --concurrency "$CONC" --duration "$DURATION" \
    "${bench_args_common[@]}" --label "$name" --out-json "$WORK/$name.json" >/dev/null \
    || die "ramjet-bench failed ($name)"
  collect "$name"
  stop_pids
}

# run_classes NAME POLICY...: section C, two bench processes at once (short and long outputs)
run_classes() {
  local name=$1; shift
  start_sims "${FLEET[@]}"
  start_ramjet "$name" "$@"
  local half=$((C_CONCURRENCY / 2)) bpids=()
  log "  $name: ${*} (c=$half short + $((C_CONCURRENCY - half)) long, ${DURATION}s)"
  "$BENCH" --target "http://$api" $(shared_prefix "$APPS" "$SEED" "$C_SHORT_TOKENS") --concurrency "$half" \
    --duration "$DURATION" "${bench_args_common[@]}" --label "$name-short" --out-json "$WORK/$name-short.json" >/dev/null &
  bpids+=($!)
  "$BENCH" --target "http://$api" $(shared_prefix "$APPS" "$((SEED + 1))" "$C_LONG_TOKENS") \
    --concurrency "$((C_CONCURRENCY - half))" --duration "$DURATION" "${bench_args_common[@]}" \
    --label "$name-long" --out-json "$WORK/$name-long.json" >/dev/null &
  bpids+=($!)
  for p in "${bpids[@]}"; do wait "$p" || die "ramjet-bench failed ($name)"; done
  collect "$name"
  stop_pids
}

rotate() {  # rotate K ITEM...: print the items rotated left by K
  local k=$1; shift
  local a=("$@") n=$#
  k=$((k % n))
  printf '%s\n' "${a[@]:k}" "${a[@]:0:k}"
}

START_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$SECONDS

# ---------------------------------------------------------------- A: shared prefix ladder
if has_section A; then
  log "A: $APPS apps x $PREFIX_KIB KiB shared prefix, 4 x $PRESET, concurrency $CONCURRENCY"
  FLEET=("$PRESET" "$PRESET" "$PRESET" "$PRESET")
  read -ra WL <<<"$(shared_prefix "$APPS" "$SEED" "$MAX_TOKENS")"
  cell=0
  for CONC in "${concs[@]}"; do
    SIM_EXTRA=()
    if ((${#a_blocks[@]})); then SIM_EXTRA=(--num-gpu-blocks-override "${a_blocks[$(( ${#a_blocks[@]} > 1 ? cell : 0 ))]}"); fi
    mapfile -t order < <(rotate "$cell" prefix load round_robin oracle)
    for p in "${order[@]}"; do
      if [[ $p == oracle ]]; then run_policy "A-c$CONC-oracle" oracle
      else run_policy "A-c$CONC-$p" RJ_AFFINITY="$p"; fi
    done
    cell=$((cell + 1))
  done
  SIM_EXTRA=()
fi

# ---------------------------------------------------------------- B: one app, many sessions
if has_section B; then
  log "B: 1 app x $PREFIX_KIB KiB, $B_SESSIONS sessions at concurrency $B_SESSIONS, 4 x $PRESET"
  FLEET=("$PRESET" "$PRESET" "$PRESET" "$PRESET")
  read -ra WL <<<"$(shared_prefix 1 "$SEED" "$MAX_TOKENS") --sessions $B_SESSIONS"
  CONC=$B_SESSIONS
  run_policy B-prefix RJ_AFFINITY=prefix
  run_policy B-sticky RJ_AFFINITY=prefix RJ_ROUTE_ALPHA=0
  run_policy B-round_robin RJ_AFFINITY=round_robin
fi

# ---------------------------------------------------------------- C: decode profiles
if has_section C; then
  log "C: 2 x $MTP_PRESET + 2 x $PRESET, $C_SHORT_TOKENS/$C_LONG_TOKENS-token outputs, concurrency $C_CONCURRENCY"
  FLEET=("$MTP_PRESET" "$MTP_PRESET" "$PRESET" "$PRESET")
  run_classes C-profiles RJ_AFFINITY=prefix RJ_UPSTREAM_PROFILES=mtp,mtp,standard,standard
  run_classes C-blind RJ_AFFINITY=prefix
fi

# ---------------------------------------------------------------- D: preparation cost
if has_section D; then
  log "D: ramjet-micro-canonical (256 KiB, 2 MiB; $MICRO_REPS repetitions, median)"
  "$MICRO" --benchmark_filter='/(262144|2097152)$' --benchmark_repetitions="$MICRO_REPS" \
    --benchmark_min_time="$MICRO_MIN_TIME" --benchmark_report_aggregates_only=true \
    --benchmark_format=json --benchmark_out="$WORK/micro.json" --benchmark_out_format=json >/dev/null 2>"$WORK/micro.err" \
    || { cat "$WORK/micro.err" >&2; die "ramjet-micro-canonical failed"; }
fi
# ---------------------------------------------------------------- E: exact routing under eviction pressure
# run_exact_cell NAME POLICY [VAR=VALUE...]: POLICY is oracle, round_robin, approx or exact; fleet in
# FLEET, workload + shape args in WL (array), KV pool in SIM_EXTRA, ramjet settings every policy
# shares in E_COMMON (array), the exact window in E_MIN_BYTES. Sims publish KV events; a ramjet
# subscribes in every run (for the oracle only to count evictions: the bench routes by itself).
run_exact_cell() {
  local name=$1 policy=$2; shift 2
  start_sims "${FLEET[@]}"
  local kv=(RJ_KV_EVENT_LIVE_ENDPOINTS="$(IFS=,; echo "${kv_live[*]}")"
            RJ_KV_EVENT_REPLAY_ENDPOINTS="$(IFS=,; echo "${kv_replay[*]}")")
  local settings target
  case $policy in
    oracle) settings=(RJ_AFFINITY=round_robin RJ_EXACT_ROUTE_MODE=off) ;;
    round_robin) settings=(RJ_AFFINITY=round_robin RJ_EXACT_ROUTE_MODE=off) ;;
    approx) settings=(RJ_AFFINITY=prefix RJ_EXACT_ROUTE_MODE=off) ;;
    exact) settings=(RJ_AFFINITY=prefix RJ_EXACT_ROUTE_MODE=on ${E_MIN_BYTES:+RJ_EXACT_ROUTE_MIN_BYTES=$E_MIN_BYTES}) ;;
    exact_nowithdraw)  # diagnostic: exact trust never withdrawn after prediction misses
      settings=(RJ_AFFINITY=prefix RJ_EXACT_ROUTE_MODE=on ${E_MIN_BYTES:+RJ_EXACT_ROUTE_MIN_BYTES=$E_MIN_BYTES} RJ_EXACT_MISS_LIMIT=0) ;;
    *) die "unknown section E policy $policy" ;;
  esac
  start_ramjet "$name" "${E_COMMON[@]}" "${kv[@]}" "${settings[@]}" "$@"
  if [[ $policy == oracle ]]; then target=(--target oracle --engines "$(IFS=,; echo "${engines[*]}")")
  else target=(--target "http://$api"); fi
  log "  $name: ${settings[*]} ${E_COMMON[*]} $*"
  local t0=$SECONDS
  "$BENCH" "${target[@]}" "${WL[@]}" "${bench_args_common[@]}" --label "$name" --out-json "$WORK/$name.json" \
    >/dev/null 2>"$WORK/$name.bench.err" || { tail -5 "$WORK/$name.bench.err" >&2; die "ramjet-bench failed ($name)"; }
  echo $((SECONDS - t0)) >"$WORK/$name.wall"
  collect "$name"
  stop_pids
}

if has_section E; then
  KV_EVENTS=1
  IFS=, read -ra e_workloads <<<"$E_WORKLOADS"
  IFS=, read -ra e_policies <<<"$E_POLICIES"
  cell=0
  for wl in "${e_workloads[@]}"; do
    case $wl in
      trace)
        head -n "$E_TRACE_REQUESTS" "$E_TRACE" >"$WORK/trace.jsonl"
        log "E trace: first $E_TRACE_REQUESTS requests of $(basename "$E_TRACE"), time scale $E_TIME_SCALE, 4 x $PRESET, KV pool ${E_TRACE_KV_BLOCKS:-(preset)} blocks/sim"
        FLEET=("$PRESET" "$PRESET" "$PRESET" "$PRESET")
        SIM_EXTRA=()
        [[ -n $E_TRACE_KV_BLOCKS ]] && SIM_EXTRA=(--num-gpu-blocks-override "$E_TRACE_KV_BLOCKS")
        WL=(--workload trace --trace "$WORK/trace.jsonl" --time-scale "$E_TIME_SCALE")
        E_COMMON=()
        E_MIN_BYTES=$E_TRACE_MIN_BYTES
        ;;
      agent)
        log "E agent: 4 apps x $E_AGENT_PREFIX_KIB KiB, $E_AGENT_TURNS turns of ${E_AGENT_USER_WORDS:-48} words, c=$E_AGENT_CONCURRENCY, ${E_AGENT_DURATION}s, 2 x $MTP_PRESET + 2 x $PRESET, KV pool ${E_AGENT_KV_BLOCKS:-(preset)} blocks/sim"
        FLEET=("$MTP_PRESET" "$MTP_PRESET" "$PRESET" "$PRESET")
        SIM_EXTRA=()
        [[ -n $E_AGENT_KV_BLOCKS ]] && SIM_EXTRA=(--num-gpu-blocks-override "$E_AGENT_KV_BLOCKS")
        WL=(--workload shared-prefix --apps 4 --prefix-kib "$E_AGENT_PREFIX_KIB" --turns "$E_AGENT_TURNS"
            ${E_AGENT_USER_WORDS:+--user-words "$E_AGENT_USER_WORDS"} --seed 7 --max-tokens "$E_AGENT_MAX_TOKENS"
            --concurrency "$E_AGENT_CONCURRENCY" --duration "$E_AGENT_DURATION")
        E_COMMON=(RJ_UPSTREAM_PROFILES=mtp,mtp,standard,standard)
        E_MIN_BYTES=$E_AGENT_MIN_BYTES
        ;;
      *) die "unknown E_WORKLOADS entry: $wl (trace, agent)" ;;
    esac
    mapfile -t order < <(rotate "$cell" "${e_policies[@]}")
    for p in "${order[@]}"; do run_exact_cell "E-$wl-$p" "$p"; done
    cell=$((cell + 1))
  done
  SIM_EXTRA=() KV_EVENTS=0
fi
ELAPSED=$((SECONDS - T0))

# ---------------------------------------------------------------- report
CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)
if [[ -z ${COMMIT:-} ]]; then
  COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- src sim bench/loadgen 2>/dev/null || COMMIT+=" (+ uncommitted changes in the tree)"
fi
STAMP=$(date -u +%Y-%m-%d-%H%M%S)
mkdir -p "$RESULTS_DIR"
REPORT=$RESULTS_DIR/routing-$STAMP.md
{
  echo "# Routing benchmarks"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $COMMIT, binaries ${BUILD_DIR#"$ROOT"/}"
  echo "- machine: $(nproc) CPU(s), $CPU_MODEL, kernel $(uname -r); load average at start $START_LOAD, at end $(cut -d' ' -f1-3 /proc/loadavg); no pinning (sims, ramjet and the bench share every CPU)"
  echo "- command: \`DURATION=$DURATION SPEED=$SPEED CONCURRENCY=$CONCURRENCY B_SESSIONS=$B_SESSIONS C_CONCURRENCY=$C_CONCURRENCY C_SHORT_TOKENS=$C_SHORT_TOKENS C_LONG_TOKENS=$C_LONG_TOKENS TURNS=$TURNS USER_WORDS=$USER_WORDS MAX_TOKENS=$MAX_TOKENS PRESET=$PRESET MTP_PRESET=$MTP_PRESET${A_KV_BLOCKS:+ A_KV_BLOCKS=$A_KV_BLOCKS} $(has_section E && echo " E_WORKLOADS=$E_WORKLOADS E_POLICIES=$E_POLICIES E_TRACE_REQUESTS=$E_TRACE_REQUESTS E_TIME_SCALE=$E_TIME_SCALE E_TRACE_KV_BLOCKS=$E_TRACE_KV_BLOCKS E_TRACE_MIN_BYTES=$E_TRACE_MIN_BYTES E_AGENT_DURATION=$E_AGENT_DURATION E_AGENT_CONCURRENCY=$E_AGENT_CONCURRENCY E_AGENT_PREFIX_KIB=$E_AGENT_PREFIX_KIB E_AGENT_TURNS=$E_AGENT_TURNS E_AGENT_USER_WORDS=$E_AGENT_USER_WORDS E_AGENT_MAX_TOKENS=$E_AGENT_MAX_TOKENS E_AGENT_KV_BLOCKS=$E_AGENT_KV_BLOCKS E_AGENT_MIN_BYTES=$E_AGENT_MIN_BYTES") bench/routing.sh --sections $SECTIONS\` ($((ELAPSED / 60)) min $((ELAPSED % 60)) s of runs)"
  echo "- sims: ramjet-sim --speed $SPEED (tok/s below are wall-clock: divide by $SPEED for the modelled engines; times are wall-clock: multiply by $SPEED), fresh sims (cold caches) and a fresh ramjet per run, policy order rotated per cell"
  echo
  python3 - "$WORK" "$SECTIONS" "$SPEED" "$CONCURRENCY" "$APPS" "$PREFIX_KIB" "$TURNS" "$MAX_TOKENS" \
    "$B_SESSIONS" "$C_CONCURRENCY" "$C_SHORT_TOKENS" "$C_LONG_TOKENS" "$PRESET" "$MTP_PRESET" "$DURATION" "$USER_WORDS" \
    "$A_KV_BLOCKS" "$E_WORKLOADS" "$(basename "$E_TRACE")" "$E_TRACE_REQUESTS" "$E_TIME_SCALE" "$E_TRACE_KV_BLOCKS" \
    "$E_TRACE_MIN_BYTES" "$E_AGENT_DURATION" "$E_AGENT_CONCURRENCY" "$E_AGENT_PREFIX_KIB" "$E_AGENT_TURNS" \
    "$E_AGENT_USER_WORDS" "$E_AGENT_MAX_TOKENS" "$E_AGENT_KV_BLOCKS" "$E_AGENT_MIN_BYTES" <<'PY'
import json, os, re, sys
(work, sections, speed, concs, apps, prefix_kib, turns, max_tokens, b_sessions, c_conc, c_short,
 c_long, preset, mtp_preset, duration, user_words, a_kv_blocks, e_workloads, e_trace, e_trace_requests,
 e_time_scale, e_trace_kv_blocks, e_trace_min_bytes, e_agent_duration, e_agent_conc, e_agent_prefix_kib,
 e_agent_turns, e_agent_user_words, e_agent_max_tokens, e_agent_kv_blocks, e_agent_min_bytes) = sys.argv[1:]
sections = sections.split(",")
a_blocks = [b for b in a_kv_blocks.split(",") if b]

def step(name):
    p = os.path.join(work, name + ".json")
    if not os.path.exists(p):
        return None
    runs = json.load(open(p))["runs"]
    return runs[0]["steps"][0]

def sims(name):
    out, i = [], 0
    while os.path.exists(os.path.join(work, f"{name}.sim{i}.json")):
        try:
            out.append(json.load(open(os.path.join(work, f"{name}.sim{i}.json"))))
        except Exception:
            out.append({})
        i += 1
    return out

def route(name):
    p = os.path.join(work, name + ".route.txt")
    if not os.path.exists(p):
        return "-"
    d = {}
    for line in open(p):
        m = re.match(r'ramjet_route_decisions_total\{outcome="([a-z_]+)"\} (\d+)', line)
        if m and int(m.group(2)) > 0:
            d[m.group(1)] = int(m.group(2))
    return " ".join(f"{k}:{v}" for k, v in d.items()) or "-"

def late(name):
    s = sims(name)
    steps = sum(x.get("steps", 0) for x in s)
    late = sum(x.get("late_steps", 0) for x in s)
    lag = max([x.get("max_lag_seconds", 0) for x in s] or [0])
    return (f"{100.0 * late / steps:.0f} %" if steps else "-"), f"{lag * 1000:.0f} ms"

def sim_metrics(name):
    """Σ preemptions over the sims and their num_gpu_blocks (from vllm:cache_config_info)."""
    pre, blocks, i = 0, set(), 0
    while os.path.exists(os.path.join(work, f"{name}.sim{i}.metrics.txt")):
        for line in open(os.path.join(work, f"{name}.sim{i}.metrics.txt")):
            m = re.match(r'vllm:num_preemptions_total(?:\{[^}]*\})? ([0-9.e+]+)', line)
            if m:
                pre += int(float(m.group(1)))
            m = re.search(r'num_gpu_blocks="(\d+)"', line)
            if m:
                blocks.add(int(m.group(1)))
        i += 1
    return pre, "/".join(str(b) for b in sorted(blocks)) or "-"

def split(st):
    e = st.get("engines", {})
    tot = sum(e.values()) or 1
    return " ".join(f"{k}:{100.0 * v / tot:.0f}%" for k, v in sorted(e.items()))

def f(v, nd=0):
    if v is None:
        return "-"
    return f"{v:,.{nd}f}"

def ratio(a, b):
    return a / b if a and b else float("nan")

verdicts = []

if "A" in sections:
    pool = ("the preset's KV pool" if not a_blocks else
            f"KV pool {'/'.join(a_blocks)} blocks per sim" + (" (c " + "/".join(concs.split(",")) + ")" if len(a_blocks) > 1 else ""))
    print(f"## A. Shared prefix: {apps} apps × {prefix_kib} KiB system prompt, {turns} turns of {user_words} "
          f"user words, max_tokens {max_tokens}, 4 × {preset}, {pool}\n")
    print("| c | policy | out tok/s | vs round_robin | cached % | vs oracle | TTFT p50 ms | TTFT p99 ms "
          "| TPOT p50 ms | requests | engine split | route outcomes | KV blocks/sim | preemptions | sim late steps / max lag |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|")
    for c in concs.split(","):
        rr = step(f"A-c{c}-round_robin")
        orc = step(f"A-c{c}-oracle")
        for p in ("prefix", "load", "round_robin", "oracle"):
            n = f"A-c{c}-{p}"
            st = step(n)
            if st is None:
                continue
            lt, lag = late(n)
            print(f"| {c} | {p} | {f(st['output_tok_s'])} | {ratio(st['output_tok_s'], rr and rr['output_tok_s']):.2f}× "
                  f"| {f(st['cached_pct'], 1)} | {ratio(st['cached_pct'], orc and orc['cached_pct']) * 100:.1f} % "
                  f"| {f(st['ttft_p50_ms'], 1)} | {f(st['ttft_p99_ms'], 1)} | {f(st['tpot_p50_ms'], 2)} "
                  f"| {st['ok']}{' (' + str(st['errors']) + ' errors)' if st['errors'] else ''} | {split(st)} | {route(n)} "
                  f"| {sim_metrics(n)[1]} | {sim_metrics(n)[0]} | {lt} / {lag} |")
        pf = step(f"A-c{c}-prefix")
        if pf and rr and orc:
            t = ratio(pf["output_tok_s"], rr["output_tok_s"])
            k = ratio(pf["cached_pct"], orc["cached_pct"])
            verdicts.append(f"A c={c}: prefix/round_robin throughput {t:.2f}× (target ≥ 1.5×: "
                            f"{'met' if t >= 1.5 else 'not met'}); prefix cached {pf['cached_pct']:.1f} % = "
                            f"{k * 100:.1f} % of the oracle's {orc['cached_pct']:.1f} % (target ≥ 95 %: "
                            f"{'met' if k >= 0.95 else 'not met'})")
    print()

if "B" in sections:
    print(f"## B. One app, {b_sessions} sessions at concurrency {b_sessions}: {prefix_kib} KiB prefix, "
          f"{turns} turns, max_tokens {max_tokens}, 4 × {preset}\n")
    print("| policy | out tok/s | vs sticky (α 0) | cached % | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | requests "
          "| engine split | route outcomes | sim late steps / max lag |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|")
    sticky = step("B-sticky")
    for p, label in (("prefix", "prefix (α 4)"), ("sticky", "sticky: prefix, α 0"), ("round_robin", "round_robin")):
        st = step(f"B-{p}")
        if st is None:
            continue
        lt, lag = late(f"B-{p}")
        print(f"| {label} | {f(st['output_tok_s'])} | {ratio(st['output_tok_s'], sticky and sticky['output_tok_s']):.2f}× "
              f"| {f(st['cached_pct'], 1)} | {f(st['ttft_p50_ms'], 1)} | {f(st['ttft_p99_ms'], 1)} | {f(st['tpot_p50_ms'], 2)} "
              f"| {st['ok']} | {split(st)} | {route('B-' + p)} | {lt} / {lag} |")
    pf = step("B-prefix")
    if pf and sticky:
        t = ratio(pf["output_tok_s"], sticky["output_tok_s"])
        busiest = max(pf["engines"].values()) / max(1, sum(pf["engines"].values()))
        verdicts.append(f"B: prefix/sticky throughput {t:.2f}× (mark to beat 1.57×: {'met' if t > 1.57 else 'not met'}); "
                        f"prefix spreads: busiest engine took {busiest * 100:.0f} % of requests "
                        f"({'spread' if busiest < 0.5 else 'NOT spread'})")
    print()

if "C" in sections:
    print(f"## C. Decode profiles: 2 × {mtp_preset} (ordinals 0, 1) + 2 × {preset} (2, 3), "
          f"{int(c_conc) // 2} sessions with max_tokens {c_short} + {int(c_conc) - int(c_conc) // 2} with {c_long}, "
          f"{apps} apps × {prefix_kib} KiB per class\n")
    print("| policy | class | out tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p95 ms | requests | cached % | engine split |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    tot = {}
    for p, label in (("profiles", "prefix + RJ_UPSTREAM_PROFILES=mtp,mtp,standard,standard"), ("blind", "prefix, no profiles")):
        s, l = step(f"C-{p}-short"), step(f"C-{p}-long")
        if s is None or l is None:
            continue
        for cls, st in ((f"short ({c_short})", s), (f"long ({c_long})", l)):
            print(f"| {label} | {cls} | {f(st['output_tok_s'])} | {f(st['ttft_p50_ms'], 1)} | {f(st['ttft_p99_ms'], 1)} "
                  f"| {f(st['tpot_p50_ms'], 2)} | {f(st['tpot_p95_ms'], 2)} | {st['ok']} | {f(st['cached_pct'], 1)} | {split(st)} |")
        both = (s["output_tokens"] + l["output_tokens"]) / max(s["elapsed_s"], l["elapsed_s"])
        tot[p] = both
        lt, lag = late(f"C-{p}")
        print(f"| {label} | **both** | **{f(both)}** | | | | | {s['ok'] + l['ok']} | | route: {route('C-' + p)}; sim late {lt} / {lag} |")
    if "profiles" in tot and "blind" in tot:
        t = tot["profiles"] / tot["blind"]
        verdicts.append(f"C: profile routing / profile-blind total output throughput {t:.2f}× "
                        f"(target > 1: {'met' if t >= 1.05 else 'within noise (±5 %), not shown' if t > 0.95 else 'not met'})")
    print()

if "D" in sections:
    p = os.path.join(work, "micro.json")
    if os.path.exists(p):
        data = json.load(open(p))
        med = {}
        for b in data["benchmarks"]:  # the median aggregate, or the single run when there is one
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            name = b.get("run_name", b["name"])
            if b.get("run_type") == "iteration" and name in med:
                continue
            med[name] = b["cpu_time"] * {"us": 1, "ms": 1000, "ns": 0.001}[b["time_unit"]]
        print("## D. Preparation cost (ramjet-micro-canonical, CPU time, median)\n")
        print("| body | simdjson parse | Boost parse | prepare() (parse + shims) | canonical + chain | chain only "
              "| parse + canonical + chain | full: prepare + fingerprints | full / simdjson | chain / simdjson |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for size, label in ((262144, "256 KiB"), (2097152, "2 MiB")):
            g = lambda n: med.get(f"BM_{n}/{size}")
            sj, bp, pr, fp, fnv, pf, cp = (g("SimdjsonParse"), g("BoostParse"), g("Prepare"), g("Fingerprint"),
                                           g("ChainOnly") or g("FnvChainOnly"), g("ParseAndFingerprint"), g("CopyBody"))
            if None in (sj, bp, pr, fp, fnv, pf, cp):
                continue
            # What a request pays under RJ_AFFINITY=prefix: prepare() with fingerprints from its
            # own parse (BM_PrepareFingerprinted); older binaries lack it: prepare + fingerprints.
            pfp = g("PrepareFingerprinted")
            full = pfp - cp if pfp is not None else pr - cp + fp
            print(f"| {label} | {sj:,.0f} µs | {bp:,.0f} µs ({bp / sj:.1f}×) | {pr - cp:,.0f} µs ({(pr - cp) / sj:.1f}×) "
                  f"| {fp:,.0f} µs ({fp / sj:.1f}×) | {fnv:,.0f} µs ({fnv / sj:.1f}×) | {pf:,.0f} µs ({pf / sj:.1f}×) "
                  f"| {full:,.0f} µs | **{full / sj:.1f}×** | {fnv / sj:.1f}× |")
            # (prepare() parses with json_tape up to 4 MiB, with Boost.JSON past that: its cost is
            # no longer the Boost parse plus the shims, so it is reported whole.)
            verdicts.append(f"D {label}: parse + shims + canonical + fingerprints = {full / sj:.1f}× a simdjson parse "
                            f"(prepare() alone, its parse, shims and facts: {(pr - cp) / sj:.1f}×; "
                            f"canonical bytes {(fp - fnv) / sj:.1f}×; chain {fnv / sj:.1f}×)")
        print("\nprepare() excludes the body copy the benchmark makes (BM_CopyBody subtracted); "
              "canonical bytes = canonical + chain − chain only (the chain: XXH3, FNV-1a in binaries before 43884d1); full = prepare() with fingerprints from its own parse "
              "(BM_PrepareFingerprinted − BM_CopyBody: what a request pays with RJ_AFFINITY=prefix).\n")

def kv(name):
    """Σ over the engines of ramjet_kv_blocks_applied_total by op, exact outcomes, prediction results."""
    p = os.path.join(work, name + ".kv.txt")
    ops, outcomes, preds = {}, {}, {}
    if not os.path.exists(p):
        return None
    for line in open(p):
        m = re.match(r'ramjet_kv_blocks_applied_total\{([^}]*)\} ([0-9.e+]+)', line)
        if m:
            op = re.search(r'op="(\w+)"', m.group(1)).group(1)
            ops[op] = ops.get(op, 0) + int(float(m.group(2)))
        m = re.match(r'ramjet_exact_route_total\{outcome="(\w+)"\} ([0-9.e+]+)', line)
        if m and float(m.group(2)) > 0:
            outcomes[m.group(1)] = int(float(m.group(2)))
        m = re.match(r'ramjet_exact_predictions_total\{([^}]*)\} ([0-9.e+]+)', line)
        if m:
            r = re.search(r'result="(\w+)"', m.group(1)).group(1)
            preds[r] = preds.get(r, 0) + int(float(m.group(2)))
    return ops, outcomes, preds

def errhist(name):
    """ramjet_exact_prediction_error_tokens as counts per range (cumulative buckets differenced)."""
    p = os.path.join(work, name + ".kv.txt")
    if not os.path.exists(p):
        return ""
    b = []
    for line in open(p):
        m = re.match(r'ramjet_exact_prediction_error_tokens_bucket\{le="([^"]+)"\} ([0-9.e+]+)', line)
        if m:
            b.append((m.group(1), int(float(m.group(2)))))
    if not b or b[-1][1] == 0:
        return ""
    out, prev, lo = [], 0, "0"
    for le, c in b:
        if c - prev:
            out.append(f"{'0' if le == '0' else ('>' + lo if le == '+Inf' else lo + '–' + le)}:{c - prev}")
        prev, lo = c, le
    return " ".join(out)

if "E" in sections:
    for wl in e_workloads.split(","):
        if wl == "trace":
            print(f"## E. Exact routing under eviction pressure: trace replay\n")
            print(f"The first {e_trace_requests} requests of `{e_trace}` (`ramjet-bench --workload trace --time-scale "
                  f"{e_time_scale}`, replayed whole: every policy gets the same requests; output_length as max_tokens, "
                  f"ignore_eos), 4 × {preset}, KV pool {e_trace_kv_blocks or 'of the preset'} blocks per sim, "
                  f"exact window RJ_EXACT_ROUTE_MIN_BYTES={e_trace_min_bytes or '32768 (default)'}.\n")
        else:
            print(f"## E. Exact routing under eviction pressure: cache-pressured agent workload\n")
            print(f"scripts/demo's workload: 4 apps × {e_agent_prefix_kib} KiB system prompt, {e_agent_turns} turns of "
                  f"{e_agent_user_words or 48} user words, max_tokens {e_agent_max_tokens}, c = {e_agent_conc}, "
                  f"{e_agent_duration} s, 2 × {mtp_preset} + 2 × {preset} (RJ_UPSTREAM_PROFILES=mtp,mtp,standard,standard), "
                  f"KV pool {e_agent_kv_blocks or 'of the preset'} blocks per sim, exact window "
                  f"RJ_EXACT_ROUTE_MIN_BYTES={e_agent_min_bytes}.\n")
        print("| policy | out tok/s | cached % | vs oracle | TTFT p50 ms | TTFT p95 ms | TPOT p50 ms | requests | wall s "
              "| engine split | exact outcomes | KV blocks stored / removed (Σ sims) | preemptions | sim late steps / max lag |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|")
        orc = step(f"E-{wl}-oracle")
        for p, label in (("round_robin", "round_robin"), ("approx", "approximate (prefix fingerprints)"),
                         ("exact", "exact (KV events, remote tokens)"),
                         ("exact_nowithdraw", "exact, RJ_EXACT_MISS_LIMIT=0 (diagnostic)"), ("oracle", "oracle")):
            n = f"E-{wl}-{p}"
            st = step(n)
            if st is None:
                continue
            lt, lag = late(n)
            k = kv(n)
            ops, outcomes, preds = k if k else ({}, {}, {})
            wall = open(os.path.join(work, n + ".wall")).read().strip() if os.path.exists(os.path.join(work, n + ".wall")) else "-"
            oc = " ".join(f"{a}:{b}" for a, b in outcomes.items()) or "-"
            if preds:
                oc += " (predictions " + " ".join(f"{a}:{b}" for a, b in preds.items()) + ")"
            eh = errhist(n)
            if eh:
                oc += "; \\|predicted − cached\\| tokens " + eh
            print(f"| {label} | {f(st['output_tok_s'])} | {f(st['cached_pct'], 1)} "
                  f"| {ratio(st['cached_pct'], orc and orc['cached_pct']) * 100:.1f} % | {f(st['ttft_p50_ms'], 1)} "
                  f"| {f(st['ttft_p95_ms'], 1)} | {f(st['tpot_p50_ms'], 2)} "
                  f"| {st['ok']}{' (' + str(st['errors']) + ' errors)' if st['errors'] else ''} | {wall} | {split(st)} | {oc} "
                  f"| {ops.get('stored', 0):,} / **{ops.get('removed', 0):,}** | {sim_metrics(n)[0]} | {lt} / {lag} |")
        ap, ex = step(f"E-{wl}-approx"), step(f"E-{wl}-exact")
        if ap and ex:
            rc = ratio(ex["cached_pct"], ap["cached_pct"])
            rt95 = ratio(ex["ttft_p95_ms"], ap["ttft_p95_ms"])
            rt50 = ratio(ex["ttft_p50_ms"], ap["ttft_p50_ms"])
            rtp = ratio(ex["output_tok_s"], ap["output_tok_s"])
            print(f"\nexact / approximate: cached % {rc:.3f}×, TTFT p50 {rt50:.2f}×, TTFT p95 {rt95:.2f}× (lower is better), "
                  f"output tok/s {rtp:.2f}×", end="")
            if orc:
                ro = ratio(ex["cached_pct"], orc["cached_pct"])
                print(f"; exact / oracle: cached % {ro * 100:.1f} %, TTFT p95 {ratio(ex['ttft_p95_ms'], orc['ttft_p95_ms']):.2f}×, "
                      f"output tok/s {ratio(ex['output_tok_s'], orc['output_tok_s']):.2f}×", end="")
            print()
            nw = step(f"E-{wl}-exact_nowithdraw")
            if nw:
                print(f"exact with RJ_EXACT_MISS_LIMIT=0 / approximate: cached % {ratio(nw['cached_pct'], ap['cached_pct']):.3f}×, "
                      f"TTFT p50 {ratio(nw['ttft_p50_ms'], ap['ttft_p50_ms']):.2f}×, TTFT p95 "
                      f"{ratio(nw['ttft_p95_ms'], ap['ttft_p95_ms']):.2f}×, output tok/s {ratio(nw['output_tok_s'], ap['output_tok_s']):.2f}×"
                      + (f"; / oracle: cached % {ratio(nw['cached_pct'], orc['cached_pct']) * 100:.1f} %" if orc else ""))
            print()
            removed = (kv(f"E-{wl}-exact") or ({}, {}, {}))[0].get("removed", 0)
            verdicts.append(
                f"E {wl}: exact cached {ex['cached_pct']:.1f} % vs approximate {ap['cached_pct']:.1f} % "
                f"(exact ≥ approximate: {'met' if ex['cached_pct'] >= ap['cached_pct'] else 'not met'}); "
                f"TTFT p95 {ex['ttft_p95_ms']:.1f} vs {ap['ttft_p95_ms']:.1f} ms "
                f"(exact ≤ approximate: {'met' if ex['ttft_p95_ms'] <= ap['ttft_p95_ms'] else 'not met'})"
                + (f"; exact = {ratio(ex['cached_pct'], orc['cached_pct']) * 100:.1f} % of the oracle's cached "
                   f"{orc['cached_pct']:.1f} % (target ≥ 95 %: "
                   f"{'met' if ratio(ex['cached_pct'], orc['cached_pct']) >= 0.95 else 'not met'})" if orc else "")
                + f"; {removed:,} blocks evicted in the exact run ({'evictions happened' if removed else 'NO evictions'})")
        else:
            print()

print("## Verdicts\n")
for v in verdicts:
    print("- " + v)
PY
} >"$REPORT"

cat "$REPORT"
log "report written to $REPORT (runs took $((ELAPSED / 60)) min $((ELAPSED % 60)) s)"
