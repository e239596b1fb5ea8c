"""Process harness and small HTTP helpers for ramjet's end-to-end tests (standard library only).

  * RamjetProc: starts the binary with a clean environment (PATH + the RJ_* given), parses the
    api/metrics ports from the `listening api=... metrics=...` log line, mirrors stderr to a file
    (and keeps it in memory), and stops/kills it at teardown.
  * http_request(): one request over http.client (normal cases).
  * RawClient: a raw-socket HTTP/1.1 client for streaming timing, malformed input and
    disconnect tests; it timestamps every received chunk with time.monotonic().
  * scrape()/Metrics: Prometheus text parsing (`name{labels} value`).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from support.headers import HeaderLookup
from typing import Iterable, Optional

DEFAULT_BIN = "/work/main/build/dev/src/app/ramjet"
LISTEN_RE = re.compile(r"listening api=([0-9.]+):(\d+) metrics=([0-9.]+):(\d+)")
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer",
                     "WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer")
# Sanitizer runtime knobs are not ramjet configuration; they pass through when the runner sets them.
PASSTHROUGH_ENV = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS", "ASAN_SYMBOLIZER_PATH")

# Defaults that keep tests fast; any test may override them.
TEST_DEFAULTS = {
    "RJ_LISTEN": "127.0.0.1:0",
    "RJ_METRICS_LISTEN": "127.0.0.1:0",
    "RJ_PROBE_INTERVAL_MS": "200",
    "RJ_PROBE_TIMEOUT_MS": "500",
    "RJ_UPSTREAM_CONNECT_TIMEOUT_MS": "1000",
    "RJ_SHUTDOWN_GRACE_MS": "3000",
    "RJ_THREADS": "2",
    # The readiness gate off (one passing probe readmits, as the older tests assume);
    # test_readiness.py turns it on.
    "RJ_READY_SUCCESSES": "1",
    "RJ_READY_STABLE_SECONDS": "0",
    # No engine /metrics scrape: the mock engines would record its GETs next to the requests
    # the tests count; test_metrics.py and test_dashboard.py turn it on.
    "RJ_ENGINE_SCRAPE_INTERVAL_MS": "0",
    # Exact routing waits for tokens up to RJ_EXACT_ROUTE_TIMEOUT_MS whatever the sims' speed (the
    # budget learned from fast sims would send requests to the fingerprints at random);
    # test_exact_budget.py turns the budget on.
    "RJ_EXACT_ROUTE_BUDGET_SHARE": "0",
}


def ramjet_bin() -> str:
    return os.environ.get("RAMJET_BIN", DEFAULT_BIN)


def upstream_list(upstreams: Iterable) -> str:
    out = []
    for u in upstreams:
        if isinstance(u, str):
            out.append(u)
        elif isinstance(u, int):
            out.append(f"http://127.0.0.1:{u}")
        else:
            out.append(u.url)
    return ",".join(out)


class StartupError(Exception):
    pass


class RamjetProc:
    def __init__(self, upstreams: Iterable = (), env: Optional[dict] = None, log_path: Optional[str] = None,
                 binary: Optional[str] = None, raw_env: Optional[dict] = None, defaults: bool = True):
        """upstreams: MockEngine objects, ports or URLs (order = ordinal). env: RJ_* overrides
        (a value of None removes a default). raw_env: variables added verbatim (for config tests)."""
        self.binary = binary or ramjet_bin()
        e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for k in PASSTHROUGH_ENV:
            if k in os.environ:
                e[k] = os.environ[k]
        if defaults:
            e.update(TEST_DEFAULTS)
        ups = list(upstreams)
        if ups:
            e["RJ_UPSTREAM"] = upstream_list(ups)
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = str(v)
        e.update(raw_env or {})
        self.env = e
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.lines: list = []
        self._lock = threading.Lock()
        self._listening = threading.Event()
        self._reader: Optional[threading.Thread] = None
        self.api_port: Optional[int] = None
        self.metrics_port: Optional[int] = None
        self.expect_exit = False      # set by tests that make ramjet exit on purpose

    # -------------------------------------------------------------- lifecycle
    def spawn(self) -> "RamjetProc":
        self.proc = subprocess.Popen([self.binary], env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, close_fds=True)
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        return self

    def start(self, timeout: float = 10.0) -> "RamjetProc":
        self.spawn()
        deadline = time.monotonic() + timeout
        while not self._listening.wait(0.02):
            if self.proc.poll() is not None:
                self._reader.join(2)
                raise StartupError(f"ramjet exited with {self.proc.returncode} before listening:\n{self.output()}")
            if time.monotonic() > deadline:
                raise StartupError(f"ramjet did not log 'listening api=... metrics=...' within {timeout}s:\n"
                                   f"{self.output()}")
        return self

    def _read_output(self) -> None:
        f = open(self.log_path, "ab") if self.log_path else None
        try:
            for raw in iter(self.proc.stdout.readline, b""):
                if f:
                    f.write(raw)
                    f.flush()
                line = raw.decode("utf-8", "replace").rstrip("\n")
                with self._lock:
                    self.lines.append(line)
                if not self._listening.is_set():
                    m = LISTEN_RE.search(line)
                    if m:
                        self.api_port = int(m.group(2))
                        self.metrics_port = int(m.group(4))
                        self._listening.set()
        finally:
            if f:
                f.close()

    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        if self._reader:
            self._reader.join(2)
        return rc

    def run_to_exit(self, timeout: float = 10.0) -> tuple:
        """For processes expected to exit on their own (config errors): (rc, output)."""
        self.expect_exit = True
        self.spawn()
        rc = self.wait_exit(timeout)
        return rc, self.output()

    def terminate(self) -> None:
        self.expect_exit = True
        self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 8.0) -> Optional[int]:
        """SIGTERM, wait, then SIGKILL. Returns the exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.wait_exit(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.wait_exit(5)
                return None
        if self._reader:
            self._reader.join(2)
        return self.proc.returncode

    def sanitizer_report(self) -> str:
        out = self.output()
        hits = [m for m in SANITIZER_MARKERS if m in out]
        return out if hits else ""

    # -------------------------------------------------------------- convenience
    def request(self, method: str, path: str, body=None, headers=None, timeout: float = 10.0):
        return http_request(self.api_port, method, path, body, headers, timeout)

    def chat(self, body: dict, headers=None, timeout: float = 10.0, path: str = "/v1/chat/completions"):
        return http_request(self.api_port, "POST", path, json.dumps(body).encode(),
                            dict({"Content-Type": "application/json"}, **(headers or {})), timeout)

    def health(self, timeout: float = 5.0):
        r = http_request(self.api_port, "GET", "/health", timeout=timeout)
        return r.status, r.json()

    def metrics(self) -> "Metrics":
        return scrape(self.metrics_port)

    def wait_health(self, predicate, timeout: float = 5.0, what: str = "health condition"):
        """Polls /health until predicate(status_code, json) is truthy; returns (code, json)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            last = self.health()
            if predicate(*last):
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not reached within {timeout}s; last /health = {last}")
            time.sleep(0.02)

    def wait_replica(self, index: int, healthy: bool, timeout: float = 5.0):
        return self.wait_health(lambda c, j: j["replicas"][index]["healthy"] is healthy, timeout,
                                f"replica {index} healthy={healthy}")

    def wait_idle(self, timeout: float = 3.0):
        """Waits until ramjet reports no in-flight request and no load reservation anywhere."""
        deadline = time.monotonic() + timeout
        while True:
            code, h = self.health()
            m = self.metrics()
            busy = [r for r in h["replicas"] if r.get("inflight") or r.get("load_units")]
            g_inflight = m.get("ramjet_requests_inflight")
            up_inflight = m.sum("ramjet_upstream_inflight")
            up_load = m.sum("ramjet_upstream_load_units")
            if not busy and not g_inflight and not up_inflight and not up_load:
                return h, m
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"ramjet not idle after {timeout}s: /health replicas={h['replicas']}, "
                    f"ramjet_requests_inflight={g_inflight}, upstream_inflight={up_inflight}, "
                    f"upstream_load_units={up_load}")
            time.sleep(0.02)


# ---------------------------------------------------------------------------- http.client helper
class Response(HeaderLookup):
    def __init__(self, status: int, reason: str, headers: list, body: bytes):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body


    def json(self):
        return json.loads(self.body)

    @property
    def upstream(self) -> Optional[str]:
        return self.header("X-Ramjet-Upstream")

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.headers} {self.body[:300]!r}>"


def http_request(port: int, method: str, path: str, body=None, headers=None, timeout: float = 10.0) -> Response:
    return exchange(http.client.HTTPConnection("127.0.0.1", port, timeout=timeout), method, path, body, headers)


def exchange(conn: http.client.HTTPConnection, method: str, path: str, body=None, headers=None) -> Response:
    """One request on `conn` (plain or HTTPS, not yet used), read whole; the connection closes."""
    try:
        if isinstance(body, str):
            body = body.encode()
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, r.reason, r.getheaders(), data)
    finally:
        conn.close()


# ---------------------------------------------------------------------------- raw client
class RawClient:
    """A raw HTTP/1.1 client connection. send() writes bytes; read_head() parses the status line
    and headers; chunks() yields (monotonic_time, bytes) as decoded body pieces arrive."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.status: Optional[int] = None
        self.headers: list = []
        self.closed_t: Optional[float] = None
        self.eof = False

    def send(self, data: bytes) -> None:
        self.s.sendall(data)

    def send_request(self, method: str, path: str, body: bytes = b"", headers=None) -> None:
        h = {"Host": "ramjet.test"}
        h.update(headers or {})
        if body or method in ("POST", "PUT"):
            if not any(k.lower() in ("content-length", "transfer-encoding") for k in h):
                h["Content-Length"] = str(len(body))
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        self.send(head.encode("latin-1") + body)

    def _fill(self) -> bool:
        try:
            data = self.s.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def read_head(self) -> int:
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError(f"connection closed before a response head; got {self.buf!r}")
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        self.headers = []
        for line in lines[1:]:
            k, v = line.split(":", 1)
            self.headers.append((k.strip(), v.strip()))
        return self.status

    def header(self, name: str) -> Optional[str]:
        n = name.lower()
        for k, v in self.headers:
            if k.lower() == n:
                return v
        return None

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError("connection closed inside chunked framing")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def chunks(self):
        """Yields (t, bytes) per decoded body piece; ends at the end of the body."""
        te = (self.header("Transfer-Encoding") or "").lower()
        cl = self.header("Content-Length")
        if "chunked" in te:
            while True:
                size = int(self._line().split(b";")[0].strip(), 16)
                if size == 0:
                    while self._line() != b"":
                        pass
                    return
                while len(self.buf) < size + 2:
                    if not self._fill():
                        raise ConnectionError("connection closed inside a chunk")
                piece, self.buf = self.buf[:size], self.buf[size + 2:]
                yield time.monotonic(), piece
        elif cl is not None:
            left = int(cl)
            while left > 0:
                if not self.buf and not self._fill():
                    raise ConnectionError(f"connection closed with {left} body bytes missing")
                piece, self.buf = self.buf[:left], self.buf[left:]
                left -= len(piece)
                yield time.monotonic(), piece
        else:
            while True:
                if self.buf:
                    piece, self.buf = self.buf, b""
                    yield time.monotonic(), piece
                if not self._fill():
                    return

    def read_body(self) -> bytes:
        return b"".join(p for _, p in self.chunks())

    def read_response(self) -> Response:
        self.read_head()
        body = self.read_body()
        return Response(self.status, "", self.headers, body)

    def read_all_until_close(self, timeout: float = 5.0) -> bytes:
        self.s.settimeout(timeout)
        while self._fill():
            pass
        data, self.buf = self.buf, b""
        return data

    def close(self) -> float:
        """Closes the socket (FIN); returns the monotonic time just before close()."""
        t = time.monotonic()
        self.s.close()
        self.closed_t = t
        return t


def sse_events(chunks) -> list:
    """From (t, bytes) pieces, the SSE events as (t_completed, event_bytes) — robust to
    re-chunking by the proxy."""
    out = []
    buf = b""
    for t, piece in chunks:
        buf += piece
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            out.append((t, ev + b"\n\n"))
    if buf:
        out.append((None, buf))
    return out


def can_connect(port: int, timeout: float = 0.5) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------- metrics
_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    def __init__(self, text: str):
        self.text = text
        self.samples = []   # (name, labels dict, float)
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE_RE.match(line)
            if not m:
                continue
            labels = dict(_LABEL_RE.findall(m.group(3) or ""))
            try:
                v = float(m.group(4))
            except ValueError:
                continue
            self.samples.append((m.group(1), labels, v))

    def has(self, name: str) -> bool:
        return any(n == name for n, _, _ in self.samples)

    def find(self, name: str, **labels) -> list:
        return [(l, v) for n, l, v in self.samples
                if n == name and all(l.get(k) == str(val) for k, val in labels.items())]

    def get(self, name: str, **labels) -> Optional[float]:
        """The value of the single sample matching name+labels (a subset match); the sum when
        several match; None when none does."""
        found = self.find(name, **labels)
        if not found:
            return None
        return sum(v for _, v in found)

    def sum(self, name: str, **labels) -> float:
        return self.get(name, **labels) or 0.0

    def val(self, name: str, **labels) -> float:
        """Like get() but 0 when absent (counters may be created lazily)."""
        return self.get(name, **labels) or 0.0


def scrape(port: int, path: str = "/metrics") -> Metrics:
    r = http_request(port, "GET", path, timeout=5)
    assert r.status == 200, f"GET {path} on the metrics port answered {r.status}: {r.body[:300]!r}"
    return Metrics(r.body.decode())


def poll(fn, timeout: float = 5.0, interval: float = 0.02, what: str = "condition"):
    """Calls fn() until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = fn()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s (last value {last!r})")
        time.sleep(interval)


def settle(*rjs, metrics=("ramjet_kv_blocks_applied_total",), interval: float = 0.3) -> None:
    """Waits until no KV batch reached any of the ramjets for a while (`metrics`: the counters
    that move with each batch): the blocks a request just stored on its engine are applied before
    the next request is placed (a lookup that meets an index mid-write on a loaded machine falls
    back to the approximate index, by design)."""
    def applied():
        return tuple(sum(rj.metrics().sum(n) or 0 for n in metrics) for rj in rjs)
    last = applied()
    while True:
        time.sleep(interval)
        now = applied()
        if now == last:
            return
        last = now


def conversation_cache(rj, send, turns) -> list:
    """Sends each turn of a conversation (send(body) -> Response), its KV events applied before
    the next (settle); asserts every turn was answered 200 by one upstream ordinal and returns each
    turn's cached prompt tokens (usage.prompt_tokens_details)."""
    upstreams, cached = [], []
    for body in turns:
        r = send(body)
        assert r.status == 200, r.body
        upstreams.append(r.header("X-Ramjet-Upstream"))
        cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
        settle(rj)
    assert len(set(upstreams)) == 1, upstreams
    return cached
