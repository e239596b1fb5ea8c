"""Proxying: pass-through of bodies and statuses, headers, /v1/models rewrite, shims, routing."""

import json
import threading
import time

import pytest

from support.e2e import CHAT, COMPLETIONS, all_inference, chat, enc, engine_of, open_stream, wait_metric
from support.ramjet_proc import RawClient, poll


def test_chat_json_roundtrip_is_byte_exact(rj, engines):
    body = b'{ "model" : "mock-model",\n  "messages": [ {"role":"user", "content":"hi"} ],"max_tokens": 99999 }'
    r = rj.request("POST", CHAT, body, {"Content-Type": "application/json"})
    assert r.status == 200, r
    e = engine_of(engines, r)
    (req,) = e.inference_requests()
    assert req.body == body
    assert req.method == "POST" and req.target == CHAT
    assert r.json()["engine"] == e.name
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == e.cached_tokens
    assert len(all_inference(engines)) == 1


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", chat()),
    ("/v1/completions", {"model": "mock-model", "prompt": "once upon"}),
    ("/v1/responses", {"model": "mock-model", "input": "hi", "max_output_tokens": 900000}),
    ("/v1/messages", {"model": "mock-model", "max_tokens": 900000,
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]}]}),
])
def test_inference_endpoints_forwarded(rj, engines, path, body):
    raw = enc(body)
    r = rj.request("POST", path, raw, {"Content-Type": "application/json"})
    assert r.status == 200, r
    e = engine_of(engines, r)
    (req,) = e.inference_requests()
    assert req.target == path
    assert req.body == raw  # nothing to shim here (and never outside chat/completions)


OTHER_PATHS = [
    ("GET", "/version?verbose=1&x=%20y", b""),
    ("POST", "/tokenize", b'{"prompt":"abc","add_special_tokens":true}'),
    ("POST", "/v1/chat/completions/render", b'{"messages":[],"max_tokens":500000}'),
    ("DELETE", "/v1/files/file-123", b""),
    ("GET", "/metrics", b""),
    ("POST", "/v1/embeddings", b"not even json"),
]
PASSTHROUGH = {"RJ_SERVE_TOKENIZE": "true",
               "RJ_PASSTHROUGH_PATHS": "/version,/v1/chat/completions/render,/v1/files/*,/metrics,/v1/embeddings"}


@pytest.mark.parametrize("method,target,body", OTHER_PATHS)
def test_listed_paths_forwarded_unchanged(engines, ramjet_factory, method, target, body):
    rj = ramjet_factory(engines, env=PASSTHROUGH)
    r = rj.request(method, target, body or None)
    assert r.status == 200, r
    e = engine_of(engines, r)
    (req,) = e.inference_requests()
    assert (req.method, req.target, req.body) == (method, target, body)
    assert r.json() == {"engine": e.name, "method": method, "target": target, "body_len": len(body)}


@pytest.mark.parametrize("method,target,body", OTHER_PATHS)
def test_unlisted_paths_answered_by_ramjet_and_never_reach_an_engine(rj, engines, method, target, body):
    r = rj.request(method, target, body or None)
    assert r.status == 404, r
    assert r.header("X-Ramjet-Upstream") is None
    err = r.json()["error"]
    assert err["code"] == 404 and err["type"] == "invalid_request_error" and err["message"]
    assert not engines[0].inference_requests() and not engines[1].inference_requests()


def test_route_header_is_replaced_and_request_id_forwarded(rj, engines):
    r = rj.request("POST", CHAT, enc(chat()), {
        "Content-Type": "application/json", "X-Ramjet-Upstream": "7", "X-Request-Id": "req-abc-123",
        "Authorization": "Bearer sk-client-token", "X-Custom-Thing": "kept"})
    assert r.status == 200
    assert r.header_all("X-Ramjet-Upstream") in (["0"], ["1"])
    e = engine_of(engines, r)
    (req,) = e.inference_requests()
    assert req.header("X-Ramjet-Upstream") is None
    assert req.header_all("X-Request-Id") == ["req-abc-123"]
    assert req.header("Authorization") == "Bearer sk-client-token"
    assert req.header("X-Custom-Thing") == "kept"


