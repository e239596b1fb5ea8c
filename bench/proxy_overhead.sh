#!/usr/bin/env bash
# proxy_overhead.sh: what does ramjet cost on the request path, next to nginx?
#
# Starts ramjet-responder (a fast vLLM-shaped upstream), nginx (reverse proxy, buffering off,
# upstream keep-alive) and ramjet in front of it, then runs wrk against each target for every
# mode (json, sse) x concurrency cell, interleaving targets within a cell so background noise
# hits all of them alike. Prints a Markdown report and writes it to bench/results/.
#
# Usage (from anywhere; run as root on Debian 12 after scripts/setup):
#   bench/proxy_overhead.sh [--targets direct,ramjet,nginx[,base]] [--modes json,sse]
#                           [--concurrency 1,16,64] [--no-build] [--pin split|none]
#                           [--upstream-tls] [--syscalls]
# Environment (any other RJ_* variable, say RJ_AFFINITY=round_robin, reaches ramjet and base and
# is named in the report):
#   DURATION=10s      wrk duration per run          WARMUP=1s   wrk warm-up per target and mode
#   REPEATS=1         runs per cell and target (the median req/s run is reported)
#   SSE_CHUNKS=8      events per streamed response  PIN=split   same as --pin
#   RAMJET_BIN, RESPONDER_BIN   binaries (default: build/release/src/app/ramjet,
#                               build/release/bench/ramjet-responder)
#   RAMJET_BASE_BIN             the `base` target: another ramjet build (say, the previous
#                               commit's), measured in the same run, with a ramjet/base column
#   RESULTS_DIR       where the report goes (default: bench/results)
#
# --upstream-tls: the upstream is reached over TLS. The responder is put behind "the TLS
# responder": a second nginx (own prefix, pid and config, pinned to the server CPUs like the
# responder, one worker per server CPU) with `listen ... ssl` (TLS 1.2/1.3, ssl_session_cache +
# ssl_session_tickets on), `proxy_pass http://` to the responder with upstream keep-alive, and a
# throwaway CA + server certificate (ECDSA P-256, SAN IP:127.0.0.1 and DNS:localhost) made with
# openssl in the work dir. Then `direct` is wrk over https straight to the TLS responder; `ramjet`
# is wrk (plain http) -> ramjet with RJ_UPSTREAM=https://127.0.0.1:<tls port> and
# RJ_UPSTREAM_TLS_CA_FILE=<the CA> (so `base` must be a build with upstream TLS too); `nginx` is wrk
# (plain http) -> nginx with proxy_pass https://, proxy_ssl_verify on against the CA,
# proxy_ssl_name localhost + proxy_ssl_server_name on (nginx checks names, not IP SANs),
# proxy_ssl_session_reuse on, TLS 1.2/1.3 and upstream keep-alive. The run fails if any wrk run
# sees a non-2xx response, or if a ramjet's /metrics shows no upstream TLS handshake
# (ramjet_upstream_tls_handshakes_total) or any failed one (ramjet_upstream_tls_failures_total).
# The report is bench/results/proxy_overhead-tls-<UTC date-time>.md. Without the flag nothing
# changes.
#
# --syscalls: after the measurement, one more wrk run per mode and proxy (c=16, 3 s) with
# `strace -c -f` attached to the proxy process (ramjet, base, nginx's workers), and a table of the
# system calls each made per request, failed ones counted apart (strace's "errors": for a read
# on a non-blocking socket, EAGAIN).
# strace slows the proxy a lot; the counts, not the rate, are the result. Needs strace.
#
# Pinning (--pin split, the default when there are >= 2 CPUs): wrk runs on CPU 0 and every
# server process (responder, nginx, ramjet) on CPUs 1..N-1. The load generator then never steals
# CPU from the system under test, and a proxied request pays for proxy + responder on the same
# server CPUs that the responder alone has in the direct case, so throughput ratios read as
# CPU cost. nginx gets one worker and ramjet one io thread per server CPU; the responder uses one
# thread per server CPU as well.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGETS=direct,ramjet,nginx
MODES=json,sse
CONCURRENCY=1,16,64
BUILD=1
PIN=${PIN:-split}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
REPEATS=${REPEATS:-1}
SSE_CHUNKS=${SSE_CHUNKS:-8}
RAMJET_BIN=${RAMJET_BIN:-$ROOT/build/release/src/app/ramjet}
RESPONDER_BIN=${RESPONDER_BIN:-$ROOT/build/release/bench/ramjet-responder}
RESULTS_DIR=${RESULTS_DIR:-$ROOT/bench/results}
UPSTREAM_TLS=0
SYSCALLS=0

