"""Streaming relay: SSE and chunked bodies arrive intact and chunk by chunk, without buffering."""

import json
import threading

from support.e2e import (CHAT, COMPLETIONS, RELAY_BOUND_S, chat, engine_of, engine_payload,
                         expected_content, open_stream, read_events, sse_datas, stream_content)
from support.ramjet_proc import RawClient


def test_sse_relayed_intact(rj, engines):
    c = open_stream(rj.api_port, CHAT, chat(stream=True, stream_options={"include_usage": True}))
    assert c.status == 200
    assert c.header("Content-Type").startswith("text/event-stream")
    up = c.header("X-Ramjet-Upstream")
    assert up in ("0", "1")
    body = c.read_body()
    c.close()
    e = engines[int(up)]
    (req,) = e.inference_requests()
    assert body == engine_payload(e, req), "the SSE body must reach the client unchanged"
    datas = sse_datas([(0, body)])
    assert datas[-1] == "[DONE]"
    assert json.loads(datas[-2])["usage"]["completion_tokens"] == e.chunks
    assert stream_content(datas) == expected_content(e.chunks)


def test_sse_chunks_relayed_as_they_arrive(rj, engines):
    delay = 0.4
    c = open_stream(rj.api_port, CHAT, chat(stream=True), {"X-Mock": f"sse chunks=4 delay={delay}"})
    e = engines[int(c.header("X-Ramjet-Upstream"))]
    events = read_events(c)
    c.close()
    (req,) = e.inference_requests()
    sent = e.sent_for(req.id)
    assert len(sent) == len(events), (len(sent), len(events))
    lags = [t_recv - t_sent for (t_sent, _), (t_recv, _) in zip(sent, events)]
    print(f"\nrelay lag per SSE event (ms): {[round(x * 1000, 1) for x in lags]}")
    for i, lag in enumerate(lags):
        assert lag < RELAY_BOUND_S, f"event {i} reached the client {lag * 1000:.1f} ms after the engine sent it"
    for i in range(len(events) - 1):
        assert events[i][0] < sent[i + 1][0], f"event {i} arrived only after the engine sent event {i + 1}"


def test_first_chunk_arrives_before_stream_ends(rj, engines):
    """The response head and first event are not held back until the stream completes."""
    c = open_stream(rj.api_port, CHAT, chat(stream=True), {"X-Mock": "hang_mid_stream after=2"})
    assert c.status == 200
    it = c.chunks()
    got = b""
    c.s.settimeout(3)
    while got.count(b"\n\n") < 2:
        got += next(it)[1]
    assert sse_datas([(0, got)])[0].startswith("{")
    c.close()
    rj.wait_idle()


def test_completions_stream_relayed(rj, engines):
    c = open_stream(rj.api_port, COMPLETIONS, {"model": "mock-model", "prompt": "p", "stream": True},
                    {"X-Mock": "sse chunks=6 delay=0.02"})
    assert c.status == 200
    events = read_events(c)
    c.close()
    datas = sse_datas(events)
    assert datas[-1] == "[DONE]"
    assert json.loads(datas[0])["object"] == "text_completion"
    assert stream_content(datas) == expected_content(6)


