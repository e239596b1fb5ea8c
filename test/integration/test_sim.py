"""ramjet-sim speaks vLLM's HTTP, SSE, metrics and KV-event wire formats, and its faults work.

Runs real ramjet-sim processes on loopback (and ramjet in front of two of them)."""

from __future__ import annotations

import json
import socket
import time

import msgpack
import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from support.ramjet_proc import RawClient, RamjetProc, http_request, poll
from support.sim_proc import SimProc

MSGS = [{"role": "system", "content": "You are a careful assistant. " * 20},
        {"role": "user", "content": "Tell me about prefix caches."}]


def subscribe(ctx, sim, topic=b""):
    """A SUB socket on the sim's KV-event PUB endpoint, past the ZMQ slow-joiner window."""
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect("tcp://127.0.0.1:" + sim.kv_endpoint.rsplit(":", 1)[1])
    time.sleep(0.3)
    return sub


def chat(**kw):
    body = {"model": "ramjet-sim", "messages": MSGS, "max_tokens": 8}
    body.update(kw)
    return body


@pytest.fixture
def sim():
    s = SimProc("--speed", "50", "--enable-prompt-tokens-details")
    yield s
    s.stop()


def sse_datas(raw: bytes) -> list:
    out = []
    for line in raw.decode().split("\n"):
        if line.startswith("data: "):
            out.append(line[6:])
    return out


def test_chat_json_has_vllm_shape_and_honours_max_tokens(sim):
    r = sim.request("POST", "/v1/chat/completions", chat(max_tokens=7))
    assert r.status == 200, r.body
    o = r.json()
    assert o["object"] == "chat.completion" and o["id"].startswith("chatcmpl-")
    assert o["choices"][0]["message"]["role"] == "assistant"
    assert o["choices"][0]["finish_reason"] == "length"
    assert o["usage"]["completion_tokens"] == 7
    assert o["usage"]["prompt_tokens"] > 50
    assert o["usage"]["total_tokens"] == o["usage"]["prompt_tokens"] + 7


