"""Load and verdicts for the chaos suite (test/integration/test_chaos.py; standard library only).

Load runs closed-loop clients against ramjet, each request on its own connection with a hard
client-side deadline, and classifies how every response ended:

  done         a complete response: an SSE stream through `data: [DONE]` and its last chunk, or a
               complete JSON body with status 200
  error_event  an SSE stream that ended with an `event: error` (ramjet's mid-stream error) and
               its last chunk
  json_error   a complete OpenAI-style JSON error (`{"error": {...}}`) with a 4xx/5xx status
  truncated    the connection closed inside the body (no well-formed ending)
  no_response  the connection closed, or was refused, before a response head
  hung         the client deadline passed

`well_formed` is done, error_event or json_error: what every client must get, whatever an engine
does.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Optional

from support.ramjet_proc import RawClient, sse_events

WELL_FORMED = ("done", "error_event", "json_error")


@dataclass
class Result:
    t0: float
    t1: float
    status: Optional[int]
    ending: str
    upstream: Optional[str] = None
    error_type: Optional[str] = None

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    @property
    def ok(self) -> bool:
        return self.ending == "done" and self.status == 200


def chat_body(i: int, stream: bool = True, max_tokens: int = 24, prompt: str = "") -> bytes:
    return json.dumps({"model": "ramjet-sim", "stream": stream, "max_tokens": max_tokens,
                       "messages": [{"role": "system", "content": prompt or "You are a chaos monkey. " * 8},
                                    {"role": "user", "content": f"request {i}"}]}).encode()


def one_request(port: int, body: bytes, deadline: float, headers: Optional[dict] = None,
                path: str = "/v1/chat/completions") -> Result:
    t0 = time.monotonic()
    try:
        c = RawClient(port, timeout=deadline)
    except OSError:
        return Result(t0, time.monotonic(), None, "no_response")
    try:
        h = {"Content-Type": "application/json", "Connection": "close"}
        h.update(headers or {})
        try:
            c.send_request("POST", path, body, h)
        except OSError:
            pass  # refused before the body was read (413, 503): the answer may be waiting
        try:
            status = c.read_head()
        except (ConnectionError, OSError) as e:
            return Result(t0, time.monotonic(), None, "hung" if isinstance(e, socket.timeout) else "no_response")
        up = c.header("X-Ramjet-Upstream")
        try:
            pieces = list(c.chunks())
        except socket.timeout:
            return Result(t0, time.monotonic(), status, "hung", up)
        except (ConnectionError, OSError):
            return Result(t0, time.monotonic(), status, "truncated", up)
        raw = b"".join(p for _, p in pieces)
        t1 = time.monotonic()
        if "text/event-stream" in (c.header("Content-Type") or ""):
            events = [ev for _, ev in sse_events(pieces)]
            if any(ev.startswith(b"event: error") for ev in events):
                err = json.loads(events[-1].split(b"data: ", 1)[1])
                return Result(t0, t1, status, "error_event", up, err["error"]["type"])
            ended = bool(events) and events[-1].strip() == b"data: [DONE]"
            return Result(t0, t1, status, "done" if ended else "truncated", up)
        if status == 200:
            try:
                json.loads(raw)
                return Result(t0, t1, status, "done", up)
            except ValueError:
                return Result(t0, t1, status, "truncated", up)
        try:
            err = json.loads(raw)["error"]
            assert isinstance(err["message"], str) and err["code"] in (status, str(status))
            return Result(t0, t1, status, "json_error", up, err.get("type"))
        except (ValueError, KeyError, TypeError, AssertionError):
            return Result(t0, t1, status, "truncated", up)
    finally:
        try:
            c.close()
        except OSError:
            pass


class Load:
    """`clients` threads sending requests to ramjet back to back until stop()."""

    def __init__(self, port: int, clients: int = 6, deadline: float = 20.0, stream: bool = True,
                 max_tokens: int = 24, pause: float = 0.0):
        self.port = port
        self.deadline = deadline
        self.stream = stream
        self.max_tokens = max_tokens
        self.pause = pause
        self.results: list = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._n = 0
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def start(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self._n += 1
                i = self._n
            r = one_request(self.port, chat_body(i, self.stream, self.max_tokens), self.deadline)
            with self._lock:
                self.results.append(r)
            if self.pause:
                time.sleep(self.pause)

    def stop(self) -> list:
        self._stop.set()
        for t in self._threads:
            t.join(self.deadline + 10)
        assert not any(t.is_alive() for t in self._threads), "a load client never finished"
        return self.results

    def since(self, t: float) -> list:
        with self._lock:
            return [r for r in self.results if r.t0 >= t]

    def wait_results(self, n: int, timeout: float = 20.0, after: float = 0.0) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.since(after)
            if len(got) >= n:
                return got
            time.sleep(0.05)
        raise AssertionError(f"fewer than {n} results within {timeout}s")


def summary(results: list) -> dict:
    out: dict = {}
    for r in results:
        out[r.ending] = out.get(r.ending, 0) + 1
    return out


def assert_well_formed(results: list, bound: float) -> None:
    """Every client got a well-formed ending, none later than `bound` seconds."""
    bad = [r for r in results if r.ending not in WELL_FORMED]
    assert not bad, f"{len(bad)} of {len(results)} endings not well formed: {summary(results)}; first {bad[0]}"
    slow = [r for r in results if r.seconds > bound]
    assert not slow, f"{len(slow)} requests took longer than {bound}s (max {max(r.seconds for r in slow):.1f}s)"
