"""Hostile and careless clients against ramjet in front of three ramjet-sim engines, under load.

A request whose headers the engines refuse must not take them out of service; the engines'
admin and debug endpoints must not be reachable through the API port; a client that stops
reading must not hold its stream, engine slot and reservation; request bodies must not grow
memory past RJ_MAX_BUFFERED_BYTES; idle connections must not starve real clients. As in
test_chaos.py, every client of the background load must get a well-formed ending meanwhile.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from support.chaos import Load, assert_well_formed, chat_body, one_request, summary
from support.ramjet_proc import RawClient, poll
from support.sim_proc import SimProc

ENV = {
    "RJ_PROBE_INTERVAL_MS": "200",
    "RJ_PROBE_TIMEOUT_MS": "300",
    "RJ_READY_SUCCESSES": "2",
    "RJ_READY_STABLE_SECONDS": "1",
    "RJ_CLIENT_SEND_TIMEOUT_MS": "1500",
    "RJ_THREADS": "2",
}
BOUND_S = 10.0


@pytest.fixture
def fleet(sim_ramjet):
    return lambda env=None: sim_ramjet(dict(ENV, **(env or {})))


class HealthWatch:
    """Samples /health every 20 ms in the background; ok() says whether it ever said less than ok."""

    def __init__(self, rj):
        self.rj = rj
        self.bad: list = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            code, h = self.rj.health()
            if code != 200 or h["status"] != "ok":
                self.bad.append(h)
            time.sleep(0.02)

    def stop(self) -> list:
        self._stop.set()
        self._t.join(5)
        return self.bad


def hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


# ----------------------------------------------------------------------------- poison requests
POISON = {"X-Big": "x" * 9000}  # under ramjet's 64 KiB client limit, over the engines' 8 KiB


def test_a_request_the_engines_refuse_is_blamed_and_no_engine_is_fenced(fleet, sims):
    for s in sims:
        s.admin("/sim/fault", {"drop_header_bytes": 8192})  # they hang up on heads over 8 KiB
    rj = fleet()
    load = Load(rj.api_port, clients=4).start()
    watch = HealthWatch(rj)
    poisoned = []
    for i in range(5):
        poisoned.append(one_request(rj.api_port, chat_body(1000 + i), 10, POISON))
        time.sleep(0.3)
    bad_health = watch.stop()
    results = load.stop()
    print(f"\npoison: {[(r.status, r.error_type) for r in poisoned]}; load {summary(results)}")
    assert all(r.ending == "json_error" and r.status == 502 and r.error_type == "upstream_rejected_request"
               for r in poisoned), poisoned
    assert not bad_health, f"/health said less than ok: {bad_health[0]}"
    assert_well_formed(results, BOUND_S)
    assert all(r.ok for r in results), summary(results)
    m = rj.metrics()
    assert m.get("ramjet_requests_blamed_total", endpoint="chat", reason="dropped") == 5
    assert m.sum("ramjet_upstream_fences_total") == 0 and m.sum("ramjet_upstream_ejections_total") == 0
    assert m.sum("ramjet_upstream_failures_total") == 0, "the request's fault counts against no engine"
    rj.wait_idle()


def test_headers_over_what_the_engines_accept_get_431_from_ramjet(fleet, sims):
    rj = fleet({"RJ_UPSTREAM_MAX_HEADER_BYTES": "8192", "RJ_UPSTREAM_MAX_HEADER_COUNT": "64"})
    before = rj.metrics().sum("ramjet_upstream_requests_total")
    big = one_request(rj.api_port, chat_body(1), 10, POISON)
    many = one_request(rj.api_port, chat_body(2), 10, {f"X-H{i}": "v" for i in range(70)})
    assert (big.status, big.ending) == (431, "json_error") and big.upstream is None, big
    assert (many.status, many.ending) == (431, "json_error"), many
    m = rj.metrics()
    assert m.get("ramjet_request_rejections_total", reason="upstream_header_too_large") == 2
    assert m.sum("ramjet_upstream_requests_total") == before, "no engine saw them"
    assert one_request(rj.api_port, chat_body(3), 10, {"X-Small": "x" * 1000}).ok


def test_vllm_answers_an_oversized_head_with_400_and_ramjet_relays_it_without_blame(ramjet_factory, sims):
    # The sim as vLLM ships (h11 limit): an engine that answers is not failing, and a client
    # error is not a reason to retry.
    s = SimProc("--speed", "20", "--h11-max-incomplete-event-size", "8192")
    try:
        rj = ramjet_factory([s.url, sims[1].url], env=ENV)
        r = one_request(rj.api_port, chat_body(1), 10, POISON)
        assert r.status == 400 and r.upstream is not None, r
        m = rj.metrics()
        assert m.sum("ramjet_upstream_failures_total") == 0 and m.sum("ramjet_requests_blamed_total") == 0
    finally:
        s.stop()


# ----------------------------------------------------------------------------- exposed endpoints
ADMIN = [("POST", "/sim/fault", b'{"crash":true}'), ("POST", "/reset_prefix_cache", b""),
         ("GET", "/metrics", b""), ("POST", "/sleep?level=1&mode=abort", b""), ("POST", "/wake_up", b""),
         ("GET", "/is_sleeping", b""), ("POST", "/collective_rpc", b'{"method":"x"}'),
         ("POST", "/start_profile", b""), ("POST", "/v1/load_lora_adapter", b"{}"),
         ("GET", "/server_info", b""), ("POST", "/pause", b""), ("GET", "/sim/stats", b""),
         ("POST", "/v1/chat/completions/../../sim/fault", b'{"crash":true}'), ("GET", "/", b"")]


def test_engine_admin_and_debug_endpoints_are_never_reachable(fleet, sims):
    rj = fleet()
    load = Load(rj.api_port, clients=2).start()
    for method, path, body in ADMIN:
        r = rj.request(method, path, body or None)
        assert r.status == 404 and r.upstream is None, (path, r)
        assert r.json()["error"]["code"] == 404
    results = load.stop()
    assert all(s.proc.poll() is None for s in sims), "an engine crashed: /sim/fault reached it"
    assert_well_formed(results, BOUND_S)
    assert rj.metrics().get("ramjet_request_rejections_total", reason="unknown_path") == len(ADMIN)


def test_an_operator_can_list_the_one_admin_path_they_need(fleet, sims):
    rj = fleet({"RJ_PASSTHROUGH_PATHS": "/reset_prefix_cache"})
    r = rj.request("POST", "/reset_prefix_cache")
    assert r.status == 200 and r.upstream in ("0", "1", "2"), r
    assert rj.request("POST", "/sleep").status == 404


# ----------------------------------------------------------------------------- slow readers
def test_a_client_that_stops_reading_is_cut_and_releases_its_engine(ramjet_factory):
    # A fast engine with a long context: megabytes of stream that nobody reads.
    sim = SimProc("--speed", "400", "--max-model-len", "1000000", "--num-gpu-blocks-override", "65536")
    try:
        stopped_reader(ramjet_factory([sim.url], env=ENV), sim)
    finally:
        sim.stop()


def stopped_reader(rj, sim):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", rj.api_port))
    body = json.dumps({"model": "ramjet-sim", "stream": True, "max_tokens": 90000,  # (RJ_MAX_TOKENS_STRIP drops 100000 and more)
                       "messages": [{"role": "user", "content": "never read"}]}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    t = time.monotonic()
    m = poll(lambda: (lambda m: m if m.get("ramjet_request_timeouts_total", endpoint="chat",
                                           reason="client_send") else None)(rj.metrics()),
             timeout=30, what="the client-send timeout")
    took = time.monotonic() - t
    print(f"\nstopped reader cut after {took:.1f}s")
    rj.wait_idle(timeout=5)  # stream, reservation and in-flight count released
    poll(lambda: sim.admin("/sim/stats", {})["running"] == 0, timeout=5, what="engine request cancelled")
    assert m.get("ramjet_requests_total", endpoint="chat", code="499") == 1
    s.close()


def test_a_chunked_body_trickled_a_byte_at_a_time_is_read_and_answered(fleet, sims):
    """A chunked request whose last chunk arrives a byte or two at a time (Beast's final-chunk step
    asserts it has five bytes buffered: a Debug ramjet aborted on the byte-at-a-time one, on the
    API port and on the metrics port). Each is answered (an empty body is a 400 of ramjet's, the
    chat a 200; the metrics port takes no body) and ramjet serves on."""
    rj = fleet({})
    data = chat_body(1, stream=False)
    chat = f"{len(data):x}\r\n".encode() + data
    for first, tail, status in ((b"", [b"0\r\n", b"\r\n"], 400), (b"", [b"0", b"\r", b"\n", b"\r", b"\n"], 400),
                                (chat, [b"\r\n0", b"\r\n\r", b"\n"], 200)):
        c = RawClient(rj.api_port, timeout=10)
        c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n" + first)
        for piece in tail:
            time.sleep(0.05)
            c.send(piece)
        assert c.read_head() == status, tail
        c.close()
        assert rj.proc.poll() is None, tail
    c = RawClient(rj.metrics_port, timeout=10)
    c.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    for piece in (b"0", b"\r", b"\n", b"\r", b"\n"):
        time.sleep(0.05)
        try:
            c.send(piece)
        except OSError:
            break  # refused on its head
    assert c.read_head() == 400
    c.close()
    assert rj.proc.poll() is None
    assert one_request(rj.api_port, chat_body(1), 10).ok


# ----------------------------------------------------------------------------- memory
def test_request_bodies_past_the_buffer_budget_get_503_with_retry_after(fleet, sims):
    rj = fleet({"RJ_MAX_BUFFERED_BYTES": str(8 << 20), "RJ_BODY_TIMEOUT_MS": "20000"})
    size = 1536 << 10
    holders = []
    for _ in range(2):  # two declared 1.5 MiB inference bodies, half sent: 2 x 3 MiB of 8 held
        c = RawClient(rj.api_port, timeout=10)
        c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(size).encode() + b"\r\n\r\n" + b"{" + b" " * (size // 2))
        holders.append(c)
    poll(lambda: rj.metrics().get("ramjet_request_buffered_bytes") == 4 * size, what="two leases, counted twice")
    third = one_request(rj.api_port, b'{"model":"ramjet-sim",' + b" " * size + b'"messages":[]}', 10)
    assert third.status == 503 and third.ending == "json_error" and third.error_type == "server_busy", third
    r = RawClient(rj.api_port, timeout=10)  # refused on its head, before any body byte is read
    r.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(size).encode() + b"\r\n\r\n")
    assert r.read_head() == 503 and r.header("Retry-After") == "1" and r.header("Connection") == "close"
    # A chunked body is leased as it grows: it is refused once it outgrows what is left.
    ch = RawClient(rj.api_port, timeout=10)
    ch.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(20):
        try:
            ch.send(b"10000\r\n" + b" " * 0x10000 + b"\r\n")
        except OSError:
            break
    assert ch.read_head() == 503
    m = rj.metrics()
    assert m.get("ramjet_request_rejections_total", reason="buffered_bytes_full") == 3
    assert m.get("ramjet_request_buffered_bytes") <= 8 << 20
    for c in holders:
        c.close()
    poll(lambda: rj.metrics().get("ramjet_request_buffered_bytes") == 0, what="leases released")
    assert one_request(rj.api_port, chat_body(1), 10).ok, "the budget is back once the holders are gone"


def padded_chat(values: int, value: bytes, path_messages: bool = False) -> bytes:
    """A chat (or Anthropic messages) body whose `pad` array holds `values` copies of `value`."""
    head = b'{"model":"ramjet-sim","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"pad":['
    return head + b",".join([value] * values) + b"]}"


def test_json_too_dense_to_parse_is_refused_and_its_parse_memory_is_leased(fleet, sims):
    rj = fleet({"RJ_MAX_BUFFERED_BYTES": str(48 << 20), "RJ_BODY_TIMEOUT_MS": "20000"})
    # One-digit numbers: a 24-byte tape entry per 2 body bytes, past the 8 a byte ramjet reads.
    # 413 in each API's own error shape; nothing reaches an engine.
    dense = padded_chat(1 << 20, b"0")
    r = one_request(rj.api_port, dense, 20)
    assert r.status == 413 and r.ending == "json_error" and r.error_type == "invalid_request_error", r
    assert r.upstream is None
    c = RawClient(rj.api_port, timeout=20)
    c.send_request("POST", "/v1/messages", dense, {"Content-Type": "application/json", "Connection": "close"})
    assert c.read_head() == 413
    err = json.loads(b"".join(p for _, p in c.chunks()))
    assert err["type"] == "error" and err["error"]["type"] == "request_too_large", err  # (Anthropic's 413)
    m = rj.metrics()
    assert m.get("ramjet_request_rejections_total", reason="json_too_dense") == 2
    assert m.get("ramjet_malformed_json_total", endpoint="chat") == 0
    # Token IDs as clients send them (3 MiB, ~3.4 bytes of tape a body byte) are read and served;
    # their parse past the free share is held in RJ_MAX_BUFFERED_BYTES while it runs, so with
    # most of the budget taken by a half-sent body the same request is told to come back.
    ids = padded_chat(450_000, b"151644")
    assert one_request(rj.api_port, ids, 30).status == 200
    holder = RawClient(rj.api_port, timeout=20)
    size = 17 << 20  # counted twice: 34 of 48 MiB held
    holder.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(size).encode() + b"\r\n\r\n{")
    poll(lambda: rj.metrics().get("ramjet_request_buffered_bytes") == 2 * size, what="the holder's lease")
    busy = one_request(rj.api_port, ids, 30)  # its 2 x 3 MiB fits; its parse's growth does not
    assert busy.status == 503 and busy.ending == "json_error" and busy.error_type == "server_busy", busy
    assert rj.metrics().get("ramjet_request_rejections_total", reason="buffered_bytes_full") == 1
    poll(lambda: rj.metrics().get("ramjet_request_buffered_bytes") == 2 * size, what="the parse's lease given back")
    holder.close()
    poll(lambda: rj.metrics().get("ramjet_request_buffered_bytes") == 0, what="leases released")
    assert one_request(rj.api_port, ids, 30).status == 200
    assert one_request(rj.api_port, chat_body(1), 10).ok


def test_eight_concurrent_50_mb_bodies_stay_within_the_default_budget(fleet, sims):
    # (The sims tokenize 50 MB on one thread: their /health waits meanwhile. A production probe
    # timeout keeps that from looking like a hang.)
    rj = fleet({"RJ_BODY_TIMEOUT_MS": "30000", "RJ_PROBE_TIMEOUT_MS": "5000"})
    base = hwm_kib(rj.proc.pid)
    size = 50 << 20
    body = b'{"model":"ramjet-sim","messages":[{"role":"user","content":"' + b"a" * size + b'"}]}'
    results = [None] * 8

    def send(k):
        results[k] = one_request(rj.api_port, body, 60)

    threads = [threading.Thread(target=send, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    codes = sorted(r.status for r in results)
    peak_mib = (hwm_kib(rj.proc.pid) - base) / 1024
    print(f"\n8 x 50 MB bodies: {[(r.status, r.error_type) for r in results]}, "
          f"ramjet peak RSS +{peak_mib:.0f} MiB over its idle peak")
    assert all(r.ending == "json_error" for r in results), results
    # Counted twice (bytes and parse), two 50 MB bodies fit the default 256 MiB; the engine
    # refuses those (longer than its context), the rest are told to come back.
    assert codes.count(503) == 6 and codes.count(400) == 2, codes
    assert all(r.error_type == "server_busy" for r in results if r.status == 503)
    # (RSS under the sanitizers says little: docs/benchmarks.md has release-build figures.)
    rj.wait_idle(timeout=20)


# ----------------------------------------------------------------------------- idle connections
def test_a_thousand_idle_connections_do_not_starve_real_clients(fleet, sims):
    rj = fleet({"RJ_HEADER_TIMEOUT_MS": "2000"})
    idle = []
    for i in range(1000):
        c = socket.create_connection(("127.0.0.1", rj.api_port), timeout=10)
        if i % 2:
            c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # never finished
        idle.append(c)
    load = Load(rj.api_port, clients=4).start()
    time.sleep(3)
    results = load.stop()
    assert_well_formed(results, BOUND_S)
    assert all(r.ok for r in results) and len(results) > 50, summary(results)
    # The header timeout closed every one of them (each gets a 408 or a plain close).
    deadline = time.monotonic() + 10
    for c in idle:
        c.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            while c.recv(65536):
                pass
        except socket.timeout:
            pytest.fail("an idle connection was still open after the header timeout")
        except OSError:
            pass
        c.close()
    assert rj.alive()
    code, h = rj.health()
    assert code == 200 and h["status"] == "ok"