die() { echo "proxy_overhead: $*" >&2; exit 1; }
log() { echo "proxy_overhead: $*" >&2; }

while (($#)); do
  case $1 in
    --targets) TARGETS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --pin) PIN=$2; shift 2 ;;
    --upstream-tls) UPSTREAM_TLS=1; shift ;;
    --syscalls) SYSCALLS=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

IFS=, read -ra targets <<<"$TARGETS"
IFS=, read -ra modes <<<"$MODES"
IFS=, read -ra concs <<<"$CONCURRENCY"
has_target() { [[ ",$TARGETS," == *",$1,"* ]]; }
for t in "${targets[@]}"; do [[ $t =~ ^(direct|ramjet|nginx|base)$ ]] || die "unknown target: $t"; done
for m in "${modes[@]}"; do [[ $m =~ ^(json|sse)$ ]] || die "unknown mode: $m"; done
for c in "${concs[@]}"; do [[ $c =~ ^[1-9][0-9]*$ ]] || die "bad concurrency: $c"; done
has_target direct || die "--targets must include direct (latency and ratios are relative to it)"
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || die "REPEATS must be a positive integer"
for d in "$DURATION" "$WARMUP"; do [[ $d =~ ^[1-9][0-9]*[smh]?$ ]] || die "bad duration '$d' (wrk wants whole units: 3s, 1m)"; done
for tool in wrk curl; do command -v $tool >/dev/null || die "$tool not found (run scripts/setup as root)"; done
if has_target nginx; then command -v nginx >/dev/null || die "nginx not found (run scripts/setup as root)"; fi
if ((SYSCALLS)); then command -v strace >/dev/null || die "--syscalls needs strace (run scripts/setup as root)"; fi
if ((UPSTREAM_TLS)); then
  command -v nginx >/dev/null || die "--upstream-tls needs nginx for the TLS responder (run scripts/setup as root)"
  command -v openssl >/dev/null || die "--upstream-tls needs openssl for the throwaway certificates"
fi

# ---------------------------------------------------------------- build
if ((BUILD)); then
  log "building the release preset"
  (cd "$ROOT" && cmake --preset release >/dev/null && cmake --build --preset release -j "$(nproc)")
fi
[[ -x $RESPONDER_BIN ]] || die "responder not found at $RESPONDER_BIN (build the release preset or set RESPONDER_BIN)"
RAMJET_NOTE=""
if has_target base; then
  [[ -x ${RAMJET_BASE_BIN:-} ]] || die "the base target needs RAMJET_BASE_BIN (another ramjet build)"
fi
if has_target ramjet; then
  [[ -x $RAMJET_BIN ]] || die "ramjet not found at $RAMJET_BIN (build it, set RAMJET_BIN, or use --targets direct,nginx)"
  if ldd "$RAMJET_BIN" 2>/dev/null | grep -Eq 'lib(asan|tsan|ubsan)'; then
    RAMJET_NOTE="**ramjet is a sanitizer build ($RAMJET_BIN): its numbers are not representative**"
    log "warning: $RAMJET_BIN is a sanitizer build; use the release preset for real numbers"
  fi
fi

