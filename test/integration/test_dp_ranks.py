"""Data-parallel ranks as routing targets (RJ_UPSTREAM_DP_SIZE): ramjet in front of one ramjet-sim
with --data-parallel-size 4 (docs/sim.md §8.2) takes four ordinals, one per rank; it pins each
request to the rank it chose with X-Data-Parallel-Rank (a client's own is dropped), follows each
rank's KV events (discovered: GET /kv_event_sources, source k for rank k) and load."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.ramjet_proc import conversation_cache, http_request, poll, settle
from support.sim_proc import SimProc

RANKS = 4
KV = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0",
                 "replay_endpoint": "tcp://*:0", "topic": "kv", "buffer_steps": 1000})


@pytest.fixture
def dp4():
    s = SimProc("--speed", "50", "--enable-prompt-tokens-details", "--data-parallel-size", str(RANKS),
                "--kv-events-config", KV)
    yield s
    s.stop()


@pytest.fixture
def rj(dp4, ramjet_factory):
    r = ramjet_factory([dp4.url], env={"RJ_UPSTREAM_DP_SIZE": str(RANKS),
                                       "RJ_KV_EVENT_LIVE_ENDPOINTS": "discover",
                                       "RJ_KV_EVENT_TIMEOUT_MS": "2000",
                                       "RJ_PROBE_INTERVAL_MS": "200",
                                       "RJ_ENGINE_SCRAPE_INTERVAL_MS": "200"})
    r.wait_health(lambda c, j: len(j["replicas"]) == RANKS and all(x.get("kv_trusted") for x in j["replicas"]),
                  15, "every rank discovered and trusted")
    return r


def chat(tag: str, turns: int = 1, max_tokens: int = 4, system_repeat: int = 12) -> dict:
    msgs = [{"role": "system", "content": f"Conversation {tag}. " + "You are a careful assistant. " * system_repeat}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"Question {t} of {tag}: tell me about prefix caches."})
        if t + 1 < turns:
            msgs.append({"role": "assistant", "content": f"Answer {t} of {tag}: they keep computed blocks."})
    return {"model": "ramjet-sim", "messages": msgs, "max_tokens": max_tokens}


def long_chat(k: int, turn: str) -> dict:
    """A ~40 KB prompt (over RJ_EXACT_ROUTE_MIN_BYTES: exact placement applies)."""
    system = f"Agent {k} tool manual. " + " ".join(f"rule {k}.{i}: keep the invariant {i * 7 % 13}." for i in range(1400))
    return {"model": "ramjet-sim", "max_tokens": 2,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": turn}]}


def through(rj, body: dict, headers: dict | None = None, timeout: float = 30):
    return http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                        {"Content-Type": "application/json", **(headers or {})}, timeout=timeout)


def per_rank(sim, name: str) -> dict:
    """{rank: value} of one of the sim's own per-rank counters (engine="<rank>")."""
    text = sim.request("GET", "/metrics").body.decode()
    out = {k: 0.0 for k in range(RANKS)}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[int(s.labels["engine"])] += s.value
    return out


def served(sim) -> dict:
    """{rank: requests finished}."""
    return per_rank(sim, "vllm:request_success_total")


def test_each_rank_is_an_ordinal_with_its_own_kv_source(rj, dp4):
    assert [(r["index"], r.get("dp_rank")) for r in rj.health()[1]["replicas"]] == [(k, k) for k in range(RANKS)]
    m = rj.metrics()
    for k in range(RANKS):
        assert m.get("ramjet_upstream_dp_rank", upstream=str(k), engine="0") == k
        assert m.get("ramjet_kv_discovery_total", upstream=str(k), outcome="found") >= 1
        assert (m.get("ramjet_kv_discovery_total", upstream=str(k), outcome="unsupported") or 0) == 0
    assert "127.0.0.1" not in "".join(line for line in rj.output().splitlines() if "kv events" in line)


