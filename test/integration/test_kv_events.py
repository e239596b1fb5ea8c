"""KV events end to end: ramjet subscribed to ramjet-sim engines' ZeroMQ publishers.

Each sim publishes vLLM's KV events (map layout, u64 hashes, replay with the topic frame); ramjet
keeps an exact index per engine behind a sequence fence. These tests put the publishers into the
states the fence is for — dropped batches (a replay fills the gap), skipped sequence numbers (it
cannot), unreadable batches, a restarted publisher, a killed and restarted engine — and check the
trust ramjet reports (/health kv_trusted, ramjet_kv_state) and what its index holds.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time

import pytest

from support.metric_docs import families_by_section
from support.ramjet_proc import http_request, poll, settle
from support.sim_proc import SimProc

TOPIC = "kv"
BLOCK = 16  # the sims' block size
PROMPT = [{"role": "system", "content": "You are a careful assistant. " * 40},
          {"role": "user", "content": "Summarise the conversation so far."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kv_config(live_port: int = 0, replay_port: int = 0) -> str:
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "topic": TOPIC,
                       "endpoint": f"tcp://*:{live_port}", "replay_endpoint": f"tcp://*:{replay_port}",
                       "buffer_steps": 1000})


def kv_sim(*extra: str, live_port: int = 0, replay_port: int = 0, port: int = 0) -> SimProc:
    args = ["--speed", "50", "--kv-events-config", kv_config(live_port, replay_port), *extra]
    if port:
        args += ["--port", str(port)]
    return SimProc(*args)


def local(endpoint: str) -> str:
    return "tcp://127.0.0.1:" + endpoint.rsplit(":", 1)[1]


@pytest.fixture
def kv_sims():
    made = [kv_sim(), kv_sim()]
    yield made
    for s in made:
        s.stop()


def start(ramjet_factory, sims, env=None):
    rj = ramjet_factory([s.url for s in sims], env={
        "RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join(local(s.kv_endpoint) for s in sims),
        "RJ_KV_EVENT_REPLAY_ENDPOINTS": ",".join(local(s.kv_replay) for s in sims),
        "RJ_KV_EVENT_TOPIC": TOPIC,
        "RJ_KV_EVENT_TIMEOUT_MS": "2000",
        "RJ_PROBE_INTERVAL_MS": "200",
        **(env or {}),
    })
    rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every engine's index trusted")
    return rj


def chat(sim: SimProc, i: int = 0, max_tokens: int = 4) -> None:
    """A request straight to the engine (not through ramjet): its KV events still reach ramjet. Its
    own long question fills new blocks, so it always publishes a batch."""
    body = {"model": "ramjet-sim", "max_tokens": max_tokens,
            "messages": [*PROMPT, {"role": "user", "content": f"question {i}: " + f"detail {i} " * 40}]}
    r = sim.request("POST", "/v1/chat/completions", body)
    assert r.status == 200, r.body


def transitions(rj, engine: int, event: str) -> float:
    return rj.metrics().get("ramjet_kv_fence_transitions_total", upstream=str(engine), event=event) or 0


def state(rj, engine: int) -> str:
    m = rj.metrics()
    for s in ("trusted", "replaying", "fenced"):
        if m.get("ramjet_kv_state", upstream=str(engine), state=s) == 1:
            return s
    return "?"


def resident_blocks(rj, engine: int) -> float:
    return rj.metrics().get("ramjet_kv_index_resident_blocks", upstream=str(engine)) or 0


def wait_state(rj, engine: int, want: str, timeout: float = 10.0):
    poll(lambda: state(rj, engine) == want, timeout=timeout, what=f"engine {engine} {want}")


def test_every_engine_is_trusted_and_its_index_follows_its_cache(ramjet_factory, kv_sims):
    rj = start(ramjet_factory, kv_sims)
    text = rj.metrics_text() if hasattr(rj, "metrics_text") else http_request(rj.metrics_port, "GET", "/metrics").body.decode()
    on_metrics = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    documented = families_by_section()["KV events"]
    assert documented and documented <= on_metrics, documented - on_metrics
    assert "127.0.0.1" not in text, "endpoints never reach /metrics"
    assert resident_blocks(rj, 0) == 0
    chat(kv_sims[0])
    poll(lambda: resident_blocks(rj, 0) > 0, timeout=5, what="engine 0's blocks in the index")
    assert resident_blocks(rj, 1) == 0, "engine 1 cached nothing"
    m = rj.metrics()
    assert m.get("ramjet_kv_blocks_applied_total", upstream="0", op="stored") >= resident_blocks(rj, 0)
    assert m.get("ramjet_kv_batches_total", upstream="0", source="live") >= 1
    # A cache reset empties it (AllBlocksCleared), trust holds.
    assert kv_sims[0].request("POST", "/reset_prefix_cache").status == 200
    poll(lambda: resident_blocks(rj, 0) == 0, timeout=5, what="engine 0's index emptied")
    assert state(rj, 0) == "trusted"


def test_dropped_batches_are_replayed_and_trust_comes_back(ramjet_factory, kv_sims):
    rj = start(ramjet_factory, kv_sims)
    chat(kv_sims[0], 0)
    poll(lambda: resident_blocks(rj, 0) > 0, timeout=5, what="first blocks")
    done = transitions(rj, 0, "replay_done")  # the connect's replay from 0
    kv_sims[0].admin("/sim/fault", {"kv_drop": 2})
    for i in range(1, 4):
        chat(kv_sims[0], i)
    poll(lambda: transitions(rj, 0, "gap_replay") >= 1 and transitions(rj, 0, "replay_done") > done
         and state(rj, 0) == "trusted", timeout=10, what="gap replayed")
    assert rj.metrics().get("ramjet_kv_batches_total", upstream="0", source="replay") >= 2
    assert transitions(rj, 0, "replay_failed") == 0
    assert rj.health()[1]["replicas"][0]["kv_trusted"] is True


def test_a_gap_no_replay_can_fill_fences_until_the_engine_clears(ramjet_factory, kv_sims):
    rj = start(ramjet_factory, kv_sims)
    chat(kv_sims[0], 0)
    kv_sims[0].admin("/sim/fault", {"kv_skip": 3})
    chat(kv_sims[0], 1)
    poll(lambda: state(rj, 0) == "fenced" and transitions(rj, 0, "replay_failed") >= 1, timeout=10,
         what="engine 0 fenced by a failed replay")
    assert resident_blocks(rj, 0) == 0, "a fenced index is emptied"
    assert rj.health()[1]["replicas"][0]["kv_trusted"] is False
    assert rj.health()[1]["replicas"][1]["kv_trusted"] is True, "the other engine is not affected"
    # New batches do not make it whole again (a replay from 0 no longer reaches 0)...
    chat(kv_sims[0], 2)
    # ...a cache reset does.
    assert kv_sims[0].request("POST", "/reset_prefix_cache").status == 200
    wait_state(rj, 0, "trusted")
    chat(kv_sims[0], 3)
    poll(lambda: resident_blocks(rj, 0) > 0, timeout=5, what="blocks after the clear")


def test_an_unreadable_batch_fences_and_is_counted(ramjet_factory, kv_sims):
    rj = start(ramjet_factory, kv_sims)
    chat(kv_sims[0], 0)
    kv_sims[0].admin("/sim/fault", {"kv_garbage": 1})
    chat(kv_sims[0], 1)
    wait_state(rj, 0, "fenced")
    assert rj.metrics().get("ramjet_kv_decode_errors_total", upstream="0") >= 1
    assert kv_sims[0].request("POST", "/reset_prefix_cache").status == 200
    wait_state(rj, 0, "trusted")
    # ramjet kept serving throughout.
    r = kv_sims[1].request("GET", "/health")
    assert r.status == 200


def test_a_restarted_publisher_starts_a_new_generation(ramjet_factory, kv_sims):
    rj = start(ramjet_factory, kv_sims)
    chat(kv_sims[0], 0)
    poll(lambda: resident_blocks(rj, 0) > 0, timeout=5, what="first blocks")
    gen = rj.metrics().get("ramjet_kv_generation", upstream="0")
    kv_sims[0].admin("/sim/fault", {"kv_restart": True})
    chat(kv_sims[0], 1)
    poll(lambda: transitions(rj, 0, "restart") >= 1, timeout=5, what="restart seen")
    wait_state(rj, 0, "trusted")
    assert rj.metrics().get("ramjet_kv_generation", upstream="0") > gen


def test_a_killed_engine_is_fenced_at_once_and_trusted_again_when_it_is_back(ramjet_factory):
    live, replay = free_port(), free_port()
    sims = [kv_sim(live_port=live, replay_port=replay), kv_sim()]
    try:
        rj = start(ramjet_factory, sims)
        chat(sims[0])
        poll(lambda: resident_blocks(rj, 0) > 0, timeout=5, what="first blocks")
        port = sims[0].port
        sims[0].proc.send_signal(signal.SIGKILL)
        sims[0].proc.wait()
        poll(lambda: transitions(rj, 0, "disconnect") >= 1, timeout=5, what="disconnect seen")
        assert state(rj, 0) != "trusted" and resident_blocks(rj, 0) == 0
        sims[0] = kv_sim(live_port=live, replay_port=replay, port=port)  # a fresh engine, same endpoints
        wait_state(rj, 0, "trusted", timeout=20)  # reconnect: a replay from 0 of the new publisher
        chat(sims[0])
        poll(lambda: resident_blocks(rj, 0) > 0, timeout=5, what="the new engine's blocks")
    finally:
        for s in sims:
            s.stop()


# ----------------------------------------------------------------------------- exact placement
def long_chat(k: int, turn: str) -> dict:
    """A ~40 KB agent prompt of its own (over RJ_EXACT_ROUTE_MIN_BYTES), then one user turn."""
    system = f"Agent {k} tool manual. " + " ".join(f"rule {k}.{i}: keep the invariant {i * 7 % 13}." for i in range(1400))
    return {"model": "ramjet-sim", "max_tokens": 2,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": turn}]}


def through(rj, body: dict):
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200, r.body
    settle(rj)
    return r


def warm_behind_its_back(rj, sim: SimProc, engine: int, body: dict) -> None:
    """Sends `body` straight to one engine and waits until all the blocks it stored reached
    ramjet's index. A long prompt is prefilled, and reported, in several batches: waiting for the
    first one only would leave the rest arriving during the next request (a short prediction, or
    a lookup that meets the index mid-write on a loaded machine and falls back)."""
    def stored():
        return rj.metrics().get("ramjet_kv_blocks_applied_total", upstream=str(engine), op="stored") or 0
    before = stored()
    r = sim.request("POST", "/v1/chat/completions", body)
    assert r.status == 200, r.body
    usage = json.loads(r.body)["usage"]
    details = usage.get("prompt_tokens_details") or {}
    if "cached_tokens" in details:  # the engine says how many full blocks it had to store
        blocks = usage["prompt_tokens"] // BLOCK - details["cached_tokens"] // BLOCK
        poll(lambda: stored() >= before + blocks, timeout=10, what="the warmed blocks in ramjet's index")
        return
    poll(lambda: stored() > before, timeout=10, what="the warmed blocks in ramjet's index")
    last = stored()
    while True:  # without usage details: until no batch arrived for a while
        time.sleep(0.3)
        now = stored()
        if now == last:
            return
        last = now


@pytest.fixture
def three_kv_sims():
    made = [kv_sim("--enable-prompt-tokens-details") for _ in range(3)]
    yield made
    for s in made:
        s.stop()


def test_forced_miss_exact_placement_finds_the_engine_warmed_behind_its_back(ramjet_factory, three_kv_sims):
    sims = three_kv_sims
    rj = start(ramjet_factory, sims)  # RJ_EXACT_ROUTE_MODE=auto: on, since KV endpoints are set
    for k in range(4):
        warm_behind_its_back(rj, sims[1], 1, long_chat(k, "first question"))
        r = through(rj, long_chat(k, "first question"))
        assert r.header("X-Ramjet-Upstream") == "1", f"prompt {k}: placed on {r.header('X-Ramjet-Upstream')}"
        receipt = r.header("X-Ramjet-Route")
        assert receipt and receipt.startswith("exact; predicted_cached_tokens="), receipt
        predicted = int(receipt.rsplit("=", 1)[1])
        cached = json.loads(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
        # The engine's hit is the prediction, less the block a fully cached prompt recomputes.
        assert cached > 8000 and predicted - 16 <= cached <= predicted, (predicted, cached)
    m = rj.metrics()
    assert m.get("ramjet_exact_route_total", outcome="exact") >= 4
    # Each placement was checked against the engine's own report, and agreed.
    assert m.get("ramjet_exact_predictions_total", upstream="1", result="agree") >= 4
    assert m.sum("ramjet_exact_predictions_total", result="miss") == 0
    assert m.get("ramjet_exact_withdrawn", upstream="1") == 0
    # A small request is outside the size window: the approximate index places it, and says so.
    small = through(rj, {"model": "ramjet-sim", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert small.header("X-Ramjet-Route") == "ineligible"


def test_forced_miss_the_approximate_index_cannot_see_it(ramjet_factory, three_kv_sims):
    sims = three_kv_sims
    rj = start(ramjet_factory, sims, env={"RJ_EXACT_ROUTE_MODE": "off"})
    landed = []
    for k in range(4):
        warm_behind_its_back(rj, sims[1], 1, long_chat(10 + k, "first question"))
        r = through(rj, long_chat(10 + k, "first question"))
        assert r.header("X-Ramjet-Route") is None
        landed.append(r.header("X-Ramjet-Upstream"))
    # Cold to the approximate index, the prompts take turns: the warm engine gets its share only.
    assert landed.count("1") <= 2, landed


def test_shadow_mode_counts_what_exact_placement_would_have_done(ramjet_factory, three_kv_sims):
    sims = three_kv_sims
    rj = start(ramjet_factory, sims, env={"RJ_EXACT_ROUTE_MODE": "shadow"})
    outcomes = []
    for k in range(4):
        warm_behind_its_back(rj, sims[1], 1, long_chat(20 + k, "first question"))
        r = through(rj, long_chat(20 + k, "first question"))
        receipt = r.header("X-Ramjet-Route")
        outcomes.append((r.header("X-Ramjet-Upstream"), receipt.split(";")[0]))
    for upstream, outcome in outcomes:
        assert outcome == ("shadow_agree" if upstream == "1" else "shadow_would_move"), outcomes
    m = rj.metrics()
    assert m.get("ramjet_exact_route_total", outcome="shadow_would_move") == sum(1 for u, _ in outcomes if u != "1")


def test_a_fenced_engine_gets_its_fingerprint_estimate_while_the_others_stay_exact(ramjet_factory, three_kv_sims):
    """One engine whose KV batches cannot be read (its replay holds the same batch, so it stays
    fenced until its cache clears) does not turn exact routing off for the fleet: the trusted
    engines are placed on their exact overlaps, the fenced one on its fingerprint estimate (the
    same scale), its recovery is retried on a backoff, and /health and a metric say how long it
    has been untrusted."""
    sims = three_kv_sims
    rj = start(ramjet_factory, sims)
    assert [r["kv_untrusted_seconds"] for r in rj.health()[1]["replicas"]] == [0, 0, 0]
    sims[2].admin("/sim/fault", {"kv_garbage": 1})
    chat(sims[2], 0)
    wait_state(rj, 2, "fenced")
    # Retried on its backoff (1 s, then 2 s, ...), and still fenced: the replay holds the bad batch.
    poll(lambda: transitions(rj, 2, "retry") >= 2, timeout=10, what="engine 2's recovery retried")
    assert state(rj, 2) != "trusted"
    replicas = rj.health()[1]["replicas"]
    assert replicas[2]["kv_trusted"] is False and replicas[2]["kv_untrusted_seconds"] >= 1.0, replicas[2]
    assert replicas[0]["kv_untrusted_seconds"] == 0 and replicas[1]["kv_untrusted_seconds"] == 0
    assert rj.metrics().get("ramjet_kv_untrusted_seconds", upstream="2") >= 1.0
    assert rj.metrics().get("ramjet_kv_untrusted_seconds", upstream="1") == 0
    # A forced miss on a trusted engine still lands where the cache is, and is checked.
    for k in range(2):
        warm_behind_its_back(rj, sims[1], 1, long_chat(30 + k, "first question"))
        r = through(rj, long_chat(30 + k, "first question"))
        assert r.header("X-Ramjet-Upstream") == "1", r.header("X-Ramjet-Route")
        assert r.header("X-Ramjet-Route").startswith("exact_partial; predicted_cached_tokens="), r.header("X-Ramjet-Route")
    # A conversation the fenced engine served: the fingerprints learned it, and bring it back.
    landed = None
    for k in range(6):
        r = through(rj, long_chat(40 + k, "first question"))
        if r.header("X-Ramjet-Upstream") == "2":
            landed = k
            assert r.header("X-Ramjet-Route") == "exact_partial; estimated"
            break
    assert landed is not None, "no cold request was placed on engine 2"
    r = through(rj, long_chat(40 + landed, "second question"))
    assert r.header("X-Ramjet-Upstream") == "2" and r.header("X-Ramjet-Route") == "exact_partial; estimated"
    m = rj.metrics()
    assert m.get("ramjet_exact_route_total", outcome="exact_partial") >= 4
    assert m.get("ramjet_exact_route_total", outcome="untrusted") == 0
    assert m.get("ramjet_exact_predictions_total", upstream="1", result="agree") >= 2
    assert m.sum("ramjet_exact_predictions_total", result="miss") == 0
    assert sum(m.get("ramjet_exact_predictions_total", upstream="2", result=x) or 0
               for x in ("agree", "miss", "unreported", "late", "evicted")) == 0, "an estimate predicts nothing"
    # Its cache cleared, the engine is trusted again and the fleet fully exact.
    assert sims[2].request("POST", "/reset_prefix_cache").status == 200
    wait_state(rj, 2, "trusted")
    assert rj.health()[1]["replicas"][2]["kv_untrusted_seconds"] == 0
    r = through(rj, long_chat(30, "second question"))
    assert r.header("X-Ramjet-Route").startswith("exact; "), r.header("X-Ramjet-Route")


def test_two_ramjets_on_the_same_engines_make_the_same_exact_choice(ramjet_factory, three_kv_sims):
    sims = three_kv_sims
    a = start(ramjet_factory, sims)
    b = start(ramjet_factory, sims)
    for k in range(3):
        warm_behind_its_back(a, sims[2], 2, long_chat(40 + k, "first question"))
        poll(lambda: resident_blocks(a, 2) == resident_blocks(b, 2) > 0, timeout=5,
             what="both ramjets hold the same blocks of engine 2")
        ra = through(a, long_chat(40 + k, "first question"))
        rb = through(b, long_chat(40 + k, "first question"))
        assert ra.header("X-Ramjet-Upstream") == rb.header("X-Ramjet-Upstream") == "2"
        pa, pb = (int(r.header("X-Ramjet-Route").rsplit("=", 1)[1]) for r in (ra, rb))
        assert ra.header("X-Ramjet-Route").startswith("exact") and abs(pa - pb) <= 16, (pa, pb)


def test_the_canary_places_only_its_sessions_and_zero_rolls_back(ramjet_factory, three_kv_sims):
    sims = three_kv_sims
    rj = start(ramjet_factory, sims, env={"RJ_EXACT_ROUTE_CANARY_BPS": "0", "RJ_EXACT_ROUTE_CANARY_KEY": "k"})
    warm_behind_its_back(rj, sims[1], 1, long_chat(50, "first question"))
    body = json.dumps(long_chat(50, "first question")).encode()
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", body,
                     {"Content-Type": "application/json", "X-Session-ID": "s-1"}, timeout=30)
    assert r.status == 200 and r.header("X-Ramjet-Route").split(";")[0] in ("shadow_agree", "shadow_would_move")
    settle(rj)  # the first request's own blocks are applied before the second is placed
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200 and r.header("X-Ramjet-Route").split(";")[0] in ("shadow_agree", "shadow_would_move")
    m = rj.metrics()
    assert m.get("ramjet_exact_route_canary_total", cohort="control") == 1
    assert m.get("ramjet_exact_route_canary_total", cohort="no_session") == 1
    assert m.get("ramjet_exact_route_total", outcome="exact") == 0


# ----------------------------------------------------------------------------- speculative residency
def first_turn(k: int) -> dict:
    """A session's first turn: the shared agent prompt of long_chat(k), then a long context of its own."""
    body = long_chat(k, "context: " + " ".join(f"fact {k}.{i} is {i * 3 % 11}." for i in range(1000)))
    return body


