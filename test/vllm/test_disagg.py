"""The prefill/decode contract of real vLLM 0.32 (docs/sim.md §8.4), with the two legs a P/D router
sends driven by hand: two engines of vLLM's CPU build with the NixlConnector (pull mode,
kv_buffer_device "cpu", NIXL's UCX backend), one kv_producer and one kv_consumer; then ramjet's
router side in front of the two (the last test). test/integration/test_sim_disagg.py holds
ramjet-sim to the same contract.

Needs NIXL beside the vLLM environment: scripts/nixl-setup (RAMJET_NIXL_SITE, default
.venv/nixl); without it the tests fail naming the command. Its own ctest entry (vllm_disagg), not
part of vllm_engines: its two engines would otherwise run beside the session's two. Measured on
the 2-core test machine: 3 to 4 minutes in all (178 s alone; 238 s with a build beside it, of
which 162 s starting the engines); a dead producer's handshake alone waits 5 s or more.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import msgpack
import pytest

from support import kv_mirror, vllm_proc
from support.disagg import ANSWER_KEYS, prefill_leg, request_body as contract_body
from support.ramjet_proc import poll

SITE = Path(os.environ.get("RAMJET_NIXL_SITE", vllm_proc.VENV.parent / "nixl"))
ENGINE_ID = "prefill-0"
INTERNAL_ERROR = {"error": {"message": "Internal server error", "type": "InternalServerError", "param": None,
                            "code": 500}}


def kv_transfer_config(role: str, engine_id: str = "") -> str:
    cfg = {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": "cpu"}
    if engine_id:
        cfg["engine_id"] = engine_id
    return json.dumps(cfg)


@pytest.fixture(scope="module")
def pd(request, vllm_model, vllm_logs):
    """(producer, consumer, the producer's side-channel port): started one at a time."""
    if not (SITE / "nixl" / "__init__.py").is_file():
        pytest.fail(f"no NIXL at {SITE}: run scripts/nixl-setup", pytrace=False)
    logs = Path(vllm_logs) / "test_disagg"
    logs.mkdir(parents=True, exist_ok=True)
    made = []
    side = vllm_proc.free_port()
    try:
        for name, role, port, engine_id in (("prefill", "kv_producer", side, ENGINE_ID),
                                            ("decode", "kv_consumer", vllm_proc.free_port(), "")):
            env = {"PYTHONPATH": str(SITE), "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
                   "VLLM_NIXL_SIDE_CHANNEL_PORT": str(port)}
            e = vllm_proc.VllmEngine(vllm_model, extra=("--kv-transfer-config", kv_transfer_config(role, engine_id)),
                                     env=env, log_path=str(logs / f"{name}.log"))
            made.append(e.start())
            print(f"vllm {name} engine: started in {e.start_seconds:.1f} s on port {e.port}")
    except BaseException:
        for e in made:
            e.stop()
        raise

    def stop():
        for e in made:
            if request.session.testsfailed:
                print(f"\n--- vllm engine on port {e.port}, last lines ---\n{e.tail(40)}")
            e.stop()

    request.addfinalizer(stop)
    warm_up(made[0], made[1])
    return made[0], made[1], side


def warm_up(p, d, tries: int = 4) -> None:
    """One exchange before the tests: the consumer's first pull makes its NIXL handshake with the
    producer's side channel, which vLLM bounds at a fixed 5 s (base_worker._nixl_handshake) and a
    busy two-core machine can miss (the leg is then a 500). Later pulls reuse the handshake."""
    for i in range(tries):
        path, body = request_body(f"[warm-up {i}]", False)
        r = post(p, path, prefill_leg(body), rid=f"warm-{i}")
        assert r.status == 200, r.body
        kv = json.loads(r.body)["kv_transfer_params"]
        if post(d, path, dict(body, kv_transfer_params=kv), rid=f"warm-{i}").status == 200:
            return
        print(f"P/D warm-up {i}: the decode leg failed (a handshake past vLLM's 5 s?); again")
    pytest.fail(f"no P/D exchange succeeded in {tries} tries", pytrace=False)


def request_body(tag: str, chat: bool, stream: bool = False, max_tokens: int = 5) -> tuple[str, dict]:
    return contract_body(tag, chat, vllm_proc.SERVED_NAME, 60, "word", stream, max_tokens)


def post(engine, path: str, body: dict, rid: str, timeout: float = 120):
    return engine.request("POST", path, body, {"X-Request-Id": rid}, timeout=timeout)


def sse(raw: bytes) -> list:
    return [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]


def stored_hashes(engine) -> list:
    """Every BlockStored's hashes the engine published so far (its replay buffer, from 0)."""
    out = []
    for frames in kv_mirror.replay(engine.kv_replay.replace("*", "127.0.0.1"), 0):
        if frames[-1] == b"":
            continue
        for ev in msgpack.unpackb(frames[-1], raw=False)[1]:
            if ev["type"] == "BlockStored":
                out.append(ev["block_hashes"])
    return out


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_the_prefill_answer_carries_the_nixl_params_of_its_held_blocks(pd, tag, chat):
    p, _, side = pd
    path, body = request_body(tag, chat)
    r = post(p, path, prefill_leg(body), rid="leg-" + tag.strip("[] "))
    assert r.status == 200, r.body
    a = json.loads(r.body)
    kv = a["kv_transfer_params"]
    assert list(kv) == ANSWER_KEYS, "the keys, in vLLM 0.32's order"
    prompt = a["usage"]["prompt_tokens"]
    assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False
    assert kv["remote_engine_id"] == ENGINE_ID
    assert kv["remote_host"] == "127.0.0.1" and kv["remote_port"] == side, "the NIXL side channel, not HTTP"
    assert len(kv["remote_block_ids"]) == 1
    assert len(kv["remote_block_ids"][0]) == -(-prompt // vllm_proc.BLOCK_SIZE), "every block, the partial one too"
    assert kv["remote_num_tokens"] == prompt
    assert (kv["tp_size"], kv["dcp_size"], kv["pp_size"]) == (1, 1, 1)
    assert kv["remote_blocks_expiry_time"] is None and kv["transfer_mode"] == "pull"
    assert kv["remote_prefill_cached_tokens"] == a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    rid = "leg-" + tag.strip("[] ")
    want = rf"chatcmpl-{rid}-[0-9a-f]{{8}}" if chat else rf"cmpl-{rid}-0-[0-9a-f]{{8}}"
    assert re.fullmatch(want, kv["remote_request_id"]), kv["remote_request_id"]
    assert a["usage"]["completion_tokens"] == 1
    assert p.metrics().sum("vllm:kv_cache_usage_perc") > 0, "the blocks are held for the pull"
    # Pulled, they are freed (else the 30 s lease would keep them past the next tests' checks).
    assert post(pd[1], path, dict(body, kv_transfer_params=kv), rid="leg").status == 200
    assert poll(lambda: p.metrics().sum("vllm:kv_cache_usage_perc") == 0, timeout=30)


@pytest.mark.parametrize("chat,stream", [(False, False), (True, True)], ids=["completions-json", "chat-sse"])
def test_the_decode_leg_pulls_reports_the_producers_hit_and_stores_the_blocks(pd, tag, chat, stream):
    p, d, _ = pd
    path, body = request_body(tag, chat, stream, max_tokens=6)
    before = d.metrics()
    stored_before = len(stored_hashes(d))
    r = post(p, path, prefill_leg(body), rid="a")
    first = json.loads(r.body)
    kv = first["kv_transfer_params"]
    prompt = first["usage"]["prompt_tokens"]
    r = post(d, path, dict(body, kv_transfer_params=kv), rid="a")
    assert r.status == 200, r.body
    if stream:
        events = sse(r.body)
        assert events[-1] == "[DONE]"
        usage = json.loads(events[-2])["usage"]
    else:
        a = json.loads(r.body)
        usage = a["usage"]
        assert a["kv_transfer_params"] is None
    assert usage["prompt_tokens"] == prompt and usage["completion_tokens"] == 6
    assert usage["prompt_tokens_details"]["cached_tokens"] == kv["remote_prefill_cached_tokens"] == 0
    after = d.metrics()
    assert after.sum("vllm:external_prefix_cache_hits_total") - before.sum("vllm:external_prefix_cache_hits_total") \
        == prompt, "the whole prompt came from the producer"
    assert after.sum("vllm:nixl_xfer_time_seconds_count") == before.sum("vllm:nixl_xfer_time_seconds_count") + 1
    # The producer frees the blocks once D's READ completes (P notices while it steps).
    assert poll(lambda: p.metrics().sum("vllm:kv_cache_usage_perc") == 0, timeout=30)
    # Both engines published the prompt's full blocks, the same hashes (PYTHONHASHSEED=0).
    full = prompt // vllm_proc.BLOCK_SIZE
    d_new = stored_hashes(d)[stored_before:]
    assert len(d_new[0]) == full, "one BlockStored for the pulled blocks"
    assert d_new[0] in stored_hashes(p)
    # After it, only a block the generated tokens fill (the prompt's tail + 6 tokens may cross one).
    assert all(len(h) == 1 for h in d_new[1:]) and len(d_new) <= 2, d_new


def test_a_repeated_prompt_reports_the_producers_prefix_hit_on_the_decode_side(pd, tag):
    p, d, _ = pd
    path, body = request_body(tag, chat=True)
    for _ in range(2):
        first = json.loads(post(p, path, prefill_leg(body), rid="b").body)
        r = post(d, path, dict(body, kv_transfer_params=first["kv_transfer_params"]), rid="b")
        assert r.status == 200, r.body
    hit = first["kv_transfer_params"]["remote_prefill_cached_tokens"]
    prompt = first["usage"]["prompt_tokens"]
    # vLLM computes a prompt's last token again: a hit stops one token short of the prompt
    assert hit == (prompt - 1) // vllm_proc.BLOCK_SIZE * vllm_proc.BLOCK_SIZE > 0
    a = json.loads(r.body)
    assert a["usage"]["prompt_tokens_details"]["cached_tokens"] == hit
    assert a["usage"]["prompt_tokens_details"]["created_cache_tokens"] == 0


def test_kv_transfer_params_that_are_not_an_object_are_a_validation_400(pd, tag):
    _, d, _ = pd
    path, body = request_body(tag, chat=False)
    r = post(d, path, dict(body, kv_transfer_params="yes"), rid="e")
    assert r.status == 400
    assert json.loads(r.body) == {"error": {
        "message": "1 validation error:\n  {'type': 'dict_type', 'loc': 'body.kv_transfer_params', "
                   "'msg': 'Input should be a valid dictionary', 'input': 'yes'}",
        "type": "Bad Request", "param": "body.kv_transfer_params", "code": 400}}


# --- ramjet in front of the two engines (issue 31's router side) ---------------------------------

AGENT_PATHS = {"responses": "/v1/responses", "messages": "/v1/messages"}


def routed_body(api: str, tag: str, stream: bool) -> tuple[str, dict]:
    if api in ("chat", "completions"):
        return request_body(tag, chat=api == "chat", stream=stream, max_tokens=5)
    text = tag + " " + " ".join(f"word{i}" for i in range(60))
    body = {"model": vllm_proc.SERVED_NAME, "stream": stream}
    if api == "responses":
        body.update(input=text, max_output_tokens=5)
    else:
        body.update(messages=[{"role": "user", "content": text}], max_tokens=5)
    return AGENT_PATHS[api], body


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_ramjet_sends_both_legs_to_real_engines(pd, ramjet_factory, tag, api, stream):
    """Through ramjet (RJ_UPSTREAM_ROLE=prefill,decode, every request disaggregated): the producer
    computes the prompt, the consumer pulls it over NIXL and generates; the client sees the
    consumer's answer, streamed or not, on each of vLLM's four inference APIs."""
    p, d, _ = pd
    rj = ramjet_factory([p.url, d.url], env={"RJ_UPSTREAM_ROLE": "prefill,decode", "RJ_DISAGG_MIN_UNCACHED_TOKENS": "0",
                                            "RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS": "120000",
                                            "RJ_PROBE_TIMEOUT_MS": "5000"})
    before = d.metrics().sum("vllm:nixl_xfer_time_seconds_count")
    pulled = d.metrics().sum("vllm:external_prefix_cache_hits_total")
    path, body = routed_body(api, tag, stream)
    r = rj.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}, timeout=120)
    assert r.status == 200, r.body
    assert r.upstream == "1" and r.header("X-Ramjet-Prefill-Upstream") == "0"
    text = r.body.decode()
    if stream:
        assert "error" not in text.split("\n\n")[0]
        assert ("[DONE]" in text) if api in ("chat", "completions") else (
            "response.completed" in text if api == "responses" else "message_stop" in text)
    else:
        a = json.loads(text)
        assert "kv_transfer_params" not in a or a["kv_transfer_params"] is None
    assert d.metrics().sum("vllm:nixl_xfer_time_seconds_count") == before + 1, "one pull"
    assert d.metrics().sum("vllm:external_prefix_cache_hits_total") > pulled
    m = rj.metrics()
    assert m.val("ramjet_disagg_requests_total", choice="remote") == 1
    assert m.val("ramjet_disagg_prefill_legs_total", outcome="ok") == 1


# --- last: a dead producer's failed handshakes can slow the consumer's next pulls -------------------

@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_producer_that_does_not_answer_fails_the_decode_leg_with_a_500(pd, tag, stream):
    p, d, _ = pd
    path, body = request_body(tag, chat=False, stream=stream)
    kv = json.loads(post(p, path, prefill_leg(body), rid="c").body)["kv_transfer_params"]
    dead = dict(kv, remote_port=vllm_proc.free_port(), remote_engine_id="gone-" + str(stream))
    t0 = time.monotonic()
    r = post(d, path, dict(body, kv_transfer_params=dead), rid="c")
    if stream:
        assert r.status == 200
        events = sse(r.body)
        assert [json.loads(e) for e in events[:-1]] == [INTERNAL_ERROR] and events[-1] == "[DONE]"
    else:
        assert r.status == 500 and json.loads(r.body) == INTERNAL_ERROR
    assert time.monotonic() - t0 >= 4, "the NIXL handshake times out first (~5 s)"
    poll(lambda: d.metrics().sum("vllm:nixl_num_failed_transfers_total") >= 1, timeout=30,
         what="the failed pull counted")