def test_requests_are_pinned_to_the_chosen_rank_and_a_clients_rank_header_is_dropped(rj, dp4):
    before = served(dp4)
    placed = {k: 0 for k in range(RANKS)}
    # A rank header from the client would be a 400 from the engine (out of range) if forwarded, or
    # pin the request to rank 3 (then the per-rank counts below would not match ramjet's choices).
    for i in range(8):
        headers = {"X-Data-Parallel-Rank": "7"} if i % 2 else {"X-Data-Parallel-Rank": "3"}
        r = through(rj, chat(f"pin-{i}"), headers)
        assert r.status == 200, r.body
        placed[int(r.header("X-Ramjet-Upstream"))] += 1
    after = served(dp4)
    assert {k: after[k] - before[k] for k in range(RANKS)} == placed
    assert placed[3] < 8


def conversation(k: int, turns: int) -> dict:
    """An agent conversation of `turns` user turns on a long system prompt of its own."""
    body = long_chat(k, "Question 0: where is the bug?")
    for t in range(1, turns):
        body["messages"] += [{"role": "assistant", "content": f"Answer {t - 1}: look at the parser."},
                             {"role": "user", "content": f"Question {t}: and then?"}]
    return body


def test_a_conversation_stays_on_its_rank_and_its_cache_grows(rj, dp4):
    cached = conversation_cache(rj, lambda body: through(rj, body), [conversation(11, t) for t in (1, 2, 3, 4)])
    assert cached[0] == 0 and all(b > a for a, b in zip(cached, cached[1:])), cached


def test_concurrent_conversations_spread_over_the_ranks(rj, dp4):
    before = served(dp4)
    results = []

    def one(i):
        r = through(rj, {**chat(f"spread-{i}"), "max_tokens": 60, "stream": True})
        results.append((r.status, r.header("X-Ramjet-Upstream")))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [s for s, _ in results] == [200] * 8
    per_rank = {k: sum(1 for _, u in results if u == str(k)) for k in range(RANKS)}
    assert sum(1 for n in per_rank.values() if n > 0) >= 3 and max(per_rank.values()) <= 3, per_rank
    after = served(dp4)
    assert {k: after[k] - before[k] for k in range(RANKS)} == per_rank


def test_each_ranks_exact_index_follows_its_own_ranks_events(rj, dp4):
    # Warmed on rank 2 behind ramjet's back: only ordinal 2's index learns it.
    def stored(k):
        return rj.metrics().get("ramjet_kv_blocks_applied_total", upstream=str(k), op="stored") or 0
    before = {k: stored(k) for k in range(RANKS)}
    body = long_chat(5, "first question")
    r = dp4.request("POST", "/v1/chat/completions", body, headers={"X-Data-Parallel-Rank": "2"})
    assert r.status == 200, r.body
    poll(lambda: stored(2) > before[2] + 100, timeout=10, what="rank 2's blocks in ordinal 2's index")
    settle(rj)
    assert all(stored(k) == before[k] for k in (0, 1, 3))
    hits_before = served_hits(dp4)
    r = through(rj, body)
    assert r.status == 200, r.body
    assert r.header("X-Ramjet-Upstream") == "2"
    receipt = r.header("X-Ramjet-Route")
    assert receipt.startswith("exact; predicted_cached_tokens="), receipt
    predicted = int(receipt.split("=")[1])
    cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 5000 and predicted - 16 <= cached <= predicted, (predicted, cached)
    hits = served_hits(dp4)
    assert hits[2] - hits_before[2] == cached and all(hits[k] == hits_before[k] for k in (0, 1, 3))
    assert (rj.metrics().sum("ramjet_kv_events_skipped_total", reason="other_rank") or 0) == 0


def served_hits(sim) -> dict:
    """{rank: prefix-cache hit tokens}."""
    return per_rank(sim, "vllm:prefix_cache_hits_total")