def follow_up(k: int) -> dict:
    """The session's next turn: the whole first turn, then more."""
    body = first_turn(k)
    body["messages"] += [{"role": "assistant", "content": "noted"}, {"role": "user", "content": "and then?"}]
    return body


def burst(rj, sims, k: int):
    """Places a new session's first turn through ramjet on slow engines and, while that engine is
    still prefilling it (before any of its blocks are stored), sends the session's next turn.
    Returns (first turn's engine, next turn's response)."""
    import threading
    first = {}
    t = threading.Thread(target=lambda: first.setdefault("r", through(rj, first_turn(k))))
    t.start()
    busy = poll(lambda: next((str(i) for i, s in enumerate(sims) if s.admin("/sim/stats", {})["running"] > 0), None),
                timeout=5, interval=0.01, what="the first turn running")
    nxt = through(rj, follow_up(k))
    t.join()
    assert first["r"].header("X-Ramjet-Upstream") == busy
    return busy, nxt


@pytest.fixture
def slow_warm_sims():
    """Three engines that all hold the same system prompt, then take 1.5 s per engine step of at most
    1024 tokens (chunked prefill: vLLM caches, and reports, a prompt's blocks chunk by chunk)."""
    made = [kv_sim("--enable-prompt-tokens-details", "--max-model-len", "40960", "--max-num-batched-tokens", "1024")
            for _ in range(3)]
    yield made
    for s in made:
        s.stop()


