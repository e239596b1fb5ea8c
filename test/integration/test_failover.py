"""Retry before the first byte, fencing, fail-open, transport errors, health probing."""

import time

import pytest

from support.e2e import CHAT, all_inference, chat, engine_of, open_stream, read_events, sse_datas
from support.mock_engine import BlackholeEngine

# A probe interval long enough that no probe readmits a fenced engine during the test
# (the first probe round runs at startup).
NO_PROBE = {"RJ_PROBE_INTERVAL_MS": "60000"}


def quiet(engines, ramjet_factory, **env):
    """ramjet whose only probe round is the startup one, already digested: from here on, only
    requests change an engine's health."""
    rj = ramjet_factory(engines, env={**NO_PROBE, **env})
    for e in engines:
        e.wait_probed()
    time.sleep(0.05)  # the answer is written; give ramjet a moment to apply it
    return rj


def _error_json_ok(r, code):
    j = r.json()
    assert set(j) == {"error"}, j
    err = j["error"]
    assert {"message", "type", "param", "code"} <= set(err), err
    assert isinstance(err["message"], str) and err["message"]
    assert err["code"] in (code, str(code)), err


@pytest.mark.parametrize("code", [502, 503])
def test_retryable_status_fails_over_and_ejects_after_consecutive_failures(engines, ramjet_factory, code):
    # Load-blind routing keeps sending engine 0 its share (the prefix policy would avoid it after
    # one failure: test_failsafe.py shows that side).
    rj = ramjet_factory(engines, env=dict(NO_PROBE, RJ_OUTLIER_CONSECUTIVE_FAILURES="3", RJ_AFFINITY="round_robin"))
    e0, e1 = engines
    for e in engines:
        e.wait_probed()
    e0.mode = f"status={code}"
    tried = 0
    for i in range(60):
        r = rj.chat(chat(f"q{i}"))
        assert r.status == 200, r
        assert r.header("X-Ramjet-Upstream") == "1", "every request fails over to engine 1"
        tried = len(e0.inference_requests())
        if tried == 1:
            # One failure is evidence, not a verdict: engine 0 stays in service.
            h = rj.health()[1]
            assert h["replicas"][0]["state"] == "healthy" and h["replicas"][0]["consecutive_failures"] == 1, h
        if tried == 3:
            break
    assert tried == 3, "engine 0 was not tried three times"
    code_h, h = rj.health()
    assert code_h == 200 and h["status"] == "degraded" and h["ejected_replicas"] == 1, h
    assert h["replicas"][0]["state"] == "ejected" and h["replicas"][0]["ejection_ms_left"] > 0, h
    m = rj.metrics()
    assert m.get("ramjet_upstream_up", upstream="0") == 0
    assert m.get("ramjet_upstream_ejections_total", upstream="0") == 1
    assert m.get("ramjet_upstream_failures_total", upstream="0", kind="status_5xx") == 3
    assert m.get("ramjet_upstream_state", upstream="0", state="ejected") == 1
    n1 = len(e1.inference_requests())
    for i in range(4):
        assert rj.chat(chat(f"after {i}")).header("X-Ramjet-Upstream") == "1"
    assert len(e0.inference_requests()) == 3, "an ejected engine got traffic"
    assert len(e1.inference_requests()) == n1 + 4


def test_failover_replays_exact_body_and_headers(engines, ramjet_factory):
    rj = quiet(engines, ramjet_factory)
    e0, e1 = engines
    e0.mode = "status=503"
    body = b'{"messages":[{"role":"user","content":"same bytes"}],  "model":"mock-model"}'
    for _ in range(4):
        r = rj.request("POST", CHAT, body, {"Content-Type": "application/json", "X-Request-Id": "fo-1"})
        assert r.status == 200
        if e0.inference_requests():
            break
    (a,) = e0.inference_requests()
    b = e1.inference_requests()[-1]
    assert a.body == body and b.body == body
    assert b.header("X-Request-Id") == "fo-1"