def test_chat_stream_has_role_content_finish_usage_and_done(sim):
    r = sim.request("POST", "/v1/chat/completions",
                    chat(stream=True, max_tokens=5, stream_options={"include_usage": True}))
    assert r.status == 200
    assert r.header("Content-Type").startswith("text/event-stream")
    datas = sse_datas(r.body)
    assert datas[-1] == "[DONE]"
    chunks = [json.loads(d) for d in datas[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text.strip()
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finals and finals[-1]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5


def test_stream_without_stream_options_has_no_usage_chunk(sim):
    r = sim.request("POST", "/v1/chat/completions", chat(stream=True, max_tokens=3))
    chunks = [json.loads(d) for d in sse_datas(r.body)[:-1]]
    assert all("usage" not in c for c in chunks)


def test_completions_endpoint_json_and_stream(sim):
    r = sim.request("POST", "/v1/completions", {"prompt": "hello " * 40, "max_tokens": 4})
    o = r.json()
    assert o["object"] == "text_completion" and o["usage"]["completion_tokens"] == 4
    r = sim.request("POST", "/v1/completions", {"prompt": "hello " * 40, "max_tokens": 4, "stream": True})
    assert sse_datas(r.body)[-1] == "[DONE]"


def test_repeated_prompt_reports_cached_tokens_only_when_enabled(sim):
    # vLLM 0.32: with --enable-prompt-tokens-details the details are always there (0 included),
    # created_cache_tokens = the prompt's blocks this request wrote to the prefix cache.
    first = sim.request("POST", "/v1/chat/completions", chat()).json()
    d = first["usage"]["prompt_tokens_details"]
    assert d["cached_tokens"] == 0 and d["multimodal_tokens"] is None
    assert d["created_cache_tokens"] == first["usage"]["prompt_tokens"] // 16 * 16
    second = sim.request("POST", "/v1/chat/completions", chat()).json()
    d = second["usage"]["prompt_tokens_details"]
    assert 16 <= d["cached_tokens"] < second["usage"]["prompt_tokens"] and d["created_cache_tokens"] == 0
    plain = SimProc("--speed", "50")
    try:
        plain.request("POST", "/v1/chat/completions", chat())
        again = plain.request("POST", "/v1/chat/completions", chat()).json()
        assert again["usage"]["prompt_tokens_details"] is None  # (None, dumped)
    finally:
        plain.stop()


def test_models_version_health_and_tokenize(sim):
    m = sim.request("GET", "/v1/models").json()
    assert m["object"] == "list" and m["data"][0]["id"] == "ramjet-sim"
    assert m["data"][0]["max_model_len"] > 0 and m["data"][0]["owned_by"] == "vllm"
    assert "version" in sim.request("GET", "/version").json()
    assert sim.request("GET", "/health").status == 200
    t = sim.request("POST", "/tokenize", {"prompt": "hello world"}).json()
    assert t["count"] == len(t["tokens"]) > 0 and t["max_model_len"] == m["data"][0]["max_model_len"]
    c = sim.request("POST", "/tokenize", {"messages": MSGS}).json()
    full = sim.request("POST", "/v1/chat/completions", chat(max_tokens=1)).json()
    assert c["count"] == full["usage"]["prompt_tokens"]


def test_context_overflow_is_a_vllm_400(sim):
    # vLLM 0.32: max_tokens over max_model_len is refused, a prompt over it too; otherwise
    # max_tokens is clamped to what the context leaves.
    r = sim.request("POST", "/v1/chat/completions", chat(max_tokens=10_000_000))
    assert r.status == 400
    e = r.json()["error"]
    assert e["type"] == "BadRequestError" and e["code"] == 400 and e["param"] == "max_tokens"
    assert "cannot be greater than max_model_len" in e["message"]
    model_len = sim.request("GET", "/v1/models").json()["data"][0]["max_model_len"]
    r = sim.request("POST", "/v1/completions", {"prompt": list(range(1000, 1000 + model_len + 5)), "max_tokens": 1})
    e = r.json()["error"]
    assert r.status == 400 and e["param"] == "input_tokens" and "maximum context length" in e["message"]
    prompt = list(range(1000, 1000 + model_len - 3))
    r = sim.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": model_len})
    assert r.status == 200 and r.json()["usage"]["completion_tokens"] == 3


def test_unknown_model_is_404(sim):
    r = sim.request("POST", "/v1/chat/completions", chat(model="nope"))
    assert r.status == 404 and r.json()["error"]["code"] == 404


def test_metrics_use_vllm_names(sim):
    sim.request("POST", "/v1/chat/completions", chat())
    text = sim.request("GET", "/metrics").body.decode()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:cache_config_info"):
        assert f"\n{name}{{" in text, name
    assert "spec_decode" not in text
    families = {f.name for f in text_string_to_metric_families(text)}  # parses cleanly
    assert "vllm:num_requests_running" in families and "vllm:prompt_tokens" in families
    spec = SimProc("--speed", "50", "--speculative-tokens", "2")
    try:
        spec.request("POST", "/v1/chat/completions", chat(max_tokens=20))
        t = spec.request("GET", "/metrics").body.decode()
        assert "vllm:spec_decode_num_drafts_total{" in t
        assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{' in t and 'position="1"' in t
    finally:
        spec.stop()


def test_resident_oracle_sees_the_cached_prefix(sim):
    before = sim.admin("/sim/resident", {"messages": MSGS})
    assert before["resident_tokens"] == 0
    sim.request("POST", "/v1/chat/completions", chat())
    after = sim.admin("/sim/resident", {"messages": MSGS})
    assert 16 <= after["resident_tokens"] <= after["prompt_tokens"]


def test_client_disconnect_aborts_the_request(sim):
    c = RawClient(sim.port)
    c.send_request("POST", "/v1/chat/completions", json.dumps(chat(stream=True, max_tokens=100000 // 10)).encode(),
                   {"Content-Type": "application/json"})
    poll(lambda: sim.admin("/sim/stats", {})["running"] == 1, what="request running")
    c.s.close()
    poll(lambda: sim.admin("/sim/stats", {})["running"] == 0, timeout=2, what="request aborted")


def test_fault_error_rate_answers_vllm_error_json():
    s = SimProc("--fault-error-rate", "1", "--fault-error-status", "503")
    try:
        r = s.request("POST", "/v1/chat/completions", chat())
        assert r.status == 503 and r.json()["error"]["code"] == 503
        s.admin("/sim/fault", {"error_rate": 0})
        assert s.request("POST", "/v1/chat/completions", chat()).status == 200
    finally:
        s.stop()


def test_fault_health_fail_and_hang():
    s = SimProc("--speed", "50")
    try:
        s.admin("/sim/fault", {"health_fail": True})
        assert s.request("GET", "/health").status == 503
        s.admin("/sim/fault", {"health_fail": False, "hang": True})
        with pytest.raises((socket.timeout, TimeoutError)):
            http_request(s.port, "GET", "/health", timeout=0.5)
    finally:
        s.stop()


def test_fault_refuse_then_serve():
    s = SimProc("--fault-refuse-seconds", "0.6", wait_ready=False)
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", s.port), timeout=1).close()
        poll(lambda: _connects(s.port), timeout=5, what="listening after the refuse window")
    finally:
        s.stop()


def _connects(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_fault_crash_exits_nonzero():
    s = SimProc()
    try:
        with pytest.raises(Exception):
            s.request("POST", "/sim/fault", {"crash": True}, timeout=2)
        assert s.proc.wait(5) == 1
    finally:
        s.stop()


@pytest.mark.parametrize("fmt", ["map", "array"])
def test_kv_events_reach_a_zmq_subscriber_and_replay_returns_them(fmt):
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0",
           "replay_endpoint": "tcp://*:0", "topic": "kv"}
    s = SimProc("--speed", "50", "--kv-events-config", json.dumps(cfg), "--kv-events-format", fmt)
    ctx = zmq.Context()
    try:
        rep_port = s.kv_replay.rsplit(":", 1)[1]
        sub = subscribe(ctx, s, b"kv")
        s.request("POST", "/v1/chat/completions", chat(max_tokens=2))
        assert sub.poll(5000), "no KV event received"
        topic, seq, payload = sub.recv_multipart()
        assert topic == b"kv" and int.from_bytes(seq, "big") == 0
        batch = msgpack.unpackb(payload, raw=False)
        assert isinstance(batch, list) and len(batch) == 3 and isinstance(batch[0], float)
        ev = batch[1][0]
        if fmt == "map":
            assert ev["type"] == "BlockStored" and ev["block_size"] == 16 and ev["parent_block_hash"] is None
            assert len(ev["token_ids"]) == 16 * len(ev["block_hashes"]) and ev["medium"] == "GPU"
        else:
            assert ev[0] == "BlockStored" and ev[4] == 16 and ev[2] is None
            assert len(ev[3]) == 16 * len(ev[1])
        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{rep_port}")
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])
        assert dealer.poll(5000)
        first = dealer.recv_multipart()
        assert first[0] == b"" and first[1] == b"kv" and int.from_bytes(first[2], "big") == 0
        assert first[3] == payload
    finally:
        ctx.destroy(linger=0)
        s.stop()


def test_ramjet_streams_through_two_sims_and_spreads_load():
    sims = [SimProc("--speed", "50"), SimProc("--speed", "50")]
    rj = RamjetProc(sims).start()
    try:
        seen = set()
        for i in range(6):
            # Distinct prompts: new prefixes take turns (identical ones would stick to one engine).
            body = chat(stream=True, max_tokens=4,
                        messages=[*MSGS[:-1], {"role": "user", "content": f"a new question {i}"}])
            r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
            assert r.status == 200 and sse_datas(r.body)[-1] == "[DONE]"
            seen.add(r.header("X-Ramjet-Upstream"))
        assert seen == {"0", "1"}
    finally:
        rj.stop()
        for s in sims:
            s.stop()


def test_reset_prefix_cache_clears_residency_and_emits_all_blocks_cleared():
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0", "topic": ""}
    s = SimProc("--speed", "50", "--kv-events-config", json.dumps(cfg))
    ctx = zmq.Context()
    try:
        sub = subscribe(ctx, s)
        s.request("POST", "/v1/chat/completions", chat())
        assert s.admin("/sim/resident", {"messages": MSGS})["resident_tokens"] > 0
        assert s.request("POST", "/reset_prefix_cache").status == 200
        assert s.admin("/sim/resident", {"messages": MSGS})["resident_tokens"] == 0
        assert s.request("GET", "/health").status == 200  # still alive
        kinds = []
        while sub.poll(2000):
            batch = msgpack.unpackb(sub.recv_multipart()[2], raw=False)
            kinds += [e["type"] for e in batch[1]]
            if "AllBlocksCleared" in kinds:
                break
        assert kinds[0] == "BlockStored" and kinds[-1] == "AllBlocksCleared"
    finally:
        ctx.destroy(linger=0)
        assert s.stop() == 0


def test_gpus_flag_exposes_dcgm_series():
    s = SimProc("--gpus", "2")
    try:
        t = s.request("GET", "/metrics").body.decode()
        for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"):
            assert f'{name}{{gpu="1"' in t, name
    finally:
        s.stop()


def test_fault_slow_makes_steps_longer():
    s = SimProc("--speed", "50")
    try:
        t = time.monotonic()
        s.request("POST", "/v1/chat/completions", chat(max_tokens=5))
        fast = time.monotonic() - t
        s.admin("/sim/fault", {"slow_ms": 40})
        t = time.monotonic()
        s.request("POST", "/v1/chat/completions", chat(max_tokens=5))
        slow = time.monotonic() - t
        # 5 tokens take 5 engine steps (the first also prefills), each at least 40 ms longer.
        assert slow >= 5 * 0.040 * 0.95 and slow > fast + 0.15, (fast, slow)
    finally:
        s.stop()


def test_fault_kv_restart_resets_the_sequence():
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0"}
    s = SimProc("--speed", "50", "--kv-events-config", json.dumps(cfg))
    ctx = zmq.Context()
    try:
        sub = subscribe(ctx, s)
        seqs = []
        for i in range(2):
            s.request("POST", "/v1/chat/completions", chat(messages=[{"role": "user", "content": f"turn {i} " * 40}]))
        s.admin("/sim/fault", {"kv_restart": True})
        s.request("POST", "/v1/chat/completions", chat(messages=[{"role": "user", "content": "after " * 40}]))
        while sub.poll(1000):
            seqs.append(int.from_bytes(sub.recv_multipart()[1], "big"))
        assert seqs[0] == 0 and seqs[1] == 1 and 0 in seqs[2:], seqs
    finally:
        ctx.destroy(linger=0)
        s.stop()
