"""The dashboard's HTTP side on the metrics listener, end to end with ramjet-sim engines: the
embedded UI files (redirects, Content-Type, ETag/304), the JSON API (state, series, decisions)
with no hosts or prompt text in it, and the SSE stream (a `state` event a second, a bounded
number of clients, `event: bye` and a clean end of the body on shutdown). With KV-event engines:
each engine's index state in the state answer (trusted, fenced, none) and exact routing's outcome
and predicted tokens per decision. The browser test (test/browser) drives the pages themselves."""

from __future__ import annotations

import json
import re
import time

import pytest

from support.ramjet_proc import RawClient, http_request, poll
from support.sim_proc import SimProc
from test_kv_events import settle

PROMPT = "The secret system prompt of the dashboard test. " * 120  # three 2 KiB blocks
ENV = {"RJ_UPSTREAM_PROFILES": "mtp,standard", "RJ_ENGINE_SCRAPE_INTERVAL_MS": "500"}


@pytest.fixture
def sims():
    made = [SimProc("--speed", "50", "--gpus", "2", "--enable-prompt-tokens-details"),
            SimProc("--speed", "50", "--gpus", "2", "--enable-prompt-tokens-details")]
    yield made
    for s in made:
        s.stop()


def _chat(rj, n):
    body = {"model": "ramjet-sim", "stream": True, "max_tokens": 16, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": PROMPT}, {"role": "user", "content": f"q{n}"}]}
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"})
    assert r.status == 200, r


def _get(rj, path, headers=None):
    return http_request(rj.metrics_port, "GET", path, headers=headers)


def test_ui_files_redirects_and_etag(sims, ramjet_factory):
    rj = ramjet_factory(sims, env=ENV)
    for path in ("/", "/ui"):
        r = _get(rj, path)
        assert r.status == 302 and r.header("Location") == "/ui/", r
    r = _get(rj, "/ui/")
    assert r.status == 200 and r.header("Content-Type").startswith("text/html"), r
    assert b"app.js" in r.body and not re.search(rb"(src|href)=[\"']?(https?:)?//", r.body), "nothing external"
    etag = r.header("ETag")
    assert etag and etag.startswith('"') and r.header("Cache-Control") == "no-cache"
    r304 = _get(rj, "/ui/", {"If-None-Match": etag})
    assert r304.status == 304 and r304.body == b""
    js = _get(rj, "/ui/app.js")
    assert js.status == 200 and js.header("Content-Type").startswith("text/javascript")
    assert js.header("ETag") != etag
    assert _get(rj, "/ui/style.css").header("Content-Type").startswith("text/css")
    assert _get(rj, "/ui/nope.js").status == 404
    assert _get(rj, "/metrics").status == 200  # the listener's other routes are untouched


def test_api_state_series_decisions(sims, ramjet_factory):
    rj = ramjet_factory(sims, env=ENV)
    for n in range(6):
        _chat(rj, n)

    def state():
        s = json.loads(_get(rj, "/api/v1/state").body)
        ok = s.get("t") and len(s["gpus"]) == 4 and all(e["scrape_ok"] for e in s["engines"])
        return s if ok and s["tiles"]["completion_tokens"] > 0 else None

    s = poll(state, timeout=10, what="a state with the traffic and the engine scrape in it")
    assert s["total"] == 2 and s["healthy"] == 2 and s["fail_open"] is False
    assert [(e["ordinal"], e["profile"], e["state"]) for e in s["engines"]] == \
        [(0, "mtp", "healthy"), (1, "standard", "healthy")]
    assert sorted((g["engine"], g["device"]) for g in s["gpus"]) == [(0, "0"), (0, "1"), (1, "0"), (1, "1")]
    assert s["tiles"]["ttft_p95"] is not None and len(s["hours"]) == 24
    assert sum(h["tokens"] for h in s["hours"]) > 0

    series = json.loads(_get(rj, "/api/v1/series?window=3").body)
    assert 1 <= len(series["t"]) <= 3 and len(series["gen_tps"]) == len(series["t"])
    assert len(series["engines"]) == 2 and len(series["engines"][1]["kv_usage"]) == len(series["t"])
    assert len(series["gpus"]) == 4

    d = json.loads(_get(rj, "/api/v1/decisions?n=4").body)
    assert d["total"] == 6 and d["capacity"] == 200 and len(d["decisions"]) == 4
    assert [x["seq"] for x in d["decisions"]] == [6, 5, 4, 3]
    first = d["decisions"][0]
    assert first["endpoint"] == "chat" and first["policy"] == "prefix" and first["chosen"] in (0, 1)
    assert set(first["candidates"][0]) == {"ordinal", "eligible", "failing", "overlap", "single_flight",
                                           "session_bonus", "affinity", "load_units", "request_load_units",
                                           "foreign_load_units", "score", "profile", "adapter", "decode_charge"}
    # The repeated system prompt is held by the engine that served it: overlap shows in the terms.
    assert any(c["overlap"] > 0 for x in d["decisions"] for c in x["candidates"])

    for path in ("/api/v1/state", "/api/v1/series", "/api/v1/decisions?n=200"):
        body = _get(rj, path).body
        assert b"127.0.0.1" not in body and b"secret system prompt" not in body, path
        assert _get(rj, path).header("Cache-Control") == "no-store"


# ----------------------------------------------------------------------------- exact routing
KV_TOPIC = "kv"


def _kv_sim() -> SimProc:
    """An engine that publishes vLLM's KV events (live and replay on ports of its own)."""
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": KV_TOPIC, "endpoint": "tcp://*:0",
              "replay_endpoint": "tcp://*:0", "buffer_steps": 1000}
    return SimProc("--speed", "50", "--enable-prompt-tokens-details", "--kv-events-config", json.dumps(config))


