#!/usr/bin/env python3
"""Time to exact trust for a ramjet that starts after its engine has filled its cache: from a
ramjet-companion's snapshot (RJ_EXACT_INVENTORY=companion) versus from the engine's own replay of
its whole event history (possible here only because the engine keeps a replay window as long as
that history; a real vLLM keeps buffer_steps = 10,000 batches and has usually run past them).

One release ramjet-sim publishes KV events; one ramjet-companion follows it from its first batch.
Unique long prompts sent straight to the engine fill its cache to --blocks blocks. Then, --repeats
times and alternating, a fresh ramjet is started in each mode and the time from its spawn to
/health kv_trusted is measured (process start included), with the companion's snapshot size and
ramjet's import time. Usage:

  cmake --preset release && cmake --build --preset release --target ramjet ramjet-sim ramjet-companion
  PYTHONPATH=test /usr/bin/python3 bench/companion_trust.py --blocks 36000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))
os.environ.setdefault("RAMJET_BIN", str(ROOT / "build/release/src/app/ramjet"))
os.environ.setdefault("SIM_BIN", str(ROOT / "build/release/sim/server/ramjet-sim"))
os.environ.setdefault("COMPANION_BIN", str(ROOT / "build/release/src/companion/ramjet-companion"))

from support.companion_proc import CompanionProc, write_secret  # noqa: E402
from support.ramjet_proc import RamjetProc, http_request  # noqa: E402
from support.sim_proc import SimProc  # noqa: E402

TOPIC = "kv"
BLOCK = 16


def local(endpoint: str) -> str:
    return "tcp://127.0.0.1:" + endpoint.rsplit(":", 1)[1]


def time_to_trust(env: dict, sim: SimProc, timeout: float = 120.0) -> tuple[float, RamjetProc]:
    rj = RamjetProc([sim.url], env=env)
    started = time.monotonic()
    rj.start(timeout=30)
    while True:
        try:
            r = http_request(rj.api_port, "GET", "/health", timeout=5)
            if all(x.get("kv_trusted") for x in json.loads(r.body)["replicas"]):
                return time.monotonic() - started, rj
        except OSError:
            pass
        if time.monotonic() - started > timeout:
            rj.stop()
            raise SystemExit(f"not trusted within {timeout} s:\n{rj.output()[-3000:]}")
        time.sleep(0.005)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=36000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rj-trust-"))
    session, digest = tmp / "session.key", tmp / "digest.key"
    write_secret(session)
    write_secret(digest)
    kv = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": TOPIC, "endpoint": "tcp://*:0",
          "replay_endpoint": "tcp://*:0", "buffer_steps": 1_000_000}
    sim = SimProc("--speed", "1000", "--kv-events-config", json.dumps(kv),
                  "--num-gpu-blocks-override", str(args.blocks * 2), "--max-model-len", "200000")
    comp = CompanionProc(local(sim.kv_endpoint), "--kv-topic", TOPIC, kv_replay=local(sim.kv_replay),
                         listen=[f"unix:{tmp}/c.sock"], secret_file=str(session), digest_secret_file=str(digest))
    try:
        # Fill: unique prompts of ~60K characters each.
        i = 0
        while comp.health()["blocks"] < args.blocks:
            body = {"model": "ramjet-sim", "max_tokens": 1,
                    "messages": [{"role": "user", "content": f"document {i}: " + " ".join(
                        f"w{i}x{j}" for j in range(9000))}]}
            r = sim.request("POST", "/v1/chat/completions", body, timeout=120)
            assert r.status == 200, r.body
            i += 1
        time.sleep(1)
        blocks = comp.health()["blocks"]
        batches = sum(int(float(line.rsplit(" ", 1)[1])) for line in comp.metrics_text().splitlines()
                      if line.startswith("ramjet_companion_kv_batches_total{"))
        print(f"engine filled: {blocks} blocks in the companion's index, {batches} KV-event batches, {i} requests")

        base = {"RJ_PROBE_INTERVAL_MS": "200", "RJ_KV_INDEX_MAX_BLOCKS": str(max(262144, 2 * args.blocks))}
        with_companion = dict(base, RJ_EXACT_INVENTORY="companion", RJ_COMPANION_ENDPOINTS=f"unix:{tmp}/c.sock",
                              RJ_COMPANION_SECRET_FILE=str(session), RJ_COMPANION_DIGEST_SECRET_FILE=str(digest))
        with_replay = dict(base, RJ_KV_EVENT_LIVE_ENDPOINTS=local(sim.kv_endpoint),
                           RJ_KV_EVENT_REPLAY_ENDPOINTS=local(sim.kv_replay), RJ_KV_EVENT_TOPIC=TOPIC,
                           RJ_KV_EVENT_REPLAY_LIMIT=str(1_000_000), RJ_KV_EVENT_TIMEOUT_MS="120000")
        times = {"companion": [], "replay": []}
        imports = []
        for _ in range(args.repeats):
            for mode, env in (("companion", with_companion), ("replay", with_replay)):
                t, rj = time_to_trust(env, sim)
                times[mode].append(t)
                if mode == "companion":
                    m = rj.metrics()
                    imports.append(m.get("ramjet_companion_snapshot_import_seconds", upstream="0"))
                    assert m.get("ramjet_companion_snapshot_blocks", upstream="0") == blocks
                rj.stop()
        snap = comp.metrics_text()
        size = next(float(l.rsplit(" ", 1)[1]) for l in snap.splitlines() if l.startswith("ramjet_companion_snapshot_bytes "))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"snapshot: {int(size)} bytes ({size / blocks:.1f} B/block); ramjet's import "
              f"median {statistics.median(imports) * 1000:.2f} ms")
        for k, v in times.items():
            print(f"time to trust, {k}: median {med[k] * 1000:.0f} ms (" + ", ".join(f"{x * 1000:.0f}" for x in v) + ")")
        print(f"replay / companion: {med['replay'] / med['companion']:.2f}")
    finally:
        comp.stop()
        sim.stop()


if __name__ == "__main__":
    main()
