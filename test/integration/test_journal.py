"""The route decision journal end to end: RJ_ROUTE_JOURNAL writes a start and a finish record per
routed request, never prompt bytes, completions or hosts, and ramjet-route-replay recomputes
every recorded decision. With exact routing, each start record says how it answered and how many
prompt tokens it predicted the chosen engine holds."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from support.e2e import open_stream
from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc
from test_kv_events import settle

MARKER = "PROMPT-MARKER-7f3a9c"


@pytest.fixture
def sims():
    made = [SimProc("--speed", "50"), SimProc("--speed", "50"), SimProc("--speed", "50")]
    yield made
    for s in made:
        s.stop()


def _chat(rj, system: str, user: str, stream: bool = False, max_tokens: int = 8):
    body = {"model": "ramjet-sim", "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"})
    assert r.status == 200, r
    return r


def _records(path: str, want: int, timeout: float = 5.0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        lines = open(path, encoding="utf-8").read().splitlines() if os.path.exists(path) else []
        if len(lines) >= want or time.monotonic() > deadline:
            return [json.loads(x) for x in lines]
        time.sleep(0.05)


def test_journal_records_every_decision_without_prompt_bytes_and_replays_exactly(sims, ramjet_factory, tmp_path):
    journal = str(tmp_path / "route.jsonl")
    rj = ramjet_factory(sims, env={"RJ_ROUTE_JOURNAL": "true", "RJ_ROUTE_JOURNAL_FILE": journal,
                                   "RJ_UPSTREAM_PROFILES": "mtp,standard,standard"})
    system = (MARKER + " you are a careful assistant. ") * 400  # ~16 KiB, several blocks
    n = 0
    for app in range(3):
        for turn in range(3):
            r = _chat(rj, f"app {app} " + system, f"{MARKER} question {turn} for sims on 127.0.0.1",
                      stream=(turn % 2 == 1), max_tokens=64 if turn == 0 else 600)
            n += 1
    recs = _records(journal, 2 * n)
    starts = [r for r in recs if r["event"] == "start"]
    finishes = [r for r in recs if r["event"] == "finish"]
    assert len(starts) == n and len(finishes) == n, (len(starts), len(finishes))
    assert sorted(r["seq"] for r in starts) == sorted(r["seq"] for r in finishes) == list(range(1, n + 1))
    for s in starts:
        assert s["v"] == 18 and s["policy"] == "prefix" and s["endpoint"] == "chat"
        assert s["exact_outcome"] is None and s["predicted_cached_tokens"] is None, "no KV events: not asked"
        assert len(s["candidates"]) == 3
        assert s["chosen"] == s["candidates"][0]["upstream"]
    for f in finishes:
        assert f["result"] == "complete" and f["status"] == 200
    # Each app's first request is cold (rotation), its later turns follow the cached prefix.
    outcomes = [s["outcome"] for s in sorted(starts, key=lambda s: s["seq"])]
    assert outcomes.count("overlap") >= 6, outcomes
    # The short first turn of each app asked for <= 256 tokens: it preferred the MTP engine.
    assert all(s["wanted_profile"] == "mtp" for s in starts if s["output_limit"] == "1_64")

    # Privacy: no prompt or completion text, no hosts or ports of the engines.
    text = open(journal, encoding="utf-8").read()
    assert MARKER not in text and "careful assistant" not in text
    assert "127.0.0.1" not in text and "http://" not in text
    for s in sims:
        assert str(s.port) not in text.replace('"unix_ms":', ""), "an engine port leaked into the journal"
    assert MARKER not in rj.output()

    # Replay with the recorded parameters reproduces every decision.
    replay = os.environ.get("REPLAY_BIN")
    if not replay:
        pytest.skip("ramjet-route-replay not built")
    out = subprocess.run([replay, "--json", "--strict", journal], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    base = json.loads(out.stdout)["baseline"]
    assert base["replayed"] == n and base["agree"] == n and base["disagree_seqs"] == [], base


def test_a_disconnected_stream_is_journalled_as_such(sims, ramjet_factory, tmp_path):
    journal = str(tmp_path / "route.jsonl")
    rj = ramjet_factory(sims[:1], env={"RJ_ROUTE_JOURNAL": "true", "RJ_ROUTE_JOURNAL_FILE": journal})
    body = {"model": "ramjet-sim", "stream": True, "max_tokens": 4000,
            "messages": [{"role": "user", "content": "a long answer please"}]}
    s = open_stream(rj.api_port, "/v1/chat/completions", body)
    next(s.chunks())  # the first SSE bytes arrived: the stream is live
    s.s.close()
    recs = _records(journal, 2)
    fin = [r for r in recs if r["event"] == "finish"]
    assert fin and fin[0]["result"] == "client_disconnect", recs


def _kv_sim() -> SimProc:
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv", "endpoint": "tcp://*:0",
              "replay_endpoint": "tcp://*:0", "buffer_steps": 1000}
    return SimProc("--speed", "50", "--enable-prompt-tokens-details", "--kv-events-config", json.dumps(config))


def _local(endpoint: str) -> str:
    return "tcp://127.0.0.1:" + endpoint.rsplit(":", 1)[1]


def test_exact_routing_journals_its_outcome_and_the_predicted_tokens(ramjet_factory, tmp_path):
    sims = [_kv_sim(), _kv_sim()]
    try:
        journal = str(tmp_path / "route.jsonl")
        rj = ramjet_factory(sims, env={
            "RJ_ROUTE_JOURNAL": "true", "RJ_ROUTE_JOURNAL_FILE": journal, "RJ_PROBE_INTERVAL_MS": "200",
            "RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join(_local(s.kv_endpoint) for s in sims),
            "RJ_KV_EVENT_REPLAY_ENDPOINTS": ",".join(_local(s.kv_replay) for s in sims),
            "RJ_KV_EVENT_TOPIC": "kv", "RJ_KV_EVENT_TIMEOUT_MS": "2000"})
        rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every index trusted")
        # A ~40 KB prompt of its own (exact routing tokenizes it), twice; then a small request.
        system = MARKER + " " + " ".join(f"rule {i}: keep invariant {i * 7 % 13}." for i in range(1400))
        receipts = [_chat(rj, system, "first question", max_tokens=2).header("X-Ramjet-Route")]
        # The engine publishes the prompt's blocks after it answered: wait until they are indexed.
        poll(lambda: (rj.metrics().sum("ramjet_kv_index_resident_blocks") or 0) > 100, timeout=5,
             what="the first prompt's blocks in ramjet's index")
        settle(rj)  # every batch applied: a lookup meeting the index mid-write would answer busy
        receipts.append(_chat(rj, system, "first question", max_tokens=2).header("X-Ramjet-Route"))
        small = _chat(rj, "short", "hi", max_tokens=2).header("X-Ramjet-Route")
        assert small == "ineligible", small
        recs = _records(journal, 6)
        starts = sorted((r for r in recs if r["event"] == "start"), key=lambda r: r["seq"])
        finishes = {r["seq"]: r for r in recs if r["event"] == "finish"}
        assert len(starts) == 3 and len(finishes) == 3, recs
        for s, receipt in zip(starts[:2], receipts):
            assert s["v"] == 18 and s["exact_outcome"] == "exact", s
            assert receipt == f"exact; predicted_cached_tokens={s['predicted_cached_tokens']}", (receipt, s)
        # The second placement predicted the prompt resident where the first left it, and the
        # engine's own count agrees (less the block a fully cached prompt recomputes).
        second = starts[1]
        predicted, cached = second["predicted_cached_tokens"], finishes[second["seq"]]["cached_tokens"]
        assert cached > 8000 and predicted - 16 <= cached <= predicted, (predicted, cached)
        assert starts[2]["exact_outcome"] == "ineligible" and starts[2]["predicted_cached_tokens"] is None

        text = open(journal, encoding="utf-8").read()
        assert MARKER not in text and "rule 1" not in text and "tcp://" not in text and "127.0.0.1" not in text
        replay = os.environ.get("REPLAY_BIN")
        if not replay:
            pytest.skip("ramjet-route-replay not built")
        out = subprocess.run([replay, "--json", "--strict", journal], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        base = json.loads(out.stdout)["baseline"]
        assert base["replayed"] == 3 and base["agree"] == 3, base
    finally:
        for s in sims:
            s.stop()