def test_hop_by_hop_headers_not_forwarded(rj, engines):
    c = RawClient(rj.api_port)
    body = enc(chat())
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\n"
           b"Host: ramjet.test\r\n"
           b"Content-Type: application/json\r\n"
           b"Content-Length: " + str(len(body)).encode() + b"\r\n"
           b"Connection: keep-alive, X-Drop-Me\r\n"
           b"X-Drop-Me: 1\r\n"
           b"Keep-Alive: timeout=5\r\n"
           b"TE: trailers\r\n"
           b"Trailers: X-Foo\r\n"
           b"Upgrade: h2c\r\n"
           b"Proxy-Authorization: Basic dXNlcjpwYXNz\r\n"
           b"Proxy-Authenticate: Basic\r\n"
           b"X-Keep-Me: yes\r\n"
           b"\r\n" + body)
    r = c.read_response()
    c.close()
    assert r.status == 200, r
    e = engine_of(engines, r)
    (req,) = e.inference_requests()
    names = req.header_names()
    for h in ("x-drop-me", "keep-alive", "te", "trailers", "upgrade", "proxy-authorization",
              "proxy-authenticate", "x-ramjet-upstream"):
        assert h not in names, f"{h} reached the engine: {req.headers}"
    assert (req.header("Connection") or "").lower() in ("", "keep-alive", "close")
    assert req.header("X-Keep-Me") == "yes"
    assert req.body == body


def merged_models(rj):
    """GET /v1/models once ramjet answers it itself (the engines' cards merged, no engine dialed)."""
    return poll(lambda: (lambda r: r if r.status == 200 and r.header("X-Ramjet-Upstream") is None else None)(
        rj.request("GET", "/v1/models")), what="ramjet's own /v1/models")


def test_models_context_shrink_recursive(engines, ramjet_factory):
    for e in engines:
        e.max_model_len = 131072
        e.models_extra = {"nested": {"context_length": 131072, "max_context_length": 20000,
                                     "deeper": {"max_model_len": 50000, "other_len": 999999}},
                          "context_length": 16384}
        e.extra_cards = [{"id": "lora-a", "object": "model", "max_model_len": 16385, "parent": "mock-model"},
                         {"id": "lora-b", "object": "model", "max_context_length": 1000}]
    rj = ramjet_factory(engines)
    # Before the engines' cards are known ramjet forwards the call to one engine, with the same
    # rewrite; then it answers from the cards of all of them, each model once.
    r = merged_models(rj)
    data = r.json()["data"]
    assert [c["id"] for c in data] == ["mock-model", "lora-a", "lora-b"]
    card = data[0]
    assert card["max_model_len"] == 131072 - 16384
    assert card["context_length"] == 16384                       # not > margin: unchanged
    assert card["nested"]["context_length"] == 131072 - 16384
    assert card["nested"]["max_context_length"] == 20000 - 16384
    assert card["nested"]["deeper"]["max_model_len"] == 50000 - 16384
    assert card["nested"]["deeper"]["other_len"] == 999999       # other names untouched
    assert card["id"] == "mock-model" and card["owned_by"] == "vllm"
    assert data[1]["max_model_len"] == 1
    assert data[2]["max_context_length"] == 1000


