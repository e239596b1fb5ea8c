"""Self-tests of the mock engine and the client helpers (no ramjet needed).

Run: /usr/bin/python3 -m pytest -q test/support
"""

import json
import socket
import time

import pytest

from support.mock_engine import BlackholeEngine, MockEngine, dead_port, parse_directive
from support.ramjet_proc import Metrics, RawClient, can_connect, http_request, poll, sse_events


@pytest.fixture
def eng():
    e = MockEngine("e0").start()
    yield e
    e.stop()


def chat_body(**kw):
    b = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}
    b.update(kw)
    return json.dumps(b).encode()


def test_parse_directive():
    assert parse_directive("sse chunks=3 delay=0.1") == ("sse", {"chunks": "3", "delay": "0.1"})
    assert parse_directive("status=503") == ("status", {"status": "503"})
    assert parse_directive("") == ("auto", {})


def test_json_chat_and_exact_body_capture(eng):
    body = b'{"model":"mock-model",  "messages":[{"role":"user","content":"hi"}]}'
    r = http_request(eng.port, "POST", "/v1/chat/completions?x=1", body,
                     {"Content-Type": "application/json", "X-Request-Id": "abc"})
    assert r.status == 200
    j = r.json()
    assert j["object"] == "chat.completion"
    assert j["usage"]["prompt_tokens_details"]["cached_tokens"] == eng.cached_tokens
    assert j["choices"][0]["finish_reason"] == "stop"
    (req,) = eng.inference_requests()
    assert req.body == body
    assert req.target == "/v1/chat/completions?x=1" and req.path == "/v1/chat/completions"
    assert req.header("x-request-id") == "abc"


def test_cached_zero_omits_details(eng):
    eng.cached_tokens = 0
    r = http_request(eng.port, "POST", "/v1/completions", json.dumps({"prompt": "x"}))
    assert r.status == 200
    assert "prompt_tokens_details" not in r.json()["usage"]
    assert r.json()["object"] == "text_completion"


def test_keep_alive_two_requests_one_connection(eng):
    c = RawClient(eng.port)
    for _ in range(2):
        c.send_request("POST", "/v1/chat/completions", chat_body())
        r = c.read_response()
        assert r.status == 200
    c.close()
    reqs = eng.inference_requests()
    assert len(reqs) == 2 and reqs[0].conn_id == reqs[1].conn_id


def test_sse_stream_shape_and_pacing(eng):
    eng.chunks = 3
    eng.chunk_delay = 0.1
    c = RawClient(eng.port)
    c.send_request("POST", "/v1/chat/completions",
                   chat_body(stream=True, stream_options={"include_usage": True}))
    assert c.read_head() == 200
    assert c.header("content-type").startswith("text/event-stream")
    events = sse_events(c.chunks())
    c.close()
    datas = [e.decode().strip()[len("data: "):] for _, e in events]
    assert datas[-1] == "[DONE]"
    usage = json.loads(datas[-2])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    content = "".join(json.loads(d)["choices"][0]["delta"].get("content", "") for d in datas[:-2])
    assert content == "tok0 tok1 tok2 "
    # paced: the content chunks are ~0.1 s apart, and each arrived right after it was sent
    req = eng.inference_requests()[0]
    sent = eng.sent_for(req.id)
    assert len(sent) == len(events)
    for (ts, _), (tr, _) in zip(sent, events):
        assert 0 <= tr - ts < 0.05
    assert sent[2][0] - sent[1][0] >= 0.09


def test_sse_without_include_usage_has_no_usage_chunk(eng):
    c = RawClient(eng.port)
    c.send_request("POST", "/v1/completions", json.dumps({"prompt": "x", "stream": True}).encode())
    c.read_head()
    datas = [e.decode().strip()[6:] for _, e in sse_events(c.chunks())]
    c.close()
    assert datas[-1] == "[DONE]"
    assert all("usage" not in json.loads(d) for d in datas[:-1])
    assert json.loads(datas[0])["object"] == "text_completion"


@pytest.mark.parametrize("code", [400, 429, 500, 502, 503])
def test_status_injection(eng, code):
    r = http_request(eng.port, "POST", "/v1/chat/completions", chat_body(), {"X-Mock": f"status={code}"})
    assert r.status == code
    err = r.json()["error"]
    assert err["code"] == code and set(err) == {"message", "type", "param", "code"}


def test_queue_then_mode(eng):
    eng.queue = ["status=503"]
    eng.mode = "status=429"
    assert http_request(eng.port, "POST", "/v1/chat/completions", chat_body()).status == 503
    assert http_request(eng.port, "POST", "/v1/chat/completions", chat_body()).status == 429


def test_hang_records_eof_promptly(eng):
    c = RawClient(eng.port)
    c.send_request("POST", "/v1/chat/completions", chat_body(), {"X-Mock": "hang"})
    (req,) = eng.wait_for_inference(1)
    time.sleep(0.05)
    t = c.close()
    rec = eng.wait_conn_eof(req.conn_id, 2)
    assert rec.eof_how == "eof"
    assert rec.eof_t - t < 0.02, rec.eof_t - t


def test_hang_mid_stream_then_eof(eng):
    c = RawClient(eng.port)
    c.send_request("POST", "/v1/chat/completions", chat_body(stream=True), {"X-Mock": "hang_mid_stream after=2"})
    c.read_head()
    it = c.chunks()
    next(it)
    next(it)
    c.s.settimeout(0.2)
    with pytest.raises(socket.timeout):
        next(it)
    (req,) = eng.inference_requests()
    t = c.close()
    rec = eng.wait_conn_eof(req.conn_id, 2)
    assert rec.eof_t - t < 0.02


