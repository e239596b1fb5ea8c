"""Session affinity as a score prior (RJ_SESSION_AFFINITY_*): where cache and load leave a choice, a
session's turns go to its primary engine; a loaded primary does not get them; shadow only counts.

Two ramjet-sim engines; every request has a prompt of its own (no cache overlap anywhere), so
without the prior equal engines take turns. X-Session-ID never reaches the engines.
"""

from __future__ import annotations

import json
import uuid

import pytest

from support.e2e import CHAT, open_stream
from support.ramjet_proc import http_request
from support.sim_proc import SimProc

KEY = "k" * 40
ON = {"RJ_SESSION_AFFINITY_MODE": "on", "RJ_SESSION_AFFINITY_KEY": KEY}
SIM = ("--preset", "tiny", "--speed", "1", "--enable-prompt-tokens-details")
FAMILY = "ramjet_session_affinity_total"


@pytest.fixture
def sims():
    made = [SimProc(*SIM), SimProc(*SIM)]
    yield made
    for s in made:
        s.stop()


def body(max_tokens=4, stream=False) -> bytes:
    tag = uuid.uuid4().hex  # a prompt no engine has seen
    return json.dumps({"model": "ramjet-sim", "max_tokens": max_tokens, "stream": stream,
                       "messages": [{"role": "user", "content": f"{tag} " * 20}]}).encode()


def send(rj, session=None) -> str:
    h = {"Content-Type": "application/json"}
    if session is not None:
        h["X-Session-ID"] = session
    r = http_request(rj.api_port, "POST", CHAT, body(), h, timeout=30)
    assert r.status == 200, r
    return r.header("X-Ramjet-Upstream")


def outcomes(rj) -> dict:
    m = rj.metrics()
    return {l["outcome"]: v for l, v in m.find(FAMILY, endpoint="chat")}


def test_a_sessions_turns_stay_on_its_primary_and_sessions_spread(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims], env=ON)
    primaries = {}
    for i in range(8):
        session = f"session-{i}"
        served = {send(rj, session) for _ in range(4)}
        assert len(served) == 1, (session, served)  # every turn on one engine
        primaries[session] = served.pop()
    assert set(primaries.values()) == {"0", "1"}, primaries  # sessions spread over both engines
    o = outcomes(rj)
    assert o["moved"] + o["agree"] == 32 and o["moved"] > 0, o
    # Without a session the equal engines take turns.
    assert {send(rj) for _ in range(4)} == {"0", "1"}
    assert outcomes(rj)["no_session"] == 4


def test_a_loaded_primary_does_not_get_the_sessions_next_turn(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims], env=ON)
    primary = send(rj, "busy-session")
    # A long stream of the same session holds its primary (load 1 > least 0 + delta 0).
    c = open_stream(rj.api_port, CHAT, json.loads(body(max_tokens=4000, stream=True)),
                    headers={"X-Session-ID": "busy-session"}, timeout=30)
    try:
        assert c.header("X-Ramjet-Upstream") == primary
        other = {"0": "1", "1": "0"}[primary]
        assert [send(rj, "busy-session") for _ in range(3)] == [other] * 3
        assert outcomes(rj)["load_gated"] == 3
    finally:
        c.close()


def test_shadow_counts_but_never_changes_a_route(sims, ramjet_factory):
    rj = ramjet_factory([s.url for s in sims], env={**ON, "RJ_SESSION_AFFINITY_MODE": "shadow"})
    served = [send(rj, "one-session") for _ in range(6)]
    assert set(served) == {"0", "1"}, served  # rotation, as without the prior
    o = outcomes(rj)
    assert o["moved"] + o["agree"] == 6 and o["moved"] >= 2, o


def test_invalid_session_headers_are_ignored_and_counted_and_never_reach_the_engine(engine_factory, ramjet_factory):
    engines = engine_factory(2)
    for e in engines:
        e.model = "ramjet-sim"  # the model the requests name
    rj = ramjet_factory(engines, env=ON)
    h = {"Content-Type": "application/json"}
    for value in ("", "x" * 257):
        r = http_request(rj.api_port, "POST", CHAT, body(), {**h, "X-Session-ID": value}, timeout=10)
        assert r.status == 200
    r = http_request(rj.api_port, "POST", CHAT, body(), {**h, "X-Session-ID": "ok"}, timeout=10)
    assert r.status == 200
    assert outcomes(rj)["invalid"] == 2
    for e in engines:
        for req in e.inference_requests():
            assert "x-session-id" not in req.header_names()