def warm_everywhere(rj, sims, k: int) -> None:
    for i, s in enumerate(sims):
        warm_behind_its_back(rj, s, i, {"model": "ramjet-sim", "max_tokens": 2,
                                        "messages": long_chat(k, "warm")["messages"][:1]})
    for s in sims:
        s.admin("/sim/fault", {"slow_ms": 1500})


def test_a_burst_of_one_session_follows_its_first_turn_before_the_events_arrive(ramjet_factory, slow_warm_sims):
    sims = slow_warm_sims
    rj = start(ramjet_factory, sims)
    warm_everywhere(rj, sims, 60)
    busy, nxt = burst(rj, sims, 60)
    # The events have told ramjet of the first chunks of the first turn only; the placement of all.
    assert nxt.header("X-Ramjet-Upstream") == busy
    receipt = nxt.header("X-Ramjet-Route")
    assert receipt.startswith("exact; predicted_cached_tokens=") and "; provisional_tokens=" in receipt, receipt
    provisional = int(receipt.rsplit("=", 1)[1])
    assert provisional > 2000, receipt
    m = rj.metrics()
    assert m.get("ramjet_exact_provisional_hits_total") >= 1
    assert m.get("ramjet_exact_provisional_blocks_total") >= provisional // 16
    # The engine's report agreed with the range [confirmed, confirmed + provisional].
    assert m.sum("ramjet_exact_predictions_total", result="miss") == 0


