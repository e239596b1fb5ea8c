"""ramjet-sim's prefill/decode roles (--kv-role; docs/sim.md §8.4), driven by hand as a P/D router
will drive them: the prefill leg (the client's request with kv_transfer_params asking for a
remote decode, max_tokens 1, not streamed) answers kv_transfer_params in vLLM 0.32's exact shape
and holds its blocks; the decode leg (the client's request with those params) pulls them instead
of computing, reports the producer's prefix hit as cached_tokens and publishes the pulled blocks
as BlockStored; the producer frees the blocks once pulled or when the lease ends. The shapes
and values asserted here are those measured on two real vLLM 0.32 engines with the NixlConnector
(test/vllm/test_disagg.py holds vLLM to the same contract)."""

from __future__ import annotations

import json
import re
import time

import pytest

from support.disagg import ANSWER_KEYS, prefill_leg, request_body
from support.kv_mirror import Mirror
from support.ramjet_proc import poll, scrape
from support.sim_proc import SimProc, kv_events_config

JSON = {"Content-Type": "application/json"}
BLOCK = 16


def role(kind: str, *extra: str, engine_id: str = "") -> SimProc:
    args = ["--kv-role", kind, "--kv-side-channel-host", "127.0.0.1", "--enable-prompt-tokens-details",
            "--block-size", str(BLOCK), "--kv-events-config", kv_events_config(), "--speed", "20"]
    if engine_id:
        args += ["--kv-engine-id", engine_id]
    return SimProc(*args, *extra)


@pytest.fixture
def pd():
    p = role("kv_producer", engine_id="prefill-0")
    d = role("kv_consumer")
    yield p, d
    p.stop()
    d.stop()


def request(tag: str, chat: bool, stream: bool = False, max_tokens: int = 5) -> tuple[str, dict]:
    return request_body(tag, chat, "ramjet-sim", 90, "w", stream, max_tokens)


def post(sim, path: str, body: dict, rid: str = "", timeout: float = 30):
    headers = dict(JSON, **({"X-Request-Id": rid} if rid else {}))
    return sim.request("POST", path, body, headers, timeout=timeout)


def sse(raw: bytes) -> list:
    return [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]


def stats(sim) -> dict:
    return sim.admin("/sim/stats", {})


