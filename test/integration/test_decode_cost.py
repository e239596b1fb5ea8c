"""The decode profile as a cost (issue 29, RJ_ROUTE_DECODE_COST).

A speculative (MTP) engine decodes short batches faster than a standard one. With
RJ_ROUTE_DECODE_COST=on ramjet learns each engine's time per output token from the streamed
responses it relays (no declared profiles) and charges each candidate the time the request's
expected output would take there beyond the fastest engine's, in blocks of prefill time: the unit
of the cache credit. So a request whose long output would decode much faster elsewhere leaves the
engine holding its prefix, and a short one stays with its cache.

Two ramjet-sim engines in real time: ordinal 0 `tiny` (standard decoding), ordinal 1 `tiny-mtp`
(two draft tokens, about 1.7x the tokens per second of one stream).
"""

from __future__ import annotations

import json

import pytest

from support.e2e import CHAT
from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc


@pytest.fixture
def fleet():
    made = [SimProc("--preset", "tiny", "--speed", "1"), SimProc("--preset", "tiny-mtp", "--speed", "1")]
    yield made
    for s in made:
        s.stop()


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def chat(rj, messages: list, max_tokens: int) -> tuple[str, bytes]:
    body = {"model": "ramjet-sim", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
            "messages": messages}
    r = http_request(rj.api_port, "POST", CHAT, json.dumps(body).encode(), {"Content-Type": "application/json"},
                     timeout=60)
    assert r.status == 200, r
    return r.header("X-Ramjet-Upstream"), r.body


def test_long_outputs_leave_their_cache_for_the_faster_decoder(fleet, ramjet_factory, tmp_path):
    journal = tmp_path / "route.jsonl"
    rj = ramjet_factory([s.url for s in fleet], env={
        "RJ_ROUTE_DECODE_COST": "true", "RJ_ROUTE_JOURNAL": "true", "RJ_ROUTE_JOURNAL_FILE": str(journal)})

    # A long prompt (about 40 KiB: 20 fingerprint blocks), first while nothing is learned: cold and
    # tied, it goes to ordinal 0, the standard engine, which holds its prefix from then on.
    system = {"role": "system", "content": words("sys", 6000)}
    engine, _ = chat(rj, [system, {"role": "user", "content": "first"}], 16)
    assert engine == "0"

    # Distinct cold prompts take turns: both engines' speeds are measured (8 responses each).
    for i in range(18):
        chat(rj, [{"role": "user", "content": words(f"w{i}x", 1200)}], 32)
    m = rj.metrics()
    std = m.get("ramjet_route_decode_seconds_per_token", upstream="0")
    mtp = m.get("ramjet_route_decode_seconds_per_token", upstream="1")
    assert std is not None and mtp is not None, "both engines have a fit"
    assert mtp < 0.8 * std, (mtp, std)
    assert m.get("ramjet_route_decode_seconds_per_token_per_request", upstream="1") is not None
    assert m.get("ramjet_route_decode_output_share") == pytest.approx(1.0)

    # A short answer stays with its cache: 16 tokens decode slower there by less than the prefill
    # of the 20 blocks it holds.
    engine, _ = chat(rj, [system, {"role": "user", "content": "short"}], 16)
    assert engine == "0"
    # A long answer goes to the faster decoder although its prefix is elsewhere.
    engine, _ = chat(rj, [system, {"role": "user", "content": "long"}], 2000)
    assert engine == "1"

    def starts():
        return [json.loads(l) for l in open(journal) if '"event":"start"' in l]
    poll(lambda: len(starts()) >= 21, 10, what="the journal has every decision")
    short, long = starts()[-2], starts()[-1]
    by = {c["upstream"]: c for c in short["candidates"]}
    assert short["outcome"] == "overlap", short
    assert by[0]["overlap_blocks"] >= 15 and 0 < by[0]["decode_charge_blocks"] < by[0]["affinity_blocks"], short
    assert by[1]["decode_charge_blocks"] == 0
    by = {c["upstream"]: c for c in long["candidates"]}
    assert long["outcome"] == "decode", long
    assert by[0]["decode_charge_blocks"] > by[0]["affinity_blocks"], long
    assert by[1]["decode_charge_blocks"] == 0
    assert rj.metrics().get("ramjet_route_decisions_total", outcome="decode") >= 1


def test_off_by_default_nothing_is_charged(fleet, ramjet_factory):
    rj = ramjet_factory([s.url for s in fleet])
    for i in range(18):
        chat(rj, [{"role": "user", "content": words(f"o{i}x", 1200)}], 32)
    m = rj.metrics()
    assert m.get("ramjet_route_decode_seconds_per_token") is None
    assert not m.get("ramjet_route_decisions_total", outcome="decode")