# ---------------------------------------------------------------- CPU placement
NCPU=$(nproc)
if [[ $PIN == split && $NCPU -ge 2 ]]; then
  WRK_CPUS=0
  SERVER_CPUS=1; ((NCPU > 2)) && SERVER_CPUS=1-$((NCPU - 1))
  SERVER_NCPU=$((NCPU - 1))
  WRK_PREFIX=(taskset -c "$WRK_CPUS")
  SERVER_PREFIX=(taskset -c "$SERVER_CPUS")  # an array, not a function: `fn &` would fork a subshell
  PIN_DESC="wrk pinned to CPU $WRK_CPUS; the responder and the proxies pinned to CPU(s) $SERVER_CPUS (taskset)"
elif [[ $PIN == none || $PIN == split ]]; then
  PIN=none
  SERVER_NCPU=$NCPU
  WRK_PREFIX=()
  SERVER_PREFIX=()
  PIN_DESC="no pinning: wrk, the proxy and the responder share all $NCPU CPU(s)"
else
  die "--pin must be split or none"
fi

# ---------------------------------------------------------------- processes and cleanup
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_workdir ramjet-bench
chmod 755 "$WORK"  # nginx workers run as nobody when started by root
trap 'log "failed (exit $?) at line $LINENO: $BASH_COMMAND"' ERR

wait_for() {  # wait_for <seconds> <command...>: poll until the command succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

start_nginx() {  # start_nginx <dir> <what> <upstream host:port> <server block>: one worker per server CPU
  local dir=$1
  mkdir -p "$dir/tmp"
  cat >"$dir/nginx.conf" <<EOF
# generated by bench/proxy_overhead.sh: $2
worker_processes $SERVER_NCPU;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  keepalive_requests 1000000;
  upstream responder {
    server $3;
    keepalive 64;
    keepalive_requests 1000000;
  }
$4
}
EOF
  chmod -R a+rwx "$dir/tmp"
  "${SERVER_PREFIX[@]}" nginx -p "$dir" -e "$dir/error.log" -c "$dir/nginx.conf" >"$dir/stdout" 2>&1 &
  pids+=($!)
}

free_port() {  # a TCP port nobody listens on (nginx cannot report an ephemeral port back)
  local p
  for _ in $(seq 200); do
    # Below the kernel's ephemeral range (32768+), so no client socket can hold the port either.
    p=$((20000 + RANDOM % 12000))
    if [[ -z $(ss -Htan "sport = :$p" 2>/dev/null) ]]; then echo "$p"; return; fi
  done
  die "no free port found"
}

# responder
"${SERVER_PREFIX[@]}" "$RESPONDER_BIN" --port 0 --threads "$SERVER_NCPU" --sse-chunks "$SSE_CHUNKS" \
  >"$WORK/responder.out" 2>"$WORK/responder.err" &
pids+=($!)
wait_for 10 grep -q '^listening port=' "$WORK/responder.out" || { cat "$WORK/responder.err" >&2; die "responder did not start"; }
RESP_PORT=$(sed -n 's/^listening port=\([0-9]*\).*/\1/p' "$WORK/responder.out")
declare -A URL=([direct]="http://127.0.0.1:$RESP_PORT")
declare -A PID  # each proxy's process (--syscalls)
log "responder on port $RESP_PORT"

