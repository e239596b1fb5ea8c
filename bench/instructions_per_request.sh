#!/usr/bin/env bash
# instructions_per_request.sh: what one proxied request costs ramjet, nginx and haproxy, in CPU
# instructions — the deterministic comparison on a noisy machine (wall-clock ratios move by ±10 %
# here; instruction counts by well under 1 %).
#
# One ramjet-responder serves every target. Each proxy runs single-threaded under
# `valgrind --tool=callgrind` (CACHE=1: cachegrind) in front of it: ramjet with RJ_THREADS=1, once with round-robin
# routing (RJ_AFFINITY=round_robin) and once with prefix routing (RJ_AFFINITY=prefix, the
# default); nginx with one worker and no master process (proxy_buffering off, upstream keepalive,
# access log off: the usual SSE reverse proxy, as bench/proxy_overhead.sh runs it); haproxy with
# nbthread 1 (mode http, keep-alive both sides). The same Python client sends N1 and then N2
# requests of one kind on one keep-alive connection (CONNECTIONS: several) in two separate runs, and each cell is
# (I(N2) - I(N1)) / (N2 - N1) user-space instructions of the proxy process: startup, shutdown
# and warm-up cancel out.
#
# Request kinds:
#   json  a ~1 KB chat request answered with JSON (a 484-byte chat.completion with usage)
#   sse   the same request streamed: 8 chunk events, a usage chunk, [DONE]
#   long  a 64 KiB agent turn (system prompt, tools, 40 messages with tool calls and results),
#         streamed like sse
#
# Prints a Markdown table: one row per kind, one column per target, and each target's ratio to
# nginx. Several ramjet binaries (a before and an after, say) each get an rr and a prefix column.
#
# Usage: bench/instructions_per_request.sh [RAMJET_BIN...]
#   (default: build/release/src/app/ramjet)
# Environment:
#   N1=300 N2=1300       request counts of the two runs
#   KINDS=json,sse,long  request kinds
#   TARGETS=nginx,haproxy,ramjet-rr,ramjet-prefix   what to measure (ramjet-* once per binary)
#   RESPONDER_BIN=build/release/bench/ramjet-responder
#   RJ_EXTRA="RJ_X=1 ..."  extra settings for every ramjet run
#   CHUNK_DELAY_US=1000  the responder's pause between SSE events: each event reaches the proxy
#                        on its own, as an engine emits tokens, whatever the machine's load
#                        (0: events written back to back, and how many one read gets then
#                        depends on timing: ±2 % between runs)
#   KEEP=DIR             keep every callgrind output there (callgrind.TARGET-KIND-N, CACHE=1:
#                        cachegrind.TARGET-KIND-N; with several
#                        ramjet binaries callgrind.ramjet-rr.I-KIND-N, I = 1, 2, ... in argument
#                        order), for callgrind_annotate --inclusive=yes
#   FOOTPRINT=1          also count the code a request runs: callgrind with --dump-instr=yes,
#                        and a second table of the 64-byte lines of code holding an instruction
#                        that ran at least once a request (bench/code_footprint.py; its --top
#                        shows by what, on KEEP's files). The instruction cache holds lines: what
#                        a request runs beyond its 32 KiB is fetched again after every system call
#                        or switch that evicted it, which instruction counts do not show.
#   CONNECTIONS=1        the client's keep-alive connections, each with one request in flight
#                        (N1 and N2 are totals over all of them): at 64 the proxy holds 64 requests
#                        at once, as at bench/proxy_overhead.sh's c64, and what each touches is
#                        colder when its turn comes again
#   CACHE=1              cachegrind instead of callgrind (--cache-sim=yes with this machine's
#                        caches of one core, AMD EPYC: 32 KiB 8-way L1i and L1d, and a 512 KiB
#                        8-way L2 as the last level; 64-byte lines), and two more tables: L1d and L2
#                        misses a request (reads and writes). The simulation sees user space only:
#                        bytes the kernel copied into a receive buffer count as cold when first
#                        read. Without a call graph the dashboard sampler is not taken out (it
#                        ticks once a second: a few instructions a request at most here).
# ramjet runs with RJ_ENGINE_SCRAPE_INTERVAL_MS=0 (the responder has no /metrics) and
# RJ_PROBE_INTERVAL_MS=3600000 (probes are time-driven, not per request: under valgrind the two
# runs last different times), every other setting at its default. For the same reason the
# dashboard's sampler (a 1 Hz timer on the same thread: its cost follows how long a run lasts,
# not how many requests it served; ~1,000 instructions a request in the sse rows before it was
# subtracted) is taken out of each of ramjet's totals: its inclusive cost, as
# callgrind_annotate reports it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RESPONDER_BIN=${RESPONDER_BIN:-$ROOT/build/release/bench/ramjet-responder}
N1=${N1:-300}
N2=${N2:-1300}
KINDS=${KINDS:-json,sse,long}
TARGETS=${TARGETS:-nginx,haproxy,ramjet-rr,ramjet-prefix}
RJ_EXTRA=${RJ_EXTRA:-}
KEEP=${KEEP:-}
FOOTPRINT=${FOOTPRINT:-0}
CONNECTIONS=${CONNECTIONS:-1}
CACHE=${CACHE:-0}
CHUNK_DELAY_US=${CHUNK_DELAY_US:-1000}
BINS=("$@")
((${#BINS[@]})) || BINS=("$ROOT/build/release/src/app/ramjet")

die() { echo "instructions_per_request: $*" >&2; exit 1; }
has_target() { [[ ",$TARGETS," == *",$1,"* ]]; }
((CACHE && FOOTPRINT)) && die "CACHE=1 and FOOTPRINT=1 are two valgrind tools: one at a time"
[[ $CONNECTIONS =~ ^[1-9][0-9]*$ ]] && ((N1 >= CONNECTIONS)) || die "CONNECTIONS must be 1..N1"
command -v valgrind >/dev/null || die "valgrind not found (run scripts/setup as root)"
[[ -x $RESPONDER_BIN ]] || die "responder not found at $RESPONDER_BIN"
has_target nginx && { command -v nginx >/dev/null || die "nginx not found (run scripts/setup as root)"; }
has_target haproxy && { command -v haproxy >/dev/null || die "haproxy not found (run scripts/setup as root)"; }
for b in "${BINS[@]}"; do [[ -x $b ]] || die "ramjet not found at $b"; done

WORK=$(mktemp -d /tmp/ipr.XXXXXX)
chmod 755 "$WORK"  # nginx runs its worker as nobody when started by root
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$RESPONDER_BIN" --port 0 --threads 1 --sse-chunks 8 --chunk-delay-us "$CHUNK_DELAY_US" >"$WORK/responder.out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^listening port=' "$WORK/responder.out" 2>/dev/null && break; sleep 0.1; done
RESP_PORT=$(sed -n 's/^listening port=\([0-9]*\).*/\1/p' "$WORK/responder.out")
[[ -n $RESP_PORT ]] || die "responder did not start"

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Sends n requests of one kind over CONNECTIONS keep-alive connections, one request in flight on
# each; every response must be a 200 and a streamed one must end with [DONE].
client() {
  /usr/bin/python3 - "$1" "$2" "$3" "$CONNECTIONS" <<'EOF'
import http.client, json, sys, threading
port, kind, n, conns = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if kind == "long":
    # A 64 KiB agent turn: system prompt, tools, and a conversation of tool calls and results.
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "Runs a step. " * 8,
              "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                              "line": {"type": "integer"}},
                             "required": ["path"]}}} for i in range(8)]
    messages = [{"role": "system", "content": "You are a coding agent working in a repository. " * 40}]
    i = 0
    while len(json.dumps(messages)) + len(json.dumps(tools)) < 64 * 1024 - 600:
        messages.append({"role": "user", "content": f"Step {i}: look at the next file and fix it. " * 6})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "tool_1", "arguments": json.dumps({"path": f"src/f{i}.cc", "line": i})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}",
                         "content": f"int f{i}() {{ return {i}; }}  // file contents\n" * 12})
        i += 1
    body = {"model": "bench-model", "stream": True, "stream_options": {"include_usage": True},
            "messages": messages, "tools": tools}