def test_stream_notices_eof_between_chunks(eng):
    c = RawClient(eng.port)
    c.send_request("POST", "/v1/chat/completions", chat_body(stream=True), {"X-Mock": "sse chunks=50 delay=0.2"})
    c.read_head()
    next(c.chunks())
    (req,) = eng.inference_requests()
    t = c.close()
    rec = eng.wait_conn_eof(req.conn_id, 2)
    assert rec.eof_t - t < 0.02
    assert len(eng.sent_for(req.id)) < 5


def test_close_and_reset_modes(eng):
    for mode in ("close", "reset"):
        c = RawClient(eng.port)
        c.send_request("POST", "/v1/chat/completions", chat_body(), {"X-Mock": mode})
        with pytest.raises(ConnectionError):
            c.read_head()
        c.close()


def test_slow_mode(eng):
    t = time.monotonic()
    r = http_request(eng.port, "POST", "/v1/chat/completions", chat_body(), {"X-Mock": "slow delay=0.2"})
    assert r.status == 200 and time.monotonic() - t >= 0.19


def test_chunked_text_and_chunked_request_body(eng):
    c = RawClient(eng.port)
    c.send(b"POST /other HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Mock: chunked_text chunks=3\r\n\r\n"
           b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    assert c.read_head() == 200
    assert c.read_body() == b"line 0\nline 1\nline 2\n"
    c.close()
    (req,) = eng.inference_requests()
    assert req.body == b"hello world" and req.chunked_request


def test_echo_and_other_paths(eng):
    r = http_request(eng.port, "GET", "/version?a=b")
    assert r.json() == {"engine": "e0", "method": "GET", "target": "/version?a=b", "body_len": 0}
    r = http_request(eng.port, "POST", "/tokenize", b"xyz", {"X-Mock": "echo"})
    assert r.json()["body"] == "xyz"


def test_health_and_models(eng):
    assert http_request(eng.port, "GET", "/health").status == 200
    eng.health = 503
    assert http_request(eng.port, "GET", "/health").status == 503
    eng.health = 404
    assert http_request(eng.port, "GET", "/health").status == 404
    eng.models_extra = {"nested": {"context_length": 65536}}
    r = http_request(eng.port, "GET", "/v1/models")
    card = r.json()["data"][0]
    assert card["max_model_len"] == 131072 and card["nested"]["context_length"] == 65536
    assert len(eng.probe_requests()) == 4 and not eng.inference_requests()
    eng.health = "hang"
    with pytest.raises(socket.timeout):
        http_request(eng.port, "GET", "/health", timeout=0.2)


def test_kill_and_revive(eng):
    port = eng.port
    c = RawClient(port)
    c.send_request("POST", "/v1/chat/completions", chat_body(), {"X-Mock": "hang"})
    eng.wait_for_inference(1)
    eng.kill()
    assert not can_connect(port)
    with pytest.raises(ConnectionError):
        c.read_head()
    eng.revive()
    assert eng.port == port
    assert http_request(port, "POST", "/v1/chat/completions", chat_body()).status == 200


def test_dead_port_refuses():
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", dead_port()), timeout=1)


def test_blackhole_connect_times_out():
    b = BlackholeEngine()
    try:
        t = time.monotonic()
        with pytest.raises((socket.timeout, TimeoutError)):
            socket.create_connection(("127.0.0.1", b.port), timeout=0.2)
        assert time.monotonic() - t >= 0.19
    finally:
        b.stop()


def test_metrics_parser():
    m = Metrics('# HELP x y\n# TYPE ramjet_requests_total counter\n'
                'ramjet_requests_total{endpoint="chat",code="200",stream="false"} 3\n'
                'ramjet_requests_total{endpoint="chat",code="502",stream="false"} 1\n'
                'ramjet_requests_inflight 0\n'
                'ramjet_upstream_up{upstream="0"} 1\nramjet_upstream_up{upstream="1"} 0\n'
                'weird{a="x\\"y"} 2.5e0 1700000000\n')
    assert m.get("ramjet_requests_total", endpoint="chat") == 4
    assert m.get("ramjet_requests_total", code="200") == 3
    assert m.get("ramjet_requests_inflight") == 0
    assert m.get("ramjet_upstream_up", upstream="1") == 0
    assert m.get("weird", a='x\\"y') == 2.5
    assert m.get("missing") is None and m.val("missing") == 0


def test_poll():
    n = []
    assert poll(lambda: n.append(1) or len(n) >= 3, 1) is True
    with pytest.raises(AssertionError):
        poll(lambda: False, 0.05)


def test_finish_knob_badjson_and_die_mid_stream(eng):
    r = http_request(eng.port, "POST", "/v1/chat/completions", chat_body(), {"X-Mock": "json finish=length"})
    assert r.json()["choices"][0]["finish_reason"] == "length"
    r = http_request(eng.port, "POST", "/v1/chat/completions", chat_body(), {"X-Mock": "badjson"})
    with pytest.raises(ValueError):
        r.json()
    c = RawClient(eng.port)
    c.send_request("POST", "/v1/chat/completions", chat_body(stream=True), {"X-Mock": "die_mid_stream after=2"})
    assert c.read_head() == 200
    got = []
    with pytest.raises(ConnectionError):
        for piece in c.chunks():
            got.append(piece)
    assert len(got) == 2
    c.close()