# the TLS responder (--upstream-tls): nginx terminating TLS in front of the responder
UPSTREAM_URL="http://127.0.0.1:$RESP_PORT"
NGINX_UPSTREAM_SERVER="127.0.0.1:$RESP_PORT"
NGINX_SCHEME=http
NGINX_PROXY_SSL=""
CURL_TLS=()  # curl's options for the https direct target
if ((UPSTREAM_TLS)); then
  PKI=$WORK/pki
  mkdir -p "$PKI"
  {
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$PKI/ca.key" \
      -out "$PKI/ca.pem" -days 2 -subj "/CN=ramjet bench throwaway CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$PKI/server.key" \
      -out "$PKI/server.csr" -subj "/CN=localhost"
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" \
      "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid" >"$PKI/server.ext"
    openssl x509 -req -in "$PKI/server.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca.key" -CAcreateserial \
      -days 2 -extfile "$PKI/server.ext" -out "$PKI/server.pem"
  } >"$PKI/openssl.log" 2>&1 || { cat "$PKI/openssl.log" >&2; die "could not make the throwaway certificates"; }
  chmod -R a+rX "$PKI"
  TLS_PORT=$(free_port)
  start_nginx "$WORK/tls" "the TLS responder (--upstream-tls)" "127.0.0.1:$RESP_PORT" "$(cat <<EOF
  server {
    listen 127.0.0.1:$TLS_PORT ssl reuseport;
    ssl_certificate $PKI/server.pem;
    ssl_certificate_key $PKI/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:rjbench:10m;
    ssl_session_timeout 1h;
    ssl_session_tickets on;
    location / {
      proxy_pass http://responder;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
EOF
)"
  # curl verifies the chain and both SANs here, so a bad certificate stops the run before any proxy sees it
  wait_for 10 curl -sf --cacert "$PKI/ca.pem" "https://127.0.0.1:$TLS_PORT/health" \
    || { cat "$WORK/tls/stdout" "$WORK/tls/error.log" >&2 2>/dev/null; die "the TLS responder did not start"; }
  curl -sf --cacert "$PKI/ca.pem" --resolve "localhost:$TLS_PORT:127.0.0.1" "https://localhost:$TLS_PORT/health" >/dev/null \
    || die "the TLS responder's certificate does not verify as localhost"
  TLS_PROTO=$(openssl s_client -connect "127.0.0.1:$TLS_PORT" -CAfile "$PKI/ca.pem" -verify_return_error \
    -verify_ip 127.0.0.1 </dev/null 2>/dev/null | sed -n 's/^New, \([^,]*\), Cipher is \(.*\)/\1, \2/p' | head -1) \
    || die "openssl s_client could not verify the TLS responder"
  UPSTREAM_URL="https://127.0.0.1:$TLS_PORT"
  URL[direct]=$UPSTREAM_URL
  CURL_TLS=(--cacert "$PKI/ca.pem")
  NGINX_UPSTREAM_SERVER="127.0.0.1:$TLS_PORT"
  NGINX_SCHEME=https
  NGINX_PROXY_SSL="
      proxy_ssl_trusted_certificate $PKI/ca.pem;
      proxy_ssl_verify on;
      proxy_ssl_verify_depth 2;
      proxy_ssl_name localhost;
      proxy_ssl_server_name on;
      proxy_ssl_protocols TLSv1.2 TLSv1.3;
      proxy_ssl_session_reuse on;"
  log "TLS responder on port $TLS_PORT ($SERVER_NCPU worker(s); $TLS_PROTO) in front of the responder"
fi

# nginx
if has_target nginx; then
  NGINX_PORT=$(free_port)
  start_nginx "$WORK/nginx" "the reverse proxy" "$NGINX_UPSTREAM_SERVER" "$(cat <<EOF
  server {
    listen 127.0.0.1:$NGINX_PORT reuseport;
    location / {
      proxy_pass $NGINX_SCHEME://responder;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;${NGINX_PROXY_SSL}
    }
  }
EOF
)"
  wait_for 10 curl -sf "http://127.0.0.1:$NGINX_PORT/health" \
    || { cat "$WORK/nginx/stdout" "$WORK/nginx/error.log" >&2 2>/dev/null; die "nginx did not start"; }
  URL[nginx]="http://127.0.0.1:$NGINX_PORT"
  if ((SYSCALLS)); then  # nginx's workers (strace takes a comma-separated list)
    PID[nginx]=$(pgrep -d, -P "$(cat "$WORK/nginx/nginx.pid")") || die "no nginx worker found"
  fi
  log "nginx on port $NGINX_PORT ($SERVER_NCPU worker(s))"
fi