def test_models_margin_is_configurable(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_ADVERTISE_CTX_MARGIN": "1000"})
    r = rj.request("GET", "/v1/models")
    assert r.status == 200
    assert r.json()["data"][0]["max_model_len"] == 131072 - 1000


def test_models_error_passes_through(engine_factory, ramjet_factory):
    (e,) = engine_factory(1)
    e.models_status = 404
    rj = ramjet_factory([e])
    r = rj.request("GET", "/v1/models")
    assert r.status == 404
    assert r.body == e.error_body(404)
    assert r.header("X-Ramjet-Upstream") == "0"


@pytest.mark.parametrize("code", [400, 404, 429, 500])
def test_error_statuses_pass_through_without_retry(rj, engines, code):
    for e in engines:
        e.mode = f"status={code}"
    r = rj.chat(chat())
    assert r.status == code, r
    e = engine_of(engines, r)
    assert r.body == e.error_body(code)
    assert len(all_inference(engines)) == 1, "a non-502/503 status must not be retried"
    code_h, h = rj.health()
    assert h["healthy_replicas"] == 2, f"a {code} must not fence the engine: {h}"


# ------------------------------------------------------------------------------------ shims
TEXT_PARTS = [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]
IMAGE_PARTS = [{"type": "text", "text": "what is this?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
VIDEO_PARTS = [{"type": "video_url", "video_url": {"url": "https://example.invalid/v.mp4"}},
               {"type": "text", "text": "describe"}]

SHIM_CASES = [
    # id, path, body, expected body at the engine (None = byte-for-byte unchanged)
    ("max_tokens_at_threshold_dropped", CHAT, chat(max_tokens=100000), chat()),
    ("max_tokens_huge_dropped", CHAT, chat(max_tokens=10**9, temperature=0.5), chat(temperature=0.5)),
    ("max_tokens_below_kept", CHAT, chat(max_tokens=99999), None),
    ("max_completion_tokens_dropped", CHAT, chat(max_completion_tokens=262144, max_tokens=10),
     chat(max_tokens=10)),
    ("both_dropped", CHAT, chat(max_completion_tokens=262144, max_tokens=131072), chat()),
    ("text_parts_flattened", CHAT,
     {"model": "mock-model", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": TEXT_PARTS}]},
     {"model": "mock-model", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "Hello, world"}]}),
    ("image_parts_untouched", CHAT, {"model": "mock-model", "messages": [{"role": "user", "content": IMAGE_PARTS}]}, None),
    ("video_parts_untouched", CHAT, {"model": "mock-model", "messages": [{"role": "user", "content": VIDEO_PARTS}]}, None),
    ("bad_reasoning_effort_dropped", CHAT, chat(reasoning_effort="turbo"), chat()),
    ("reasoning_effort_xhigh_kept", CHAT, chat(reasoning_effort="xhigh"), None),
    ("reasoning_effort_none_kept", CHAT, chat(reasoning_effort="none"), None),
    ("completions_max_tokens_dropped", COMPLETIONS, {"model": "mock-model", "prompt": "p", "max_tokens": 200000},
     {"model": "mock-model", "prompt": "p"}),
    ("completions_small_max_tokens_kept", COMPLETIONS, {"model": "mock-model", "prompt": "p", "max_tokens": 16}, None),
    ("responses_never_shimmed", "/v1/responses",
     {"model": "mock-model", "input": "x", "max_tokens": 900000, "reasoning_effort": "turbo"}, None),
    ("messages_never_shimmed", "/v1/messages",
     {"model": "mock-model", "max_tokens": 900000, "messages": [{"role": "user", "content": TEXT_PARTS}]}, None),
]


@pytest.mark.parametrize("case", SHIM_CASES, ids=[c[0] for c in SHIM_CASES])
def test_shims(rj, engines, case):
    _, path, body, expected = case
    # Odd spacing makes any re-serialisation visible for the unchanged cases.
    raw = json.dumps(body, indent=1).encode()
    before = rj.metrics().sum("ramjet_shim_rewrites_total")
    r = rj.request("POST", path, raw, {"Content-Type": "application/json"})
    assert r.status == 200, r
    (req,) = engine_of(engines, r).inference_requests()
    after = rj.metrics().sum("ramjet_shim_rewrites_total")
    if expected is None:
        assert req.body == raw, "an unchanged body must reach the engine byte for byte"
        assert after == before
    else:
        assert json.loads(req.body) == expected
        assert after > before, "ramjet_shim_rewrites_total did not move"
        cl = req.header("Content-Length")
        assert cl is None or int(cl) == len(req.body)


def test_mixed_message_flattens_text_only_message(rj, engines):
    body = {"model": "mock-model", "messages": [{"role": "user", "content": IMAGE_PARTS},
                                       {"role": "assistant", "content": TEXT_PARTS}]}
    r = rj.chat(body)
    assert r.status == 200
    (req,) = engine_of(engines, r).inference_requests()
    got = json.loads(req.body)
    assert got["messages"][0]["content"] == IMAGE_PARTS
    assert got["messages"][1]["content"] == "Hello, world"


def test_strip_threshold_is_configurable(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_MAX_TOKENS_STRIP": "1000"})
    r = rj.chat(chat(max_tokens=1000))
    req = engine_of(engines, r).inference_requests()[-1]
    assert json.loads(req.body) == chat()
    raw = enc(chat(max_tokens=999))
    r = rj.request("POST", CHAT, raw, {"Content-Type": "application/json"})
    req = engine_of(engines, r).inference_requests()[-1]
    assert req.body == raw


def test_large_body_forwarded_byte_exact(rj, engines):
    body = enc(chat("x" * (3 << 20)))
    r = rj.request("POST", CHAT, body, {"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200
    (req,) = engine_of(engines, r).inference_requests()
    assert req.body == body


# ------------------------------------------------------------------------------ usage / metrics
def test_usage_metrics_non_streaming(rj, engines):
    m0 = rj.metrics()
    r = rj.chat(chat(stream=False))
    assert r.status == 200
    e = engine_of(engines, r)
    # accounting may land just after the last byte: wait for the request counter
    m1 = wait_metric(rj, lambda m: m.val("ramjet_requests_total", endpoint="chat") > m0.val(
        "ramjet_requests_total", endpoint="chat"), what="ramjet_requests_total{endpoint=chat} +1")
    d = lambda name, **l: m1.val(name, **l) - m0.val(name, **l)  # noqa: E731
    assert d("ramjet_requests_total", endpoint="chat", code="200", stream="false") == 1
    assert d("ramjet_prompt_tokens_total") == e.prompt_tokens
    assert d("ramjet_cached_prompt_tokens_total") == e.cached_tokens
    assert d("ramjet_completion_tokens_total") == e.chunks
    assert d("ramjet_finish_reasons_total", endpoint="chat", reason="stop") == 1
    assert d("ramjet_usage_parse_failures_total") == 0


def test_usage_metrics_completions_without_cached(rj, engines):
    for e in engines:
        e.cached_tokens = 0
    m0 = rj.metrics()
    r = rj.request("POST", COMPLETIONS, enc({"model": "mock-model", "prompt": "p"}))
    assert r.status == 200
    m1 = wait_metric(rj, lambda m: m.val("ramjet_requests_total", endpoint="completions") > m0.val(
        "ramjet_requests_total", endpoint="completions"), what="ramjet_requests_total{endpoint=completions} +1")
    d = lambda name, **l: m1.val(name, **l) - m0.val(name, **l)  # noqa: E731
    assert d("ramjet_requests_total", endpoint="completions", code="200") == 1
    assert d("ramjet_prompt_tokens_total") == engines[0].prompt_tokens
    assert d("ramjet_cached_prompt_tokens_total") == 0
    assert d("ramjet_finish_reasons_total", endpoint="completions", reason="stop") == 1


# ------------------------------------------------------------------------------------ routing
def test_rotation_spreads_sequential_new_prompts(rj, engines):
    ups = [rj.chat(chat(f"new prompt {i}")).header("X-Ramjet-Upstream") for i in range(10)]
    assert ups.count("0") >= 3 and ups.count("1") >= 3, ups


def test_a_repeated_prompt_stays_on_the_engine_that_served_it(rj, engines):
    ups = [rj.chat(chat("the same prompt")).header("X-Ramjet-Upstream") for _ in range(6)]
    assert len(set(ups)) == 1, ups


def test_least_load_avoids_busy_engine(rj, engines):
    busy = open_stream(rj.api_port, CHAT, chat(stream=True), {"X-Mock": "hang_mid_stream after=1"})
    assert busy.status == 200
    k = int(busy.header("X-Ramjet-Upstream"))
    try:
        # New prompts (an identical one would follow the busy stream there: single-flight).
        ups = [rj.chat(chat(f"another question {i}")).header("X-Ramjet-Upstream") for i in range(4)]
        assert ups == [str(1 - k)] * 4, f"busy engine {k} still chosen: {ups}"
    finally:
        busy.close()
    rj.wait_idle()


def test_keep_alive_client_connection(rj, engines):
    c = RawClient(rj.api_port)
    for _ in range(3):
        c.send_request("POST", CHAT, enc(chat()), {"Content-Type": "application/json"})
        r = c.read_response()
        assert r.status == 200
        assert r.json()["object"] == "chat.completion"
    c.close()
    assert len(all_inference(engines)) == 3


def test_pipelined_requests_are_answered_in_order(rj, engines):
    """Requests a client sends before their answers came (HTTP/1.1 pipelining) are answered in
    order, whichever way they reach ramjet: in the same write as the one before (its bytes stay in
    the connection's buffer, which keeps its storage while they are there), already on the socket
    when the connection next waits to read, or read by the client watch while the engine is still
    answering the one before."""
    def request(content, mock):
        data = enc(chat(content))
        return (f"POST {CHAT} HTTP/1.1\r\nHost: ramjet.test\r\nContent-Type: application/json\r\n"
                f"X-Mock: {mock}\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data

    def echoed(r):
        assert r.status == 200
        return json.loads(r.json()["body"])["messages"][0]["content"]

    c = RawClient(rj.api_port)
    c.send(request("first", "slow delay=0.3") + request("second", "echo"))  # one write
    time.sleep(0.1)  # the first is at its engine, the second in ramjet's buffer
    c.send(request("third", "slow delay=0.3"))  # on the socket before the connection waits again
    r1 = c.read_response()
    assert r1.status == 200 and r1.json()["object"] == "chat.completion"
    assert echoed(c.read_response()) == "second"
    time.sleep(0.1)  # the third is at its engine, nothing buffered: the watch waits on the socket
    c.send(request("fourth", "echo"))
    r3 = c.read_response()
    assert r3.status == 200 and r3.json()["object"] == "chat.completion"
    assert echoed(c.read_response()) == "fourth"
    c.send(request("fifth", "echo"))  # and the connection goes on
    assert echoed(c.read_response()) == "fifth"
    c.close()
    assert len(all_inference(engines)) == 5


def test_concurrent_json_requests(rj, engines):
    results = []

    def one(i):
        r = rj.chat(chat(f"req {i}"), headers={"X-Request-Id": f"r{i}"})
        results.append((i, r.status, r.header("X-Ramjet-Upstream")))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert sorted(s for _, s, _ in results) == [200] * 16
    ids = sorted(r.header("X-Request-Id") for r in all_inference(engines))
    assert ids == sorted(f"r{i}" for i in range(16))
    rj.wait_idle()


def test_usage_metrics_messages_and_responses(rj, engines):
    m0 = rj.metrics()
    r = rj.request("POST", "/v1/messages", enc({"model": "mock-model", "max_tokens": 64,
                                                "messages": [{"role": "user", "content": "hi"}]}))
    assert r.status == 200
    e = engine_of(engines, r)
    m1 = wait_metric(rj, lambda m: m.val("ramjet_requests_total", endpoint="messages") > 0,
                     what="ramjet_requests_total{endpoint=messages}")
    d = lambda name, **l: m1.val(name, **l) - m0.val(name, **l)  # noqa: E731
    assert d("ramjet_prompt_tokens_total") == e.prompt_tokens          # input_tokens
    assert d("ramjet_cached_prompt_tokens_total") == e.cached_tokens   # cache_read_input_tokens
    assert d("ramjet_completion_tokens_total") == e.chunks             # output_tokens
    assert d("ramjet_finish_reasons_total", endpoint="messages", reason="stop") == 1   # end_turn
    r = rj.request("POST", "/v1/responses", enc({"model": "mock-model", "input": "hi"}))
    assert r.status == 200
    m2 = wait_metric(rj, lambda m: m.val("ramjet_requests_total", endpoint="responses") > 0,
                     what="ramjet_requests_total{endpoint=responses}")
    d = lambda name, **l: m2.val(name, **l) - m1.val(name, **l)  # noqa: E731
    assert d("ramjet_prompt_tokens_total") == e.prompt_tokens
    assert d("ramjet_completion_tokens_total") == e.chunks
    assert d("ramjet_finish_reasons_total", endpoint="responses", reason="stop") == 1   # completed


def test_finish_reason_length_bucket(rj, engines):
    m0 = rj.metrics().val("ramjet_finish_reasons_total", endpoint="chat", reason="length")
    r = rj.chat(chat(), headers={"X-Mock": "json finish=length"})
    assert r.status == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    wait_metric(rj, lambda m: m.val("ramjet_finish_reasons_total", endpoint="chat", reason="length") == m0 + 1,
                what="finish_reasons_total{reason=length} +1")


def test_unparseable_engine_json_passes_through_and_is_counted(rj, engines):
    m0 = rj.metrics().val("ramjet_usage_parse_failures_total")
    r = rj.chat(chat(), headers={"X-Mock": "badjson"})
    assert r.status == 200
    assert r.body == b'{"id":"x","object":"chat.completion","usage":{"prompt_tokens":'
    wait_metric(rj, lambda m: m.val("ramjet_usage_parse_failures_total") >= m0 + 1,
                what="ramjet_usage_parse_failures_total +1")
    assert rj.alive()


def test_expect_100_continue(rj, engines):
    body = enc(chat("expect"))
    c = RawClient(rj.api_port)
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    assert c.read_head() == 100
    c.send(body)
    r = c.read_response()
    c.close()
    assert r.status == 200
    (req,) = all_inference(engines)
    assert req.body == body
    assert req.header("Expect") is None


def test_client_connection_close_is_honoured(rj, engines):
    c = RawClient(rj.api_port)
    c.send_request("POST", CHAT, enc(chat()), {"Content-Type": "application/json", "Connection": "close"})
    r = c.read_response()
    assert r.status == 200
    assert c.read_all_until_close(timeout=3) == b"", "ramjet kept the connection open after Connection: close"
    c.close()