def _local(endpoint: str) -> str:
    return "tcp://127.0.0.1:" + endpoint.rsplit(":", 1)[1] if endpoint != "-" else "-"


def _kv_env(sims) -> dict:
    return {"RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join(_local(s.kv_endpoint) for s in sims),
            "RJ_KV_EVENT_REPLAY_ENDPOINTS": ",".join(_local(s.kv_replay) for s in sims),
            "RJ_KV_EVENT_TOPIC": KV_TOPIC, "RJ_KV_EVENT_TIMEOUT_MS": "2000", "RJ_PROBE_INTERVAL_MS": "200"}


def _kv_states(rj):
    return [e["kv_index"] for e in json.loads(_get(rj, "/api/v1/state").body).get("engines", [])]


def _long_chat(rj, k: int):
    """A ~40 KB prompt of its own (over RJ_EXACT_ROUTE_MIN_BYTES): exact routing tokenizes it."""
    system = f"Dashboard agent {k}. " + " ".join(f"rule {k}.{i}: keep invariant {i * 7 % 13}." for i in range(1400))
    body = {"model": "ramjet-sim", "max_tokens": 2,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "first question"}]}
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200, r.body
    return r


def test_kv_index_state_per_engine_and_exact_outcomes_per_decision(ramjet_factory):
    sims = [_kv_sim(), _kv_sim()]
    try:
        rj = ramjet_factory(sims, env=_kv_env(sims))
        rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every index trusted")
        poll(lambda: _kv_states(rj) == ["trusted", "trusted"], timeout=5, what="the dashboard shows both trusted")

        # The same long prompt twice: the second is placed on the engine that now holds it, and its
        # decision lists every candidate's predicted resident tokens.
        _long_chat(rj, 1)
        # The engine publishes the prompt's blocks after it answered, in several batches: wait until
        # they are indexed and no batch is still being applied (a lookup that meets the index
        # mid-write on a loaded machine answers busy, by design).
        poll(lambda: (rj.metrics().sum("ramjet_kv_index_resident_blocks") or 0) > 100, timeout=5,
             what="the first prompt's blocks in ramjet's index")
        settle(rj)
        r = _long_chat(rj, 1)
        receipt = r.header("X-Ramjet-Route")
        assert receipt and receipt.startswith("exact; predicted_cached_tokens="), receipt
        predicted = int(receipt.rsplit("=", 1)[1])
        d = json.loads(_get(rj, "/api/v1/decisions?n=1").body)["decisions"][0]
        assert d["exact"] == "exact" and d["exact_block_size"] > 0, d
        assert d["chosen"] == int(r.header("X-Ramjet-Upstream"))
        tokens = {c["ordinal"]: c["exact_tokens"] for c in d["candidates"]}
        assert set(tokens) == {0, 1} and tokens[d["chosen"]] == predicted > 8000, (tokens, predicted)
        assert tokens[1 - d["chosen"]] == 0, tokens

        # Fence engine 1's index (a sequence gap its replay cannot fill): the engine stays healthy,
        # its index is shown fenced, and the next long request is placed on engine 0's exact
        # overlaps and engine 1's fingerprint estimate (no exact tokens shown for it).
        sims[1].admin("/sim/fault", {"kv_skip": 3})
        assert sims[1].request("POST", "/v1/chat/completions", {
            "model": "ramjet-sim", "max_tokens": 2,
            "messages": [{"role": "user", "content": "straight to the engine: " + "detail 7 " * 300}]}).status == 200
        poll(lambda: _kv_states(rj) == ["trusted", "fenced"], timeout=10, what="engine 1's index fenced")
        state = json.loads(_get(rj, "/api/v1/state").body)
        assert [e["state"] for e in state["engines"]] == ["healthy", "healthy"], "a fenced index, not a fenced engine"
        r = _long_chat(rj, 2)
        assert r.header("X-Ramjet-Route").startswith("exact_partial"), r.header("X-Ramjet-Route")
        d = json.loads(_get(rj, "/api/v1/decisions?n=1").body)["decisions"][0]
        assert d["exact"] == "exact_partial" and d["exact_block_size"] > 0, d
        tokens = {c["ordinal"]: c.get("exact_tokens") for c in d["candidates"]}
        assert tokens[0] is not None and tokens[1] is None, d["candidates"]

        for path in ("/api/v1/state", "/api/v1/decisions?n=200"):
            body = _get(rj, path).body
            assert b"127.0.0.1" not in body and b"tcp://" not in body and b"Dashboard agent" not in body, path
    finally:
        for s in sims:
            s.stop()


