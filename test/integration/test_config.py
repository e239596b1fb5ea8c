"""Startup configuration: environment validation and the listening log line."""

from support.ramjet_proc import LISTEN_RE, http_request, scrape


def test_unknown_rj_variables_abort_startup_listing_all(engines, ramjet_factory):
    p = ramjet_factory(engines, start=False, raw_env={"RJ_BOGUS_KNOB": "1", "RJ_NOT_A_SETTING": "x"})
    rc, out = p.run_to_exit(10)
    assert rc != 0, out
    assert "RJ_BOGUS_KNOB" in out and "RJ_NOT_A_SETTING" in out, out
    assert not LISTEN_RE.search(out)


def test_retired_prefixes_abort_startup_listing_all(engines, ramjet_factory):
    p = ramjet_factory(engines, start=False, raw_env={"MD_ROUTE_ALPHA": "4", "DS4_UPSTREAM": "http://x:1",
                                                      "MD_OTHER": "y"})
    rc, out = p.run_to_exit(10)
    assert rc != 0, out
    for name in ("MD_ROUTE_ALPHA", "DS4_UPSTREAM", "MD_OTHER"):
        assert name in out, f"{name} not listed in:\n{out}"
    assert not LISTEN_RE.search(out)


def test_unknown_and_retired_reported_together(engines, ramjet_factory):
    p = ramjet_factory(engines, start=False, raw_env={"RJ_TYPO_INTERVAL": "1", "DS4_THING": "2"})
    rc, out = p.run_to_exit(10)
    assert rc != 0
    assert "RJ_TYPO_INTERVAL" in out and "DS4_THING" in out, out


def test_invalid_value_aborts_startup(engines, ramjet_factory):
    p = ramjet_factory(engines, start=False, env={"RJ_PROBE_INTERVAL_MS": "soon"})
    rc, out = p.run_to_exit(10)
    assert rc != 0, out
    assert "RJ_PROBE_INTERVAL_MS" in out, out


def test_profile_count_must_match_the_upstreams(engines, ramjet_factory):
    p = ramjet_factory(engines, start=False, env={"RJ_UPSTREAM_PROFILES": "mtp,standard,mtp"})
    rc, out = p.run_to_exit(10)
    assert rc != 0, out
    assert "RJ_UPSTREAM_PROFILES: 3 profiles for 2 RJ_UPSTREAM entries" in out, out
    assert not LISTEN_RE.search(out)


def test_bad_profile_and_decimal_are_reported_together(engines, ramjet_factory):
    p = ramjet_factory(engines, start=False,
                       env={"RJ_UPSTREAM_PROFILES": "mtp,eagle", "RJ_ROUTE_ALPHA": "1e3"})
    rc, out = p.run_to_exit(10)
    assert rc != 0, out
    assert "RJ_UPSTREAM_PROFILES: item 2: expected mtp or standard" in out, out
    assert 'RJ_ROUTE_ALPHA="1e3": not a decimal number' in out, out


def test_routing_options_are_accepted(engines, ramjet_factory):
    rj = ramjet_factory(engines, env={"RJ_UPSTREAM_PROFILES": "MTP,standard", "RJ_ROUTE_ALPHA": "2.5",
                                      "RJ_AFFINITY": "prefix"})
    assert rj.health()[0] == 200


def test_listening_line_gives_both_ephemeral_ports(rj):
    assert rj.api_port and rj.metrics_port and rj.api_port != rj.metrics_port
    r = http_request(rj.api_port, "GET", "/health")
    assert r.status == 200
    m = scrape(rj.metrics_port)
    assert m.has("ramjet_requests_inflight")
    # The log line is JSON with the text in "msg".
    line = next(l for l in rj.output().splitlines() if LISTEN_RE.search(l))
    import json
    assert LISTEN_RE.search(json.loads(line)["msg"])


def test_two_instances_do_not_collide(engines, ramjet_factory):
    a = ramjet_factory(engines)
    b = ramjet_factory(engines)
    assert len({a.api_port, a.metrics_port, b.api_port, b.metrics_port}) == 4
    assert a.health()[0] == 200 and b.health()[0] == 200