def test_connect_refused_fails_over_and_fences(engines, ramjet_factory):
    rj = quiet(engines, ramjet_factory)
    e0, e1 = engines
    for e in engines:
        e.wait_probed()   # the startup probe round must not be the one that sees e0 dead
    time.sleep(0.05)      # let ramjet digest the probe answers
    e0.kill()
    m0 = rj.metrics().sum("ramjet_upstream_errors_total", endpoint="chat")
    ups = []
    for _ in range(4):
        r = rj.chat(chat())
        assert r.status == 200, r
        ups.append(r.header("X-Ramjet-Upstream"))
    assert ups == ["1"] * 4
    code, h = rj.health()
    assert h["replicas"][0]["healthy"] is False, h
    assert rj.metrics().sum("ramjet_upstream_errors_total", endpoint="chat") > m0


def test_engine_closing_without_answer_fails_over(engines, ramjet_factory):
    rj = quiet(engines, ramjet_factory)
    e0, e1 = engines
    e0.mode = "close"
    for _ in range(4):
        r = rj.chat(chat())
        assert r.status == 200, r
        assert r.header("X-Ramjet-Upstream") == "1"
        if e0.inference_requests():
            break
    assert e0.inference_requests()


# An engine that closes a keep-alive connection after answering on it (it restarted, or a proxy
# in front of it limits requests a connection) leaves ramjet a pooled connection that is closed.
# ramjet takes a connection back within a second without asking the socket (a system call a
# request under load): the request's first attempt then finds it closed before any answer and is
# made again on a new connection (ramjet_upstream_stale_retries_total). No request fails, the
# engine gets each request once, and no engine error is counted.
@pytest.mark.parametrize("stream", [False, True])
def test_engine_closing_pooled_connections_loses_no_request(engine_factory, ramjet_factory, stream):
    (e,) = engine_factory(1)
    rj = quiet([e], ramjet_factory, RJ_THREADS="1")  # one pool: each request finds the last one's
    e.close_after_answer = True
    m0 = rj.metrics().sum("ramjet_upstream_errors_total")
    n = 12
    for i in range(n):
        body = chat(f"turn {i}", stream=stream)
        if stream:
            body["stream_options"] = {"include_usage": True}
        r = rj.chat(body)
        assert r.status == 200, r
        if stream:
            assert b"data: [DONE]" in r.body, r
        time.sleep(0.03)  # the engine's FIN reaches the pooled connection
    got = e.inference_requests()
    assert len(got) == n, [q.json()["messages"][-1]["content"] for q in got]
    assert sorted(q.json()["messages"][-1]["content"] for q in got) == sorted(f"turn {i}" for i in range(n))
    m = rj.metrics()
    assert m.sum("ramjet_upstream_errors_total") == m0
    # Every request after the first found its pooled connection closed (the engine's FIN had
    # come 30 ms before, far under the pool's second): each was sent again.
    assert m.sum("ramjet_upstream_stale_retries_total") == n - 1
    code, h = rj.health()
    assert h["replicas"][0]["healthy"] is True, h


# An engine that closes idle keep-alive connections (vLLM and SGLang through uvicorn, after 5 s):
# a connection idle past a second is asked before reuse and one the engine closed is dropped
# (no retry); one idle for less and closed all the same takes the retry above. Either way no
# request fails.
def test_engine_closing_idle_connections_loses_no_request(engine_factory, ramjet_factory):
    (e,) = engine_factory(1)
    rj = quiet([e], ramjet_factory, RJ_THREADS="1")  # one pool: each request finds the last one's
    e.idle_close = 0.2
    m0 = rj.metrics().sum("ramjet_upstream_errors_total")

    def send_after(pause):
        time.sleep(pause)
        r = rj.chat(chat(f"after {pause}"))
        assert r.status == 200, (pause, r)
        return rj.metrics().sum("ramjet_upstream_stale_retries_total")

    send_after(0.0)
    retries = send_after(1.5)  # idle past the pool's second: asked, dropped, a new connection
    assert retries == 0
    assert send_after(0.5) == retries + 1  # closed at 0.2 s, reused unasked: sent again
    assert send_after(0.0) == retries + 1  # the new connection is still open
    assert len(e.inference_requests()) == 4
    assert rj.metrics().sum("ramjet_upstream_errors_total") == m0