def test_the_engine_scrape_reads_each_ranks_own_load(rj, dp4):
    dp4.admin("/sim/fault", {"pause": True, "rank": 1})
    held = []
    t = threading.Thread(target=lambda: held.append(
        dp4.request("POST", "/v1/chat/completions", chat("held"), headers={"X-Data-Parallel-Rank": "1"}, timeout=30)))
    t.start()
    try:
        poll(lambda: (rj.metrics().get("ramjet_engine_requests_waiting", upstream="1") or 0) == 1, timeout=10,
             what="rank 1's waiting request in ordinal 1's scrape")
        m = rj.metrics()
        assert all((m.get("ramjet_engine_requests_waiting", upstream=str(k)) or 0) == 0 for k in (0, 2, 3))
    finally:
        dp4.admin("/sim/fault", {"pause": False, "rank": 1})
    t.join(10)
    assert held and held[0].status == 200


def test_a_wedged_rank_leaves_the_others_serving(rj, dp4):
    dp4.admin("/sim/fault", {"pause": True, "rank": 1})
    results = []

    def one(i):
        r = through(rj, chat(f"wedge-{i}"), timeout=60)
        results.append((r.status, r.header("X-Ramjet-Upstream")))

    threads = []
    try:
        for i in range(8):
            threads.append(threading.Thread(target=one, args=(i,)))
            threads[-1].start()
            time.sleep(0.1)
        # The other ranks answer while rank 1 takes no step (its /health still says 200).
        poll(lambda: sum(1 for s, u in results if s == 200 and u != "1") >= 6, timeout=20,
             what="the other ranks serving")
        assert http_request(dp4.port, "GET", "/health").status == 200
    finally:
        dp4.admin("/sim/fault", {"pause": False, "rank": 1})
    for t in threads:
        t.join(30)
    assert [s for s, _ in results] == [200] * 8


def test_a_reload_changes_the_number_of_ranks(tmp_path, dp4, ramjet_factory):
    conf = tmp_path / "ramjet.env"
    conf.write_text(f"RJ_UPSTREAM={dp4.url}\nRJ_UPSTREAM_DP_SIZE=2\n")
    rj = ramjet_factory(env={"RJ_CONFIG_FILE": str(conf), "RJ_PROBE_INTERVAL_MS": "200"})

    def replicas():
        return {r["index"]: r for r in rj.health()[1]["replicas"] if not r.get("leaving")}

    def ranks():
        m = rj.metrics()
        return {u: m.get("ramjet_upstream_dp_rank", upstream=str(u), engine="0") for u in range(5)}

    poll(lambda: set(replicas()) == {0, 1} and all(r["healthy"] for r in replicas().values()), timeout=15,
         what="two ranks in service")
    assert ranks() == {0: 0, 1: 1, 2: None, 3: None, 4: None}

    def hup(applied):
        rj.proc.send_signal(signal.SIGHUP)
        poll(lambda: rj.metrics().get("ramjet_config_reloads_total", outcome="applied") == applied, timeout=10,
             what="the reload applied")

    conf.write_text(f"RJ_UPSTREAM={dp4.url}\nRJ_UPSTREAM_DP_SIZE=4\n")
    hup(1)  # two more ranks join (the first two stay)
    poll(lambda: set(replicas()) == {0, 1, 2, 3} and all(r["healthy"] for r in replicas().values()), timeout=20,
         what="four ranks in service")
    assert ranks() == {0: 0, 1: 1, 2: 2, 3: 3, 4: None}
    before = served(dp4)
    placed = {k: 0 for k in range(RANKS)}
    for i in range(6):
        r = through(rj, chat(f"reload-{i}"))
        assert r.status == 200, r.body
        placed[int(r.header("X-Ramjet-Upstream"))] += 1
    after = served(dp4)
    assert {k: after[k] - before[k] for k in range(RANKS)} == placed

    conf.write_text(f"RJ_UPSTREAM={dp4.url}\n")
    hup(2)  # no ranks: the four leave together, the whole engine is one target again
    poll(lambda: len(replicas()) == 1 and all(r["healthy"] for r in replicas().values()), timeout=20,
         what="the whole engine in service")
    assert set(replicas()).isdisjoint({0, 1, 2, 3})
    poll(lambda: all(v is None for v in ranks().values()), timeout=5, what="no rank series")
    assert through(rj, chat("whole")).status == 200


