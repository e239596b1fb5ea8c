"""SIGTERM: stop accepting, drain in-flight streams (up to RJ_SHUTDOWN_GRACE_MS), exit 0."""

import time

from support.e2e import CHAT, chat, expected_content, open_stream, sse_datas, stream_content
from support.ramjet_proc import can_connect, poll


def test_sigterm_when_idle_exits_zero(rj):
    assert rj.health()[0] == 200   # serving, so past startup
    t = time.monotonic()
    rj.terminate()
    rc = rj.wait_exit(5)
    print(f"\nidle shutdown took {(time.monotonic() - t) * 1000:.0f} ms")
    assert rc == 0, rj.output()[-2000:]


def test_sigterm_drains_inflight_stream(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_SHUTDOWN_GRACE_MS": "10000"})
    c = open_stream(rj.api_port, CHAT, chat(stream=True), {"X-Mock": "sse chunks=15 delay=0.1"})
    assert c.status == 200
    it = c.chunks()
    first = next(it)[1]
    rj.terminate()
    # new connections are refused while the stream goes on
    poll(lambda: not can_connect(rj.api_port), 2, what="listener closed after SIGTERM")
    assert rj.alive(), "ramjet exited before its in-flight stream finished"
    rest = b"".join(p for _, p in it)
    t_end = time.monotonic()
    c.close()
    body = first + rest
    assert stream_content(sse_datas([(0, body)])) == expected_content(15), "stream cut by shutdown"
    assert sse_datas([(0, body)])[-1] == "[DONE]"
    rc = rj.wait_exit(5)
    print(f"\nexit {(time.monotonic() - t_end) * 1000:.0f} ms after the stream ended")
    assert rc == 0


def test_sigterm_grace_expiry_cuts_stuck_stream(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_SHUTDOWN_GRACE_MS": "500"})
    c = open_stream(rj.api_port, CHAT, chat(stream=True), {"X-Mock": "hang_mid_stream after=1"})
    assert c.status == 200
    e = engines[int(c.header("X-Ramjet-Upstream"))]
    (req,) = e.inference_requests()
    t = time.monotonic()
    rj.terminate()
    rc = rj.wait_exit(5)
    took = time.monotonic() - t
    print(f"\nexit {took * 1000:.0f} ms after SIGTERM with a stuck stream (grace 500 ms)")
    assert 0.4 <= took < 3.0, took
    assert rc == 0
    e.wait_conn_eof(req.conn_id, 2)
    c.close()


def test_sigterm_keeps_metrics_and_health_off_after_exit(engines, ramjet_factory):
    rj = ramjet_factory(engines)
    api, metrics = rj.api_port, rj.metrics_port
    rj.terminate()
    assert rj.wait_exit(5) == 0
    assert not can_connect(api) and not can_connect(metrics)


def test_sigterm_right_after_listening_line(engines, ramjet_factory):
    """The listening line is the readiness signal: a SIGTERM sent right after it must already
    get the graceful path (exit 0), not the default action (death by signal)."""
    codes = []
    for _ in range(12):   # the window is a few ms wide: several tries make a hit very likely
        rj = ramjet_factory(engines)
        rj.terminate()
        codes.append(rj.wait_exit(5))
    assert codes == [0] * len(codes), f"exit codes of ramjet SIGTERMed right after startup: {codes}"