def test_last_candidate_502_passes_through(engines, ramjet_factory):
    rj = quiet(engines, ramjet_factory)
    for e in engines:
        e.mode = "status=502"
    r = rj.chat(chat())
    assert r.status == 502, r
    e = engine_of(engines, r)
    assert r.body == e.error_body(502), "the last candidate's 502 must pass through as is"
    assert len(all_inference(engines)) == 2


def test_single_engine_503_passes_through(engine_factory, ramjet_factory):
    (e,) = engine_factory(1)
    e.mode = "status=503"
    rj = ramjet_factory([e])
    r = rj.chat(chat())
    assert r.status == 503
    assert r.body == e.error_body(503)
    assert r.header("X-Ramjet-Upstream") == "0"


def test_all_engines_refusing_gives_502_error_json(engines, ramjet_factory):
    rj = ramjet_factory(engines)
    for e in engines:
        e.kill()
    r = rj.chat(chat())
    assert r.status == 502, r
    _error_json_ok(r, 502)
    assert "127.0.0.1" not in r.body.decode()
    assert rj.alive()


def test_connect_timeout_gives_504(ramjet_factory):
    holes = [BlackholeEngine(), BlackholeEngine()]
    try:
        rj = ramjet_factory(holes, env={"RJ_UPSTREAM_CONNECT_TIMEOUT_MS": "200", "RJ_PROBE_TIMEOUT_MS": "200"})
        t = time.monotonic()
        r = rj.chat(chat(), timeout=15)
        took = time.monotonic() - t
        assert r.status == 504, r
        _error_json_ok(r, 504)
        assert took < 5, f"took {took:.1f}s"
    finally:
        for h in holes:
            h.stop()


def test_fail_open_when_no_engine_is_healthy(engines, ramjet_factory):
    rj = ramjet_factory(engines)
    for e in engines:
        e.health = 503
    code, h = rj.wait_health(lambda c, j: j["healthy_replicas"] == 0, what="no healthy replica")
    assert code == 503 and h["status"] == "unhealthy"
    r = rj.chat(chat())
    assert r.status == 200, "ramjet must fail open when no replica is healthy"
    assert rj.metrics().get("ramjet_route_fail_open") == 1
    # /health keeps telling the truth: a 5xx probe is not overridden by that success
    rj.wait_health(lambda c, j: c == 503, 2, "/health back to 503")
    for e in engines:
        e.health = 200
    rj.wait_health(lambda c, j: j["status"] == "ok")
    assert rj.chat(chat()).status == 200   # the gauge follows routing decisions
    assert rj.metrics().get("ramjet_route_fail_open") == 0


def test_fail_open_tries_at_most_two_engines(engine_factory, ramjet_factory):
    es = engine_factory(3)
    rj = ramjet_factory(es)
    for e in es:
        e.health = 503
        e.mode = "status=502"
    rj.wait_health(lambda c, j: j["healthy_replicas"] == 0, what="no healthy replica")
    r = rj.chat(chat())
    assert r.status == 502
    assert len(all_inference(es)) == 2, [(e.name, len(e.inference_requests())) for e in es]


# ----------------------------------------------------------------------------- probes
def test_failed_probe_fences_and_passing_probe_readmits(rj, engines):
    e0, e1 = engines
    e0.health = 503
    rj.wait_replica(0, False)
    assert rj.metrics().get("ramjet_upstream_up", upstream="0") == 0
    for _ in range(4):
        assert rj.chat(chat()).header("X-Ramjet-Upstream") == "1"
    e0.health = 200
    rj.wait_replica(0, True)
    assert rj.metrics().get("ramjet_upstream_up", upstream="0") == 1
    # Distinct prompts: no cache affinity, so equal engines share the traffic.
    ups = {rj.chat(chat(f"question {i}")).header("X-Ramjet-Upstream") for i in range(6)}
    assert ups == {"0", "1"}