def test_an_engine_without_kv_events_is_shown_as_such(ramjet_factory, sims):
    with_events = _kv_sim()
    try:
        engines = [with_events, sims[0]]  # sims[0] publishes nothing: '-' in the endpoint lists
        rj = ramjet_factory(engines, env=_kv_env(engines))
        poll(lambda: _kv_states(rj) == ["trusted", "none"], timeout=10, what="trusted and none")
    finally:
        with_events.stop()


def test_without_kv_events_the_dashboard_shows_no_index_state(sims, ramjet_factory):
    rj = ramjet_factory(sims, env=ENV)
    poll(lambda: _kv_states(rj) == [None, None], timeout=5, what="a state without index states")
    _chat(rj, 0)
    d = poll(lambda: json.loads(_get(rj, "/api/v1/decisions?n=1").body)["decisions"], timeout=5, what="a decision")
    assert d[0]["exact"] is None and all("exact_tokens" not in c for c in d[0]["candidates"])


def _open_stream(rj):
    c = RawClient(rj.metrics_port, timeout=5)
    c.send_request("GET", "/api/v1/stream")
    return c, c.read_head()


def test_sse_stream_bounded_and_ends_on_shutdown(sims, ramjet_factory):
    rj = ramjet_factory(sims, env=ENV)
    c, status = _open_stream(rj)
    assert status == 200 and c.header("Content-Type") == "text/event-stream"
    got = b""
    t0 = time.monotonic()
    for _, piece in c.chunks():
        got += piece
        if got.count(b"event: state\n") >= 3:
            break
    assert time.monotonic() - t0 < 4, "a state event about every second"
    assert b"retry: 2000" in got and b"data: {\"t\":" in got

    # 16 clients at most: the 17th is told to come back later; a freed slot is reusable.
    others = [_open_stream(rj) for _ in range(15)]
    assert all(s == 200 for _, s in others)
    extra, status = _open_stream(rj)
    assert status == 503 and extra.header("Retry-After") == "5"
    extra.close()
    others[0][0].close()
    poll(lambda: _open_stream(rj)[1] == 200, timeout=5, what="a slot after a client left")
    for o, _ in others[1:]:
        o.close()

    # SIGTERM: the stream says goodbye and its chunked body ends; ramjet exits 0.
    rj.terminate()
    rest = b"".join(p for _, p in c.chunks())  # returns at the terminating chunk
    assert b"event: bye" in rest
    assert rj.wait_exit(10) == 0
