"""Two real vLLM engines serving different models behind one ramjet (issue 28).

Engine 0 of the session serves `qwen3`; this module starts one more engine of the same weights
served as `qwen3-other` (`--served-model-name`; to vLLM and to ramjet another model: its own
/v1/models card, its own name in every response). ramjet learns both from the engines' own
GET /v1/models, answers /v1/models with both cards merged, routes each model only to its engine,
and answers a model neither serves with vLLM's own 404 before dialing either."""

from __future__ import annotations

import json

import pytest

from conftest import start_fixture_engines
from support import vllm_proc
from support.ramjet_proc import http_request, poll
from support.vllm_proc import SERVED_NAME

OTHER = "qwen3-other"


@pytest.fixture(scope="module")
def other(request, vllm_model, vllm_logs):
    (e,) = start_fixture_engines(request, vllm_model, vllm_logs, 1, name=OTHER)
    return e


def post(port, path, body):
    return http_request(port, "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"},
                        timeout=60)


def chat(model, tag, i):
    return {"model": model, "max_tokens": 2,
            "messages": [{"role": "user", "content": f"{tag} question {i} about the old mill"}]}


def test_each_model_goes_to_its_engine_and_the_list_is_both_engines_cards(engines, other, ramjet_factory, tag):
    pair = [engines[0], other]
    rj = ramjet_factory([e.url for e in pair])
    rj.wait_health(lambda c, j: j["status"] == "ok", 15, "both engines healthy")

    def merged():
        r = rj.request("GET", "/v1/models")
        if r.status != 200 or r.header("X-Ramjet-Upstream") is not None:
            return None
        return r if sorted(c["id"] for c in r.json()["data"]) == sorted([SERVED_NAME, OTHER]) else None

    cards = {c["id"]: c for c in poll(merged, timeout=15, what="ramjet's merged /v1/models").json()["data"]}
    # Each card is the engine's own (vLLM's fields; it stamps `created` and the permission ids
    # anew on every answer), its context below the margin left as it is.
    def stable(card):
        return {k: v for k, v in card.items() if k not in ("created", "permission")}
    for e in pair:
        (own,) = http_request(e.port, "GET", "/v1/models").json()["data"]
        assert stable(cards[e.name]) == stable(own), (cards[e.name], own)
        assert [p["object"] for p in cards[e.name]["permission"]] == ["model_permission"]
    for i in range(6):
        for k, e in enumerate(pair):
            r = post(rj.api_port, "/v1/chat/completions", chat(e.name, tag, i))
            assert r.status == 200, r
            assert r.header("X-Ramjet-Upstream") == str(k), (e.name, r.header("X-Ramjet-Upstream"))
            assert r.json()["model"] == e.name
    r = post(rj.api_port, "/v1/messages", {"model": OTHER, "max_tokens": 2,
                                           "messages": [{"role": "user", "content": f"{tag} hi"}]})
    assert r.status == 200 and r.header("X-Ramjet-Upstream") == "1", r
    m = rj.metrics()
    assert m.val("ramjet_model_requests_total", model=SERVED_NAME) == 6
    assert m.val("ramjet_model_requests_total", model=OTHER) == 7


def test_a_model_neither_engine_serves_is_vllms_404_from_ramjet(engines, other, ramjet_factory, tag):
    pair = [engines[0], other]
    rj = ramjet_factory([e.url for e in pair])
    rj.wait_health(lambda c, j: j["status"] == "ok", 15, "both engines healthy")
    poll(lambda: rj.metrics().val("ramjet_model_engines", model=OTHER, state="listed") == 1, timeout=15,
         what="both engines' models known")
    body = chat("no-such-model", tag, 0)
    ours = post(rj.api_port, "/v1/chat/completions", body)
    theirs = post(pair[0].port, "/v1/chat/completions", body)
    assert ours.status == theirs.status == 404
    assert ours.header("X-Ramjet-Upstream") is None
    a, b = ours.json()["error"], theirs.json()["error"]
    # vLLM's shape and wording (vLLM adds the names it serves; ramjet does not list the fleet's).
    assert (a["type"], a["param"], a["code"]) == (b["type"], b["param"], b["code"]), (a, b)
    assert b["message"].startswith(a["message"]), (a, b)
    assert rj.metrics().val("ramjet_request_rejections_total", reason="unknown_model") == 1