def test_the_rank_generation_probe_fences_a_wedged_rank_and_readmits_it(dp4, ramjet_factory):
    rj = ramjet_factory([dp4.url], env={"RJ_UPSTREAM_DP_SIZE": str(RANKS), "RJ_PROBE_RANK_GENERATION": "true",
                                        "RJ_PROBE_INTERVAL_MS": "200", "RJ_PROBE_TIMEOUT_MS": "1000",
                                        "RJ_PROBE_RECENT_SUCCESS_MS": "0"})

    def healthy():
        return {r["index"]: r["healthy"] for r in rj.health()[1]["replicas"]}

    poll(lambda: all(healthy().values()), timeout=15, what="every rank in service")
    dp4.admin("/sim/fault", {"pause": True, "rank": 1})  # its /health (the engine's) still answers
    try:
        poll(lambda: healthy() == {0: True, 1: False, 2: True, 3: True}, timeout=10, what="rank 1 fenced alone")
        assert http_request(dp4.port, "GET", "/health").status == 200
        for i in range(4):  # the other ranks serve
            r = through(rj, chat(f"probe-{i}"), timeout=10)
            assert r.status == 200 and r.header("X-Ramjet-Upstream") != "1"
        m = rj.metrics()
        assert m.get("ramjet_upstream_probe_failures_total", upstream="1", reason="timeout") >= 1
        assert (m.get("ramjet_upstream_probe_failures_total", upstream="0", reason="timeout") or 0) == 0
    finally:
        dp4.admin("/sim/fault", {"pause": False, "rank": 1})
    poll(lambda: all(healthy().values()), timeout=15, what="rank 1 readmitted")


def test_auto_ranks_are_the_ones_the_engine_reports(dp4, ramjet_factory):
    """RJ_UPSTREAM_DP_SIZE=auto: the engine is one target until its /metrics (the engine scrape)
    shows its ranks' series (engine="0".."3"); then its four ranks join together (each with its
    own KV source, discovered) and the single target leaves; requests are pinned per rank."""
    rj = ramjet_factory([dp4.url], env={"RJ_UPSTREAM_DP_SIZE": "auto",
                                        "RJ_KV_EVENT_LIVE_ENDPOINTS": "discover",
                                        "RJ_KV_EVENT_TIMEOUT_MS": "2000",
                                        "RJ_PROBE_INTERVAL_MS": "200",
                                        "RJ_ENGINE_SCRAPE_INTERVAL_MS": "200"})
    rj.wait_health(lambda c, j: sorted(x.get("dp_rank", -1) for x in j["replicas"]) == list(range(RANKS)) and
                   all(x["healthy"] and x.get("kv_trusted") for x in j["replicas"]),
                   20, "the four reported ranks joined, healthy and trusted")
    ordinal_rank = {x["index"]: x["dp_rank"] for x in rj.health()[1]["replicas"]}
    assert "reports 4 data-parallel ranks (was 1)" in rj.output()
    assert rj.metrics().get("ramjet_upstream_membership_changes_total", change="joined") == RANKS
    before = served(dp4)
    placed = {k: 0 for k in range(RANKS)}
    for i in range(8):
        r = through(rj, chat(f"auto-{i}"))
        assert r.status == 200, r.body
        placed[ordinal_rank[int(r.header("X-Ramjet-Upstream"))]] += 1
    after = served(dp4)
    assert {k: after[k] - before[k] for k in range(RANKS)} == placed
    assert sum(1 for n in placed.values() if n) >= 2, placed