def test_fenced_by_failover_readmitted_by_probe(rj, engines):
    e0, e1 = engines
    e0.mode = "status=503"
    e0.health = 503   # keep it fenced while requests flow
    rj.wait_replica(0, False)
    e0.mode = "auto"
    e0.health = 200
    rj.wait_replica(0, True)


def test_probe_falls_back_to_models_when_health_is_404(rj, engines):
    e0 = engines[0]
    e0.health = 404
    e0.wait_for(lambda reqs: [r for r in reqs if r.directive == "models"], timeout=3)
    time.sleep(0.5)
    assert rj.health()[1]["replicas"][0]["healthy"] is True
    e0.models_status = 500
    rj.wait_replica(0, False)
    e0.models_status = 200
    rj.wait_replica(0, True)


def test_probe_timeout_does_not_fence_recently_serving_engine(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_PROBE_TIMEOUT_MS": "100"})
    e0 = engines[0]
    for _ in range(4):
        assert rj.chat(chat()).status == 200
        if e0.inference_requests():
            break
    assert e0.inference_requests()
    n_probes = len(e0.probe_requests())
    e0.health = "hang"
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert rj.health()[1]["replicas"][0]["healthy"] is True, "probe timeout fenced a recently serving engine"
        time.sleep(0.05)
    assert len(e0.probe_requests()) >= n_probes + 3, "the probes did not run"


def test_probe_timeout_fences_engine_without_recent_success(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_PROBE_TIMEOUT_MS": "100"})
    engines[0].health = "hang"
    rj.wait_replica(0, False)
    engines[0].health = 200
    rj.wait_replica(0, True)


def test_probe_timeout_fences_when_recent_window_is_zero(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_PROBE_TIMEOUT_MS": "100", "RJ_PROBE_RECENT_SUCCESS_MS": "0"})
    e0 = engines[0]
    for _ in range(4):
        rj.chat(chat())
        if e0.inference_requests():
            break
    e0.health = "hang"
    rj.wait_replica(0, False)


def test_probe_refused_does_not_fence_recently_serving_engine(engines, ramjet_factory):
    rj = ramjet_factory(engines)
    e0 = engines[0]
    for _ in range(4):
        rj.chat(chat())
        if e0.inference_requests():
            break
    assert e0.inference_requests()
    n = len(e0.probe_requests())
    e0.kill()
    time.sleep(1.0)  # five probe intervals with connection refused
    assert rj.health()[1]["replicas"][0]["healthy"] is True
    assert len(e0.probe_requests()) == n


def test_non_200_probe_fences_despite_recent_success(rj, engines):
    e0 = engines[0]
    for _ in range(4):
        rj.chat(chat())
        if e0.inference_requests():
            break
    assert e0.inference_requests()
    e0.health = 503
    rj.wait_replica(0, False, timeout=2)


def test_dead_engine_fenced_then_revived(rj, engines):
    e0 = engines[0]
    e0.kill()
    rj.wait_replica(0, False)
    for _ in range(3):
        assert rj.chat(chat()).header("X-Ramjet-Upstream") == "1"
    e0.revive()
    rj.wait_replica(0, True)
    # Distinct prompts: no cache affinity, so equal engines share the traffic.
    ups = {rj.chat(chat(f"question {i}")).header("X-Ramjet-Upstream") for i in range(6)}
    assert ups == {"0", "1"}


def test_failover_with_streaming_request(engines, ramjet_factory):
    rj = quiet(engines, ramjet_factory)
    e0, e1 = engines
    e0.mode = "status=503"
    for _ in range(4):
        c = open_stream(rj.api_port, CHAT, chat(stream=True))
        assert c.status == 200 and c.header("X-Ramjet-Upstream") == "1"
        assert sse_datas(read_events(c))[-1] == "[DONE]"
        c.close()
        if e0.inference_requests():
            break
    assert e0.inference_requests()
