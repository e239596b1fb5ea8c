"""Idle parking (RJ_IDLE_DRAIN_*, issue 30) on three ramjet-sim engines in sleep mode: a quiet
fleet parks down to RJ_IDLE_DRAIN_MIN_WARM (the sims report sleeping); a burst wakes engines and
loses no request; a pool whose every engine is parked holds a request in the waiting room while
one wakes (scale from zero); an engine that accepts /sleep but never wakes is fenced and the
request goes to another one, or, when none wakes, gets a clear 429 — never a hang.

The thresholds are scaled down (seconds, not minutes) so the suite runs in seconds."""

from __future__ import annotations

import json
import threading
import time

import pytest

from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc

SIM = ("--preset", "tiny", "--speed", "1", "--enable-sleep-mode", "--wake-ms", "300")
FAST = {
    "RJ_IDLE_DRAIN_MODE": "drain",
    "RJ_IDLE_DRAIN_RELEASE": "utilization",
    "RJ_IDLE_DRAIN_UPSTREAM_IDLE_AFTER_SECONDS": "1",
    "RJ_IDLE_DRAIN_COOLDOWN_SECONDS": "0.2",
    "RJ_IDLE_DRAIN_GRACE_SECONDS": "0.2",
    "RJ_IDLE_DRAIN_INTERVAL_SECONDS": "0.1",
    "RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS": "3",
    "RJ_IDLE_DRAIN_RESUME_LOAD_PER_REPLICA": "1",
    "RJ_PROBE_INTERVAL_MS": "200",
}


@pytest.fixture
def sims():
    made = [SimProc(*SIM, env={"VLLM_SERVER_DEV_MODE": "1"}) for _ in range(3)]
    yield made
    for s in made:
        s.stop()


def sleeping(sim) -> bool:
    return json.loads(sim.request("GET", "/is_sleeping").body)["is_sleeping"]


def states(rj) -> list:
    return [r["idle_drain"] for r in rj.health()[1]["replicas"]]


def chat(rj, tag: str, max_tokens: int = 8, timeout: float = 30):
    body = {"model": "ramjet-sim", "max_tokens": max_tokens, "messages": [{"role": "user", "content": tag + " word" * 50}]}
    return rj.chat(body, timeout=timeout)


def parked_down_to(rj, sims, warm: int, timeout: float = 15):
    def done():
        s = states(rj)
        return s.count("drained") == len(sims) - warm and s.count("warm") == warm and s
    s = poll(done, timeout=timeout, interval=0.05, what=f"fleet parked down to {warm} warm")
    return [i for i, x in enumerate(s) if x == "drained"]


def test_a_quiet_fleet_parks_down_to_min_warm_and_a_burst_wakes_engines_losing_no_request(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims], env={**FAST, "RJ_IDLE_DRAIN_MIN_WARM": "1", "RJ_IDLE_DRAIN_MAX_PARKED": "2"})
    parked = parked_down_to(rj, sims, warm=1)
    assert [sleeping(s) for s in sims] == [i in parked for i in range(3)]
    m = rj.metrics()
    for i in parked:
        assert m.get("ramjet_idle_drain_state", upstream=str(i)) == 2
        assert m.get("ramjet_engine_park_actions_total", upstream=str(i), action="sleep", outcome="ok") == 1
    # A burst: 12 requests at once onto the one warm engine, past one request per warm engine.
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(chat(rj, f"burst-{i}", max_tokens=300)))
               for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 12 and all(r.status == 200 for r in results), [r.status for r in results]
    poll(lambda: rj.metrics().sum("ramjet_engine_park_actions_total", action="wake", outcome="ok") >= 1,
         timeout=10, what="an engine woken by the burst")
    m = rj.metrics()
    assert m.get("ramjet_engine_park_action_seconds_count", action="wake") >= 1
    assert m.sum("ramjet_idle_drain_decisions_total", action="wake", reason="load") >= 1
    assert sum(s.admin("/sim/stats", {})["wakes"] for s in sims) >= 1
    rj.wait_idle(10)


def dashboard_state(rj) -> dict:
    return json.loads(http_request(rj.metrics_port, "GET", "/api/v1/state").body)