def test_speculative_residency_off_predicts_only_what_the_events_said(ramjet_factory, slow_warm_sims):
    sims = slow_warm_sims
    rj = start(ramjet_factory, sims, env={"RJ_EXACT_PROVISIONAL_TTL_MS": "0"})
    warm_everywhere(rj, sims, 61)
    busy, nxt = burst(rj, sims, 61)
    receipt = nxt.header("X-Ramjet-Route")
    assert receipt.startswith("exact; predicted_cached_tokens=") and "provisional" not in receipt, receipt
    m = rj.metrics()
    assert m.get("ramjet_exact_provisional_blocks_total") == 0 and m.get("ramjet_exact_provisional_hits_total") == 0


# ----------------------------------------------------------------------------- discovery
def test_discovered_endpoints_are_subscribed_and_followed_to_a_restarted_engine(ramjet_factory):
    """RJ_KV_EVENT_LIVE_ENDPOINTS=discover: ramjet asks each engine's GET /kv_event_sources (the
    sims bind tcp://*:0, as vLLM's default config binds *), subscribes to what it says, and asks
    again when a subscription stops being trusted — here an engine restarted on other ports."""
    sims = [kv_sim("--enable-prompt-tokens-details") for _ in range(3)]
    try:
        rj = ramjet_factory([s.url for s in sims], env={"RJ_KV_EVENT_LIVE_ENDPOINTS": "discover",
                                                      "RJ_KV_EVENT_TIMEOUT_MS": "2000", "RJ_PROBE_INTERVAL_MS": "200"})
        rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every engine discovered")
        m = rj.metrics()
        for i in range(3):
            assert m.get("ramjet_kv_discovery_total", upstream=str(i), outcome="found") >= 1
        # Exact placement works on the discovered subscriptions (mode auto: on).
        warm_behind_its_back(rj, sims[2], 2, long_chat(70, "first question"))
        r = through(rj, long_chat(70, "first question"))
        assert r.header("X-Ramjet-Upstream") == "2" and r.header("X-Ramjet-Route").startswith("exact")
        # The engine comes back on the same HTTP port but new KV ports (bound to :0 again).
        port = sims[0].port
        old = sims[0].kv_endpoint
        sims[0].proc.send_signal(signal.SIGKILL)
        sims[0].proc.wait()
        sims[0] = kv_sim("--enable-prompt-tokens-details", port=port)
        assert sims[0].kv_endpoint != old
        wait_state(rj, 0, "trusted", timeout=20)
        # Its KV subscription can be trusted again before a probe has seen it back in service.
        rj.wait_health(lambda c, j: j["replicas"][0]["healthy"], 10, "engine 0 back in service")
        warm_behind_its_back(rj, sims[0], 0, long_chat(71, "first question"))
        r = through(rj, long_chat(71, "first question"))
        assert r.header("X-Ramjet-Upstream") == "0" and r.header("X-Ramjet-Route").startswith("exact")
        # Nothing of the endpoints reaches the log.
        assert sims[0].kv_endpoint.rsplit(":", 1)[1] not in rj.output()
    finally:
        for s in sims:
            s.stop()


def test_an_engine_without_kv_event_sources_is_counted_and_placed_on_its_fingerprints(ramjet_factory, kv_sims):
    # A plain HTTP server that is not vLLM answers 404 to /kv_event_sources: the sim without
    # --kv-events-config answers an empty list instead.
    plain = SimProc("--speed", "50")
    try:
        sims = [kv_sims[0], plain]
        rj = ramjet_factory([s.url for s in sims], env={"RJ_KV_EVENT_LIVE_ENDPOINTS": "discover",
                                                      "RJ_PROBE_INTERVAL_MS": "200"})
        rj.wait_health(lambda c, j: j["replicas"][0].get("kv_trusted"), 10, "engine 0 discovered")
        poll(lambda: rj.metrics().get("ramjet_kv_discovery_total", upstream="1", outcome="none") >= 1, timeout=5,
             what="engine 1 publishes none")
        r = through(rj, long_chat(72, "first question"))
        # One healthy engine without an index: the fingerprints estimate it, the other is exact.
        assert r.header("X-Ramjet-Route").startswith("exact_partial"), r.header("X-Ramjet-Route")
    finally:
        plain.stop()