else:
    body = {"model": "bench-model", "stream": kind == "sse",
            "messages": [{"role": "system", "content": "You are a helpful assistant. " * 20},
                         {"role": "user", "content": "Say something about routers. " * 10}]}
    if kind == "sse":
        body["stream_options"] = {"include_usage": True}
body = json.dumps(body)
failures = []

def send(count):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        for _ in range(count):
            c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                raise RuntimeError(f"status {r.status}")
            if kind != "json" and not data.rstrip().endswith(b"data: [DONE]"):
                raise RuntimeError("stream without [DONE]")
    except Exception as e:  # noqa: BLE001 - reported below
        failures.append(e)

threads = [threading.Thread(target=send, args=(n // conns + (i < n % conns),)) for i in range(conns)]
for th in threads:
    th.start()
for th in threads:
    th.join()
if failures:
    sys.exit(str(failures[0]))
EOF
}

wait_health() {  # wait_health PORT PID
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# Starts one target under callgrind on port $2 with its output in $3; sets PID.
start_target() {
  local target=$1 port=$2 out=$3 bin=${4:-}
  local vg=(valgrind --tool=callgrind --callgrind-out-file="$out")
  ((FOOTPRINT)) && vg+=(--dump-instr=yes)
  ((CACHE)) && vg=(valgrind --tool=cachegrind --cachegrind-out-file="$out" --cache-sim=yes
                   --I1=32768,8,64 --D1=32768,8,64 --LL=524288,8,64)
  case $target in
    ramjet-rr|ramjet-prefix)
      local affinity=round_robin
      [[ $target == ramjet-prefix ]] && affinity=prefix
      # shellcheck disable=SC2086
      env RJ_UPSTREAM="http://127.0.0.1:$RESP_PORT" RJ_LISTEN="127.0.0.1:$port" RJ_METRICS_LISTEN=127.0.0.1:0 \
        RJ_THREADS=1 RJ_AFFINITY=$affinity RJ_LOG_LEVEL=warn RJ_ENGINE_SCRAPE_INTERVAL_MS=0 \
        RJ_PROBE_INTERVAL_MS=3600000 $RJ_EXTRA "${vg[@]}" "$bin" >/dev/null 2>"$WORK/valgrind.err" &
      ;;
    nginx)
      local dir=$WORK/nginx.$port
      mkdir -p "$dir/tmp" && chmod -R a+rwx "$dir"
      cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
master_process off;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  client_body_buffer_size 128k;
  keepalive_requests 1000000;
  upstream responder {
    server 127.0.0.1:$RESP_PORT;
    keepalive 64;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://responder;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
EOF
      "${vg[@]}" nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" >/dev/null 2>"$WORK/valgrind.err" &
      ;;
    haproxy)
      local cfg=$WORK/haproxy.$port.cfg
      cat >"$cfg" <<EOF
global
  nbthread 1
  maxconn 1024
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:$port
  default_backend be
backend be
  server responder 127.0.0.1:$RESP_PORT
EOF
      "${vg[@]}" haproxy -db -f "$cfg" >/dev/null 2>"$WORK/valgrind.err" &
      ;;
    *) die "unknown target $target" ;;
  esac
  PID=$!
}