def both_legs(p, d, tag: str, chat: bool = False, stream: bool = False, max_tokens: int = 5):
    path, body = request(tag, chat, stream, max_tokens)
    r = post(p, path, prefill_leg(body), rid=tag)
    assert r.status == 200, r.body
    first = json.loads(r.body)
    dr = post(d, path, dict(body, kv_transfer_params=first["kv_transfer_params"]), rid=tag)
    return first, dr


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_the_prefill_leg_answers_vllms_kv_transfer_params_and_holds_its_blocks(pd, chat):
    p, _ = pd
    path, body = request("fields", chat)
    r = post(p, path, prefill_leg(body), rid="rid-7")
    assert r.status == 200, r.body
    a = json.loads(r.body)
    kv = a["kv_transfer_params"]
    assert list(kv) == ANSWER_KEYS
    prompt = a["usage"]["prompt_tokens"]
    assert a["usage"]["completion_tokens"] == 1
    assert kv["do_remote_prefill"] is True and kv["do_remote_decode"] is False
    assert kv["remote_engine_id"] == "prefill-0"
    assert kv["remote_host"] == "127.0.0.1" and kv["remote_port"] == p.port
    assert kv["remote_num_tokens"] == prompt
    assert len(kv["remote_block_ids"]) == 1 and len(kv["remote_block_ids"][0]) == -(-prompt // BLOCK)
    assert kv["tp_size"] == 1 and kv["dcp_size"] == 1 and kv["pp_size"] == 1
    assert kv["remote_blocks_expiry_time"] is None and kv["transfer_mode"] == "pull"
    assert kv["remote_prefill_cached_tokens"] == a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    want = r"chatcmpl-rid-7-[0-9a-f]{8}" if chat else r"cmpl-rid-7-0-[0-9a-f]{8}"
    assert re.fullmatch(want, kv["remote_request_id"]), kv["remote_request_id"]
    st = stats(p)
    assert st["kv_transfer"]["held_requests"] == 1
    assert st["kv_transfer"]["held_blocks"] == len(kv["remote_block_ids"][0])
    assert st["kv_cache_usage"] > 0, "held blocks are not free"


def test_an_ordinary_request_and_a_sim_without_a_role_answer_null_params(pd):
    p, _ = pd
    path, body = request("plain", chat=False)
    r = post(p, path, body)
    assert r.status == 200 and json.loads(r.body)["kv_transfer_params"] is None
    assert stats(p)["kv_transfer"]["held_requests"] == 0
    plain = SimProc("--block-size", str(BLOCK))
    try:
        r = post(plain, path, prefill_leg(body))
        assert r.status == 200 and json.loads(r.body)["kv_transfer_params"] is None
        assert "kv_transfer" not in stats(plain)
        assert not scrape(plain.port).has("vllm:nixl_xfer_time_seconds_count")
    finally:
        plain.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_the_decode_leg_pulls_the_prompt_and_the_producer_frees_it(pd, chat, stream):
    p, d = pd
    first, r = both_legs(p, d, f"pull-{chat}-{stream}", chat=chat, stream=stream, max_tokens=6)
    assert r.status == 200, r.body
    prompt = first["usage"]["prompt_tokens"]
    if stream:
        events = sse(r.body)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all("error" not in c for c in chunks)
        usage = chunks[-1]["usage"]
        finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
        assert finishes == ["length"]
    else:
        a = json.loads(r.body)
        usage = a["usage"]
        assert a["choices"][0]["finish_reason"] == "length"
        assert a["kv_transfer_params"] is None, "the decode side answers no params"
    assert usage["prompt_tokens"] == prompt and usage["completion_tokens"] == 6
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0, "the producer's hit, not the pulled tokens"
    assert poll(lambda: stats(p)["kv_transfer"]["held_requests"] == 0, timeout=5), "freed once pulled"
    ps, ds = stats(p)["kv_transfer"], stats(d)["kv_transfer"]
    assert ps["pulls_served"] == 1 and ps["sends_done"] == 1 and ps["expired"] == 0
    assert ds["loads_ok"] == 1 and ds["loads_failed"] == 0 and ds["loads_stale"] == 0
    assert stats(p)["kv_cache_usage"] == 0
    m = scrape(d.port)
    assert m.sum("vllm:external_prefix_cache_hits_total") == prompt
    assert m.sum("vllm:external_prefix_cache_queries_total") == prompt
    assert m.sum("vllm:prefix_cache_hits_total") == 0
    assert m.sum("vllm:nixl_xfer_time_seconds_count") == 1
    assert scrape(p.port).sum("vllm:external_prefix_cache_queries_total") == prompt, "asked, and had nothing"
    assert scrape(p.port).sum("vllm:external_prefix_cache_hits_total") == 0


def test_the_decode_leg_reports_the_producers_prefix_hit_as_cached_tokens(pd):
    p, d = pd
    first, r = both_legs(p, d, "again")
    assert json.loads(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    second, r = both_legs(p, d, "again")
    hit = second["kv_transfer_params"]["remote_prefill_cached_tokens"]
    prompt = second["usage"]["prompt_tokens"]
    assert hit == second["usage"]["prompt_tokens_details"]["cached_tokens"] == (prompt - 1) // BLOCK * BLOCK
    assert json.loads(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == hit
    # The consumer had the prompt's full blocks already: it pulled only the tail.
    m = scrape(d.port)
    assert m.sum("vllm:prefix_cache_hits_total") == hit
    assert m.sum("vllm:external_prefix_cache_hits_total") == prompt + (prompt - hit)


def test_both_sides_publish_the_prompts_blocks_as_stored(pd):
    p, d = pd
    pm = Mirror("tcp://127.0.0.1:" + p.kv_endpoint.rsplit(":", 1)[1], "kv", "tcp://127.0.0.1:" + p.kv_replay.rsplit(":", 1)[1])
    dm = Mirror("tcp://127.0.0.1:" + d.kv_endpoint.rsplit(":", 1)[1], "kv", "tcp://127.0.0.1:" + d.kv_replay.rsplit(":", 1)[1])
    try:
        first, r = both_legs(p, d, "events", max_tokens=2)
        assert r.status == 200, r.body
        full = first["usage"]["prompt_tokens"] // BLOCK
        pm.quiet(0.3)
        dm.quiet(0.3)
        stored_p = [e for e in pm.events() if e["type"] == "BlockStored"]
        stored_d = [e for e in dm.events() if e["type"] == "BlockStored"]
        assert len(stored_d) == 1, "the pulled blocks, in one BlockStored"
        assert stored_d[0]["block_hashes"] == stored_p[0]["block_hashes"]
        assert len(stored_d[0]["block_hashes"]) == full
        assert stored_d[0]["parent_block_hash"] is None and stored_d[0]["medium"] == "GPU"
        assert len(stored_d[0]["token_ids"]) == full * BLOCK
        assert not [e for e in pm.events() if e["type"] == "BlockRemoved"], "freed blocks stay cached"
        assert pm.resident() == dm.resident() == full
    finally:
        pm.close()
        dm.close()


def test_a_pull_takes_less_time_than_computing_the_prompt():
    # A prompt of 8,000 token ids at 20 µs per prefill token (qwen3.8-27b-tp4's timing) against a
    # pull of 1 ms + 0.5 µs per token: the decode leg's first token comes long before the prefill
    # leg's, in real time (--speed 1).
    common = ["--preset", "qwen3.8-27b-tp4", "--block-size", "16", "--kv-side-channel-host", "127.0.0.1",
              "--speed", "1", "--max-num-batched-tokens", "8192"]
    p = SimProc("--kv-role", "kv_producer", *common)
    d = SimProc("--kv-role", "kv_consumer", *common)
    try:
        body = {"model": "ramjet-sim", "prompt": list(range(1000, 9000)), "max_tokens": 1}
        t0 = time.monotonic()
        r = post(p, "/v1/completions", prefill_leg(body))
        prefill_s = time.monotonic() - t0
        assert r.status == 200, r.body
        kv = json.loads(r.body)["kv_transfer_params"]
        t0 = time.monotonic()
        r = post(d, "/v1/completions", dict(body, kv_transfer_params=kv))
        decode_s = time.monotonic() - t0
        assert r.status == 200, r.body
        assert prefill_s > 0.15, prefill_s
        assert decode_s < prefill_s / 3, (decode_s, prefill_s)
        assert stats(d)["kv_transfer"]["loads_ok"] == 1
        assert stats(d)["prompt_tokens"] == 8000 and stats(d)["virtual_seconds"] < 0.1
    finally:
        p.stop()
        d.stop()


def test_unpulled_blocks_are_freed_when_the_lease_ends_and_a_late_pull_reads_them_anyway():
    p = role("kv_producer", "--kv-lease-seconds", "10", engine_id="prefill-0")  # 10 virtual s = 0.5 s
    d = role("kv_consumer")
    try:
        path, body = request("lease", chat=False)
        r = post(p, path, prefill_leg(body))
        kv = json.loads(r.body)["kv_transfer_params"]
        assert stats(p)["kv_transfer"]["held_requests"] == 1
        assert poll(lambda: stats(p)["kv_transfer"]["held_requests"] == 0, timeout=5)
        assert stats(p)["kv_transfer"]["expired"] == 1
        assert scrape(p.port).sum("vllm:nixl_num_kv_expired_reqs_total") == 1
        assert stats(p)["kv_cache_usage"] == 0
        # vLLM's NIXL READ does not know the lease ended: the decode goes on with whatever the
        # block ids hold, and the producer counts the late notification.
        r = post(d, path, dict(body, kv_transfer_params=kv))
        assert r.status == 200, r.body
        assert stats(d)["kv_transfer"]["loads_stale"] == 1
        assert poll(lambda: scrape(p.port).sum("vllm:nixl_num_notifications_after_expiry_total") == 1, timeout=5)
    finally:
        p.stop()
        d.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_dead_producer_fails_the_decode_leg_as_vllm_does(pd, stream):
    p, d = pd
    path, body = request("dead", chat=True, stream=stream)
    r = post(p, path, prefill_leg(body))
    kv = json.loads(r.body)["kv_transfer_params"]
    p.stop()
    r = post(d, path, dict(body, kv_transfer_params=kv))
    error = {"error": {"message": "Internal server error", "type": "InternalServerError", "param": None, "code": 500}}
    if stream:
        assert r.status == 200
        assert [json.loads(e) for e in sse(r.body)[:-1]] == [error] and sse(r.body)[-1] == "[DONE]"
    else:
        assert r.status == 500 and json.loads(r.body) == error
    assert stats(d)["kv_transfer"]["loads_failed"] == 1
    assert scrape(d.port).sum("vllm:nixl_num_failed_transfers_total") == 1
    assert stats(d)["kv_cache_usage"] == 0 and stats(d)["waiting"] == 0


def test_with_the_recompute_policy_a_dead_producer_costs_a_local_prefill():
    p = role("kv_producer", engine_id="prefill-0")
    d = role("kv_consumer", "--kv-load-failure-policy", "recompute")
    try:
        path, body = request("recompute", chat=False)
        kv = json.loads(post(p, path, prefill_leg(body)).body)["kv_transfer_params"]
        p.stop()
        r = post(d, path, dict(body, kv_transfer_params=kv))
        assert r.status == 200, r.body
        a = json.loads(r.body)
        assert a["usage"]["completion_tokens"] == 5
        assert stats(d)["kv_transfer"]["loads_failed"] == 1
        assert scrape(d.port).sum("vllm:external_prefix_cache_hits_total") == a["usage"]["prompt_tokens"]
        assert stats(d)["prompt_tokens"] == a["usage"]["prompt_tokens"]
        assert stats(d)["virtual_seconds"] > 0
    finally:
        p.stop()
        d.stop()


def test_a_decode_leg_for_another_engine_fails_and_a_refused_one_frees_the_producer(pd):
    p, d = pd
    path, body = request("other", chat=False)
    kv = json.loads(post(p, path, prefill_leg(body)).body)["kv_transfer_params"]
    # The handshake names another engine (a restarted producer): the transfer fails.
    r = post(d, path, dict(body, kv_transfer_params=dict(kv, remote_engine_id="prefill-9")))
    assert r.status == 500, r.body
    assert stats(p)["kv_transfer"]["held_requests"] == 1
    # A decode leg the API server refuses (an unknown model) tells the producer to free.
    r = post(d, path, dict(body, model="nope", kv_transfer_params=kv))
    assert r.status == 404, r.body
    assert poll(lambda: stats(p)["kv_transfer"]["held_requests"] == 0, timeout=5)
    assert stats(p)["kv_transfer"]["sends_done"] == 1 and stats(p)["kv_transfer"]["pulls_served"] == 0


def test_malformed_kv_transfer_params_are_400s(pd):
    _, d = pd
    path, body = request("bad", chat=False)
    r = post(d, path, dict(body, kv_transfer_params="yes"))
    assert r.status == 400
    # pydantic's dict_type, as vLLM 0.32 answers it (measured).
    assert json.loads(r.body) == {"error": {
        "message": "1 validation error:\n  {'type': 'dict_type', 'loc': 'body.kv_transfer_params', "
                   "'msg': 'Input should be a valid dictionary', 'input': 'yes'}",
        "type": "Bad Request", "param": "body.kv_transfer_params", "code": 400}}
    for params, what in [({"do_remote_prefill": True}, "remote_engine_id"),
                         ({"do_remote_prefill": True, "remote_engine_id": "e", "remote_request_id": "r",
                           "remote_host": "127.0.0.1", "remote_port": 1, "remote_block_ids": []}, "remote_block_ids"),
                         ({"do_remote_prefill": True, "remote_engine_id": "e", "remote_request_id": "r",
                           "remote_host": "127.0.0.1", "remote_port": "x", "remote_block_ids": [[1]]}, "remote_port"),
                         ({"do_remote_prefill": True, "do_remote_decode": True}, "exclusive")]:
        r = post(d, path, dict(body, kv_transfer_params=params))
        assert r.status == 400, (params, r.body)
        err = json.loads(r.body)["error"]
        assert err["type"] == "BadRequestError" and err["param"] == "kv_transfer_params" and err["code"] == 400
        assert what in err["message"], err
    assert stats(d)["running"] == 0 and stats(d)["waiting"] == 0


def test_a_streamed_prefill_leg_holds_its_blocks_without_answering_params(pd):
    # vLLM writes kv_transfer_params only into the full answer: a streamed prefill leg's blocks
    # wait for a pull nobody can ask for, until the lease ends.
    p, _ = pd
    path, body = request("streamed", chat=True)
    r = post(p, path, dict(prefill_leg(body), stream=True))
    assert r.status == 200
    assert all("kv_transfer_params" not in json.loads(e) for e in sse(r.body)[:-1])
    assert stats(p)["kv_transfer"]["held_requests"] == 1


def test_a_side_channel_port_of_its_own_is_answered_and_served():
    import socket
    with socket.socket() as s:  # a free port for the flag (the sim binds it)
        s.bind(("127.0.0.1", 0))
        side = s.getsockname()[1]
    p = role("kv_producer", "--kv-side-channel-port", str(side), engine_id="prefill-0")
    d = role("kv_consumer")
    try:
        assert f"side_channel=127.0.0.1:{side}" in p.output()
        first, r = both_legs(p, d, "side")
        assert first["kv_transfer_params"]["remote_port"] == side != p.port
        assert r.status == 200, r.body
        assert stats(d)["kv_transfer"]["loads_ok"] == 1
        assert poll(lambda: stats(p)["kv_transfer"]["sends_done"] == 1, timeout=5)
    finally:
        p.stop()
        d.stop()


def test_heartbeats_of_a_queued_decode_leg_keep_the_producers_blocks_past_the_lease():
    # A 10 s lease (0.5 s at --speed 20); the consumer runs one sequence at a time and is busy
    # for ~1 s with a long request, so the decode leg queues twice as long as the lease: its
    # heartbeats (every lease/6) extend it, as vLLM's decode engine does, and the pull is fresh.
    import threading
    p = role("kv_producer", "--kv-lease-seconds", "10", engine_id="prefill-0")
    d = role("kv_consumer", "--kv-lease-seconds", "10", "--max-num-seqs", "1")
    try:
        path, body = request("busy", chat=False)
        long = {"model": "ramjet-sim", "prompt": "long one", "max_tokens": 10000}
        t = threading.Thread(target=lambda: post(d, "/v1/completions", long, timeout=60))
        t.start()
        assert poll(lambda: stats(d)["running"] == 1, timeout=5)
        kv = json.loads(post(p, path, prefill_leg(body)).body)["kv_transfer_params"]
        t0 = time.monotonic()
        r = post(d, path, dict(body, kv_transfer_params=kv))
        assert r.status == 200, r.body
        assert time.monotonic() - t0 > 0.6, "queued longer than the lease"
        t.join()
        ps = stats(p)["kv_transfer"]
        assert ps["heartbeats"] >= 2 and ps["expired"] == 0 and ps["sends_done"] == 1
        assert stats(d)["kv_transfer"]["loads_stale"] == 0
    finally:
        p.stop()
        d.stop()


AGENT_PATHS = {"responses": "/v1/responses", "messages": "/v1/messages"}


def agent_body(api: str, tag: str, max_tokens: int = 5) -> dict:
    text = tag + " " + " ".join(f"a{i}" for i in range(90))
    if api == "responses":
        return {"model": "ramjet-sim", "input": text, "max_output_tokens": max_tokens}
    return {"model": "ramjet-sim", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}


def agent_prefill_leg(api: str, body: dict) -> dict:
    leg = dict(body, kv_transfer_params={"do_remote_decode": True, "do_remote_prefill": False}, stream=False)
    leg["max_output_tokens" if api == "responses" else "max_tokens"] = 1
    return leg


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_the_agent_apis_take_both_legs(pd, api):
    """vLLM 0.32 reads kv_transfer_params on its Responses and Messages requests too: the prefill
    answer carries them at its top level, the decode leg pulls instead of computing and reports the
    producer's hit."""
    p, d = pd
    body = agent_body(api, "agent-" + api)
    r = post(p, AGENT_PATHS[api], agent_prefill_leg(api, body), rid="ag-" + api)
    assert r.status == 200, r.body
    first = json.loads(r.body)
    kv = first["kv_transfer_params"]
    assert list(kv) == ANSWER_KEYS and kv["remote_engine_id"] == "prefill-0"
    assert kv["remote_prefill_cached_tokens"] == 0
    prompt = kv["remote_num_tokens"]
    assert stats(p)["kv_transfer"]["held_requests"] == 1
    r = post(d, AGENT_PATHS[api], dict(body, kv_transfer_params=kv), rid="ag-" + api)
    assert r.status == 200, r.body
    a = json.loads(r.body)
    assert "kv_transfer_params" not in a or a["kv_transfer_params"] is None
    assert scrape(d.port).sum("vllm:external_prefix_cache_hits_total") == prompt
    poll(lambda: stats(p)["kv_transfer"]["held_requests"] == 0, what="the producer freed the pulled blocks")
    # Again: the producer's own hit is what the decode answer reports as cached.
    first = json.loads(post(p, AGENT_PATHS[api], agent_prefill_leg(api, body)).body)
    hit = first["kv_transfer_params"]["remote_prefill_cached_tokens"]
    assert hit == (prompt - 1) // BLOCK * BLOCK > 0
    a = json.loads(post(d, AGENT_PATHS[api], dict(body, kv_transfer_params=first["kv_transfer_params"])).body)
    if api == "responses":
        assert a["usage"]["input_tokens_details"]["cached_tokens"] == hit
    else:
        assert a["usage"]["cache_read_input_tokens"] == hit
