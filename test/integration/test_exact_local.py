"""Exact routing with local tokens (RJ_EXACT_TOKENS=local): ramjet renders and tokenizes each prompt
itself with the attested pipeline (RJ_TOKENIZER_MODE=local: the real Qwen3 tokenizer and chat
template, pinned by digest and checked against a manifest whose goldens come from an independent
implementation) and looks the tokens up in the engines' KV-event indexes — no /tokenize round trip.
The sims tokenize with the same real files, so their KV events carry the same token IDs."""

from __future__ import annotations

import json
import os
import time

from support.ramjet_proc import poll
from support.sim_proc import SimProc
from test_kv_events import TOPIC, kv_config, local, through, warm_behind_its_back
from test_tokenizer import CTX, MODEL_ID, ROOT, TOK, TPL, VERSION, local_env, model_folder, wait_attested


def qwen_kv_sim(version: str = VERSION, template: str = TPL, ctx: int = CTX, model: str = MODEL_ID) -> SimProc:
    return SimProc("--speed", "50", "--tokenizer", TOK, "--chat-template", str(template), "--served-model-name",
                   model, "--model", ROOT, "--max-model-len", str(ctx), "--engine-version", version,
                   "--kv-events-config", kv_config(), "--enable-prompt-tokens-details",
                   "--num-gpu-blocks-override", "16384")


