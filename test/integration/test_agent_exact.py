"""Exact routing for the agent APIs: Responses (/v1/responses) and Anthropic Messages
(/v1/messages) requests placed on the engines' KV-event indexes.

ramjet turns each request into the chat request vLLM renders for it
(src/render/template/api_conversion) and tokenizes that (locally, or by the engine's /tokenize in
chat form); ramjet-sim serves the same request on its own endpoint with its own port of vLLM's
conversion (sim/server/agent_convert), and its KV events carry the token blocks of *that* rendering.
A prediction that equals the engine's prefix-cache hit therefore shows the two independent
conversions produce the same tokens, over long Codex- and Claude-Code-shaped conversations (tools,
reasoning, tool calls and results)."""

from __future__ import annotations

import json

from support import agent_conversations
from support.ramjet_proc import http_request
from test_exact_local import qwen_kv_sim, start as start_local
from test_kv_events import TOPIC, local, settle
from test_tokenizer import MODEL_ID, wait_attested

def manual(k: int) -> str:
    return f"Agent {k} tool manual. " + " ".join(f"rule {k}.{i}: keep the invariant {i * 7 % 13}." for i in range(1400))


def responses_conv(k: int, *turns: str) -> dict:
    return agent_conversations.responses_conv(MODEL_ID, manual(k), k, turns)


def messages_conv(k: int, billing: str, *turns: str) -> dict:
    return agent_conversations.messages_conv(MODEL_ID, manual(k), k, billing, turns)


PATHS = {"responses": "/v1/responses", "messages": "/v1/messages"}


def hits(sim) -> int:
    r = sim.request("GET", "/sim/stats")
    assert r.status == 200, r.body
    return json.loads(r.body)["prefix_cache_hits"]


def post(rj, api: str, body: dict):
    r = http_request(rj.api_port, "POST", PATHS[api], json.dumps(body).encode(),
                     {"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200, r.body
    return r


def warm(rj, sim, api: str, body: dict) -> None:
    """The request straight to one engine's own endpoint (the sim's conversion), its blocks applied."""
    r = sim.request("POST", PATHS[api], body)
    assert r.status == 200, r.body
    settle(rj)


def placed_exactly(rj, sims, engine: int, api: str, body: dict) -> int:
    """Sends `body` through ramjet; it must land on `engine` with an exact receipt whose prediction
    is that engine's prefix-cache hit for it (less the block a fully cached prompt recomputes).
    Returns the predicted tokens."""
    before = hits(sims[engine])
    r = post(rj, api, body)
    settle(rj)
    assert r.header("X-Ramjet-Upstream") == str(engine), f"{api}: placed on {r.header('X-Ramjet-Upstream')}"
    receipt = r.header("X-Ramjet-Route")
    assert receipt and receipt.startswith("exact; predicted_cached_tokens="), receipt
    predicted = int(receipt.split(";")[1].split("=")[1])
    cached = hits(sims[engine]) - before
    assert cached > 5000 and predicted - 16 <= cached <= predicted, (api, predicted, cached)
    return predicted


def run_conversations(rj, sims) -> None:
    for api in ("responses", "messages"):
        for k in range(2):
            first = (responses_conv(k, "Fix the failing test.") if api == "responses"
                     else messages_conv(k, f"warm{k}", "Fix the failing test."))
            warm(rj, sims[1], api, first)
            # The same conversation through ramjet (for Messages with another billing header).
            again = first if api == "responses" else messages_conv(k, f"cc{k}", "Fix the failing test.")
            placed_exactly(rj, sims, 1, api, again)
            # The next turn follows its conversation, its earlier turns cached.
            follow = (responses_conv(k, "Fix the failing test.", "Now add a test.") if api == "responses"
                      else messages_conv(k, f"cc{k}b", "Fix the failing test.", "Now add a test."))
            placed_exactly(rj, sims, 1, api, follow)


def test_local_tokens_of_agent_requests_are_the_engines(tmp_path, ramjet_factory):
    sims = [qwen_kv_sim() for _ in range(3)]
    try:
        rj = start_local(tmp_path, ramjet_factory, sims, RJ_EXACT_ROUTE_TIMEOUT_MS="5000")
        wait_attested(rj, [0, 1, 2])
        run_conversations(rj, sims)
        m = rj.metrics()
        assert m.get("ramjet_exact_route_total", outcome="exact") >= 8
        assert m.sum("ramjet_exact_predictions_total", result="miss") == 0
        # No engine was asked for tokens.
        assert m.sum("ramjet_tokenizer_shadow_total", backend="remote") == 0
    finally:
        for s in sims:
            s.stop()


def test_remote_tokens_of_agent_requests_are_the_engines(ramjet_factory):
    sims = [qwen_kv_sim() for _ in range(3)]
    try:
        rj = ramjet_factory([s.url for s in sims], env={
            "RJ_EXACT_TOKENS": "remote", "RJ_AFFINITY": "prefix", "RJ_EXACT_ROUTE_TIMEOUT_MS": "5000",
            "RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join(local(s.kv_endpoint) for s in sims),
            "RJ_KV_EVENT_REPLAY_ENDPOINTS": ",".join(local(s.kv_replay) for s in sims),
            "RJ_KV_EVENT_TOPIC": TOPIC})
        rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every engine's index trusted")
        run_conversations(rj, sims)
        assert rj.metrics().get("ramjet_exact_route_total", outcome="exact") >= 8
    finally:
        for s in sims:
            s.stop()


def test_requests_only_the_engine_can_render_use_the_fingerprints(tmp_path, ramjet_factory):
    sims = [qwen_kv_sim() for _ in range(2)]
    try:
        rj = start_local(tmp_path, ramjet_factory, sims, RJ_EXACT_ROUTE_TIMEOUT_MS="5000")
        wait_attested(rj, [0, 1])
        body = responses_conv(5, "Fix the failing test.")
        body["input"][0]["content"].append({"type": "input_image", "image_url": "data:image/png;base64,AAAA"})
        r = http_request(rj.api_port, "POST", "/v1/responses", json.dumps(body).encode(),
                         {"Content-Type": "application/json"}, timeout=30)
        assert r.header("X-Ramjet-Route") == "ineligible", r.header("X-Ramjet-Route")
        body = responses_conv(6, "Fix the failing test.")
        body["previous_response_id"] = "resp_0123"
        r = http_request(rj.api_port, "POST", "/v1/responses", json.dumps(body).encode(),
                         {"Content-Type": "application/json"}, timeout=30)
        assert r.status == 404, r.body  # the engine keeps no stored responses (vLLM's default)
        assert r.header("X-Ramjet-Route") == "ineligible", r.header("X-Ramjet-Route")
        assert rj.metrics().get("ramjet_exact_route_total", outcome="ineligible") >= 2
    finally:
        for s in sims:
            s.stop()
