"""ramjet-sim's real-tokenizer mode (--tokenizer with --chat-template or --native-formatter):
/tokenize, the prompt tokens of chat and completions requests (usage, prefix-cache blocks, KV
events) and /sim/resident reproduce the golden token ids of test/data/testdata/goldens; plus the
engine identity flags (--engine-version, --model, --max-model-len) and startup errors.

Runs real ramjet-sim processes on loopback; one process per tokenizer setup (loading a tokenizer
takes a fraction of a second, more under sanitizers)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from support.sim_proc import SimProc, sim_bin

TESTDATA = Path(__file__).resolve().parents[1] / "data" / "testdata"
MODELS = TESTDATA / "models"
GOLDENS = TESTDATA / "goldens"
QWEN3_TOK = MODELS / "qwen3" / "tokenizer.json"
QWEN3_TPL = MODELS / "qwen3" / "chat_template.jinja"
QWEN3_CONFIG = MODELS / "qwen3" / "tokenizer_config.json"
DS_TOK = MODELS / "deepseek-v3" / "tokenizer.json"
DS_ADDED = MODELS / "deepseek-v3.1" / "added_tokens_override.json"
BLOCK = 16  # the tiny preset's block size


def goldens(name):
    return [json.loads(t) for t in (GOLDENS / name).read_text(encoding="utf-8").split("\n") if t.strip()]


QWEN3 = goldens("qwen3.jsonl")
QWEN3_TEXT = goldens("qwen3-tokenize.jsonl")
DSV32 = goldens("deepseek-v3.2.jsonl")
SHORT = next(g for g in QWEN3 if g["id"] == "qwen3-01-single-user")
WITH_TOOLS = next(g for g in QWEN3 if g["id"] == "qwen3-22-tool-call-roundtrip")


def start(*args) -> SimProc:
    return SimProc("--speed", "50", *map(str, args))


@pytest.fixture(scope="module")
def qwen3():
    s = start("--tokenizer", QWEN3_TOK, "--chat-template", QWEN3_TPL, "--engine-version", "0.11.2+golden",
              "--model", "Qwen/Qwen3-8B", "--served-model-name", "qwen3", "--max-model-len", "40960")
    yield s
    s.stop()


def tokenize(sim, body):
    r = sim.request("POST", "/tokenize", body)
    assert r.status == 200, r.body
    out = r.json()
    assert out["count"] == len(out["tokens"]) and out["token_strs"] is None
    return out["tokens"]


def test_the_goldens_are_there():
    assert len(QWEN3) >= 20 and len(QWEN3_TEXT) >= 20 and DSV32
    assert all(g["token_ids"] for g in QWEN3)


def test_chat_tokenize_reproduces_every_qwen3_golden(qwen3):
    for g in QWEN3:
        assert g["tokenizer"].startswith("qwen3/tokenizer.json") and g["template"] == "qwen3/chat_template.jinja"
        assert tokenize(qwen3, {"model": "qwen3", **g["request"]}) == g["token_ids"], g["id"]


def test_prompt_tokenize_reproduces_the_qwen3_tokenizer_goldens(qwen3):
    for g in QWEN3_TEXT:
        assert tokenize(qwen3, {"prompt": g["text"], "add_special_tokens": False}) == g["token_ids"], g["id"]
    # Qwen3 has no BOS: the completion default (add_special_tokens=true) gives the same ids.
    g = QWEN3_TEXT[-1]
    assert tokenize(qwen3, {"prompt": g["text"]}) == g["token_ids"]


def test_chat_add_special_tokens_and_continue_final_message_follow_vllm(qwen3):
    golden = SHORT["token_ids"]
    assert tokenize(qwen3, {**SHORT["request"], "add_special_tokens": True}) == golden  # no BOS in Qwen3
    # continue_final_message: the prompt ends inside the final (assistant) message.
    prefix = {"messages": [*SHORT["request"]["messages"], {"role": "assistant", "content": "Par"}],
              "add_generation_prompt": False, "chat_template_kwargs": {"enable_thinking": False}}
    cont = tokenize(qwen3, {**prefix, "continue_final_message": True})
    closed = tokenize(qwen3, prefix)
    assert cont[:len(golden)] == golden
    assert len(cont) < len(closed) and cont == closed[:len(cont)]  # the closing <|im_end|>\n is cut


def test_usage_prompt_tokens_and_residency_come_from_the_real_tokenizer(qwen3):
    for g in [SHORT, WITH_TOOLS, next(g for g in QWEN3 if g["id"] == "qwen3-19-long")]:
        ids = g["token_ids"]
        r = qwen3.request("POST", "/v1/chat/completions", {"model": "qwen3", **g["request"], "max_tokens": 2})
        assert r.status == 200, r.body
        assert r.json()["usage"]["prompt_tokens"] == len(ids), g["id"]
        # The cached blocks hold exactly the golden ids: asking by ids or by messages agrees.
        by_ids = qwen3.admin("/sim/resident", {"tokens": ids})
        by_msgs = qwen3.admin("/sim/resident", g["request"])
        assert by_ids["resident_tokens"] == by_msgs["resident_tokens"] == len(ids) // BLOCK * BLOCK, g["id"]
        assert by_msgs["prompt_tokens"] == len(ids)
    g = QWEN3_TEXT[-1]
    r = qwen3.request("POST", "/v1/completions", {"model": "qwen3", "prompt": g["text"], "max_tokens": 1})
    assert r.status == 200 and r.json()["usage"]["prompt_tokens"] == len(g["token_ids"])


def test_version_and_model_card_answer_the_identity_flags(qwen3):
    assert qwen3.request("GET", "/version").json() == {"version": "0.11.2+golden"}
    assert qwen3.request("POST", "/tokenize", {"prompt": "x"}).json()["max_model_len"] == 40960
    card = qwen3.request("GET", "/v1/models").json()["data"][0]
    assert card["id"] == "qwen3" and card["root"] == "Qwen/Qwen3-8B" and card["max_model_len"] == 40960
    assert card["parent"] is None


def vllm_400(r):
    assert r.status == 400, r.body
    e = r.json()["error"]
    assert e["type"] == "BadRequestError" and e["code"] == 400 and e["param"] is None and e["message"]
    return e["message"]


@pytest.mark.parametrize("path", ["/tokenize", "/v1/chat/completions"])
def test_render_failures_are_vllm_400s(qwen3, path):
    msgs = SHORT["request"]["messages"]
    assert "chat_template_kwargs" in vllm_400(qwen3.request("POST", path, {"messages": msgs, "chat_template_kwargs": 5}))
    both = {"messages": msgs, "continue_final_message": True, "add_generation_prompt": True}
    assert "continue_final_message" in vllm_400(qwen3.request("POST", path, both))
    vllm_400(qwen3.request("POST", path, {"messages": msgs, "chat_template": "{{ messages }}"}))
    vllm_400(qwen3.request("POST", path, {"messages": [{"role": "user", "content": "x"}, 7]}))
    assert qwen3.request("GET", "/health").status == 200


def test_kv_events_carry_the_golden_token_ids():
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0",
           "replay_endpoint": "tcp://*:0", "topic": "kv"}
    s = start("--tokenizer", QWEN3_TOK, "--chat-template", QWEN3_TPL, "--kv-events-config", json.dumps(cfg))
    ctx = zmq.Context()
    try:
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect("tcp://127.0.0.1:" + s.kv_endpoint.rsplit(":", 1)[1])
        time.sleep(0.3)  # the ZMQ slow-joiner window
        ids = WITH_TOOLS["token_ids"]
        r = s.request("POST", "/v1/chat/completions", {**WITH_TOOLS["request"], "max_tokens": 1})
        assert r.status == 200, r.body
        stored = []
        while len(stored) < len(ids) // BLOCK * BLOCK and sub.poll(5000):
            _, _, payload = sub.recv_multipart()
            for ev in msgpack.unpackb(payload, raw=False)[1]:
                if ev["type"] == "BlockStored":
                    stored += ev["token_ids"]
        assert stored[:len(ids) // BLOCK * BLOCK] == ids[:len(ids) // BLOCK * BLOCK]
    finally:
        ctx.destroy(linger=0)
        s.stop()


@pytest.mark.parametrize("template", ["config", "default"])
def test_the_template_may_come_from_tokenizer_config_or_beside_the_tokenizer(template):
    args = ["--chat-template", QWEN3_CONFIG] if template == "config" else []
    s = start("--tokenizer", QWEN3_TOK, *args)
    try:
        for g in (SHORT, WITH_TOOLS):
            assert tokenize(s, g["request"]) == g["token_ids"], g["id"]
    finally:
        s.stop()


def test_deepseek_v32_native_formatter_reproduces_its_goldens():
    g0 = DSV32[0]
    assert g0["tokenizer"] == "deepseek-v3/tokenizer.json with deepseek-v3.1/added_tokens_override.json applied"
    s = start("--tokenizer", DS_TOK, "--added-tokens", DS_ADDED, "--native-formatter", "deepseek-v32")
    try:
        picked = [g for g in DSV32 if g["id"] in {"dsv32-01-single-user", "dsv32-04-system-user-thinking",
                                                   "dsv32-27-tool-call-roundtrip"}]
        assert len(picked) == 3
        for g in picked:
            assert tokenize(s, g["request"]) == g["token_ids"], g["id"]
        r = s.request("POST", "/v1/chat/completions", {**picked[-1]["request"], "max_tokens": 1})
        assert r.status == 200 and r.json()["usage"]["prompt_tokens"] == len(picked[-1]["token_ids"])
    finally:
        s.stop()


def run_sim(*args):
    p = subprocess.run([sim_bin(), "--host", "127.0.0.1", "--port", "0", *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


STARTUP_ERRORS = [
    (["--tokenizer", QWEN3_TOK, "--chat-template", "/nonexistent/chat_template.jinja"], "template error (io)"),
    (["--tokenizer", "/nonexistent/tokenizer.json", "--chat-template", QWEN3_TPL], "tokenizer error"),
    (["--tokenizer", QWEN3_TPL, "--chat-template", QWEN3_TPL], "tokenizer error"),
    (["--tokenizer", QWEN3_TOK, "--native-formatter", "llama-9"], "unknown native formatter"),
    (["--tokenizer", QWEN3_TOK, "--chat-template", QWEN3_TPL, "--tokenizer-config", "/nonexistent/c.json"],
     "config error (io)"),
    (["--chat-template", QWEN3_TPL], "--chat-template: needs --tokenizer"),
    (["--tokenizer", QWEN3_TOK, "--chat-template", QWEN3_TPL, "--native-formatter", "deepseek-v32"], "exclusive"),
]


@pytest.mark.parametrize("args,message", STARTUP_ERRORS, ids=[m for _, m in STARTUP_ERRORS])
def test_unusable_prompt_files_stop_the_start(args, message):
    rc, out = run_sim(*args)
    assert rc != 0 and "listening" not in out
    assert out.startswith("ramjet-sim: ") and message in out, out


def test_a_template_that_does_not_parse_stops_the_start(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }}")
    rc, out = run_sim("--tokenizer", QWEN3_TOK, "--chat-template", bad)
    assert rc != 0 and "template error" in out and str(bad) in out, out


def test_a_tokenizer_without_any_template_needs_one(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(QWEN3_TOK.read_bytes())
    rc, out = run_sim("--tokenizer", tmp_path / "tokenizer.json")
    assert rc != 0 and "--chat-template or --native-formatter" in out, out
