"""/health (answered by ramjet) and the metrics endpoint."""

from support.e2e import CHAT, chat, open_stream
from support.ramjet_proc import http_request


def _no_addresses(body: str, engines):
    assert "127.0.0.1" not in body and "localhost" not in body and "http://" not in body, body
    for e in engines:
        assert str(e.port) not in body, f"engine port {e.port} leaked into /health: {body}"


def test_health_all_ok(rj, engines):
    r = rj.request("GET", "/health")
    assert r.status == 200
    assert r.header("Content-Type") is None or "json" in r.header("Content-Type")
    h = r.json()
    assert h["status"] == "ok"
    assert h["healthy_replicas"] == 2 and h["total_replicas"] == 2
    assert [x["index"] for x in h["replicas"]] == [0, 1]
    for x in h["replicas"]:
        assert x["healthy"] is True
        assert x["inflight"] == 0 and x["load_units"] == 0
    _no_addresses(r.body.decode(), engines)
    assert r.header("X-Ramjet-Upstream") is None, "/health is answered by ramjet, not an engine"


def test_health_not_forwarded_to_engines(rj, engines):
    for _ in range(3):
        assert rj.request("GET", "/health", headers={"X-Client-Marker": "yes"}).status == 200
    for e in engines:
        assert not [r for r in e.all_requests() if r.header("X-Client-Marker")]


def test_health_degraded(rj, engines):
    engines[1].health = 503
    code, h = rj.wait_replica(1, False)
    assert code == 200
    assert h["status"] == "degraded" and h["healthy_replicas"] == 1 and h["total_replicas"] == 2
    assert h["replicas"][0]["healthy"] is True


def test_health_unhealthy_is_503(rj, engines):
    for e in engines:
        e.health = 503
    code, h = rj.wait_health(lambda c, j: j["healthy_replicas"] == 0, what="zero healthy")
    assert code == 503 and h["status"] == "unhealthy"
    assert h["total_replicas"] == 2
    r = rj.request("GET", "/health")
    _no_addresses(r.body.decode(), engines)


def test_health_single_replica(engine_factory, ramjet_factory):
    (e,) = engine_factory(1)
    rj = ramjet_factory([e])
    code, h = rj.health()
    assert code == 200 and h["status"] == "ok" and h["total_replicas"] == 1
    e.kill()
    code, h = rj.wait_health(lambda c, j: j["healthy_replicas"] == 0, what="dead engine fenced")
    assert code == 503


def test_health_and_metrics_show_inflight(rj, engines):
    c = open_stream(rj.api_port, CHAT, chat(stream=True), {"X-Mock": "hang_mid_stream after=1"})
    assert c.status == 200
    k = int(c.header("X-Ramjet-Upstream"))
    try:
        code, h = rj.health()
        assert h["replicas"][k]["inflight"] == 1 and h["replicas"][k]["load_units"] >= 1, h
        assert h["replicas"][1 - k]["inflight"] == 0 and h["replicas"][1 - k]["load_units"] == 0, h
        m = rj.metrics()
        assert m.get("ramjet_requests_inflight") == 1
        assert m.get("ramjet_upstream_inflight", upstream=str(k)) == 1
        assert m.get("ramjet_upstream_load_units", upstream=str(k)) >= 1
        assert m.get("ramjet_upstream_inflight", upstream=str(1 - k)) == 0
    finally:
        c.close()
    rj.wait_idle()


def test_load_units_scale_with_body_size(rj, engines):
    """A large uncached body reserves more than one load unit (ceil(bytes/32 KiB), max 8)."""
    c = open_stream(rj.api_port, CHAT, chat("y" * (200 * 1024), stream=True), {"X-Mock": "hang_mid_stream after=1"})
    k = int(c.header("X-Ramjet-Upstream"))
    try:
        units = rj.health()[1]["replicas"][k]["load_units"]
        assert 1 < units <= 8, units
    finally:
        c.close()
    rj.wait_idle()


def test_upstream_up_metric_follows_health(rj, engines):
    m = rj.metrics()
    assert m.get("ramjet_upstream_up", upstream="0") == 1 and m.get("ramjet_upstream_up", upstream="1") == 1
    engines[0].health = 503
    rj.wait_replica(0, False)
    m = rj.metrics()
    assert m.get("ramjet_upstream_up", upstream="0") == 0 and m.get("ramjet_upstream_up", upstream="1") == 1


def test_metrics_families_present(rj, engines):
    assert rj.chat(chat()).status == 200
    m = rj.metrics()
    for name in ("ramjet_requests_total", "ramjet_requests_inflight", "ramjet_upstream_up",
                 "ramjet_upstream_inflight", "ramjet_upstream_load_units", "ramjet_route_fail_open",
                 "ramjet_prompt_tokens_total", "ramjet_cached_prompt_tokens_total",
                 "ramjet_completion_tokens_total", "ramjet_usage_parse_failures_total"):
        assert m.has(name), f"{name} missing from /metrics"
    labels = {l["upstream"] for l, _ in m.find("ramjet_upstream_up")}
    assert labels == {"0", "1"}, "the upstream label is the ordinal"
    assert "127.0.0.1" not in m.text
    assert "# TYPE ramjet_requests_total counter" in m.text


def test_metrics_not_served_on_api_port(rj, engines):
    r = http_request(rj.api_port, "GET", "/metrics")
    # neither ramjet's (metrics listener) nor an engine's (not a path the API port serves)
    assert r.status == 404 and r.header("X-Ramjet-Upstream") is None
    assert r.json()["error"]["code"] == 404
    assert not engines[0].inference_requests() and not engines[1].inference_requests()
