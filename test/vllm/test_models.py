"""Two real vLLM engines serving different models behind one ramjet (issue 28).

Engine 0 of the session serves `qwen3`; this module starts one more engine of the same weights
served as `qwen3-other` (`--served-model-name`; to vLLM and to ramjet another model: its own
/v1/models card, its own name in every response). ramjet learns both from the engines' own
GET /v1/models, answers /v1/models with both cards merged, routes each model only to its engine,
and answers a model neither serves with vLLM's own 404 before dialing either. The other model's
engine renders with a chat template of its own: with a model folder per model (RJ_MODEL_DIR), each
engine is proven by its own folder and each model's prompts are tokenized by it, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import count_predictions, start_fixture_engines
from support import vllm_proc
from support.ramjet_proc import http_request, poll
from support.vllm_proc import QWEN3, SERVED_NAME

OTHER = "qwen3-other"


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    """The other model's folder: the same tiny weights and tokenizer, a chat template of its own (a
    fine-tune's preamble), so its prompts render to other tokens than `qwen3`'s."""
    d = tmp_path_factory.mktemp("other") / "qwen3-other"
    d.mkdir()
    (d / "chat_template.jinja").write_text("{{- 'You are the other model. ' }}" + (QWEN3 / "chat_template.jinja").read_text())
    return vllm_proc.model_dir(d)


@pytest.fixture(scope="module")
def other(request, other_model, vllm_logs):
    (e,) = start_fixture_engines(request, other_model, vllm_logs, 1, name=OTHER,
                                 extra=("--chat-template", str(Path(other_model) / "chat_template.jinja")))
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
    # Both engines' lists known: until one is, a model nobody lists goes to that engine (it may serve it).
    poll(lambda: all(rj.metrics().val("ramjet_model_engines", model=m, state="listed") == 1 for m in (SERVED_NAME, OTHER)),
         timeout=15, what="both engines' models known")
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


def long_chat(model, tag, i, *turns):
    system = f"{tag} tool manual {i}. " + " ".join(f"rule {i}.{k}: keep invariant {k * 7 % 13}." for k in range(120))
    messages = [{"role": "system", "content": system}]
    for n, t in enumerate(turns):
        if n:
            messages.append({"role": "assistant", "content": "done"})
        messages.append({"role": "user", "content": t})
    return {"model": model, "max_tokens": 2, "messages": messages}


def test_a_model_folder_per_model_tokenizes_each_models_prompts_as_its_engine_does(engines, vllm_model, other,
                                                                                   other_model, ramjet_factory, tag):
    """RJ_MODEL_DIR names both folders: vLLM's own /tokenize proves engine 0 by the first and the
    other model's engine by the second, and each model's follow-up turn is placed exactly with a
    prediction vLLM's cached_tokens agrees with (tokens rendered with the wrong folder would share
    no block with the other engine's cache: the preamble comes first)."""
    pair = [engines[0], other]
    rj = ramjet_factory([e.url for e in pair],
                        env={"RJ_MODEL_DIR": f"{vllm_model},{other_model}", "RJ_KV_EVENT_LIVE_ENDPOINTS": "discover",
                             "RJ_EXACT_ROUTE_MIN_BYTES": "1024", "RJ_EXACT_ROUTE_TIMEOUT_MS": "5000",
                             "RJ_PROBE_INTERVAL_MS": "200"})
    rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 20, "both engines' indexes trusted")
    poll(lambda: all(rj.metrics().get("ramjet_tokenizer_attested", upstream=str(i)) == 1 for i in (0, 1)), 30,
         what="each engine proven by its folder")
    out = rj.output()
    assert "upstream 0: its /tokenize reproduced all 5 goldens of RJ_MODEL_DIR folder 1" in out, out
    assert "upstream 1: its /tokenize reproduced all 5 goldens of RJ_MODEL_DIR folder 2" in out, out
    for k, e in enumerate(pair):
        first = post(rj.api_port, "/v1/chat/completions", long_chat(e.name, tag, k, "first question"))
        assert first.status == 200 and first.header("X-Ramjet-Upstream") == str(k), first
        poll(lambda: rj.metrics().val("ramjet_kv_index_resident_blocks", upstream=str(k)) >= 8, 10,
             what="the first turn's blocks in ramjet's index")
        r = post(rj.api_port, "/v1/chat/completions", long_chat(e.name, tag, k, "first question", "second"))
        assert r.status == 200 and r.header("X-Ramjet-Upstream") == str(k), r
        receipt = r.header("X-Ramjet-Route") or ""
        assert receipt.startswith("exact; predicted_cached_tokens="), (e.name, receipt)
        predicted = int(receipt.split("predicted_cached_tokens=")[1].split(";")[0])
        cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        # (within the two-block tolerance ramjet checks with, as test_exact.py)
        assert predicted >= 8 * vllm_proc.BLOCK_SIZE and abs(predicted - cached) <= 64, (e.name, predicted, cached)
    poll(lambda: sum(rj.metrics().sum("ramjet_exact_predictions_total", result=r) for r in ("agree", "late", "miss"))
         >= 2, 10, what="both predictions checked")
    own = count_predictions(rj)
    assert own["miss"] == 0 and own["agree"] >= 1, own
    assert rj.metrics().sum("ramjet_tokenizer_shadow_total", backend="remote") == 0
