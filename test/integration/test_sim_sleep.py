"""ramjet-sim's sleep mode, as vLLM serves it (docs/sim.md): the routes exist only with
VLLM_SERVER_DEV_MODE=1, sleeping needs --enable-sleep-mode; POST /sleep aborts what runs, frees
the KV block pool and stops the engine; a request that arrives meanwhile is queued and hangs until
POST /wake_up, which takes --wake-ms of virtual time; GET /is_sleeping and
vllm:engine_sleep_state say which."""

from __future__ import annotations

import json
import threading
import time

import pytest

from support.ramjet_proc import scrape
from support.sim_proc import SimProc

DEV = {"VLLM_SERVER_DEV_MODE": "1"}


def chat(sim, tag: str, max_tokens: int = 8, timeout: float = 30):
    body = {"model": "ramjet-sim", "max_tokens": max_tokens, "messages": [{"role": "user", "content": tag + " word" * 100}]}
    return sim.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}, timeout=timeout)


def is_sleeping(sim) -> bool:
    r = sim.request("GET", "/is_sleeping")
    assert r.status == 200, r
    return json.loads(r.body)["is_sleeping"]


def test_the_sleep_routes_exist_only_in_dev_mode():
    sim = SimProc("--enable-sleep-mode")
    try:
        assert sim.request("POST", "/sleep?level=1").status == 404
        assert sim.request("GET", "/is_sleeping").status == 404
        assert sim.request("POST", "/wake_up").status == 404
    finally:
        sim.stop()
    sim = SimProc(env=DEV)  # dev mode, sleep mode not enabled
    try:
        assert is_sleeping(sim) is False
        r = sim.request("POST", "/sleep?level=1")
        assert r.status == 400, r
        assert is_sleeping(sim) is False
        assert sim.request("GET", "/sleep").status == 405
        assert not scrape(sim.port).has("vllm:engine_sleep_state")
    finally:
        sim.stop()


@pytest.fixture
def sleepy():
    sim = SimProc("--preset", "tiny", "--speed", "1", "--enable-sleep-mode", "--wake-ms", "400", env=DEV)
    yield sim
    sim.stop()


def test_sleep_frees_the_block_pool_and_a_wake_takes_its_time(sleepy):
    assert chat(sleepy, "warm").status == 200
    stats = sleepy.admin("/sim/stats", {})
    assert stats["cached_blocks"] > 0
    m = scrape(sleepy.port)
    assert m.get("vllm:engine_sleep_state", sleep_state="awake") == 1
    r = sleepy.request("POST", "/sleep?level=2")
    assert r.status == 200 and r.body == b""
    assert is_sleeping(sleepy) is True
    stats = sleepy.admin("/sim/stats", {})
    assert stats["cached_blocks"] == 0 and stats["kv_cache_usage"] == 0 and stats["sleeping"] is True
    m = scrape(sleepy.port)
    assert m.get("vllm:engine_sleep_state", sleep_state="discard_all") == 1
    assert m.get("vllm:engine_sleep_state", sleep_state="awake") == 0
    t0 = time.monotonic()
    r = sleepy.request("POST", "/wake_up")
    took = time.monotonic() - t0
    assert r.status == 200, r
    assert took >= 0.35, took  # --wake-ms 400 at --speed 1
    assert is_sleeping(sleepy) is False
    assert scrape(sleepy.port).get("vllm:engine_sleep_state", sleep_state="awake") == 1
    assert chat(sleepy, "warm").status == 200  # serves again, from an empty cache
    stats = sleepy.admin("/sim/stats", {})
    assert stats["sleeps"] == 1 and stats["wakes"] == 1


def test_a_request_to_a_sleeping_engine_hangs_until_it_wakes(sleepy):
    assert sleepy.request("POST", "/sleep?level=1").status == 200
    got = []
    t = threading.Thread(target=lambda: got.append(chat(sleepy, "queued")))
    t.start()
    time.sleep(0.8)
    assert not got, "a sleeping engine answered"
    assert sleepy.request("POST", "/wake_up").status == 200
    t.join(20)
    assert got and got[0].status == 200, got


def test_sleep_aborts_the_requests_in_flight():
    sim = SimProc("--preset", "tiny", "--speed", "0.2", "--enable-sleep-mode", env=DEV)
    try:
        got = []
        t = threading.Thread(target=lambda: got.append(chat(sim, "long", max_tokens=2000)))
        t.start()
        time.sleep(0.5)
        assert sim.request("POST", "/sleep").status == 200  # level 1 by default
        t.join(10)
        assert got, "the request in flight was not ended by the sleep"
        assert got[0].status == 200
        assert json.loads(got[0].body)["choices"][0]["finish_reason"] == "abort"
        assert sim.admin("/sim/stats", {})["finished_abort"] == 1
    finally:
        sim.stop()


def test_an_engine_that_does_not_wake_keeps_sleeping(sleepy):
    sleepy.admin("/sim/fault", {"wake_hang": True})
    assert sleepy.request("POST", "/sleep").status == 200
    with pytest.raises(OSError):
        sleepy.request("POST", "/wake_up", timeout=1)
    assert is_sleeping(sleepy) is True
