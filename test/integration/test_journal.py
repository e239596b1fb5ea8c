"""The route decision journal end to end: RJ_ROUTE_JOURNAL writes a start and a finish record per
routed request, never prompt bytes, completions or hosts, and ramjet-route-replay recomputes
every recorded decision."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from support.e2e import open_stream
from support.ramjet_proc import http_request
from support.sim_proc import SimProc

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
        assert s["v"] == 10 and s["policy"] == "prefix" and s["endpoint"] == "chat"
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
