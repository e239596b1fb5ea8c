#!/usr/bin/env bash
# several_routers.sh: do N ramjet replicas in front of the same engines route as well as one?
# (issue 14, "Several routers"). Simulated Qwen3.8-27B TP4 engines (ramjet-sim) that publish
# vLLM KV events; every ramjet subscribes to every engine's events (exact routing on), so the
# replicas agree on where each prefix is cached; each also counts the load the other replicas
# put on the engines (RJ_ROUTE_ENGINE_LOAD, from the engines' own /metrics).
#
# Runs, one after another on fresh engines (cold caches) and fresh ramjets, in an order that
# rotates from repeat to repeat:
#   one          1 ramjet; ramjet-bench talks to it directly
#   one-front    1 ramjet behind the same haproxy as three (the front's own cost, apart)
#   one-of-three REPLICAS ramjets running (KV events, scrapes), all traffic through haproxy to the
#                first: what the idle replicas' own work costs the engines beside them
#   three        REPLICAS ramjets behind haproxy (HTTP mode, balance roundrobin: every request
#                to the next replica, whatever its session), RJ_ROUTE_ENGINE_LOAD=on (default)
#   three-noload the same with RJ_ROUTE_ENGINE_LOAD=off (each replica sees its own reservations)
#   three-peers  three, and the replicas share their load directly (RJ_PEERS, every 50 ms)
#   one-fp, three-fp   one / three ramjets on their fingerprints only (no KV events, exact off)
# Target (issue 14): three's cached-prompt-token % within 2 points of one's, and its output
# throughput >= 0.95x one's. Prints Markdown and writes bench/results/several_routers-<UTC>.md.
#
# Usage: bench/several_routers.sh [--no-build]
# Environment:
#   DURATION=30 SPEED=6 REPEATS=2 REPLICAS=3 ENGINES=4   seconds per run, sim --speed, repeats
#   CONCURRENCY=32 APPS=4 PREFIX_KIB=24 TURNS=10 USER_WORDS=2048 MAX_TOKENS=64 KV_BLOCKS=384
#                      scripts/demo's cache-pressured agent workload (KV_BLOCKS empty = full pool)
#   PRESET=qwen3.8-27b-tp4   EXACT_MIN_BYTES=8192 (RJ_EXACT_ROUTE_MIN_BYTES, as scripts/demo)
#   BUILD_DIR=build/release  RESULTS_DIR=bench/results  COMMIT (default: HEAD)
#   BIN_DIR      a folder with ramjet, ramjet-sim and ramjet-bench to use instead (no build)
#   LABELS="one three three-noload"   the runs above, in this order (rotated per repeat)
#   WORKLOAD=agent   or trace: the first TRACE_REQUESTS=2000 requests of TRACE (default
#                ../shared/traces/mooncake_conversation_trace.jsonl) replayed whole at TIME_SCALE=0.15
#                (DURATION unused), KV pool TRACE_KV_BLOCKS=3126 blocks per sim (the preset's own)
#   RAMJET_ENV="VAR=VALUE ..."   extra settings of every ramjet (e.g. RJ_ENGINE_SCRAPE_INTERVAL_MS=100)
#   KEEP_WORK=1  keep the work folder: each ramjet's log and its /metrics as its run ended
#   FRONT=http   haproxy's mode: http (every request to the next replica) or tcp (every client
#                connection to the next replica, as a Kubernetes Service or any L4 balancer does:
#                a client's keep-alive connection, and the sessions on it, stay on one replica)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_args several_routers "$@"
DURATION=${DURATION:-30}
REPEATS=${REPEATS:-2}
REPLICAS=${REPLICAS:-3}
agent_workload_defaults
BUILD_DIR=${BUILD_DIR:-build/release}
LABELS=${LABELS:-one three three-noload}
WORKLOAD=${WORKLOAD:-agent}
TRACE=${TRACE:-../shared/traces/mooncake_conversation_trace.jsonl}
TRACE_REQUESTS=${TRACE_REQUESTS:-2000}
TIME_SCALE=${TIME_SCALE:-0.15}
TRACE_KV_BLOCKS=${TRACE_KV_BLOCKS:-3126}
[[ $TRACE == /* ]] || TRACE=$ROOT/$TRACE
[[ $WORKLOAD == agent || $WORKLOAD == trace ]] || { echo "several_routers: WORKLOAD is agent or trace" >&2; exit 1; }
[[ $WORKLOAD == trace ]] && KV_BLOCKS=$TRACE_KV_BLOCKS
FRONT=${FRONT:-http}

RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
[[ $BUILD_DIR == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}

[[ $FRONT == http || $FRONT == tcp ]] || die "FRONT must be http or tcp"
for tool in curl python3 haproxy; do command -v $tool >/dev/null || die "$tool not found (run scripts/setup as root)"; done

bench_binaries

bench_workdir ramjet-several

KV_EVENTS=1
SIM_PREFIX=(nice)
[[ -n $KV_BLOCKS ]] && SIM_EXTRA=(--num-gpu-blocks-override "$KV_BLOCKS")
FLEET=()
for ((i = 0; i < ENGINES; i++)); do FLEET+=("$PRESET"); done

apis=()
fingerprints=0  # 1: the ramjets route on their fingerprints only
start_ramjet() {  # start_ramjet NAME [VAR=VALUE...]: appends its API address to apis
  local name=$1 api exact=(); shift
  ((fingerprints)) || exact=(RJ_KV_EVENT_LIVE_ENDPOINTS="$(IFS=,; echo "${kv_live[*]}")"
                             RJ_KV_EVENT_REPLAY_ENDPOINTS="$(IFS=,; echo "${kv_replay[*]}")"
                             RJ_EXACT_ROUTE_MODE=on RJ_EXACT_ROUTE_MIN_BYTES="$EXACT_MIN_BYTES")
  local more=()
  read -r -a more <<<"${RAMJET_ENV:-}"
  env RJ_UPSTREAM="$(IFS=,; echo "${engines[*]}")" RJ_LISTEN=127.0.0.1:0 RJ_METRICS_LISTEN=127.0.0.1:0 \
    ${exact[@]+"${exact[@]}"} RJ_THREADS=2 ${more[@]+"${more[@]}"} "$@" \
    nice "$RAMJET" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  pids+=($!)
  api=$(wait_grep "$WORK/$name.err" 'api=[0-9.]+:[0-9]+' | cut -d= -f2) || die "ramjet $name did not start"
  wait_ramjet_ready "$api" || die "ramjet $name: engines not healthy and trusted within 15 s"
  apis+=("$api")
}

front=""
start_haproxy() {  # start_haproxy -> front=host:port; balances over apis (not in a subshell: pids must keep it)
  local port i cfg=$WORK/haproxy.cfg
  port=$(free_port)
  {
    echo "global"; echo "  maxconn 4096"
    echo "defaults"; echo "  mode $FRONT"; echo "  timeout connect 5s"; echo "  timeout client 600s"; echo "  timeout server 600s"
    # Streamed tokens pass at once: without it HTTP mode holds small writes back (MSG_MORE) and
    # the client's delayed ACKs add tens of ms to every TTFT (one ramjet behind it: 107 vs 18 ms).
    [[ $FRONT == http ]] && echo "  option http-no-delay"
    echo "frontend fe"; echo "  bind 127.0.0.1:$port"; echo "  default_backend be"
    echo "backend be"; echo "  balance roundrobin"
    for i in "${!apis[@]}"; do echo "  server r$i ${apis[$i]}"; done
  } >"$cfg"
  nice haproxy -f "$cfg" -db >"$WORK/haproxy.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.1; done
  front="127.0.0.1:$port"
}

run() {  # run LABEL REPEAT: fresh engines and ramjets, then the workload
  local label=$1 rep=$2 target n=1 extra=() i via_front=0 only_first=0 peers=0 ports=() list
  fingerprints=0
  case $label in
    one) n=1 ;;
    one-front) n=1; via_front=1 ;;
    one-of-three) n=$REPLICAS; only_first=1 ;;
    three) n=$REPLICAS ;;
    three-noload) n=$REPLICAS; extra=(RJ_ROUTE_ENGINE_LOAD=off) ;;
    three-peers) n=$REPLICAS; peers=1 ;;
    one-fp) n=1; fingerprints=1 ;;
    three-fp) n=$REPLICAS; fingerprints=1 ;;
    *) die "unknown label $label (one, one-front, one-of-three, three, three-noload, three-peers, one-fp, three-fp)" ;;
  esac
  start_sims "${FLEET[@]}"
  apis=()
  if ((peers)); then  # RJ_PEERS: every replica gets the same list and its own UDP port
    for ((i = 0; i < n; i++)); do ports+=("$(free_udp_port)"); done
    list=$(printf '127.0.0.1:%s,' "${ports[@]}"); list=${list%,}
    [[ -s $WORK/peer.key ]] || { openssl rand -hex 32 >"$WORK/peer.key"; chmod 600 "$WORK/peer.key"; }
    extra+=(RJ_PEERS="$list" RJ_PEER_SECRET_FILE="$WORK/peer.key")
  fi
  for ((i = 0; i < n; i++)); do
    start_ramjet "$label-$rep-$i" ${extra[@]+"${extra[@]}"} $( ((peers)) && echo "RJ_PEER_LISTEN=127.0.0.1:${ports[$i]}")
  done
  if ((only_first)); then apis=("${apis[0]}"); fi  # the others run (KV events, scrapes) but get no traffic
  if ((n == 1 && via_front == 0)); then target=${apis[0]}; else start_haproxy; target=$front; fi
  log "repeat $rep: $label ($n ramjet$( ((n > 1)) && echo s)$( ((n > 1 || via_front)) && echo " behind haproxy"), $WORKLOAD)"
  local wl=()
  if [[ $WORKLOAD == trace ]]; then
    wl=(--workload trace --trace "$WORK/trace.jsonl" --time-scale "$TIME_SCALE")
  else
    agent_bench_args
    wl=("${AGENT_ARGS[@]}" --duration "$DURATION")
  fi
  local before
  before=$(cpu_by_name "${pids[@]}")
  nice "$BENCH" --target "http://$target" "${wl[@]}" --seed $((7 + rep)) \
    --label "$label" --out-json "$WORK/$label-$rep.json" --quiet || true
  [[ -s $WORK/$label-$rep.json ]] || die "$label: ramjet-bench wrote no report"
  # CPU seconds each kind of process spent during the workload (ramjet, ramjet-sim, haproxy)
  python3 -c 'import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); print(json.dumps({k: round(b[k]-a.get(k,0),2) for k in b}))' \
    "$before" "$(cpu_by_name "${pids[@]}")" >"$WORK/$label-$rep.cpu"
  for ((i = 0; i < n; i++)); do  # each ramjet's metrics as the run ended (kept with KEEP_WORK)
    local m
    m=$(grep -oE 'metrics=[0-9.]+:[0-9]+' "$WORK/$label-$rep-$i.err" | head -n1 | cut -d= -f2) || true
    [[ -n $m ]] && curl -s "http://$m/metrics" >"$WORK/$label-$rep-$i.metrics" || true
  done
  stop_pids
}

if [[ $WORKLOAD == trace ]]; then
  [[ -r $TRACE ]] || die "TRACE $TRACE not readable"
  head -n "$TRACE_REQUESTS" "$TRACE" >"$WORK/trace.jsonl"
fi
read -r -a labels <<<"$LABELS"
for ((rep = 1; rep <= REPEATS; rep++)); do
  for ((k = 0; k < ${#labels[@]}; k++)); do
    run "${labels[$(((k + rep - 1) % ${#labels[@]}))]}" "$rep"
  done
done

mkdir -p "$RESULTS_DIR"
out=$RESULTS_DIR/several_routers-$( [[ $FRONT == tcp ]] && echo "tcp-")$(date -u +%Y-%m-%d-%H%M%S).md
python3 - "$WORK" "$REPEATS" "$out" $LABELS <<EOF
import json, sys, statistics
work, repeats, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
labels = sys.argv[4:]
rows = {l: [json.load(open(f"{work}/{l}-{r}.json"))["runs"][0]["steps"][0] for r in range(1, repeats + 1)] for l in labels}
def med(l, k): return statistics.median(s[k] for s in rows[l])
cpu = {l: [json.load(open(f"{work}/{l}-{r}.json".replace(".json", ".cpu"))) for r in range(1, repeats + 1)] for l in labels}
lines = []
p = lines.append
p("# Several routers (issue 14): $REPLICAS ramjet replicas behind haproxy (mode $FRONT) vs one")
p("")
p("commit $COMMIT; $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')); $ENGINES ramjet-sim $PRESET at ${SPEED}x with KV events; exact routing on in every ramjet but the -fp runs (fingerprints only)")
if "$WORKLOAD" == "trace":
    p("workload: the first $TRACE_REQUESTS requests of $(basename "$TRACE") replayed whole at time scale $TIME_SCALE, KV pool ${KV_BLOCKS:-full} blocks per sim; $REPEATS repeats, medians; order rotated per repeat")
else:
    p("workload: ramjet-bench shared-prefix, $APPS apps x $PREFIX_KIB KiB, $TURNS turns, $USER_WORDS user words, max_tokens $MAX_TOKENS, concurrency $CONCURRENCY, ${DURATION}s, KV pool ${KV_BLOCKS:-full} blocks per sim; $REPEATS repeats, medians; order rotated per repeat")
p("")
p("| run | output tok/s | x first | cached % | - first (points) | TTFT p50 ms | TTFT p95 ms | TTFT p99 ms | requests | errors | engine split (last repeat) |")
p("|---|---|---|---|---|---|---|---|---|---|---|")
base_t, base_c = med(labels[0], "output_tok_s"), med(labels[0], "cached_pct")
for l in labels:
    t, c = med(l, "output_tok_s"), med(l, "cached_pct")
    split = "/".join(str(v) for _, v in sorted(rows[l][-1]["engines"].items()))
    p(f"| {l} | {t:.0f} | {t / base_t:.3f} | {c:.1f} | {c - base_c:+.1f} | {med(l, 'ttft_p50_ms'):.0f} | {med(l, 'ttft_p95_ms'):.0f} | {med(l, 'ttft_p99_ms'):.0f} | {sum(s['ok'] for s in rows[l])} | {sum(s['errors'] for s in rows[l])} | {split} |")
p("")
p("CPU seconds during the workload (median of repeats): ramjet (all replicas) / ramjet-sim (all) / haproxy")
for l in labels:
    m = lambda k: statistics.median(c.get(k, 0) for c in cpu[l])
    p(f"- {l}: {m('ramjet'):.1f} / {m('ramjet-sim'):.1f} / {m('haproxy'):.1f}")
p("")
p("per repeat (output tok/s, cached %):")
for l in labels:
    p(f"- {l}: " + ", ".join(f"{s['output_tok_s']:.0f} / {s['cached_pct']:.1f}" for s in rows[l]))
if "one" in labels and "three" in labels:
    b1t, b1c = med("one", "output_tok_s"), med("one", "cached_pct")
    t3, c3 = med("three", "output_tok_s"), med("three", "cached_pct")
    ok = t3 >= 0.95 * b1t and abs(c3 - b1c) <= 2
    p("")
    p(f"target (three vs one: cached within 2 points, throughput >= 0.95x): {'met' if ok else 'NOT met'}")
for a, b in (("three", "one"), ("three", "one-front"), ("one-front", "one"), ("three-peers", "one"), ("three-peers", "one-front"), ("three-peers", "three"), ("one-of-three", "one-front"), ("three", "one-of-three"), ("three-fp", "one-fp"), ("three", "three-fp")):
    if a in labels and b in labels:
        p(f"- {a} / {b}: cached {med(a, 'cached_pct') / med(b, 'cached_pct'):.2f}x, TTFT p95 {med(a, 'ttft_p95_ms') / med(b, 'ttft_p95_ms'):.2f}x, output {med(a, 'output_tok_s') / med(b, 'output_tok_s'):.2f}x")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
log "wrote $out"
