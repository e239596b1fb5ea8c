"""The readiness gate, end to end with real ramjet-sim engines: a restarted engine must pass
RJ_READY_SUCCESSES consecutive probes and stay stable for RJ_READY_STABLE_SECONDS before it
receives traffic again. Reachable is not the same as ready."""

from __future__ import annotations

import json
import time

import pytest

from support.ramjet_proc import http_request
from support.sim_proc import SimProc

GATE = {
    "RJ_PROBE_INTERVAL_MS": "200",
    "RJ_READY_SUCCESSES": "3",
    "RJ_READY_STABLE_SECONDS": "2",
    "RJ_AFFINITY": "round_robin",
}


def _chat(rj):
    body = {"model": "ramjet-sim", "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 2}
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"})
    assert r.status == 200, r
    return r.header("X-Ramjet-Upstream")


def _state(rj, i):
    return rj.health()[1]["replicas"][i]["state"]


@pytest.fixture
def sims():
    made = [SimProc("--speed", "50"), SimProc("--speed", "50")]
    yield made
    for s in made:
        s.stop()


def test_restarted_engine_warms_up_before_it_gets_traffic(sims, ramjet_factory):
    rj = ramjet_factory(sims, env=GATE)
    code, h = rj.health()
    assert code == 200 and h["status"] == "ok" and h["warming_replicas"] == 0, h
    assert [r["state"] for r in h["replicas"]] == ["healthy", "healthy"], "engines known at startup start healthy"
    assert {_chat(rj) for _ in range(4)} == {"0", "1"}

    # Engine 1 dies: the data plane fences it (connect refused) and retries on engine 0.
    port = sims[1].port
    sims[1].stop()
    deadline = time.monotonic() + 5
    while _state(rj, 1) != "unhealthy":
        assert time.monotonic() < deadline, "engine 1 was never fenced"
        assert _chat(rj) == "0"
    code, h = rj.health()
    assert code == 200 and h["status"] == "degraded" and h["replicas"][1]["healthy"] is False, h

    # It comes back on the same port: reachable at once, but warming, and no traffic meanwhile.
    sims[1] = SimProc("--speed", "50", "--port", str(port))
    assert sims[1].port == port
    restarted = time.monotonic()
    assert _state(rj, 1) != "healthy", "readmitted without passing the gate"
    _, h = rj.wait_health(lambda c, j: j["replicas"][1]["state"] == "warming", 3, "engine 1 warming")
    warming_seen = time.monotonic()
    assert h["warming_replicas"] == 1 and h["healthy_replicas"] == 1 and h["status"] == "degraded", h
    assert h["replicas"][1]["healthy"] is False, h
    m = rj.metrics()
    assert m.get("ramjet_upstream_state", upstream="1", state="warming") == 1
    assert m.get("ramjet_upstream_state", upstream="1", state="healthy") == 0
    assert m.get("ramjet_upstream_up", upstream="1") == 0

    during = []
    while True:
        up = _chat(rj)
        state = _state(rj, 1)
        if state == "healthy":
            healthy_seen = time.monotonic()
            break
        assert state == "warming", f"engine 1 left warming for {state}"
        during.append(up)  # dispatched while engine 1 was warming (before and after the request)
        assert time.monotonic() - restarted < 8, "engine 1 never became healthy"
    assert len(during) >= 5, f"too few requests during the warming window: {during}"
    assert set(during) == {"0"}, f"a warming engine received traffic: {during}"
    # Warming lasts the stable window (2 s, checked on 200 ms probes), measured from the third pass.
    assert healthy_seen - warming_seen >= 1.5, f"warming lasted only {healthy_seen - warming_seen:.2f}s"

    # Ready: it is healthy again and takes its share of a deterministic round-robin split.
    code, h = rj.health()
    assert code == 200 and h["status"] == "ok" and h["warming_replicas"] == 0, h
    after = [_chat(rj) for _ in range(6)]
    assert after.count("1") == 3 and after.count("0") == 3, after
    m = rj.metrics()
    assert m.get("ramjet_upstream_state", upstream="1", state="healthy") == 1
    assert m.get("ramjet_upstream_readmissions_total", upstream="1") == 1
    assert m.get("ramjet_upstream_readmissions_total", upstream="0") == 0
    assert "127.0.0.1" not in rj.request("GET", "/health").body.decode()
