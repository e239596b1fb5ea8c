"""Exact routing is never slower than the fingerprints because of tokenization.

A request waits for its exact-routing tokens at most RJ_EXACT_ROUTE_BUDGET_SHARE of its expected
cold prefill time, learned from the responses ramjet relays (request/stream/tokenize_budget.h).
Here an engine's /tokenize answers late (the sim's tokenize_delay_ms fault, an API server too busy
to answer at once): requests go out on the fingerprints within their budget instead of waiting
for it, counted as tokenize_timeout; when /tokenize is quick again they are placed exactly.
"""

from __future__ import annotations

import json
import time

from support.ramjet_proc import http_request
from support.sim_proc import SimProc, kv_event_env, kv_events_config


def sim() -> SimProc:
    kv = kv_events_config(buffer_steps=1000)
    # Real time (speed 1, the tiny preset): a ~10,000-token prompt takes a measurable prefill.
    return SimProc("--speed", "1", "--enable-prompt-tokens-details", "--kv-events-config", kv)



def prompt(k: int) -> dict:
    system = f"Agent {k} manual. " + " ".join(f"rule {k}.{i}: keep invariant {i % 13}." for i in range(1200))
    return {"model": "ramjet-sim", "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "go"}]}


def send(rj, body: dict):
    t0 = time.monotonic()
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"}, timeout=60)
    assert r.status == 200, r.body
    return r, time.monotonic() - t0


def test_a_slow_tokenize_never_delays_a_request_beyond_its_budget(ramjet_factory):
    sims = [sim(), sim()]
    try:
        rj = ramjet_factory([s.url for s in sims], env={
            **kv_event_env(sims),
            "RJ_EXACT_ROUTE_MIN_BYTES": "4096",
            "RJ_EXACT_ROUTE_TIMEOUT_MS": "5000",
            "RJ_EXACT_ROUTE_BUDGET_SHARE": "2",  # a budget a quick /tokenize fits in, under load too
        })
        rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every index trusted")
        # Before anything is learned the budget is the timeout: these are placed exactly, and teach
        # ramjet the fleet's prefill speed.
        for k in range(4):
            r, _ = send(rj, prompt(k))
            assert (r.header("X-Ramjet-Route") or "").startswith("exact"), r.header("X-Ramjet-Route")
        m = rj.metrics()
        per_token = m.get("ramjet_exact_tokenize_budget_prefill_seconds_per_token")
        per_byte = m.get("ramjet_exact_tokenize_budget_tokens_per_byte")
        assert per_token > 0 and per_byte > 0, (per_token, per_byte)
        body = json.dumps(prompt(100)).encode()
        budget_s = 2 * len(body) * per_byte * per_token
        assert budget_s < 2.0, f"the sims' prefill is too slow for this test: budget {budget_s:.2f} s"
        # Every engine's /tokenize now answers 3 s late: far past the budget, inside the timeout.
        for s in sims:
            s.admin("/sim/fault", {"tokenize_delay_ms": 3000})
        timeouts = m.get("ramjet_exact_route_total", outcome="tokenize_timeout") or 0
        took = []
        for k in range(100, 104):
            r, seconds = send(rj, prompt(k))
            assert r.header("X-Ramjet-Route") == "tokenize_timeout", r.header("X-Ramjet-Route")
            took.append(seconds)
        assert rj.metrics().get("ramjet_exact_route_total", outcome="tokenize_timeout") == timeouts + 4
        # Waited at most the budget (as learned now) for the tokens, never the 3 s.
        print(f"\nlearned {per_token * 1e6:.2f} us/token, {per_byte:.3f} tokens/byte: budget {budget_s * 1000:.1f} ms; "
              f"requests took {[round(t * 1000) for t in took]} ms with /tokenize 3 s late")
        assert max(took) < 2.5, took
        # Quick again: placed exactly.
        for s in sims:
            s.admin("/sim/fault", {"tokenize_delay_ms": 0})
        r, _ = send(rj, prompt(200))
        assert (r.header("X-Ramjet-Route") or "").startswith("exact"), r.header("X-Ramjet-Route")
    finally:
        for s in sims:
            s.stop()
