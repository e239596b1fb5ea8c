# bench/lib.sh: what the benchmark scripts share (sourced, not run): a work folder whose
# processes are stopped and which is removed on exit, waiting for a line in a log, and fresh
# ramjet-sim engines. The sourcing script calls bench_args with its name and arguments (log, die,
# BUILD) and sets SIM and SPEED before start_sims.

# bench_args NAME "$@": the scripts' common arguments — --no-build (BUILD=0; else BUILD=1) and
# -h/--help (prints the script's header comment and exits) — and log/die, which prefix NAME.
bench_args() {
  BENCH_NAME=$1
  BUILD=1
  [[ ${2:-} == --no-build ]] && BUILD=0
  [[ ${2:-} == -h || ${2:-} == --help ]] && { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
  log() { echo "$BENCH_NAME: $*" >&2; }
  die() { log "$*"; exit 1; }
  return 0
}

# bench_binaries: RAMJET, SIM and BENCH, from BIN_DIR when it is set (one folder holding ramjet,
# ramjet-sim and ramjet-bench, e.g. copies that a rebuild of build/release cannot change under a
# long run; the scripts then build nothing), else from BUILD_DIR's tree, built first (the release
# preset) when the script was not given --no-build (BUILD=1). Stops on a missing one.
bench_binaries() {
  if ((${BUILD:-0})) && [[ -z ${BIN_DIR:-} ]]; then  # BUILD=1 (no --no-build): the release preset first
    (cd "$ROOT" && cmake --preset release -B "$BUILD_DIR" >/dev/null &&
      nice cmake --build "$BUILD_DIR" -j "$(nproc)" --target ramjet ramjet-sim ramjet-bench)
  fi
  if [[ -n ${BIN_DIR:-} ]]; then
    RAMJET=$BIN_DIR/ramjet SIM=$BIN_DIR/ramjet-sim BENCH=$BIN_DIR/ramjet-bench
  else
    RAMJET=$BUILD_DIR/src/app/ramjet SIM=$BUILD_DIR/sim/server/ramjet-sim BENCH=$BUILD_DIR/bench/loadgen/ramjet-bench
  fi
  local b
  for b in "$RAMJET" "$SIM" "$BENCH"; do [[ -x $b ]] || die "$b not found (build it, or set BUILD_DIR or BIN_DIR)"; done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# cpu_by_name PID... -> JSON {"comm": CPU seconds (user + system, children included)} summed by name
cpu_by_name() {
  python3 - "$@" <<'PY'
import json, os, sys
tick, out = os.sysconf("SC_CLK_TCK"), {}
for pid in sys.argv[1:]:
    try:
        raw = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    name, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()
    out[name] = out.get(name, 0) + sum(int(v) for v in rest[11:15]) / tick
print(json.dumps(out))
PY
}
free_udp_port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# bench_workdir NAME: WORK=/tmp/NAME.XXXXXX; every pid added to pids is stopped on exit, and the
# folder removed (kept when KEEP_WORK is set).
bench_workdir() {
  WORK=$(mktemp -d "/tmp/$1.XXXXXX")
  pids=()
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}
stop_pids() {  # stop every process in pids (TERM, then KILL after 5 s), then forget them
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
cleanup() { stop_pids; if [[ -n ${KEEP_WORK:-} ]]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi; }

wait_grep() {  # wait_grep FILE REGEX: print the first match, waiting up to 15 s
  local f=$1 re=$2
  for _ in $(seq 150); do
    if grep -oE "$re" "$f" 2>/dev/null | head -n1; then return 0; fi
    sleep 0.1
  done
  tail -5 "$f" >&2 2>/dev/null || true
  return 1
}

# The demo's cache-pressured agent workload (scripts/demo; docs/benchmarks.md): defaults for
# whichever of its variables the caller's environment did not set, then agent_bench_args fills
# AGENT_ARGS with the matching ramjet-bench arguments.
agent_workload_defaults() {
  SPEED=${SPEED:-6} ENGINES=${ENGINES:-4} CONCURRENCY=${CONCURRENCY:-32} APPS=${APPS:-4}
  PREFIX_KIB=${PREFIX_KIB:-24} TURNS=${TURNS:-10} USER_WORDS=${USER_WORDS-2048} MAX_TOKENS=${MAX_TOKENS:-64}
  KV_BLOCKS=${KV_BLOCKS-384} PRESET=${PRESET:-qwen3.8-27b-tp4} EXACT_MIN_BYTES=${EXACT_MIN_BYTES:-8192}
}
agent_bench_args() {
  AGENT_ARGS=(--workload shared-prefix --apps "$APPS" --prefix-kib "$PREFIX_KIB" --turns "$TURNS"
              --concurrency "$CONCURRENCY" --max-tokens "$MAX_TOKENS" --ignore-eos)
  [[ -n $USER_WORDS ]] && AGENT_ARGS+=(--user-words "$USER_WORDS")
  return 0
}

engines=() kv_live=() kv_replay=()
SIM_EXTRA=()   # extra ramjet-sim arguments for every sim (e.g. --num-gpu-blocks-override)
SIM_PREFIX=()  # a command the sims run under (e.g. nice)
KV_EVENTS=0    # 1: every sim publishes vLLM KV events (live + replay) -> kv_live, kv_replay
start_sims() {  # start_sims PRESET... -> engines=(URL...), one fresh sim per preset
  local i=0 p port kv=()
  engines=() kv_live=() kv_replay=()
  ((KV_EVENTS)) && kv=(--kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:0","replay_endpoint":"tcp://*:0"}')
  for p in "$@"; do
    ${SIM_PREFIX[@]+"${SIM_PREFIX[@]}"} "$SIM" --host 127.0.0.1 --port 0 --served-model-name qwen3.8-27b --preset "$p" \
      --speed "$SPEED" --enable-prompt-tokens-details --seed $((i + 1)) ${SIM_EXTRA[@]+"${SIM_EXTRA[@]}"} \
      ${kv[@]+"${kv[@]}"} >"$WORK/sim$i.log" 2>&1 &
    pids+=($!)
    port=$(wait_grep "$WORK/sim$i.log" 'listening port=[0-9]+' | cut -d= -f2) || die "sim $i ($p) did not start"
    engines+=("http://127.0.0.1:$port")
    if ((KV_EVENTS)); then
      kv_live+=("tcp://127.0.0.1:$(wait_grep "$WORK/sim$i.log" 'kv_endpoint=[^ ]+' | sed 's/.*://')") || die "sim $i: no kv_endpoint"
      kv_replay+=("tcp://127.0.0.1:$(wait_grep "$WORK/sim$i.log" 'kv_replay=[^ ]+' | sed 's/.*://')") || die "sim $i: no kv_replay"
    fi
    i=$((i + 1))
  done
}

# start_ramjet LOG VAR=VALUE...: $RAMJET on ephemeral loopback ports with those settings, its stderr
# to LOG; sets api and metrics (HOST:PORT) and waits until it is ready (wait_ramjet_ready).
start_ramjet() {
  local log=$1
  shift
  env RJ_LISTEN=127.0.0.1:0 RJ_METRICS_LISTEN=127.0.0.1:0 "$@" "$RAMJET" 2>"$log" &
  pids+=($!)
  api=$(wait_grep "$log" 'api=[0-9.]+:[0-9]+' | cut -d= -f2) || die "ramjet did not start ($log)"
  metrics=$(wait_grep "$log" 'metrics=[0-9.]+:[0-9]+' | cut -d= -f2)
  wait_ramjet_ready "$api" || die "engines not healthy and trusted within 15 s ($log)"
}

# wait_ramjet_ready HOST:PORT [STEP]: until ramjet's /health says ok with every engine's KV-event
# index trusted (engines without events count as trusted), asking every STEP seconds (0.1; 0.05 where
# the time to ready is measured), up to 15 s; prints the last answer on failure.
wait_ramjet_ready() {
  local h step=${2:-0.1}
  for _ in $(seq "$(python3 -c "print(round(15 / $step))")"); do
    h=$(curl -s "http://$1/health" || true)
    if python3 -c 'import json,sys; j=json.loads(sys.argv[1]); r=j["replicas"]
sys.exit(0 if j["status"]=="ok" and all(x.get("kv_trusted", True) for x in r) else 1)' "$h" 2>/dev/null; then
      return 0
    fi
    sleep "$step"
  done
  echo "$h" >&2
  return 1
}

# reset_prefix_caches: POST /reset_prefix_cache on every engine (vLLM's admin endpoint; the sims
# drop every cached block and publish AllBlocksCleared), after waiting up to 30 s for each to be
# idle (no running or waiting request: vLLM refuses to reset while blocks are in use).
reset_prefix_caches() {
  local e code
  for e in "${engines[@]}"; do
    for _ in $(seq 300); do
      curl -s "$e/sim/stats" | python3 -c 'import json,sys; j=json.load(sys.stdin); sys.exit(0 if j["running"]==0 and j["waiting"]==0 else 1)' 2>/dev/null && break
      sleep 0.1
    done
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$e/reset_prefix_cache") || true
    [[ $code == 200 ]] || die "POST $e/reset_prefix_cache answered ${code:-nothing}"
  done
}

# run_alternating LABEL...: calls `run LABEL REPEAT` for each label, $REPEATS times, the label
# order reversed on every second repeat (a drift in the machine's load favours no label).
run_alternating() {
  local rep k label order
  for ((rep = 1; rep <= REPEATS; rep++)); do
    order=("$@")
    if ((rep % 2 == 0)); then order=(); for ((k = $#; k >= 1; k--)); do order+=("${!k}"); done; fi
    for label in "${order[@]}"; do run "$label" "$rep"; done
  done
}

# median_table NAME COLUMN HEADING DESCRIPTION LABEL...: each label's medians over $REPEATS runs
# ($WORK/<label>-<repeat>.json, ramjet-bench's JSON) as one Markdown table against the first label,
# printed and written to $RESULTS_DIR/NAME-<UTC>.md.
median_table() {
  local name=$1 column=$2 heading=$3 description=$4
  shift 4
  mkdir -p "$RESULTS_DIR"
  local out
  out=$RESULTS_DIR/$name-$(date -u +%Y-%m-%d-%H%M%S).md
  python3 - "$WORK" "$REPEATS" "$out" "$column" "$heading" "$description" "$@" <<'PY'
import json, sys, statistics
work, repeats, out, column, heading, description = sys.argv[1], int(sys.argv[2]), *sys.argv[3:7]
labels = sys.argv[7:]
rows = {l: [json.load(open(f"{work}/{l}-{r}.json"))["runs"][0]["steps"][0] for r in range(1, repeats + 1)] for l in labels}
def med(l, k): return statistics.median(s[k] for s in rows[l])
base = labels[0]
lines = [heading, "", description, "",
         f"| {column} | ok | errors | out tok/s | vs " + base + " | TTFT p50 ms | TTFT p95 ms | cached % |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
for l in labels:
    t = med(l, "output_tok_s")
    lines.append(f"| {l} | {med(l, 'ok'):.0f} | {med(l, 'errors'):.0f} | {t:.0f} | {t / med(base, 'output_tok_s'):.2f}x | "
                 f"{med(l, 'ttft_p50_ms'):.1f} | {med(l, 'ttft_p95_ms'):.1f} | {med(l, 'cached_pct'):.1f} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print(f"\n(written to {out})")
PY
}
