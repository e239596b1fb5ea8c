"""A LoRA adapter on a real vLLM, as ramjet's adapter term reads it (issue 29).

One engine of its own serves the tiny Qwen3 with a LoRA adapter `sql` (`--enable-lora
--max-loras 1`; the adapter is written here: rank 8 on q_proj and v_proj, small fixed weights, the
PEFT layout vLLM loads). vLLM 0.32 reports the adapters with requests in
vllm:lora_requests_info (every adapter with a running or waiting request in both of its lists,
max_lora, the value the time; every label set it ever had stays): the engine scrape reads the
latest, and the journal's candidate shows where the adapter stood when each request was placed:
`free` while the engine is idle, `active` while a long `sql` request runs, `none` for the base
model. ramjet-sim writes the gauge the same way (held to it here: the same label names and order).
"""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path

import pytest

from conftest import start_fixture_engines
from support.ramjet_proc import http_request, poll
from support.vllm_proc import SERVED_NAME

RANK = 8
HIDDEN = 128
TARGETS = {"q_proj": 2 * 64, "v_proj": 1 * 64}  # out features of the tiny config's projections
SCRAPE_MS = 200


def write_adapter(d: Path) -> str:
    """A PEFT LoRA adapter for test/vllm/qwen3-tiny.json in safetensors (written by hand: the tests
    run without torch)."""
    d.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for layer in range(2):
        for module, out in TARGETS.items():
            p = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[p + ".lora_A.weight"] = (RANK, HIDDEN)
            tensors[p + ".lora_B.weight"] = (out, RANK)
    header, data, offset = {}, bytearray(), 0
    for i, (name, shape) in enumerate(sorted(tensors.items())):
        n = shape[0] * shape[1]
        data += struct.pack(f"<{n}f", *[((i * 131 + k * 7) % 17 - 8) * 0.001 for k in range(n)])
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + 4 * n]}
        offset += 4 * n
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    (d / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + bytes(data))
    (d / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": RANK, "lora_alpha": 16, "lora_dropout": 0.0,
        "target_modules": list(TARGETS), "bias": "none", "base_model_name_or_path": SERVED_NAME,
        "fan_in_fan_out": False, "modules_to_save": None, "use_rslora": False, "use_dora": False}))
    return str(d)


@pytest.fixture(scope="module")
def lora_engine(request, vllm_model, vllm_logs, tmp_path_factory):
    adapter = write_adapter(tmp_path_factory.mktemp("lora") / "sql")
    (e,) = start_fixture_engines(request, vllm_model, vllm_logs, 1, extra=(
        "--enable-lora", "--lora-modules", f"sql={adapter}", "--max-loras", "1", "--max-lora-rank", str(RANK)))
    return e


def chat(model: str, tag: str, max_tokens: int) -> bytes:
    return json.dumps({"model": model, "max_tokens": max_tokens, "ignore_eos": True,
                       "messages": [{"role": "user", "content": f"{tag} a question for the adapter"}]}).encode()


def lora_info(port: int) -> list:
    text = http_request(port, "GET", "/metrics").body.decode()
    return [l for l in text.splitlines() if l.startswith("vllm:lora_requests_info{")]


def test_the_journal_shows_the_adapter_free_active_and_none_as_vllm_reports_it(lora_engine, ramjet_factory, tag, tmp_path):
    journal = tmp_path / "route.jsonl"
    rj = ramjet_factory([lora_engine.url], env={"RJ_ENGINE_SCRAPE_INTERVAL_MS": str(SCRAPE_MS),
                                                 "RJ_ROUTE_JOURNAL": "true", "RJ_ROUTE_JOURNAL_FILE": str(journal)})
    rj.wait_health(lambda c, j: j["status"] == "ok", 30, "the engine healthy")

    def listed():
        r = rj.request("GET", "/v1/models")
        return r.status == 200 and "sql" in {c["id"] for c in r.json()["data"]}
    poll(listed, timeout=15, what="ramjet lists the adapter")

    def post(model, t, n):
        r = http_request(rj.api_port, "POST", "/v1/chat/completions", chat(model, t, n),
                         {"Content-Type": "application/json"}, timeout=120)
        assert r.status == 200, r
        return r

    # Idle: an adapter request after the scrape saw no active adapter (vLLM writes the gauge
    # from its first request on).
    post("sql", tag + "warm", 2)
    poll(lambda: any('running_lora_adapters=""' in l for l in lora_info(lora_engine.port)), 30,
         what="vLLM reports no adapter active after the first request")
    time.sleep(4 * SCRAPE_MS / 1000)
    post("sql", tag + "idle", 2)
    # A long sql request runs: vLLM names sql; the next sql request finds it active.
    long = threading.Thread(target=post, args=("sql", tag + "long", 600))
    long.start()
    try:
        poll(lambda: any('running_lora_adapters="sql"' in l for l in lora_info(lora_engine.port)), 30,
             what="vLLM reports sql running")
        time.sleep(4 * SCRAPE_MS / 1000)
        post("sql", tag + "busy", 2)
        post(SERVED_NAME, tag + "base", 2)
        # The gauge as vLLM 0.32 writes it: the labels sorted, the adapter in both lists while it runs.
        lines = lora_info(lora_engine.port)
        assert any(l.startswith('vllm:lora_requests_info{max_lora="1",running_lora_adapters="sql",'
                                'waiting_lora_adapters="sql"} ') for l in lines), lines
    finally:
        long.join()

    def starts():
        records = [json.loads(l) for l in open(journal) if '"event":"start"' in l]
        return [d for d in records if d["endpoint"] == "chat"]
    decisions = poll(lambda: starts() if len(starts()) >= 5 else None, what="every decision")
    adapter = [d["candidates"][0]["adapter"] for d in decisions]
    # warm, idle, long, busy, base (the long one was placed while the engine was idle or warm)
    assert adapter[1] == "free", adapter
    assert adapter[3] == "active", adapter
    assert adapter[4] == "none", adapter