# Total instructions of one run of `target` that serves n requests of `kind`; sets TOTAL (with
# FOOTPRINT=1 it keeps the callgrind output as $WORK/run.N for per_request's code_footprint.py;
# with CACHE=1 it sets D1_MISSES and L2_MISSES too).
instructions() {
  local target=$1 kind=$2 n=$3 bin=${4:-} tag=${5:-} out=$WORK/cg.$RANDOM port
  port=$(free_port)
  start_target "$target" "$port" "$out" "$bin"
  PIDS+=("$PID")
  # (nginx and haproxy answer /health by proxying it to the responder)
  wait_health "$port" "$PID" || { cat "$WORK/valgrind.err" >&2; die "$target did not start"; }
  client "$port" "$kind" "$n" || { kill -TERM "$PID"; die "$target: $kind requests failed"; }
  kill -TERM "$PID"
  wait "$PID" || true
  TOTAL=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p;s/^totals: *\([0-9]*\).*/\1/p' "$out"* | head -1)
  if ((CACHE)); then
    # cachegrind's events line names the summary's columns: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
    read -r D1_MISSES L2_MISSES < <(awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i - 1 }
      /^summary:/ { printf "%.0f %.0f\n", $(col["D1mr"] + 1) + $(col["D1mw"] + 1), $(col["DLmr"] + 1) + $(col["DLmw"] + 1) }' "$out") ||
      die "$target: no cachegrind summary in $out"
  elif [[ $target == ramjet-* && -n $TOTAL ]]; then
    # The dashboard sampler's inclusive cost: every file:function line of the coroutine (its own
    # lines and those inlined into it, each with the calls made from them).
    local timed
    timed=$(callgrind_annotate --inclusive=yes --tree=none --auto=no --threshold=100 "$out" |
      awk '/:ramjet::app::\(anonymous namespace\)::sample_loop\(/ { gsub(",", "", $1); s += $1 } END { print s + 0 }')
    TOTAL=$((TOTAL - timed))
  fi
  if [[ -n $KEEP ]]; then
    mkdir -p "$KEEP"
    local tool=callgrind
    ((CACHE)) && tool=cachegrind
    for f in "$out"*; do cp "$f" "$KEEP/$tool.$target$tag-$kind-$n${f#"$out"}"; done
  fi
  ((FOOTPRINT)) && cp "$out" "$WORK/run.$n"
  rm -f "$out"*
  [[ -n $TOTAL ]] || die "$target: no valgrind total"
}

