"""Hostile or broken clients: limits, malformed input, slowloris. ramjet answers with the right
status, never crashes, and a stream in flight is not disturbed."""

import json
import socket
import threading
import time

import pytest

from support.e2e import CHAT, all_inference, chat, enc, expected_content, sse_datas, stream_content
from support.ramjet_proc import RawClient

LIMITS = {"RJ_MAX_BODY_BYTES": "4096", "RJ_MAX_HEADER_BYTES": "4096", "RJ_HEADER_TIMEOUT_MS": "300"}


@pytest.fixture
def rjl(engines, ramjet_factory):
    return ramjet_factory(engines, env=LIMITS)


def _rejections(rj, reason):
    return rj.metrics().val("ramjet_request_rejections_total", reason=reason)


def _raw_exchange(port, data: bytes, timeout=5.0):
    """Sends raw bytes, returns (status or None, raw response bytes) once the server answers/closes."""
    c = RawClient(port, timeout=timeout)
    try:
        c.send(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        status = c.read_head()
        body = c.read_body() if c.header("Content-Length") or c.header("Transfer-Encoding") else b""
        return status, c, body
    except (ConnectionError, OSError):
        return None, c, c.buf
    finally:
        c.close()


def _openai_error(body: bytes):
    j = json.loads(body)
    assert {"message", "type", "param", "code"} <= set(j["error"]), j


def test_body_too_large_413(rjl, engines):
    r0 = _rejections(rjl, "body_too_large")
    body = enc(chat("z" * 5000))
    status, c, resp = _raw_exchange(rjl.api_port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert status == 413, resp
    _openai_error(resp)
    assert not all_inference(engines)
    assert _rejections(rjl, "body_too_large") == r0 + 1


def test_body_too_large_declared_only(rjl, engines):
    """A Content-Length over the limit is refused before the body is sent."""
    c = RawClient(rjl.api_port)
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n")
    assert c.read_head() == 413
    c.close()
    assert not all_inference(engines)


def test_chunked_body_too_large_413(rjl, engines):
    piece = b"a" * 1000
    data = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    data += b"".join(b"%x\r\n" % len(piece) + piece + b"\r\n" for _ in range(6)) + b"0\r\n\r\n"
    status, c, resp = _raw_exchange(rjl.api_port, data)
    assert status == 413, resp
    assert not all_inference(engines)


def test_body_at_limit_is_forwarded(rjl, engines):
    base = enc(chat(""))
    body = enc(chat("p" * (4096 - len(base))))
    assert len(body) == 4096
    r = rjl.request("POST", CHAT, body, {"Content-Type": "application/json"})
    assert r.status == 200
    assert all_inference(engines)[0].body == body


def test_chunked_request_body_forwarded(rj, engines):
    body = enc(chat("chunked upload"))
    data = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % 10 + body[:10] + b"\r\n"
            + b"%x\r\n" % (len(body) - 10) + body[10:] + b"\r\n0\r\n\r\n")
    status, c, resp = _raw_exchange(rj.api_port, data)
    assert status == 200, resp
    (req,) = all_inference(engines)
    assert req.body == body


def test_malformed_json_forwarded_unchanged_and_counted(rj, engines):
    m0 = rj.metrics().val("ramjet_malformed_json_total", endpoint="chat")
    body = b'{"model": "mock-model", "messages": [ {"role": "user", "content": "unterminated'
    r = rj.request("POST", CHAT, body, {"Content-Type": "application/json"})
    assert r.status == 400, "the engine's answer (400) must pass through"
    (req,) = all_inference(engines)
    assert req.body == body
    assert r.body == engines[int(r.header("X-Ramjet-Upstream"))].error_body(400)
    assert rj.metrics().val("ramjet_malformed_json_total", endpoint="chat") == m0 + 1


@pytest.mark.parametrize("body", [b"[1, 2, 3]", b"", b"\xff\xfe not utf8", b'"just a string"'])
def test_non_object_bodies_forwarded_unchanged(rj, engines, body):
    r = rj.request("POST", CHAT, body, {"Content-Type": "application/json"})
    assert r.status in (200, 400)
    (req,) = all_inference(engines)
    assert req.body == body


def test_headers_too_large_431(rjl, engines):
    r0 = _rejections(rjl, "header_too_large")
    data = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n")
    status, c, resp = _raw_exchange(rjl.api_port, data)
    assert status == 431, resp
    assert not all_inference(engines)
    assert _rejections(rjl, "header_too_large") == r0 + 1


def test_many_headers_too_large_431(rjl, engines):
    data = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-H%d: %s\r\n" % (i, b"v" * 60) for i in range(100)) + b"\r\n"
    status, c, resp = _raw_exchange(rjl.api_port, data)
    assert status == 431, resp


def test_slowloris_times_out(rjl, engines):
    r0 = _rejections(rjl, "header_timeout")
    c = RawClient(rjl.api_port, timeout=5)
    t = time.monotonic()
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    try:
        status = c.read_head()
    except (ConnectionError, OSError):
        status = None  # closed without an answer is acceptable
    took = time.monotonic() - t
    c.close()
    assert status in (408, None), status
    assert 0.2 <= took < 3.0, f"header timeout fired after {took:.2f}s (RJ_HEADER_TIMEOUT_MS=300)"
    print(f"\nslowloris cut after {took * 1000:.0f} ms, status {status}")
    deadline = time.monotonic() + 2
    while _rejections(rjl, "header_timeout") != r0 + 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _rejections(rjl, "header_timeout") == r0 + 1


def test_slowloris_dripping_bytes_still_times_out(rjl, engines):
    """Sending a byte now and then does not extend the header deadline."""
    c = RawClient(rjl.api_port, timeout=5)
    t = time.monotonic()
    c.send(b"GET /health HTTP/1.1\r\n")
    closed = False
    while time.monotonic() - t < 3:
        try:
            c.send(b"X")
        except OSError:
            closed = True
            break
        c.s.settimeout(0.05)
        try:
            data = c.s.recv(4096)
            if data == b"" or data.startswith(b"HTTP/1.1 408"):
                closed = True
                break
        except socket.timeout:
            pass
    c.close()
    assert closed, "a client dripping header bytes kept the connection open for 3 s"


@pytest.mark.parametrize("garbage", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(40)) + b"\r\n\r\n",
    b"HELLO THERE\r\n\r\n",
    b"GET\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost x no colon\r\n\r\n",
])
def test_garbage_gets_400(rj, engines, garbage):
    r0 = _rejections(rj, "bad_request")
    status, c, resp = _raw_exchange(rj.api_port, garbage)
    assert status == 400, (status, resp)
    assert not all_inference(engines)
    assert _rejections(rj, "bad_request") == r0 + 1
    assert rj.health()[0] == 200