def test_a_pool_with_every_engine_parked_holds_requests_until_one_wakes(sims, ramjet_factory, tmp_path):
    journal = tmp_path / "journal.jsonl"
    rj = ramjet_factory([s.url for s in sims], env={**FAST, "RJ_IDLE_DRAIN_MIN_WARM": "0", "RJ_IDLE_DRAIN_MAX_PARKED": "3",
                                                    "RJ_ROUTE_JOURNAL": "true", "RJ_ROUTE_JOURNAL_FILE": str(journal)})
    parked_down_to(rj, sims, warm=0)
    assert all(sleeping(s) for s in sims)
    code, h = rj.health()
    assert code == 200  # parked is not unhealthy
    # The dashboard shows them parked (its sampler ticks each second), healthy all the same.
    st = poll(lambda: (lambda st: st if st.get("parked") == 3 else None)(dashboard_state(rj)), 5,
              what="the dashboard shows three parked engines")
    assert [e["idle_drain"] for e in st["engines"]] == ["drained"] * 3 and st["healthy"] == 3, st["engines"]
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(chat(rj, f"cold-{i}"))) for i in range(3)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    took = time.monotonic() - t0
    assert len(results) == 3 and all(r.status == 200 for r in results), results
    assert took >= 0.25, took  # they waited for a wake (--wake-ms 300)
    m = rj.metrics()
    assert m.sum("ramjet_idle_drain_decisions_total", action="wake", reason="demand") >= 1
    assert m.sum("ramjet_admission_requests_total", outcome="admitted") >= 1
    assert m.sum("ramjet_route_fail_open_dispatches_total") == 0
    served = {r.upstream for r in results}
    assert all(not sleeping(sims[int(u)]) for u in served)
    # The journal tells a wait for a wake from a wait for room.
    def finishes():
        found = [json.loads(l) for l in journal.read_text().splitlines() if '"finish"' in l] if journal.exists() else []
        return found if len(found) == 3 else None
    reasons = [f["queue_reason"] for f in poll(finishes, 5, what="three finish records")]
    assert "wake" in reasons and "room" not in reasons, reasons


def test_an_engine_that_never_wakes_is_fenced_and_the_request_goes_to_another(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims], env={**FAST, "RJ_IDLE_DRAIN_MIN_WARM": "0", "RJ_IDLE_DRAIN_MAX_PARKED": "3",
                                                    "RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS": "1",
                                                    "RJ_IDLE_DRAIN_COOLDOWN_SECONDS": "0.2"})
    parked = parked_down_to(rj, sims, warm=0)
    # The first drained (the longest parked: engine 2, the highest ordinal among equals) is the
    # first woken: it accepts /wake_up and never answers.
    sims[2].admin("/sim/fault", {"wake_hang": True})
    r = chat(rj, "after-a-failed-wake")
    assert r.status == 200, r
    assert r.upstream in ("0", "1")
    m = rj.metrics()
    assert m.get("ramjet_engine_park_actions_total", upstream="2", action="wake", outcome="timeout") >= 1
    assert m.get("ramjet_idle_drain_transitions_total", upstream="2", state="failed") >= 1
    assert sleeping(sims[2])
    assert parked


def test_when_no_engine_wakes_a_waiting_request_gets_a_clear_429(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims], env={**FAST, "RJ_IDLE_DRAIN_MIN_WARM": "0", "RJ_IDLE_DRAIN_MAX_PARKED": "3",
                                                    "RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS": "0.5",
                                                    "RJ_ADMISSION_QUEUE_TIMEOUT_MS": "3000"})
    parked_down_to(rj, sims, warm=0)
    for s in sims:
        s.admin("/sim/fault", {"wake_hang": True})
    t0 = time.monotonic()
    r = chat(rj, "nobody-wakes", timeout=20)
    took = time.monotonic() - t0
    assert r.status == 429, r
    assert r.header("Retry-After") is not None
    assert b"woke up" in r.body
    assert took < 10, took
    assert rj.metrics().sum("ramjet_engine_park_actions_total", action="wake", outcome="timeout") >= 1


def test_observe_mode_decides_on_paper_and_parks_nothing(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims], env={**FAST, "RJ_IDLE_DRAIN_MODE": "observe", "RJ_IDLE_DRAIN_MIN_WARM": "1",
                                                    "RJ_IDLE_DRAIN_MAX_PARKED": "2"})
    parked_down_to(rj, sims, warm=1)  # on paper: /health and the metrics say what drain would do
    assert not any(sleeping(s) for s in sims)
    assert rj.metrics().sum("ramjet_idle_drain_decisions_total", action="drain") >= 2
    assert rj.metrics().sum("ramjet_engine_park_actions_total") == 0
    served = {chat(rj, f"observed-{i}").upstream for i in range(12)}
    assert len(served) >= 2, served  # every engine stays in placement