# ramjet and base (each prints a JSON log line on stderr: ... listening api=127.0.0.1:PORT ...)
declare -A METRICS_URL
start_ramjet() {  # start_ramjet <target> <binary>
  local t=$1 bin=$2 port
  if ((UPSTREAM_TLS)); then local -x RJ_UPSTREAM_TLS_CA_FILE="$PKI/ca.pem"; fi
  RJ_UPSTREAM="$UPSTREAM_URL" RJ_LISTEN=127.0.0.1:0 RJ_METRICS_LISTEN=127.0.0.1:0 \
    RJ_THREADS="$SERVER_NCPU" "${SERVER_PREFIX[@]}" "$bin" >"$WORK/$t.out" 2>"$WORK/$t.err" &
  pids+=($!)
  PID[$t]=$!
  wait_for 15 grep -q 'listening api=' "$WORK/$t.err" || { tail -20 "$WORK/$t.err" >&2; die "$t did not start"; }
  port=$(grep -o 'listening api=[^ "]*' "$WORK/$t.err" | head -1 | sed 's/.*:\([0-9]*\)$/\1/')
  [[ $port =~ ^[0-9]+$ ]] || die "could not parse the $t API port from: $(grep 'listening' "$WORK/$t.err")"
  URL[$t]="http://127.0.0.1:$port"
  METRICS_URL[$t]="http://$(grep -o 'metrics=[^ "]*' "$WORK/$t.err" | head -1 | sed 's/^metrics=//')"
  log "$t on port $port ($SERVER_NCPU io thread(s))"
}
has_target ramjet && start_ramjet ramjet "$RAMJET_BIN"
has_target base && start_ramjet base "$RAMJET_BASE_BIN"