# Requests a server behind ramjet could frame differently from ramjet (request smuggling): each is
# refused with 400, nothing reaches an engine, and the bytes after the head are never read as a
# request of their own.
_SMUGGLED = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 2\r\n\r\n{}")


@pytest.mark.parametrize("head", [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 0\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 10\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n Content-Length: 10\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\nHost: x\nContent-Length: 0\n\n",
])
def test_ambiguous_framing_gets_400_and_nothing_is_smuggled(rj, engines, head):
    r0 = _rejections(rj, "bad_request")
    status, c, resp = _raw_exchange(rj.api_port, head + _SMUGGLED)
    assert status == 400, (status, resp)
    _openai_error(resp)
    assert b"HTTP/1.1 200" not in c.buf, "the smuggled request was answered"
    assert not all_inference(engines)
    assert _rejections(rj, "bad_request") == r0 + 1
    assert rj.health()[0] == 200


def test_truncated_body_then_close(rj, engines):
    c = RawClient(rj.api_port)
    c.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"{" * 10)
    time.sleep(0.1)
    c.close()
    time.sleep(0.1)
    assert not all_inference(engines), "a truncated body must not reach an engine"
    rj.wait_idle()
    assert rj.chat(chat()).status == 200


def test_connect_and_close_storm(rj, engines):
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", rj.api_port))
        s.close()
    assert rj.health()[0] == 200
    assert rj.alive()


def test_bad_requests_do_not_disturb_stream_in_flight(engines, ramjet_factory):
    rj = ramjet_factory(engines, env=LIMITS)
    result = {}

    def stream():
        c = RawClient(rj.api_port, timeout=10)
        c.send_request("POST", CHAT, enc(chat("keeper", stream=True)),
                       {"X-Mock": "sse chunks=40 delay=0.03", "Content-Type": "application/json"})
        result["status"] = c.read_head()
        result["body"] = c.read_body()
        c.close()

    t = threading.Thread(target=stream)
    t.start()
    # wait until the stream is in flight
    deadline = time.monotonic() + 5
    while not all_inference(engines) and time.monotonic() < deadline:
        time.sleep(0.01)

    attacks = [
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\n" + b"x" * 9000,
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 6000 + b"\r\n\r\n",
        b"\x00\x01\x02\x03garbage\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{oops",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{",  # truncated
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ",                                   # slowloris
    ]
    socks = []
    for a in attacks * 3:
        try:
            s = socket.create_connection(("127.0.0.1", rj.api_port), timeout=2)
            s.sendall(a)
            socks.append(s)
        except OSError:
            pass
    for _ in range(20):
        socket.create_connection(("127.0.0.1", rj.api_port)).close()
    time.sleep(0.2)
    for s in socks:
        s.close()
    t.join(15)
    assert result.get("status") == 200
    assert stream_content(sse_datas([(0, result["body"])])) == expected_content(40), "stream damaged"
    assert rj.alive()
    assert rj.health()[0] == 200
    assert rj.chat(chat()).status in (200, 400)
    rj.wait_idle()