def test_chunked_non_sse_relayed_as_it_arrives(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_PASSTHROUGH_PATHS": "/v1/some/*"})
    c = RawClient(rj.api_port)
    c.send_request("GET", "/v1/some/long/poll", b"", {"X-Mock": "chunked_text chunks=3 delay=0.4"})
    assert c.read_head() == 200
    assert c.header("Content-Type").startswith("text/plain")
    e = engines[int(c.header("X-Ramjet-Upstream"))]
    got = list(c.chunks())
    c.close()
    (req,) = e.inference_requests()
    sent = e.sent_for(req.id)
    assert b"".join(p for _, p in got) == b"line 0\nline 1\nline 2\n"
    # arrival time of each line vs its send time
    buf, arrivals = b"", []
    for t, p in got:
        buf += p
        while len(arrivals) < buf.count(b"\n"):
            arrivals.append(t)
    lags = [a - s for a, (s, _) in zip(arrivals, sent)]
    print(f"\nrelay lag per text chunk (ms): {[round(x * 1000, 1) for x in lags]}")
    assert all(lag < RELAY_BOUND_S for lag in lags), lags


def test_stream_usage_metrics(rj, engines):
    m0 = rj.metrics()
    c = open_stream(rj.api_port, CHAT, chat(stream=True, stream_options={"include_usage": True}),
                    {"X-Mock": "sse chunks=5"})
    e = engines[int(c.header("X-Ramjet-Upstream"))]
    c.read_body()
    c.close()
    rj.wait_idle()
    m1 = rj.metrics()
    d = lambda name, **l: m1.val(name, **l) - m0.val(name, **l)  # noqa: E731
    assert d("ramjet_requests_total", endpoint="chat", code="200", stream="true") == 1
    assert d("ramjet_prompt_tokens_total") == e.prompt_tokens
    assert d("ramjet_cached_prompt_tokens_total") == e.cached_tokens
    assert d("ramjet_completion_tokens_total") == 5
    assert d("ramjet_finish_reasons_total", endpoint="chat", reason="stop") == 1


def test_long_stream_intact(rj, engines):
    c = open_stream(rj.api_port, CHAT, chat(stream=True), {"X-Mock": "sse chunks=800"})
    e = engines[int(c.header("X-Ramjet-Upstream"))]
    body = c.read_body()
    c.close()
    (req,) = e.inference_requests()
    assert body == engine_payload(e, req)
    assert stream_content(sse_datas([(0, body)])) == expected_content(800)


def test_concurrent_streams_intact(rj, engines):
    n = 8
    results = {}

    def one(i):
        c = open_stream(rj.api_port, CHAT, chat(f"stream {i}", stream=True), {"X-Mock": "sse chunks=12 delay=0.02"})
        results[i] = (c.status, c.header("X-Ramjet-Upstream"), c.read_body())
        c.close()

    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(20)
    assert len(results) == n
    for i, (status, up, body) in results.items():
        assert status == 200
        assert stream_content(sse_datas([(0, body)])) == expected_content(12), f"stream {i} damaged"
    ups = [up for _, up, _ in results.values()]
    assert set(ups) == {"0", "1"}, f"8 concurrent streams all went to one engine: {ups}"
    rj.wait_idle()


def test_stream_and_json_on_one_client_connection(rj, engines):
    c = RawClient(rj.api_port)
    c.send_request("POST", CHAT, json.dumps(chat(stream=True)).encode(), {"Content-Type": "application/json"})
    assert c.read_head() == 200
    datas = sse_datas(read_events(c))
    assert datas[-1] == "[DONE]"
    c.send_request("POST", CHAT, json.dumps(chat()).encode(), {"Content-Type": "application/json"})
    r = c.read_response()
    assert r.status == 200 and r.json()["object"] == "chat.completion"
    c.close()


def test_engine_dying_mid_stream_is_not_retried(rj, engines):
    c = open_stream(rj.api_port, CHAT, chat(stream=True), {"X-Mock": "die_mid_stream after=3"})
    assert c.status == 200
    got = b""
    try:
        for _, p in c.chunks():
            got += p
    except ConnectionError:
        pass  # a cut stream is an acceptable way to report the upstream failure
    c.close()
    datas = sse_datas([(0, got)])
    assert len(datas) >= 3 and json.loads(datas[0])["object"] == "chat.completion.chunk"
    assert "[DONE]" not in datas[:3]
    assert len([r for e in engines for r in e.inference_requests()]) == 1, \
        "a request must not be retried after response bytes reached the client"
    rj.wait_idle()
    assert rj.chat(chat()).status == 200
