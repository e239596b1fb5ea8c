"""Shared helpers for the integration tests (request bodies, routing setup, stream reading)."""

from __future__ import annotations

import json
import os
import time

from support.ramjet_proc import RawClient, poll, sse_events

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"

# Cancellation latency bound: engine-side EOF after the client's close(). Target 50 ms.
CANCEL_BOUND_S = float(os.environ.get("RJ_TEST_CANCEL_BOUND_MS", "50")) / 1000.0
# Relay latency bound: a chunk sent by the engine reaches the client within this.
RELAY_BOUND_S = float(os.environ.get("RJ_TEST_RELAY_BOUND_MS", "100")) / 1000.0


def chat(content: str = "hello", **kw) -> dict:
    b = {"model": "mock-model", "messages": [{"role": "user", "content": content}]}
    b.update(kw)
    return b


def enc(body) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def all_inference(engines) -> list:
    out = []
    for e in engines:
        out += e.inference_requests()
    return out


def wait_any_inference(engines, n: int = 1, timeout: float = 5.0):
    """Waits until the engines together received n inference requests; returns [(engine, req)]."""
    def got():
        pairs = [(e, r) for e in engines for r in e.inference_requests()]
        return pairs if len(pairs) >= n else None
    return poll(got, timeout, what=f"{n} inference request(s) at the engines")


def isolate(rj, engines, keep: int, timeout: float = 5.0) -> None:
    """Fences every engine except engines[keep] (its health probe answers 503) and waits until
    ramjet's /health shows exactly that replica healthy."""
    for i, e in enumerate(engines):
        e.health = 200 if i == keep else 503
    rj.wait_health(lambda c, j: [r["healthy"] for r in j["replicas"]] ==
                   [i == keep for i in range(len(engines))], timeout, f"only replica {keep} healthy")


def restore(rj, engines, timeout: float = 5.0) -> None:
    for e in engines:
        e.health = 200
    rj.wait_health(lambda c, j: all(r["healthy"] for r in j["replicas"]), timeout, "all replicas healthy")


def open_stream(port: int, path: str, body, headers=None, timeout: float = 10.0) -> RawClient:
    """Sends a request and reads the response head; returns the client, body unread."""
    c = RawClient(port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.send_request("POST", path, enc(body), h)
    c.read_head()
    return c


def sse_datas(events) -> list:
    """'data: X' payloads (str) of SSE events [(t, bytes)]."""
    out = []
    for _, ev in events:
        for line in ev.decode().splitlines():
            if line.startswith("data: "):
                out.append(line[len("data: "):])
    return out


def stream_content(datas) -> str:
    text = ""
    for d in datas:
        if d == "[DONE]":
            continue
        j = json.loads(d)
        for ch in j.get("choices", []):
            text += ch.get("delta", {}).get("content") or ch.get("text") or ""
    return text


def expected_content(n: int) -> str:
    return "".join(f"tok{i} " for i in range(n))


def engine_of(engines, resp) -> object:
    up = resp.header("X-Ramjet-Upstream") if hasattr(resp, "header") else resp
    assert up is not None, "response has no X-Ramjet-Upstream header"
    return engines[int(up)]


def engine_payload(engine, req) -> bytes:
    """The body bytes the engine sent for req (without chunk framing)."""
    return b"".join(b for _, b in engine.sent_for(req.id))


def wait_metric(rj, fn, timeout: float = 3.0, what: str = "metric condition"):
    """Polls the metrics endpoint until fn(metrics) is truthy; returns the Metrics."""
    deadline = time.monotonic() + timeout
    while True:
        m = rj.metrics()
        if fn(m):
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(0.02)


def read_events(client: RawClient) -> list:
    return sse_events(client.chunks())