# ---------------------------------------------------------------- sanity: every target answers correctly
declare -A SCRIPT=([json]="$ROOT/bench/wrk/chat_json.lua" [sse]="$ROOT/bench/wrk/chat_sse.lua")
check_target() {
  local t=$1 url=${URL[$1]} out
  out=$(curl -sf "${CURL_TLS[@]}" -XPOST "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"bench-model","messages":[{"role":"user","content":"hi"}],"stream":false}') \
    || die "$t: non-streaming request failed"
  [[ $out == *'"object":"chat.completion"'*'"usage"'* ]] || die "$t: unexpected JSON response: ${out:0:200}"
  out=$(curl -sfN "${CURL_TLS[@]}" -XPOST "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"bench-model","messages":[{"role":"user","content":"hi"}],"stream":true}') \
    || die "$t: streaming request failed"
  [[ $out == *'chat.completion.chunk'*'"usage"'*'data: [DONE]'* ]] || die "$t: unexpected SSE response: ${out:0:200}"
}
for t in "${targets[@]}"; do check_target "$t"; done
log "all targets answer json and sse correctly"

# ---------------------------------------------------------------- measure
to_us() {  # wrk latency token (812.00us, 1.20ms, 2.00s) -> microseconds
  awk -v v="$1" 'BEGIN {
    n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
    if (u == "us") m = 1; else if (u == "ms") m = 1000; else if (u == "s") m = 1000000; else if (u == "m") m = 60000000; else m = 1
    printf "%.1f", n * m }'
}

declare -A RPS P50 P99 ERRS
run_wrk() {  # run_wrk <target> <mode> <conc> <duration> -> wrk output on stdout
  local t=$1 m=$2 c=$3 d=$4 threads
  threads=$((c < 2 ? c : 2))
  "${WRK_PREFIX[@]}" wrk -t"$threads" -c"$c" -d"$d" --latency -s "${SCRIPT[$m]}" "${URL[$t]}" \
    || die "wrk failed against $t ($m, c=$c)"
}

log "warm-up (${WARMUP} per target and mode)"
for m in "${modes[@]}"; do for t in "${targets[@]}"; do run_wrk "$t" "$m" 16 "$WARMUP" >/dev/null; done; done

ncells=$(( ${#modes[@]} * ${#concs[@]} ))
cell=0
for m in "${modes[@]}"; do
  for c in "${concs[@]}"; do
    cell=$((cell + 1))
    declare -A runs=()
    for r in $(seq "$REPEATS"); do
      # rotate the target order each repeat and cell so no target always runs first
      rot=$(( (cell + r) % ${#targets[@]} ))
      order=("${targets[@]:rot}" "${targets[@]:0:rot}")
      for t in "${order[@]}"; do
        log "[$cell/$ncells] mode=$m c=$c target=$t run $r/$REPEATS (${DURATION})"
        out=$(run_wrk "$t" "$m" "$c" "$DURATION")
        echo "$out" >"$WORK/wrk-$t-$m-$c-$r.txt"
        rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
        p50=$(to_us "$(awk '$1 == "50%" {print $2}' <<<"$out")")
        p99=$(to_us "$(awk '$1 == "99%" {print $2}' <<<"$out")")
        errs=$(awk '/Non-2xx/ {s += $NF} /Socket errors/ {gsub(/,/, ""); s += $4 + $6 + $8 + $10} END {print s + 0}' <<<"$out")
        if ((UPSTREAM_TLS)) && grep -q 'Non-2xx' <<<"$out"; then
          echo "$out" >&2
          die "$t answered non-2xx responses over the TLS upstream ($m, c=$c): $(grep 'Non-2xx' <<<"$out")"
        fi
        runs[$t]+="$rps $p50 $p99 $errs"$'\n'
      done
    done
    for t in "${targets[@]}"; do  # the run with the median req/s stands for the cell
      read -r rps p50 p99 errs < <(sort -n -k1,1 <<<"${runs[$t]%$'\n'}" | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }')
      RPS[$t,$m,$c]=$rps; P50[$t,$m,$c]=$p50; P99[$t,$m,$c]=$p99; ERRS[$t,$m,$c]=$errs
    done
    unset runs
  done
done

# ---------------------------------------------------------------- --syscalls: system calls per request
declare -A SYSCALL_ROW
if ((SYSCALLS)); then
  for m in "${modes[@]}"; do
    for t in ramjet base nginx; do
      has_target $t || continue
      log "system calls: $t, $m, c=16 (3s under strace)"
      strace -f -c -o "$WORK/strace-$t-$m.txt" -p "${PID[$t]}" 2>"$WORK/strace-$t-$m.err" &
      sp=$!
      sleep 0.5  # attached to every thread
      out=$(run_wrk "$t" "$m" 16 3s)
      kill -INT $sp 2>/dev/null || true
      wait $sp || true
      grep -q ' total$' "$WORK/strace-$t-$m.txt" 2>/dev/null || die "strace could not count $t's system calls (attach refused?)"
      n=$(awk '/requests in/ {print $1}' <<<"$out")
      [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die "no request completed under strace ($t, $m)"
      # strace -c: % time, seconds, usecs/call, calls, [errors,] syscall; "total" last
      SYSCALL_ROW[$t,$m]=$(awk -v n="$n" '
        $NF != "total" && $NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ {
          calls = $4; errs = (NF == 6) ? $5 : 0; all += calls
          if (calls / n >= 0.05) { row = row sprintf("%s%s %.2f%s", sep, $NF, calls / n, errs / n >= 0.05 ? sprintf(" (%.2f failed)", errs / n) : ""); sep = ", " }
        }
        END { printf "%.2f | %s", all / n, row }' "$WORK/strace-$t-$m.txt")
    done
  done
fi

# ---------------------------------------------------------------- TLS upstream: did every ramjet really use it?
declare -A TLS_FULL TLS_RESUMED
if ((UPSTREAM_TLS)); then
  for t in ramjet base; do
    has_target $t || continue
    metrics=$(curl -sf "${METRICS_URL[$t]}/metrics") || die "$t: could not scrape ${METRICS_URL[$t]}/metrics"
    TLS_FULL[$t]=$(awk '/^ramjet_upstream_tls_handshakes_total[{ ]/ && /resumed="false"/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
    TLS_RESUMED[$t]=$(awk '/^ramjet_upstream_tls_handshakes_total[{ ]/ && /resumed="true"/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
    failures=$(awk '/^ramjet_upstream_tls_failures_total[{ ]/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
    ((TLS_FULL[$t] + TLS_RESUMED[$t] > 0)) || die "$t made no upstream TLS handshake (ramjet_upstream_tls_handshakes_total is 0)"
    ((failures == 0)) || { grep '^ramjet_upstream_tls_failures_total' <<<"$metrics" >&2; die "$t: $failures failed upstream TLS handshake(s)"; }
    log "$t: ${TLS_FULL[$t]} full + ${TLS_RESUMED[$t]} resumed upstream TLS handshake(s), no failure"
  done
fi

# ---------------------------------------------------------------- report
fmt_rps() { awk -v v="$1" 'BEGIN { printf "%.0f", v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
fmt_us() { awk -v v="$1" 'BEGIN { if (v >= 10000) printf "%.1f ms", v / 1000; else printf "%.0f µs", v }'; }
added() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; printf "%s%.0f µs", (d >= 0 ? "+" : "−"), (d >= 0 ? d : -d) }'; }
mark() { [[ ${ERRS[$1]:-0} == 0 ]] && echo "" || echo " ⚠${ERRS[$1]}"; }

CPU_MODEL=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$ROOT" diff --quiet HEAD 2>/dev/null || COMMIT+="+dirty"
STAMP=$(date -u +%Y-%m-%d-%H%M%S)
mkdir -p "$RESULTS_DIR"
REPORT=$RESULTS_DIR/proxy_overhead-$STAMP.md
((UPSTREAM_TLS)) && REPORT=$RESULTS_DIR/proxy_overhead-tls-$STAMP.md

proxies=()
for t in ramjet base nginx; do has_target $t && proxies+=("$t"); done

{
  title=${targets[0]}; for t in "${targets[@]:1}"; do title+=" vs $t"; done
  echo "# Proxy overhead: $title$( ((UPSTREAM_TLS)) && echo ' (TLS upstream)')"
  echo
  if ((UPSTREAM_TLS)); then
    echo "- mode: **TLS upstream** (--upstream-tls). The responder sits behind the TLS responder: nginx, $SERVER_NCPU worker(s) on the server CPU(s), listen ssl (TLS 1.2/1.3, session cache + tickets), proxy_pass http:// with keepalive 64; throwaway CA, ECDSA P-256 server certificate with SAN IP:127.0.0.1, DNS:localhost; what openssl s_client negotiates with it: $TLS_PROTO"
    echo "- direct = wrk over https to the TLS responder; ramjet = wrk (http) -> ramjet -> RJ_UPSTREAM=https://127.0.0.1:<port> with RJ_UPSTREAM_TLS_CA_FILE (chain + IP SAN verified)$(has_target nginx && echo "; nginx = wrk (http) -> nginx -> proxy_pass https:// (proxy_ssl_verify on, proxy_ssl_name localhost + SNI, proxy_ssl_session_reuse on, TLS 1.2/1.3, keepalive 64)")"
    for t in ramjet base; do
      has_target $t && echo "- $t upstream TLS handshakes over the whole run (probes included): ${TLS_FULL[$t]} full, ${TLS_RESUMED[$t]} resumed, 0 failed"
    done
  fi
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $COMMIT"
  echo "- machine: $NCPU CPU(s), $CPU_MODEL, kernel $(uname -r), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- placement: $PIN_DESC"
  # Settings the caller exported (RJ_AFFINITY=round_robin, say) reach ramjet and base alike.
  rj_env=$(env | grep -E '^RJ_' | grep -Ev '^RJ_(UPSTREAM|LISTEN|METRICS_LISTEN|THREADS|UPSTREAM_TLS_CA_FILE)=' | sort | paste -sd' ' || true)
  has_target ramjet && echo "- ramjet: ${RAMJET_BIN#"$ROOT"/}, RJ_THREADS=$SERVER_NCPU, ${rj_env:+$rj_env from the environment, }other settings default${RAMJET_NOTE:+. $RAMJET_NOTE}"
  has_target base && echo "- base: $RAMJET_BASE_BIN ($(git -C "$(dirname "$RAMJET_BASE_BIN")" rev-parse --short HEAD 2>/dev/null || echo '?')), same settings"
  echo "- tools: $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}')$(has_target nginx && echo ", $(nginx -v 2>&1 | sed 's/.*: //') ($SERVER_NCPU worker(s), proxy_buffering off, upstream keepalive 64)")"
  echo "- upstream: ramjet-responder, $SERVER_NCPU thread(s), ${SSE_CHUNKS}-event SSE stream + usage chunk + [DONE], or a ~480 B JSON completion"
  echo "- load: wrk -t min(2,c) -c c -d $DURATION --latency, ~1 KB chat body (bench/wrk/chat_{json,sse}.lua), ${REPEATS} run(s) per cell (median), targets interleaved per cell"
  echo
  hdr="| mode | c | direct req/s |"; sep="|---|---:|---:|"
  for p in "${proxies[@]}"; do hdr+=" $p req/s |"; sep+="---:|"; done
  if has_target ramjet && has_target nginx; then hdr+=" ramjet/nginx |"; sep+="---:|"; fi
  if has_target base && has_target nginx; then hdr+=" base/nginx |"; sep+="---:|"; fi
  if has_target ramjet && has_target base; then hdr+=" ramjet/base |"; sep+="---:|"; fi
  for p in "${proxies[@]}"; do hdr+=" $p/direct |"; sep+="---:|"; done
  for p in "${proxies[@]}"; do hdr+=" $p +p50 |"; sep+="---:|"; done
  echo "$hdr"; echo "$sep"
  for m in "${modes[@]}"; do
    for c in "${concs[@]}"; do
      k="$m,$c"
      row="| $m | $c | $(fmt_rps "${RPS[direct,$k]}")$(mark "direct,$k") |"
      for p in "${proxies[@]}"; do row+=" $(fmt_rps "${RPS[$p,$k]}")$(mark "$p,$k") |"; done
      if has_target ramjet && has_target nginx; then row+=" $(ratio "${RPS[ramjet,$k]}" "${RPS[nginx,$k]}") |"; fi
      if has_target base && has_target nginx; then row+=" $(ratio "${RPS[base,$k]}" "${RPS[nginx,$k]}") |"; fi
      if has_target ramjet && has_target base; then row+=" $(ratio "${RPS[ramjet,$k]}" "${RPS[base,$k]}") |"; fi
      for p in "${proxies[@]}"; do row+=" $(ratio "${RPS[$p,$k]}" "${RPS[direct,$k]}") |"; done
      for p in "${proxies[@]}"; do row+=" $(added "${P50[$p,$k]}" "${P50[direct,$k]}") |"; done
      echo "$row"
    done
  done
  echo
  echo "Latency (p50 / p99):"
  echo
  hdr="| mode | c |"; sep="|---|---:|"
  for t in "${targets[@]}"; do hdr+=" $t |"; sep+="---:|"; done
  echo "$hdr"; echo "$sep"
  for m in "${modes[@]}"; do
    for c in "${concs[@]}"; do
      row="| $m | $c |"
      for t in "${targets[@]}"; do row+=" $(fmt_us "${P50[$t,$m,$c]}") / $(fmt_us "${P99[$t,$m,$c]}") |"; done
      echo "$row"
    done
  done
  echo
  if ((SYSCALLS)); then
    echo "System calls per request (strace -c -f on the proxy process, wrk -c 16 for 3 s; calls under"
    echo "0.05 a request left out; failed = answered an error, EAGAIN for a read):"
    echo
    echo "| mode | proxy | all | by call |"
    echo "|---|---|---:|---|"
    for m in "${modes[@]}"; do
      for t in ramjet base nginx; do
        has_target $t && echo "| $m | $t | ${SYSCALL_ROW[$t,$m]} |"
      done
    done
    echo
  fi
  echo "req/s and latency are wrk's; +p50 is the target's median latency minus direct's in the same cell."
  echo "For sse, a request completes when the last chunk ([DONE] and the terminating chunk) arrives."
  echo "⚠N marks a run with N socket errors or non-2xx responses."
} >"$REPORT"

cat "$REPORT"
log "report written to $REPORT"