def placed_exactly_behind_its_back(rj, sims, k: int) -> None:
    """Agent prompt `k` warmed on engine 1 straight (ramjet's fingerprints know nothing of it),
    then sent through ramjet: placed on engine 1 exactly, predicting the engine's own hit."""
    warm_behind_its_back(rj, sims[1], 1, agent_chat(k, "first question"))
    r = through(rj, agent_chat(k, "first question"))
    assert r.header("X-Ramjet-Upstream") == "1", f"prompt {k}: placed on {r.header('X-Ramjet-Upstream')}"
    receipt = r.header("X-Ramjet-Route")
    assert receipt and receipt.startswith("exact; predicted_cached_tokens="), receipt
    predicted = int(receipt.split(";")[1].split("=")[1])
    cached = json.loads(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    # ramjet's own tokens are the engine's: its prediction is the engine's hit (less the block a
    # fully cached prompt recomputes).
    assert cached > 5000 and predicted - 16 <= cached <= predicted, (predicted, cached)


def agent_chat(k: int, *turns: str, model: str = MODEL_ID) -> dict:
    """A ~40 KB agent prompt of its own, then the user turns (alternating with short answers)."""
    system = f"Agent {k} tool manual. " + " ".join(f"rule {k}.{i}: keep the invariant {i * 7 % 13}." for i in range(1400))
    messages = [{"role": "system", "content": system}]
    for i, t in enumerate(turns):
        if i:
            messages.append({"role": "assistant", "content": "done"})
        messages.append({"role": "user", "content": t})
    return {"model": model, "max_tokens": 2, "messages": messages}


def start(tmp_path, ramjet_factory, sims, **extra):
    env = local_env(tmp_path, mode="local", RJ_EXACT_TOKENS="local", RJ_AFFINITY="prefix",
                    RJ_KV_EVENT_LIVE_ENDPOINTS=",".join(local(s.kv_endpoint) for s in sims),
                    RJ_KV_EVENT_REPLAY_ENDPOINTS=",".join(local(s.kv_replay) for s in sims),
                    RJ_KV_EVENT_TOPIC=TOPIC, **extra)
    rj = ramjet_factory([s.url for s in sims], env=env)
    rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every engine's index trusted")
    return rj


def sims_of(*versions):
    made = [qwen_kv_sim(v) for v in versions]
    return made


def test_local_tokens_place_exactly_without_asking_an_engine(tmp_path, ramjet_factory):
    sims = sims_of(VERSION, VERSION, VERSION)
    try:
        rj = start(tmp_path, ramjet_factory, sims)
        wait_attested(rj, [0, 1, 2])
        for k in range(3):
            placed_exactly_behind_its_back(rj, sims, k)
        # The next turn of a session is placed on the engine that served it; its render reuses
        # the conversation's encoded prefix (the session cache) instead of encoding it again.
        r = through(rj, agent_chat(0, "first question", "second question"))
        assert r.header("X-Ramjet-Upstream") == "1" and r.header("X-Ramjet-Route").startswith("exact")
        m = rj.metrics()
        assert m.get("ramjet_exact_route_total", outcome="exact") >= 4
        assert m.sum("ramjet_exact_predictions_total", result="miss") == 0
        assert m.get("ramjet_tokenizer_session_cache_lookups_total", result="hit") >= 1
        # No engine was asked for tokens: mode local makes no remote call, and the shadow does not
        # render a second time what routing rendered.
        assert m.sum("ramjet_tokenizer_shadow_total", backend="remote") == 0
        assert m.sum("ramjet_tokenizer_shadow_total", backend="local") == 0
    finally:
        for s in sims:
            s.stop()


def test_an_engine_that_does_not_match_the_manifest_sends_the_fleet_to_the_fingerprints(tmp_path, ramjet_factory):
    sims = sims_of(VERSION, VERSION, "0.0.1-other")
    try:
        rj = start(tmp_path, ramjet_factory, sims)
        wait_attested(rj, [0, 1])
        poll(lambda: rj.metrics().get("ramjet_tokenizer_attested", upstream="2") == 0, 10, what="engine 2 unattested")
        r = through(rj, agent_chat(7, "first question"))
        assert r.header("X-Ramjet-Route") == "unattested"
        assert rj.metrics().get("ramjet_exact_route_total", outcome="unattested") == 1
    finally:
        for s in sims:
            s.stop()


def one_setting_start(tmp_path, ramjet_factory, sims, **extra):
    """Exact routing on the engines' KV events with local tokens from one setting: RJ_MODEL_DIR.
    No RJ_EXACT_TOKENS, RJ_TOKENIZER_MODE, profile, digests or manifest."""
    env = {"RJ_MODEL_DIR": model_folder(tmp_path), "RJ_AFFINITY": "prefix", "RJ_PROBE_INTERVAL_MS": "200",
           "RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join(local(s.kv_endpoint) for s in sims),
           "RJ_KV_EVENT_REPLAY_ENDPOINTS": ",".join(local(s.kv_replay) for s in sims),
           "RJ_KV_EVENT_TOPIC": TOPIC, **extra}
    rj = ramjet_factory([s.url for s in sims], env=env)
    rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every engine's index trusted")
    return rj


def test_one_setting_proves_each_engine_and_places_exactly_on_local_tokens(tmp_path, ramjet_factory):
    """RJ_MODEL_DIR alone: ramjet pins the folder's files, picks the qwen3 profile from config.json,
    and attests each engine once its own /tokenize reproduces the built-in goldens. An engine with
    another --max-model-len is proven too (its identity differs, its tokens do not); one serving
    another chat template under the same identity is refused, visibly, and sends the fleet to the
    fingerprints."""
    other_tpl = tmp_path / "edited.jinja"  # one space more after the assistant marker
    with open(TPL, encoding="utf-8") as f:
        other_tpl.write_text(f.read().replace("<|im_start|>assistant\\n", "<|im_start|>assistant \\n"), encoding="utf-8")
    sims = [qwen_kv_sim(), qwen_kv_sim(ctx=CTX // 2)]
    try:
        rj = one_setting_start(tmp_path, ramjet_factory, sims)
        wait_attested(rj, [0, 1])
        m = rj.metrics()
        assert m.get("ramjet_tokenizer_info", mode="local", profile="qwen3") == 1
        assert m.get("ramjet_tokenizer_attestation_checks_total", upstream="1", outcome="match") >= 1
        out = rj.output()
        assert "no manifest: an engine is attested once its /tokenize reproduces 5 goldens" in out, out
        for u in (0, 1):
            assert f"upstream {u}: its /tokenize reproduced all 5 goldens" in out, out
        assert "(engines proven so far: 2)" in out, out
        for k in range(2):
            placed_exactly_behind_its_back(rj, sims, k)
        # A request the profile does not render locally (a kwarg the qwen3 template does not read)
        # is tokenized by an engine instead, and still placed exactly.
        body = agent_chat(0, "first question")
        body["chat_template_kwargs"] = {"custom_flag": True}
        r = through(rj, body)
        assert r.header("X-Ramjet-Upstream") == "1" and r.header("X-Ramjet-Route").startswith("exact"), r.headers
        m = rj.metrics()
        assert m.get("ramjet_exact_route_total", outcome="exact") >= 3
        assert m.sum("ramjet_exact_predictions_total", result="miss") == 0
        assert m.sum("ramjet_tokenizer_shadow_total", backend="remote") == 0
    finally:
        for s in sims:
            s.stop()

    # An engine with another chat template: its /tokenize differs on the goldens.
    sims = [qwen_kv_sim(), qwen_kv_sim(template=other_tpl)]
    try:
        (tmp_path / "second").mkdir()
        rj = one_setting_start(tmp_path / "second", ramjet_factory, sims)
        wait_attested(rj, [0])
        poll(lambda: rj.metrics().get("ramjet_tokenizer_attestation_checks_total", upstream="1",
                                      outcome="golden_mismatch") >= 1, 10, what="engine 1 refused")
        assert rj.metrics().get("ramjet_tokenizer_attested", upstream="1") == 0
        assert "upstream 1: its /tokenize differs from ramjet's own tokens on" in rj.output()
        r = through(rj, agent_chat(9, "first question"))
        assert r.header("X-Ramjet-Route") == "unattested", r.header("X-Ramjet-Route")
        _, h = rj.health()
        assert [x["tokenizer_attested"] for x in h["replicas"]] == [True, False], h
    finally:
        for s in sims:
            s.stop()


def test_a_model_folder_per_model_renders_each_models_requests(tmp_path, ramjet_factory):
    """Engines serving two models of one tokenizer and two chat templates (a fine-tune that adds a
    preamble): RJ_MODEL_DIR names both folders. Each engine is proven by the folder whose goldens
    its /tokenize reproduces (the other folder stops asking it), and each model's requests are
    rendered by its own folder: placed exactly, their predictions the engines' own hits. Rendered
    with the other folder, model B's tokens would share no block with its engines' caches."""
    tpl_b = tmp_path / "b.jinja"
    with open(TPL, encoding="utf-8") as f:
        tpl_b.write_text("{{- 'You are model B. ' }}" + f.read(), encoding="utf-8")
    folder_a = model_folder(tmp_path)
    (tmp_path / "b").mkdir()
    folder_b = model_folder(tmp_path / "b", str(tpl_b))
    sims = [qwen_kv_sim(model="model-a"), qwen_kv_sim(model="model-a"),
            qwen_kv_sim(model="model-b", template=tpl_b), qwen_kv_sim(model="model-b", template=tpl_b)]
    try:
        env = {"RJ_MODEL_DIR": f"{folder_a},{folder_b}", "RJ_AFFINITY": "prefix", "RJ_PROBE_INTERVAL_MS": "200",
               "RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join(local(s.kv_endpoint) for s in sims),
               "RJ_KV_EVENT_REPLAY_ENDPOINTS": ",".join(local(s.kv_replay) for s in sims),
               "RJ_KV_EVENT_TOPIC": TOPIC}
        rj = ramjet_factory([s.url for s in sims], env=env)
        rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every engine's index trusted")
        wait_attested(rj, [0, 1, 2, 3], timeout=20)
        out = rj.output()
        for u in (0, 1):
            assert f"upstream {u}: its /tokenize reproduced all 5 goldens of RJ_MODEL_DIR folder 1" in out, out
        for u in (2, 3):
            assert f"upstream {u}: its /tokenize reproduced all 5 goldens of RJ_MODEL_DIR folder 2" in out, out
        m = rj.metrics()
        assert m.get("ramjet_tokenizer_info", mode="local", profile="qwen3") == 2
        # Once proven by its own folder, an engine is not asked for the other folder's goldens.
        checks = {u: m.sum("ramjet_tokenizer_attestation_checks_total", upstream=str(u)) for u in range(4)}
        time.sleep(1.0)  # five more intervals
        m = rj.metrics()
        for u in range(4):
            mism = m.get("ramjet_tokenizer_attestation_checks_total", upstream=str(u), outcome="golden_mismatch")
            assert mism <= 1, (u, mism)  # at most the other folder's first ask, before its own proved it
        for model, engine, k in (("model-a", 1, 20), ("model-b", 3, 21), ("model-b", 2, 22)):
            body = agent_chat(k, "first question", model=model)
            warm_behind_its_back(rj, sims[engine], engine, body)
            r = through(rj, body)
            assert r.header("X-Ramjet-Upstream") == str(engine), (model, r.header("X-Ramjet-Upstream"))
            receipt = r.header("X-Ramjet-Route")
            assert receipt and receipt.startswith("exact; predicted_cached_tokens="), (model, receipt)
            predicted = int(receipt.split(";")[1].split("=")[1])
            cached = json.loads(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached > 5000 and predicted - 16 <= cached <= predicted, (model, predicted, cached)
        m = rj.metrics()
        assert m.sum("ramjet_exact_predictions_total", result="miss") == 0
        assert m.sum("ramjet_tokenizer_shadow_total", backend="remote") == 0
        assert all(m.sum("ramjet_tokenizer_attestation_checks_total", upstream=str(u)) > checks[u] for u in range(4))
    finally:
        for s in sims:
            s.stop()