per_request() {  # per_request TARGET KIND [BIN [TAG]]: sets PER (and CODE_LINES with FOOTPRINT=1,
                 # PER_D1 and PER_L2 with CACHE=1: misses a request, one decimal)
  local a d1 l2
  instructions "$1" "$2" "$N1" "${3:-}" "${4:-}"
  a=$TOTAL d1=${D1_MISSES:-} l2=${L2_MISSES:-}
  instructions "$1" "$2" "$N2" "${3:-}" "${4:-}"
  PER=$(( (TOTAL - a) / (N2 - N1) ))
  if ((CACHE)); then
    PER_D1=$(awk -v a="$d1" -v b="$D1_MISSES" -v n=$((N2 - N1)) 'BEGIN { printf "%.1f", (b - a) / n }')
    PER_L2=$(awk -v a="$l2" -v b="$L2_MISSES" -v n=$((N2 - N1)) 'BEGIN { printf "%.1f", (b - a) / n }')
  fi
  if ((FOOTPRINT)); then
    # (not LINES: bash sets that one to the terminal's height after a command when stderr is one)
    CODE_LINES=$(/usr/bin/python3 "$ROOT/bench/code_footprint.py" "$WORK/run.$N1" "$WORK/run.$N2" $((N2 - N1)) |
      awk 'NR == 1 { print $1 }') || die "$1: code_footprint.py failed"
    [[ $CODE_LINES =~ ^[0-9]+$ ]] || die "$1: code_footprint.py failed"
    rm -f "$WORK/run.$N1" "$WORK/run.$N2"
  fi
}

IFS=, read -ra kinds <<<"$KINDS"
columns=() labels=()
for t in nginx haproxy; do has_target $t && { columns+=("$t|"); labels+=("$t"); }; done
for i in "${!BINS[@]}"; do
  suffix="" tag=""; ((${#BINS[@]} > 1)) && suffix=" ($((i + 1)))" && tag=".$((i + 1))"
  for t in ramjet-rr ramjet-prefix; do
    has_target $t && { columns+=("$t|${BINS[$i]}|$tag"); labels+=("${t/ramjet-/ramjet }$suffix"); }
  done
done

declare -A cell lines d1 l2
for kind in "${kinds[@]}"; do
  for c in "${!columns[@]}"; do
    IFS='|' read -r t bin tag <<<"${columns[$c]}"
    echo "instructions_per_request: $kind ${labels[$c]} ..." >&2
    per_request "$t" "$kind" "$bin" "$tag"
    cell[$kind,$c]=$PER
    ((FOOTPRINT)) && lines[$kind,$c]=$CODE_LINES
    ((CACHE)) && d1[$kind,$c]=$PER_D1 l2[$kind,$c]=$PER_L2
  done
done

echo "- $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), N1=$N1 N2=$N2, CONNECTIONS=$CONNECTIONS, CHUNK_DELAY_US=$CHUNK_DELAY_US, $(valgrind --version)$( ((CACHE)) && echo ", cachegrind")"
for i in "${!BINS[@]}"; do echo "- ramjet ($((i + 1))): ${BINS[$i]}"; done
has_target nginx && echo "- $(nginx -v 2>&1 | sed 's/.*: //'), 1 worker, no master; $(haproxy -v 2>&1 | head -1 | awk '{print $1, $2, $3}'), nbthread 1"
echo
table() {  # table ARRAY-NAME [FORMAT]: one row per kind, one column per target, ratios to nginx
  local -n t=$1
  local fmt=${2:-%\'d}
  local hdr="| request |" sep="|---|" kind c v base row
  for l in "${labels[@]}"; do hdr+=" $l |"; sep+="---:|"; done
  echo "$hdr"; echo "$sep"
  for kind in "${kinds[@]}"; do
    row="| $kind |"
    base=${t[$kind,0]}
    for c in "${!columns[@]}"; do
      v=${t[$kind,$c]}
      if has_target nginx && ((c > 0)); then
        row+=" $(printf "$fmt" "$v") ($(awk -v a="$v" -v b="$base" 'BEGIN { if (b == 0) printf "–"; else printf "%.2f×", a / b }')) |"
      else
        row+=" $(printf "$fmt" "$v") |"
      fi
    done
    echo "$row"
  done
}
table cell
has_target nginx && echo && echo "Instructions per request (user space, the proxy process only); (×) is the ratio to nginx."
if ((FOOTPRINT)); then
  echo
  table lines
  echo
  echo "Code a request runs: 64-byte lines holding an instruction that ran at least once a request (bench/code_footprint.py)."
fi
if ((CACHE)); then
  echo
  table d1 %.1f
  echo
  echo "L1d misses a request (reads and writes; cachegrind, 32 KiB 8-way, 64-byte lines)."
  echo
  table l2 %.1f
  echo
  echo "L2 misses a request (reads and writes; cachegrind's last level as one core's 512 KiB 8-way L2). Bytes the kernel copied into a receive buffer count as cold when first read."
fi
exit 0
