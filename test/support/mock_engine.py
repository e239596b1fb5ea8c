"""A controllable mock vLLM engine for ramjet's end-to-end tests (standard library only).

One MockEngine is one threaded HTTP/1.1 server on 127.0.0.1:<ephemeral>, raw sockets, keep-alive
aware, with request bodies framed by Content-Length or chunked transfer coding. It lives in the
test process: tests flip its attributes and read what it recorded.

What it records (all times are time.monotonic(), comparable with the test's own clock):
  * engine.requests: every request (method, target, headers in wire order and case, raw body
    bytes, connection id, receive time, the directive that answered it);
  * engine.conns: every accepted connection (accept time, first EOF/reset time seen on the
    engine side, close time): tests measure cancellation latency from these;
  * engine.sent: every body chunk written (request id, send time, bytes), for relay latency.

Behaviour of an inference (or any non-health/models) request = its *directive*, taken from, in
order: the request header `X-Mock: <directive>`, the next entry of engine.queue (one entry per
request, consumed), else engine.mode. A directive is a mode name and optional key=value words,
for example "sse chunks=5 delay=0.2" or "status=503" or "hang_mid_stream after=2".

Modes:
  auto                 JSON or SSE according to the body's "stream" flag (the default)
  json                 a non-streaming vLLM-shaped response
  sse                  an SSE stream: chunks=N content chunks, delay=S seconds between chunks,
                       a usage chunk when stream_options.include_usage, then data: [DONE]
  status=CODE          a vLLM error JSON with that HTTP status (e.g. 400, 429, 500, 502, 503)
  hang                 read the request, never answer; wait for the peer to close
  hang_mid_stream      send headers and after=N SSE chunks, then go silent until the peer closes
  die_mid_stream       send headers and after=N SSE chunks, then abort the connection (RST)
  badjson              200 application/json whose body is truncated JSON
  close                close the connection without answering
  reset                abort the connection (RST) without answering
  slow                 wait delay=S seconds (watching for EOF), then behave like auto
  chunked_text         a text/plain chunked (non-SSE) body: chunks=N, delay=S
  echo                 200 JSON describing the request as received (method, target, headers, body)
Knobs for all modes: delay=, chunks=, after=, prompt_tokens=, cached_tokens=, finish= (finish_reason).

Special paths (unless an X-Mock header is present): GET /health answers engine.health
(an int status, or "hang" / "close"); GET /v1/models answers engine.models_status with
engine.models_body(). Everything else goes through the directive.

Connection habits (attributes, for every connection): close_after_answer closes the connection
after each answer although the answer said keep-alive (an engine that restarts between
requests, or a proxy in front of it with a request limit); idle_close = S closes a keep-alive
connection that brought no request for S seconds (uvicorn's timeout_keep_alive: vLLM and
SGLang close idle connections after 5 s).

kill() makes the engine dead (listening socket closed: connection refused; open connections
aborted); revive() listens again on the same port.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from support.headers import HeaderLookup
from typing import Optional

INFERENCE_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")

_REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 408: "Request Timeout", 413: "Payload Too Large",
    429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}
_ERROR_TYPES = {
    400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError",
    500: "InternalServerError", 502: "BadGatewayError", 503: "ServiceUnavailableError",
}


class _PeerGone(Exception):
    """The peer closed or reset the connection."""


class _Stopping(Exception):
    """The engine is stopping or was killed."""


@dataclass
class ConnRecord:
    id: int
    accept_t: float
    peer: tuple
    eof_t: Optional[float] = None      # first time the engine saw EOF/reset from the peer
    eof_how: str = ""                  # "eof" | "reset" | "send_error"
    close_t: Optional[float] = None    # when the engine closed its side
    request_ids: list = field(default_factory=list)


@dataclass
class Request(HeaderLookup):
    id: int
    conn_id: int
    engine: str
    method: str
    target: str
    version: str
    headers: list            # [(name, value)] in wire order, original case
    body: bytes
    t: float                 # time the request was fully received
    directive: str = ""
    chunked_request: bool = False
    responded_t: Optional[float] = None   # when the complete response had been written

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


    def header_names(self) -> set:
        return {k.lower() for k, _ in self.headers}

    def json(self):
        return json.loads(self.body)


def parse_directive(text: str) -> tuple:
    """'sse chunks=3 delay=0.1' -> ('sse', {'chunks': '3', 'delay': '0.1'}); 'status=503' ->
    ('status', {'status': '503'})."""
    words = text.replace(",", " ").split()
    if not words:
        return "auto", {}
    opts = {}
    mode = None
    for i, w in enumerate(words):
        if "=" in w:
            k, v = w.split("=", 1)
            opts[k] = v
            if i == 0:
                mode = k
        elif i == 0:
            mode = w
    return mode or "auto", opts


class MockEngine:
    def __init__(self, name: str = "engine", model: str = "mock-model"):
        self.name = name
        self.model = model
        # --- behaviour (tests set these) ---
        self.mode = "auto"
        self.queue: list = []            # directives consumed one per directed request
        self.chunks = 4                  # SSE content chunks
        self.chunk_delay = 0.0           # seconds between SSE chunks
        self.prompt_tokens = 21
        self.cached_tokens = 16          # 0 omits prompt_tokens_details (vLLM behaviour)
        self.health = 200                # int status, or "hang" / "close"
        self.models_status = 200
        self.max_model_len = 131072
        self.models_extra: dict = {}     # merged into the first model card (nested fields etc.)
        self.extra_cards: list = []      # extra model cards appended to data[]
        # A P/D prefill engine's transfer parameters: a JSON answer to a request whose
        # kv_transfer_params ask for remote decode carries these as its top-level kv_transfer_params.
        self.kv_answer: Optional[dict] = None
        self.close_after_answer = False  # close after every answer, keep-alive promised or not
        self.idle_close: Optional[float] = None  # close a connection idle this many seconds
        # --- records ---
        self.requests: list = []
        self.conns: dict = {}
        self.sent: list = []             # (request_id, t_send_start, body bytes without framing)
        # --- internals ---
        self._cv = threading.Condition()
        self._ids = itertools.count(1)
        self._conn_ids = itertools.count(1)
        self._listener: Optional[socket.socket] = None
        self._socks: dict = {}           # conn id -> socket
        self._stopping = False
        self._dead = False
        self.port: Optional[int] = None
        self._accept_thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "MockEngine":
        self._listen(0)
        return self

    def _listen(self, port: int) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(128)
        self.port = s.getsockname()[1]
        self._listener = s
        self._dead = False
        t = threading.Thread(target=self._accept_loop, args=(s,), name=f"{self.name}-accept", daemon=True)
        self._accept_thread = t
        t.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._stopping = True
        self._close_all()

    def kill(self) -> None:
        """Connection refused from now on; open connections are aborted."""
        self._dead = True
        self._close_all()

    def revive(self) -> None:
        self._stopping = False
        self._listen(self.port)

    def _close_all(self) -> None:
        lst, self._listener = self._listener, None
        if lst is not None:
            try:
                lst.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            lst.close()
        with self._cv:
            socks = list(self._socks.items())
        for cid, s in socks:
            _abort(s)
        with self._cv:
            self._cv.notify_all()

    # ------------------------------------------------------------------ queries
    def all_requests(self, path: Optional[str] = None) -> list:
        with self._cv:
            reqs = list(self.requests)
        if path is not None:
            reqs = [r for r in reqs if r.path == path]
        return reqs

    def inference_requests(self) -> list:
        """Requests other than the LB's health probes (GET /health, GET /v1/models without X-Mock)."""
        with self._cv:
            reqs = list(self.requests)
        return [r for r in reqs if not _is_probe(r)]

    def probe_requests(self) -> list:
        with self._cv:
            return [r for r in self.requests if _is_probe(r)]

    def wait_for(self, predicate, timeout: float = 5.0):
        """Waits until predicate(list_of_requests) returns a truthy value; returns it."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                got = predicate(list(self.requests))
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: condition not met within {timeout}s; "
                                       f"saw {[(r.method, r.target) for r in self.requests]}")
                self._cv.wait(min(left, 0.05))

    def wait_for_inference(self, n: int = 1, timeout: float = 5.0) -> list:
        return self.wait_for(lambda reqs: (lambda inf: inf if len(inf) >= n else None)(
            [r for r in reqs if not _is_probe(r)]), timeout)

    def wait_probed(self, timeout: float = 5.0) -> Request:
        """Waits until a health probe has been answered; returns that probe request."""
        return self.wait_for(lambda reqs: next((r for r in reqs if _is_probe(r) and r.responded_t), None),
                             timeout)

    def wait_conn_eof(self, conn_id: int, timeout: float = 5.0) -> ConnRecord:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                c = self.conns[conn_id]
                if c.eof_t is not None or c.close_t is not None:
                    return c
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: connection {conn_id} still open after {timeout}s")
                self._cv.wait(min(left, 0.02))

    def conn_of(self, req: Request) -> ConnRecord:
        with self._cv:
            return self.conns[req.conn_id]

    def open_conns(self) -> list:
        with self._cv:
            return [c for c in self.conns.values() if c.eof_t is None and c.close_t is None]

    def sent_for(self, request_id: int) -> list:
        with self._cv:
            return [(t, b) for rid, t, b in self.sent if rid == request_id]

    def reset_records(self) -> None:
        with self._cv:
            self.requests.clear()
            self.sent.clear()

    # ------------------------------------------------------------------ bodies
    def models_body(self) -> bytes:
        card = {
            "id": self.model, "object": "model", "created": 1700000000, "owned_by": "vllm",
            "root": self.model, "parent": None, "max_model_len": self.max_model_len,
            "permission": [{"id": "modelperm-mock", "object": "model_permission", "created": 1700000000,
                            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                            "organization": "*", "group": None, "is_blocking": False}],
        }
        card.update(self.models_extra)
        return json.dumps({"object": "list", "data": [card] + list(self.extra_cards)}).encode()

    def _usage(self, completion: int, opts: dict) -> dict:
        p = int(opts.get("prompt_tokens", self.prompt_tokens))
        c = int(opts.get("cached_tokens", self.cached_tokens))
        u = {"prompt_tokens": p, "total_tokens": p + completion, "completion_tokens": completion}
        if c > 0:
            u["prompt_tokens_details"] = {"cached_tokens": c}
        return u

    def _json_body(self, req: Request, opts: dict) -> bytes:
        n = int(opts.get("chunks", self.chunks))
        finish = opts.get("finish", "stop")
        text = "".join(f"tok{i} " for i in range(n))
        now = int(time.time())
        path = req.path
        if path == "/v1/completions":
            body = {"id": f"cmpl-{req.id}", "object": "text_completion", "created": now, "model": self.model,
                    "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                                 "stop_reason": None, "prompt_logprobs": None}],
                    "usage": self._usage(n, opts), "engine": self.name}
        elif path == "/v1/messages":
            u = self._usage(n, opts)
            cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
            # Anthropic's meaning, as vLLM 0.32 reports it: input_tokens is the uncached part.
            body = {"id": f"msg_{req.id}", "type": "message", "role": "assistant", "model": self.model,
                    "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": u["prompt_tokens"] - cached, "output_tokens": n,
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached},
                    "engine": self.name}
        elif path == "/v1/responses":
            u = self._usage(n, opts)
            body = {"id": f"resp_{req.id}", "object": "response", "created_at": now, "model": self.model,
                    "status": "completed",
                    "output": [{"type": "message", "id": f"msg_{req.id}", "status": "completed", "role": "assistant",
                                "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                    "usage": {"input_tokens": u["prompt_tokens"], "output_tokens": n,
                              "total_tokens": u["total_tokens"],
                              "input_tokens_details": {"cached_tokens": int(opts.get("cached_tokens", self.cached_tokens))}},
                    "engine": self.name}
        else:
            body = {"id": f"chatcmpl-{req.id}", "object": "chat.completion", "created": now, "model": self.model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                                         "reasoning_content": None, "tool_calls": []},
                                 "logprobs": None, "finish_reason": finish, "stop_reason": None}],
                    "usage": self._usage(n, opts), "prompt_logprobs": None, "engine": self.name}
        asked = (req.json() or {}).get("kv_transfer_params") if req.body[:1] == b"{" else None
        if self.kv_answer is not None and isinstance(asked, dict) and asked.get("do_remote_decode"):
            body["kv_transfer_params"] = self.kv_answer
        return json.dumps(body).encode()

    def sse_events(self, req: Request, opts: dict) -> list:
        """The SSE events (each b'data: ...\\n\\n') of a vLLM-shaped stream for this request."""
        n = int(opts.get("chunks", self.chunks))
        finish = opts.get("finish", "stop")
        try:
            parsed = json.loads(req.body) if req.body else {}
        except ValueError:
            parsed = {}
        so = parsed.get("stream_options") if isinstance(parsed, dict) else None
        include_usage = isinstance(so, dict) and so.get("include_usage", True) is not False
        now = int(time.time())
        events = []
        if req.path == "/v1/completions":
            base = {"id": f"cmpl-{req.id}", "object": "text_completion", "created": now, "model": self.model}
            for i in range(n):
                last = i == n - 1
                events.append(dict(base, choices=[{"index": 0, "text": f"tok{i} ", "logprobs": None,
                                                   "finish_reason": finish if last else None,
                                                   "stop_reason": None}]))
        else:
            base = {"id": f"chatcmpl-{req.id}", "object": "chat.completion.chunk", "created": now, "model": self.model}
            events.append(dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                               "logprobs": None, "finish_reason": None}]))
            for i in range(n):
                last = i == n - 1
                events.append(dict(base, choices=[{"index": 0, "delta": {"content": f"tok{i} "}, "logprobs": None,
                                                   "finish_reason": finish if last else None,
                                                   "stop_reason": None}]))
        if include_usage:
            events.append(dict(base, choices=[], usage=self._usage(n, opts)))
        out = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
        out.append(b"data: [DONE]\n\n")
        return out

    def error_body(self, status: int) -> bytes:
        return json.dumps({"error": {"message": f"mock {self.name} says {status}",
                                     "type": _ERROR_TYPES.get(status, "Error"), "param": None,
                                     "code": status}}).encode()

    # ------------------------------------------------------------------ server
    def _accept_loop(self, lst: socket.socket) -> None:
        while True:
            try:
                s, peer = lst.accept()
            except OSError:
                return
            if self._dead or self._stopping:
                _abort(s)
                continue
            cid = next(self._conn_ids)
            rec = ConnRecord(id=cid, accept_t=time.monotonic(), peer=peer)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._cv:
                self.conns[cid] = rec
                self._socks[cid] = s
                self._cv.notify_all()
            threading.Thread(target=self._serve_conn, args=(s, rec), name=f"{self.name}-c{cid}",
                             daemon=True).start()

    def _mark_eof(self, rec: ConnRecord, how: str) -> None:
        with self._cv:
            if rec.eof_t is None:
                rec.eof_t = time.monotonic()
                rec.eof_how = how
            self._cv.notify_all()

    def _serve_conn(self, s: socket.socket, rec: ConnRecord) -> None:
        conn = _Conn(s, self, rec)
        try:
            while True:
                req = conn.read_request()
                if req is None:
                    break
                keep = self._handle(conn, req)
                if not keep or self.close_after_answer:
                    break
        except (_PeerGone, _Stopping):
            pass
        except Exception as exc:  # a mock bug: make it visible without killing the test process
            import sys
            print(f"mock_engine {self.name}: handler error {exc!r}", file=sys.stderr)
        finally:
            with self._cv:
                if rec.close_t is None:
                    rec.close_t = time.monotonic()
                self._socks.pop(rec.id, None)
                self._cv.notify_all()
            try:
                s.close()
            except OSError:
                pass

    def _directive_for(self, req: Request) -> str:
        d = req.header("X-Mock")
        if d:
            return d
        with self._cv:
            if self.queue:
                return self.queue.pop(0)
        return self.mode

    def _handle(self, conn: "_Conn", req: Request) -> bool:
        """Answers one request; returns False when the connection must end."""
        keep_alive = (req.header("Connection") or "").lower() != "close" and req.version == "HTTP/1.1"
        has_directive = req.header("X-Mock") is not None
        if not has_directive and req.method in ("GET", "HEAD") and req.path == "/health":
            self._record(req, "health")
            h = self.health
            if h == "hang":
                conn.wait_eof(None)
                return False
            if h == "close":
                return False
            conn.respond(req, int(h), b"", "application/json", keep_alive)
            return keep_alive
        if not has_directive and req.method in ("GET", "HEAD") and req.path == "/v1/models":
            self._record(req, "models")
            st = int(self.models_status)
            body = self.models_body() if st == 200 else self.error_body(st)
            conn.respond(req, st, body, "application/json", keep_alive)
            return keep_alive

        directive = self._directive_for(req)
        self._record(req, directive)
        mode, opts = parse_directive(directive)
        delay = float(opts.get("delay", self.chunk_delay))

        if mode == "slow":
            if conn.wait_eof(float(opts.get("delay", 1.0))):
                return False
            mode = "auto"
            delay = self.chunk_delay
        if mode == "status":
            st = int(opts["status"])
            conn.respond(req, st, self.error_body(st), "application/json", keep_alive)
            return keep_alive
        if mode == "hang":
            conn.wait_eof(None)
            return False
        if mode == "close":
            return False
        if mode == "reset":
            _abort(conn.s)
            return False
        if mode == "echo":
            body = json.dumps({"engine": self.name, "method": req.method, "target": req.target,
                               "headers": req.headers, "body": req.body.decode("latin-1")}).encode()
            conn.respond(req, 200, body, "application/json", keep_alive)
            return keep_alive
        if mode == "chunked_text":
            n = int(opts.get("chunks", self.chunks))
            pieces = [f"line {i}\n".encode() for i in range(n)]
            return conn.stream(req, pieces, delay, "text/plain; charset=utf-8", keep_alive)
        if mode == "badjson":
            conn.respond(req, 200, b'{"id":"x","object":"chat.completion","usage":{"prompt_tokens":',
                         "application/json", keep_alive)
            return keep_alive
        if mode == "die_mid_stream":
            after = int(opts.get("after", 2))
            events = self.sse_events(req, opts)[:after]
            conn.stream(req, events, delay, "text/event-stream; charset=utf-8", keep_alive, finish=False)
            _abort(conn.s)
            return False
        if mode == "hang_mid_stream":
            after = int(opts.get("after", 1))
            events = self.sse_events(req, opts)[:after]
            conn.stream(req, events, delay, "text/event-stream; charset=utf-8", keep_alive, finish=False)
            conn.wait_eof(None)
            return False
        if mode in ("auto", "json", "sse"):
            stream = mode == "sse"
            if mode == "auto" and req.path in INFERENCE_PATHS:
                try:
                    parsed = json.loads(req.body)
                except ValueError:
                    st = 400
                    conn.respond(req, st, self.error_body(st), "application/json", keep_alive)
                    return keep_alive
                stream = isinstance(parsed, dict) and parsed.get("stream") is True
            elif mode == "auto":
                # A non-inference path: echo it (forwarding tests read the echo).
                body = json.dumps({"engine": self.name, "method": req.method, "target": req.target,
                                   "body_len": len(req.body)}).encode()
                conn.respond(req, 200, body, "application/json", keep_alive)
                return keep_alive
            if stream:
                return conn.stream(req, self.sse_events(req, opts), delay,
                                   "text/event-stream; charset=utf-8", keep_alive)
            conn.respond(req, 200, self._json_body(req, opts), "application/json", keep_alive)
            return keep_alive
        raise ValueError(f"unknown mock directive {directive!r}")

    def _record(self, req: Request, directive: str) -> None:
        req.directive = directive
        with self._cv:
            self.requests.append(req)
            self.conns[req.conn_id].request_ids.append(req.id)
            self._cv.notify_all()


def _is_probe(r: Request) -> bool:
    return r.directive in ("health", "models")


def _abort(s: socket.socket) -> None:
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


class _Conn:
    """One server-side connection: buffered reads with EOF tracking, framed writes."""

    def __init__(self, s: socket.socket, engine: MockEngine, rec: ConnRecord):
        self.s = s
        self.engine = engine
        self.rec = rec
        self.buf = b""

    def _recv(self, timeout: Optional[float]) -> bool:
        """Reads whatever is available (waiting up to timeout; None = until data/EOF).
        Returns True when data was added; raises _PeerGone on EOF/reset."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.engine._stopping or self.engine._dead:
                raise _Stopping()
            wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))
            try:
                r, _, _ = select.select([self.s], [], [], wait)
            except (OSError, ValueError):
                raise _Stopping()
            if r:
                try:
                    data = self.s.recv(65536)
                except (ConnectionResetError, OSError):
                    self.engine._mark_eof(self.rec, "reset")
                    raise _PeerGone()
                if not data:
                    self.engine._mark_eof(self.rec, "eof")
                    raise _PeerGone()
                self.buf += data
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def wait_eof(self, timeout: Optional[float]) -> bool:
        """Waits (discarding nothing: pipelined bytes stay buffered) until the peer closes
        (returns True) or the timeout passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._recv(left)
        except _PeerGone:
            return True

    def read_request(self) -> Optional[Request]:
        """The next request, or None when the peer closed (or the connection stayed idle past the
        engine's idle_close: the engine closes it)."""
        while b"\r\n\r\n" not in self.buf:
            idle = self.engine.idle_close if not self.buf else None
            try:
                if not self._recv(idle):
                    return None
            except _PeerGone:
                return None
            if len(self.buf) > 1 << 20:
                raise _PeerGone()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ", 2)
        headers = []
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers.append((k.strip(), v.strip()))
        req = Request(id=next(self.engine._ids), conn_id=self.rec.id, engine=self.engine.name, method=method,
                      target=target, version=version, headers=headers, body=b"", t=0.0)
        te = (req.header("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            req.chunked_request = True
            req.body = self._read_chunked_body()
        else:
            n = int(req.header("Content-Length") or 0)
            while len(self.buf) < n:
                self._recv(None)
            req.body, self.buf = self.buf[:n], self.buf[n:]
        req.t = time.monotonic()
        return req

    def _read_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._recv(None)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_chunked_body(self) -> bytes:
        body = b""
        while True:
            size = int(self._read_line().split(b";")[0].strip(), 16)
            if size == 0:
                while self._read_line() != b"":  # trailers
                    pass
                return body
            while len(self.buf) < size + 2:
                self._recv(None)
            body += self.buf[:size]
            self.buf = self.buf[size + 2:]

    def _send(self, data: bytes, rid: Optional[int] = None, payload: Optional[bytes] = None) -> None:
        t = time.monotonic()  # the time the engine *starts* sending this piece
        try:
            self.s.sendall(data)
        except OSError:
            self.engine._mark_eof(self.rec, "send_error")
            raise _PeerGone()
        if rid is not None:
            with self.engine._cv:
                self.engine.sent.append((rid, t, data if payload is None else payload))
                self.engine._cv.notify_all()

    def _head(self, status: int, headers: list) -> bytes:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
                 "date: " + time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()),
                 "server: uvicorn", f"x-mock-engine: {self.engine.name}"]
        lines += [f"{k}: {v}" for k, v in headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def respond(self, req: Request, status: int, body: bytes, ctype: str, keep_alive: bool) -> None:
        hdrs = [("content-type", ctype), ("content-length", str(len(body)))]
        if not keep_alive:
            hdrs.append(("connection", "close"))
        payload = body if req.method != "HEAD" else b""
        self._send(self._head(status, hdrs))
        if payload:
            self._send(payload, req.id)
        self._done(req)

    def _done(self, req: Request) -> None:
        with self.engine._cv:
            req.responded_t = time.monotonic()
            self.engine._cv.notify_all()

    def stream(self, req: Request, pieces: list, delay: float, ctype: str, keep_alive: bool,
               finish: bool = True) -> bool:
        """Chunked response, one HTTP chunk per piece, `delay` seconds between pieces (watching
        for the peer's EOF meanwhile). Returns keep-alive; raises _PeerGone if the peer left."""
        hdrs = [("content-type", ctype), ("transfer-encoding", "chunked")]
        if not keep_alive:
            hdrs.append(("connection", "close"))
        self._send(self._head(200, hdrs))
        for i, p in enumerate(pieces):
            if i > 0 and delay > 0:
                if self.wait_eof(delay):
                    raise _PeerGone()
            self._send(b"%x\r\n" % len(p) + p + b"\r\n", req.id, p)
        if finish:
            self._send(b"0\r\n\r\n")
            self._done(req)
        return keep_alive


class BlackholeEngine:
    """A listening port whose accept queue is full: TCP connects to it hang until the caller's
    timeout (an upstream connect *timeout*, as opposed to a refusal)."""

    def __init__(self):
        self._l = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._l.bind(("127.0.0.1", 0))
        self._l.listen(0)
        self.port = self._l.getsockname()[1]
        self._fill = []
        # backlog 0 admits one queued connection; later SYNs are dropped.
        for _ in range(2):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self._fill.append(c)
        time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        for c in self._fill:
            c.close()
        self._l.close()


def dead_port() -> int:
    """A port with nothing listening (connection refused), at the time of the call."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
