#!/usr/bin/env bash
# peers.sh: ramjet and the peer routers in front of the same engines on the same trace (issue 27,
# "The peers in the same run"). Four ramjet-sim engines (the several-routers trace setup:
# qwen3.8-27b-tp4 at SPEED, KV events on, the preset's own KV pool) that tokenize with the real
# Qwen3 tokenizer and chat template (MODEL_DIR), so that ramjet's exact routing takes its tokens
# locally (RJ_MODEL_DIR, each engine attested by its /tokenize), the path issue 27 makes the
# normal one. They are started once; before every run their prefix caches are emptied (POST
# /reset_prefix_cache). One router at a time, fresh, then the same trace slice replayed whole by
# ramjet-bench:
#   ramjet-fp           ramjet, RJ_AFFINITY=prefix: prefix fingerprints (as several_routers.sh's -fp)
#   ramjet-exact        the same plus exact routing on the engines' KV events (RJ_EXACT_ROUTE_MODE=on,
#                       RJ_KV_EVENT_LIVE/REPLAY_ENDPOINTS), prompt tokens local (RJ_MODEL_DIR)
#   vllm-router-cache   vLLM Router (PyPI vllm-router), --policy cache_aware (its defaults)
#   vllm-router-kv      vLLM Router, --policy kv_aware on the engines' KV events (--kv-event-source,
#                       --kv-event-replay-source, the engines' block size); it gets each prompt's
#                       tokens from every engine's POST /tokenize (0.1.17, HTTP workers)
#   smg-cache           the SGLang model gateway (PyPI smg), smg launch --policy cache_aware
# The peers are installed, pinned, into the project's own virtual environment (PEERS_VENV; never
# the system Python); one that cannot be installed or started is reported with the reason and
# the others run. Measured per run: cached-prompt-token % (the engines' cached_tokens over
# prompt_tokens, from ramjet-bench), TTFT p50/p95/p99, output throughput, and the router's CPU
# seconds (utime+stime of its process and its children, from /proc before and after the replay).
# Target (issue 27): ramjet >= every peer's cached share at a lower TTFT p95.
# Prints Markdown and writes bench/results/peers-<UTC>.md.
#
# Usage: bench/peers.sh [--no-build]
# Environment:
#   TRACE=../shared/traces/mooncake_conversation_trace.jsonl  TRACE_REQUESTS=2000  TIME_SCALE=0.15
#   TRACE_KV_BLOCKS=3126 (KV blocks per sim)  SPEED=6  ENGINES=4  PRESET=qwen3.8-27b-tp4  SEED=8
#   EXACT_MIN_BYTES=8192 (RJ_EXACT_ROUTE_MIN_BYTES, as several_routers.sh)
#   LABELS="ramjet-fp ramjet-exact vllm-router-cache vllm-router-kv smg-cache"   runs, in this order
#   MODEL_DIR=test/data/testdata/models/qwen3   tokenizer.json + tokenizer_config.json + template
#   PEERS_VENV=.venv/peers   VLLM_ROUTER_VERSION=0.1.17   SMG_VERSION=1.13.0
#   BUILD_DIR=build/release  BIN_DIR (a folder with ramjet, ramjet-sim, ramjet-bench; no build)
#   RESULTS_DIR=bench/results  COMMIT (default: HEAD)  KEEP_WORK=1 keeps the work folder (logs)
#   BENCH_ARGS="..."   ramjet-bench workload arguments instead of the trace replay, e.g. the routers'
#                own latency on idle engines: "--workload unique --prompt-kib 16 --concurrency 1
#                --requests 40 --max-tokens 32"
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args peers "$@"
TRACE=${TRACE:-../shared/traces/mooncake_conversation_trace.jsonl}
TRACE_REQUESTS=${TRACE_REQUESTS:-2000}
TIME_SCALE=${TIME_SCALE:-0.15}
KV_BLOCKS=${TRACE_KV_BLOCKS:-3126}
SPEED=${SPEED:-6}
ENGINES=${ENGINES:-4}
PRESET=${PRESET:-qwen3.8-27b-tp4}
SEED=${SEED:-8}
EXACT_MIN_BYTES=${EXACT_MIN_BYTES:-8192}
LABELS=${LABELS:-ramjet-fp ramjet-exact vllm-router-cache vllm-router-kv smg-cache}
MODEL_DIR=${MODEL_DIR:-test/data/testdata/models/qwen3}
PEERS_VENV=${PEERS_VENV:-.venv/peers}
VLLM_ROUTER_VERSION=${VLLM_ROUTER_VERSION:-0.1.17}
SMG_VERSION=${SMG_VERSION:-1.13.0}
BUILD_DIR=${BUILD_DIR:-build/release}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
MODEL=qwen3.8-27b
for v in TRACE MODEL_DIR PEERS_VENV BUILD_DIR RESULTS_DIR; do [[ ${!v} == /* ]] || printf -v "$v" '%s' "$ROOT/${!v}"; done
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}

for tool in curl python3; do command -v $tool >/dev/null || die "$tool not found (run scripts/setup as root)"; done
[[ -r $TRACE ]] || die "TRACE $TRACE not readable"
for f in tokenizer.json tokenizer_config.json; do [[ -r $MODEL_DIR/$f ]] || die "MODEL_DIR $MODEL_DIR has no $f"; done

bench_binaries

# ---- the peers, pinned, in the project's own virtual environment -------------------------------
declare -A peer_missing=()  # package -> why it cannot run here
python=/usr/bin/python3
install_peers() {
  local pkg ver out got
  if [[ ! -x $PEERS_VENV/bin/python ]]; then
    "$python" -c 'import ensurepip, venv' 2>/dev/null || die "python3-venv is missing (run scripts/setup as root)"
    mkdir -p "$(dirname "$PEERS_VENV")"
    "$python" -m venv "$PEERS_VENV" || die "could not create $PEERS_VENV"
  fi
  for pkg in vllm-router smg; do
    ver=$VLLM_ROUTER_VERSION
    [[ $pkg == smg ]] && ver=$SMG_VERSION
    got=$("$PEERS_VENV/bin/python" -m pip show "$pkg" 2>/dev/null | sed -n 's/^Version: //p') || true
    if [[ $got != "$ver" ]]; then
      log "installing $pkg $ver into $PEERS_VENV"
      if ! out=$("$PEERS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
                 --progress-bar off -c "$ROOT/bench/peers.constraints.txt" "$pkg==$ver" 2>&1); then
        peer_missing[$pkg]="pip install $pkg==$ver failed: $(echo "$out" | grep -v '^\s*$' | tail -n 2 | tr '\n' ' ')"
        log "${peer_missing[$pkg]}"
        continue
      fi
    fi
    # Installed is not runnable: a wheel for another platform or a missing shared library shows here.
    local cli=("$PEERS_VENV/bin/vllm-router" --help)
    [[ $pkg == smg ]] && cli=("$PEERS_VENV/bin/smg" launch --help)
    if ! out=$("${cli[@]}" 2>&1 >/dev/null); then
      peer_missing[$pkg]="$pkg $ver is installed but does not start here: $(echo "$out" | tail -n 2 | tr '\n' ' ')"
      log "${peer_missing[$pkg]}"
    else
      log "$pkg $ver present in $PEERS_VENV"
    fi
  done
}
install_peers

bench_workdir ramjet-peers
head -n "$TRACE_REQUESTS" "$TRACE" >"$WORK/trace.jsonl"
# The engines' model folder as ramjet reads it (RJ_MODEL_DIR): the tokenizer and template, plus
# the config.json a model folder has (ramjet picks its tokenizer profile from model_type).
mkdir -p "$WORK/model"
for f in tokenizer.json tokenizer_config.json chat_template.jinja config.json; do
  if [[ -e $MODEL_DIR/$f ]]; then ln -s "$MODEL_DIR/$f" "$WORK/model/$f"; fi
done
if [[ ! -e $WORK/model/config.json ]]; then
  echo '{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","vocab_size":151936}' >"$WORK/model/config.json"
fi

KV_EVENTS=1
SIM_PREFIX=(nice)
SIM_EXTRA=(--num-gpu-blocks-override "$KV_BLOCKS" --tokenizer "$MODEL_DIR/tokenizer.json"
           --chat-template "$MODEL_DIR/tokenizer_config.json")
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done
log "starting $ENGINES sims ($PRESET at ${SPEED}x, $KV_BLOCKS KV blocks each, KV events, tokenizer $MODEL_DIR)"
start_sims "${FLEET[@]}"
sim_pids=("${pids[@]}")
BLOCK_SIZE=$(wait_grep "$WORK/sim0.log" 'block_size=[0-9]+' | cut -d= -f2) || die "sim 0: no block_size"

# proc_cpu_ticks PID: utime+stime (+ the waited-for children's) of PID and of its live descendants.
proc_cpu_ticks() {
  python3 - "$1" <<'EOF'
import os, sys
def stat(pid):
    s = open(f"/proc/{pid}/stat").read()
    r = s[s.rindex(")") + 2:].split()  # r[0] is field 3 (state)
    return int(r[1]), sum(int(x) for x in r[11:15])  # ppid; utime, stime, cutime, cstime
procs = {}
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            procs[int(d)] = stat(d)
        except (OSError, ValueError, IndexError):
            pass
todo, total, seen = [int(sys.argv[1])], 0, set()
while todo:
    p = todo.pop()
    if p in seen or p not in procs:
        continue
    seen.add(p)
    total += procs[p][1]
    todo += [c for c, (pp, _) in procs.items() if pp == p]
print(total)
EOF
}
sim_finished() {  # one line per engine: requests finished so far, prompt tokens, prefix-cache hits
  local e
  for e in "${engines[@]}"; do
    curl -s "$e/sim/stats" | python3 -c 'import json,sys; j=json.load(sys.stdin)
print(j["finished_stop"] + j["finished_length"] + j["finished_abort"], j["prompt_tokens"], j["prefix_cache_hits"])'
  done
}

wait_http() {  # wait_http URL SECONDS [PYTHON-CONDITION on the JSON body j]: until 200 (and the condition)
  local url=$1 secs=$2 cond=${3:-True} body
  for _ in $(seq $((secs * 10))); do
    if body=$(curl -sf "$url" 2>/dev/null) &&
       python3 -c "import json,sys; j=json.loads(sys.argv[1]) if sys.argv[1].strip().startswith('{') else None; sys.exit(0 if ($cond) else 1)" "$body" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

router_pid="" target="" router_cmd=""
start_router() {  # start_router LABEL: one fresh router in front of the engines -> router_pid, target, router_cmd
  local label=$1 port mport api workers=() sources=() replays=() i
  port=$(free_port) mport=$(free_port)
  for ((i = 0; i < ${#engines[@]}; i++)); do
    workers+=("${engines[$i]}")
    sources+=(--kv-event-source "${engines[$i]}=${kv_live[$i]}")
    replays+=(--kv-event-replay-source "${engines[$i]}=${kv_replay[$i]}")
  done
  local cmd=() envs=(RJ_UPSTREAM="$(IFS=,; echo "${engines[*]}")" RJ_LISTEN=127.0.0.1:$port RJ_METRICS_LISTEN=127.0.0.1:$mport
                     RJ_THREADS=2 RJ_AFFINITY=prefix)
  case $label in
    ramjet-fp) cmd=(env "${envs[@]}" "$RAMJET") ;;
    ramjet-exact)
      cmd=(env "${envs[@]}" RJ_KV_EVENT_LIVE_ENDPOINTS="$(IFS=,; echo "${kv_live[*]}")"
           RJ_KV_EVENT_REPLAY_ENDPOINTS="$(IFS=,; echo "${kv_replay[*]}")" RJ_EXACT_ROUTE_MODE=on
           RJ_EXACT_ROUTE_MIN_BYTES="$EXACT_MIN_BYTES" RJ_MODEL_DIR="$WORK/model" "$RAMJET") ;;
    vllm-router-cache)
      cmd=("$PEERS_VENV/bin/vllm-router" --host 127.0.0.1 --port "$port" --worker-urls "${workers[@]}"
           --policy cache_aware --prometheus-host 127.0.0.1 --prometheus-port "$mport") ;;
    vllm-router-kv)
      cmd=("$PEERS_VENV/bin/vllm-router" --host 127.0.0.1 --port "$port"
           --worker-urls "${workers[@]}" --policy kv_aware "${sources[@]}" "${replays[@]}"
           --kv-event-block-size "$BLOCK_SIZE" --kv-event-model "$MODEL"
           --prometheus-host 127.0.0.1 --prometheus-port "$mport") ;;
    smg-cache)
      cmd=("$PEERS_VENV/bin/smg" launch --host 127.0.0.1 --port "$port" --worker-urls "${workers[@]}"
           --policy cache_aware --prometheus-host 127.0.0.1 --prometheus-port "$mport") ;;
    *) die "unknown label $label (ramjet-fp ramjet-exact vllm-router-cache vllm-router-kv smg-cache)" ;;
  esac
  router_cmd="${cmd[*]}"
  NO_COLOR=1 nice "${cmd[@]}" >"$WORK/$label.out" 2>"$WORK/$label.err" &
  router_pid=$!
  pids+=("$router_pid")
  target=127.0.0.1:$port
  echo "$mport" >"$WORK/$label.mport"
  case $label in
    ramjet-*) wait_ramjet_ready "$target" || die "$label: engines not healthy and trusted within 15 s"
              wait_http "http://$target/health" 30 'all(r.get("tokenizer_attested", True) for r in j["replicas"])' ||
                die "$label: engines not attested within 30 s" ;;
    vllm-router-*) wait_http "http://$target/readiness" 60 || die "$label: not ready within 60 s ($(tail -n 3 "$WORK/$label.err"))" ;;
    smg-*) wait_http "http://$target/readiness" 60 "j['healthy_workers'] == $ENGINES" ||
             die "$label: not ready within 60 s ($(tail -n 3 "$WORK/$label.err"))" ;;
  esac
}
stop_router() {  # TERM, then KILL after 10 s; the sims stay
  kill -TERM "$router_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$router_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$router_pid" 2>/dev/null || true
  wait "$router_pid" 2>/dev/null || true
  pids=("${sim_pids[@]}")
}

run() {  # run LABEL: empty caches, a fresh router, the trace; CPU and the engines' split around it
  local label=$1 c0 c1 t0 t1
  reset_prefix_caches
  start_router "$label"
  log "$label: ${BENCH_ARGS:-$TRACE_REQUESTS requests of $(basename "$TRACE") at time scale $TIME_SCALE} through $target"
  sim_finished >"$WORK/$label.sim0"
  c0=$(proc_cpu_ticks "$router_pid")
  t0=$(date +%s.%N)
  local wl=(--workload trace --trace "$WORK/trace.jsonl" --time-scale "$TIME_SCALE")
  [[ -n ${BENCH_ARGS:-} ]] && read -r -a wl <<<"$BENCH_ARGS"
  nice "$BENCH" --target "http://$target" --model "$MODEL" "${wl[@]}" --seed "$SEED" --label "$label" \
    --out-json "$WORK/$label.json" --quiet >"$WORK/$label.bench.md" || true
  t1=$(date +%s.%N)
  c1=$(proc_cpu_ticks "$router_pid")
  sim_finished >"$WORK/$label.sim1"
  [[ -s $WORK/$label.json ]] || die "$label: ramjet-bench wrote no report"
  kill -0 "$router_pid" 2>/dev/null || die "$label: the router exited during the run ($(tail -n 3 "$WORK/$label.err"))"
  echo "$c0 $c1 $(getconf CLK_TCK) $t0 $t1" >"$WORK/$label.cpu"
  echo "$router_cmd" | sed "s|$WORK|\$WORK|g; s|$ROOT/||g" >"$WORK/$label.cmd"
  curl -s "http://127.0.0.1:$(cat "$WORK/$label.mport")/metrics" >"$WORK/$label.metrics" 2>/dev/null || true
  stop_router
}

read -r -a labels <<<"$LABELS"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
ran=()
for label in "${labels[@]}"; do
  case $label in
    vllm-router-*) pkg=vllm-router ;;
    smg-*) pkg=smg ;;
    *) pkg="" ;;
  esac
  if [[ -n $pkg && -n ${peer_missing[$pkg]:-} ]]; then
    echo "${peer_missing[$pkg]}" >"$WORK/$label.missing"
    log "$label: not run: ${peer_missing[$pkg]}"
  else
    run "$label"
  fi
  ran+=("$label")
done

mkdir -p "$RESULTS_DIR"
out=$RESULTS_DIR/peers-$(date -u +%Y-%m-%d-%H%M%S).md
versions="ramjet $("$RAMJET" --version | sed 's/^ramjet //'); vllm-router $VLLM_ROUTER_VERSION; smg $SMG_VERSION (PyPI, in $(realpath --relative-to="$ROOT" "$PEERS_VENV" 2>/dev/null || echo "$PEERS_VENV"))"
python3 - "$WORK" "$out" "${ran[@]}" <<EOF
import json, os, sys
work, out, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
def read(label, ext):
    p = f"{work}/{label}.{ext}"
    return open(p).read().strip() if os.path.exists(p) else None
what = {
    "ramjet-fp": "ramjet, prefix fingerprints (RJ_AFFINITY=prefix)",
    "ramjet-exact": "ramjet, exact on the KV events, local tokens",
    "vllm-router-cache": "vLLM Router cache_aware",
    "vllm-router-kv": "vLLM Router kv_aware on the KV events",
    "smg-cache": "SGLang model gateway (smg) cache_aware",
}
rows = {}
for l in labels:
    if read(l, "missing"):
        rows[l] = {"missing": read(l, "missing")}
        continue
    s = json.load(open(f"{work}/{l}.json"))["runs"][0]["steps"][0]
    c0, c1, hz, t0, t1 = read(l, "cpu").split()
    s["cpu_s"] = (int(c1) - int(c0)) / int(hz)
    s["wall_s"] = float(t1) - float(t0)
    a = [list(map(int, x.split())) for x in read(l, "sim0").splitlines()]
    b = [list(map(int, x.split())) for x in read(l, "sim1").splitlines()]
    s["split"] = "/".join(str(y[0] - x[0]) for x, y in zip(a, b))
    pt, hits = sum(y[1] - x[1] for x, y in zip(a, b)), sum(y[2] - x[2] for x, y in zip(a, b))
    s["engine_cached_pct"] = 100.0 * hits / pt if pt else 0.0
    s["cmd"] = read(l, "cmd")
    m = read(l, "metrics") or ""
    s["exact"] = {ln.split("{outcome=\"")[1].split("\"")[0]: int(float(ln.split()[-1]))
                  for ln in m.splitlines() if ln.startswith("ramjet_exact_route_total{")}
    s["cpu_per_k"] = 1000.0 * s["cpu_s"] / max(s["ok"] + s["errors"], 1)
    rows[l] = s
ok = [l for l in labels if "missing" not in rows[l]]
base = "ramjet-exact" if "ramjet-exact" in ok else (ok[0] if ok else None)
def ratio(l, k):
    b = rows[base][k] if base else 0
    return f"{rows[l][k] / b:.2f}" if b else "-"
lines = []
p = lines.append
p("# The peers on the trace (issue 27): ramjet, vLLM Router and the SGLang model gateway, same engines, same trace")
p("")
p("commit $COMMIT; $versions")
p("$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); $ENGINES ramjet-sim $PRESET at ${SPEED}x, KV pool $KV_BLOCKS blocks of $BLOCK_SIZE tokens per sim, KV events on, real Qwen3 tokenizer and chat template ($(realpath --relative-to="$ROOT" "$MODEL_DIR" 2>/dev/null || echo "$MODEL_DIR")); prefix caches reset before every run")
p("load average (1/5/15 min) before the first run $LOAD_START, after the last $(cut -d' ' -f1-3 /proc/loadavg): other work on the machine shares its CPUs")
p("workload: " + ("ramjet-bench ${BENCH_ARGS:-}" if "${BENCH_ARGS:-}" else "the first $TRACE_REQUESTS requests of $(basename "$TRACE") replayed whole by ramjet-bench at time scale $TIME_SCALE") + " (seed $SEED); one run per router, one router at a time, in this order")
p("")
p(f"| router | cached % | cached x {base} | TTFT p50 ms | TTFT p95 ms | TTFT p99 ms | TTFT p95 x {base} | out tok/s | router CPU s | CPU s / 1k req | CPU x {base} | ok | errors | engine split |")
p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for l in labels:
    r = rows[l]
    if "missing" in r:
        p(f"| {l} ({what.get(l, l)}) | not run: {r['missing']} |||||||||||||")
        continue
    p(f"| {l} ({what.get(l, l)}) | {r['cached_pct']:.1f} | {ratio(l, 'cached_pct')} | {r['ttft_p50_ms']:.0f} | {r['ttft_p95_ms']:.0f} | "
      f"{r['ttft_p99_ms']:.0f} | {ratio(l, 'ttft_p95_ms')} | {r['output_tok_s']:.0f} | {r['cpu_s']:.2f} | {r['cpu_per_k']:.2f} | "
      f"{ratio(l, 'cpu_per_k')} | {r['ok']} | {r['errors']} | {r['split']} |")
p("")
peers = [l for l in ok if not l.startswith("ramjet")]
for mine in (l for l in ok if l.startswith("ramjet")):
    if not peers or "${BENCH_ARGS:-}":  # the target is the trace's
        break
    c_ok = all(rows[mine]["cached_pct"] >= rows[q]["cached_pct"] for q in peers)
    t_ok = all(rows[mine]["ttft_p95_ms"] < rows[q]["ttft_p95_ms"] for q in peers)
    p(f"target ({mine} >= every peer's cached share at a lower TTFT p95): {'met' if c_ok and t_ok else 'NOT met'}"
      f" (cached share >= every peer's: {'yes' if c_ok else 'no'}; TTFT p95 below every peer's: {'yes' if t_ok else 'no'})"
      + (" - among the peers that ran" if len(ok) < len(labels) else ""))
p("")
p("cached % as the engines counted it (prefix-cache hits / prompt tokens, /sim/stats): " +
  ", ".join(f"{l} {rows[l]['engine_cached_pct']:.1f}" for l in ok))
for l in ok:
    if rows[l]["exact"]:
        p(f"{l} placements (ramjet_exact_route_total): " + ", ".join(f"{k} {v}" for k, v in sorted(rows[l]["exact"].items())))
p("")
p("how each router ran (\$WORK: the script's work folder):")
for l in ok:
    p(f"- {l}: \`{rows[l]['cmd']}\`")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
log "wrote $out"
