"""TLS end to end: ramjet -> engines over https (verification against a CA file or the system store,
hostname/IP checks, expired and not-yet-valid certificates, mTLS, session resumption, a mixed
https/http fleet) and clients -> ramjet over HTTPS (both listeners, plain HTTP refused, the TLS
handshake under the header timeout, SIGHUP certificate reload), with no key material in the log.

Engines are ramjet-sim processes behind an nginx TLS terminator (support.tls.TlsFront), or behind
support.tls.StrictTlsFront where a missing client certificate must fail the TLS handshake itself
(nginx only refuses it at the HTTP level). Certificates come from a throwaway PKI (support.tls.make_pki).
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import ssl
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from support.e2e import CHAT, open_stream, read_events, sse_datas
from support.ramjet_proc import RawClient, poll
from support.sim_proc import SimProc
from support.tls import (StrictTlsFront, TlsFront, https_request, https_scrape, make_pki, peer_certificate,
                         write_pair)

DER = Encoding.DER
REASONS = ("untrusted", "hostname", "expired", "not_yet_valid", "handshake")
# Debug + ASan on a loaded 2-core machine: every wait is a poll with a generous deadline.
T_HEALTHY = 30.0
T_METRIC = 30.0
FAST_PROBES = {"RJ_PROBE_INTERVAL_MS": "100", "RJ_PROBE_TIMEOUT_MS": "3000",
               "RJ_UPSTREAM_CONNECT_TIMEOUT_MS": "3000"}
# Strings that come from certificates (subjects, issuers, SAN names): never in an error-level line.
CERT_WORDS = ("ramjet tests", "ramjet test root CA", "ramjet test intermediate CA", "unrelated CA",
              "wrong.example", "ramjet test client")


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


@pytest.fixture(autouse=True)
def no_key_material_in_any_ramjet_log(pki, tmp_path):
    """Case 9, checked after every test of this file: no PEM marker and no private-key bytes in any
    ramjet output written under tmp_path (ramjet_factory's ramjet<N>.log), whatever the test did."""
    yield
    secrets = pki.key_secrets()
    for log in sorted(tmp_path.glob("ramjet*.log")):
        text = log.read_text(errors="replace")
        assert "BEGIN" not in text, f"a PEM marker in {log.name}"
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"private key bytes in {log.name}"


@pytest.fixture
def sim():
    s = SimProc("--speed", "20")
    yield s
    s.stop()


@pytest.fixture
def front(tmp_path, sim):
    """make(cert, client_ca=None, name=None, upstream=sim) -> a started nginx TLS front."""
    made = []

    def make(cert, client_ca=None, name=None, upstream=None):
        f = TlsFront((upstream or sim).port, cert, tmp_path, client_ca=client_ca,
                     name=name or f"front{len(made)}")
        made.append(f)
        return f.start()

    yield make
    for f in made:
        f.stop()


def body(**kw) -> dict:
    b = {"model": "ramjet-sim", "messages": [{"role": "user", "content": "Say something about TLS."}],
         "max_tokens": 8}
    b.update(kw)
    return b


def tls_lines(m) -> str:
    """The TLS and probe-failure series of a scrape, for assertion messages."""
    return "\n".join(l for l in m.text.splitlines()
                     if not l.startswith("#") and ("tls" in l or "probe_failures" in l or "upstream_up" in l))


def wait_metric(scrape, pred, what: str, timeout: float = T_METRIC):
    """Polls scrape() until pred(metrics); the failure message shows the TLS series."""
    deadline = time.monotonic() + timeout
    while True:
        m = scrape()
        if pred(m):
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s; TLS/probe series:\n{tls_lines(m)}")
        time.sleep(0.05)


def error_lines(rj) -> list:
    out = []
    for line in rj.output().splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if j.get("lvl") == "error":
            out.append(line)
    return out


def assert_error_lines_name_no_certificate(rj, hostnames=()) -> None:
    """Error-level lines carry the reason only: nothing from certificates or hostnames."""
    for line in error_lines(rj):
        for w in CERT_WORDS + tuple(hostnames):
            assert w not in line, f"{w!r} in an error-level log line: {line}"


def assert_5xx_json(r) -> None:
    assert 500 <= r.status < 600, r
    assert (r.header("Content-Type") or "").startswith("application/json"), r
    err = r.json()["error"]
    assert err.get("message") and err.get("type"), r


def stays_unhealthy(rj, index: int = 0, seconds: float = 1.0) -> None:
    """The replica turns unhealthy (it starts healthy until its first probe), then stays so at every
    /health read for `seconds` (several probes)."""
    rj.wait_replica(index, False, T_HEALTHY)
    end = time.monotonic() + seconds
    while True:
        code, h = rj.health()
        assert h["replicas"][index]["healthy"] is False, h
        if time.monotonic() > end:
            return
        time.sleep(0.05)


# ---------------------------------------------------------------------------- the helpers themselves
def test_the_test_pki_and_front_behave_as_the_other_tests_assume(pki, sim, front):
    """Python's own verifier against the nginx fronts: the certificate defects are the intended ones,
    the front proxies JSON and SSE, resumes sessions and records SNI; the strict front refuses a
    missing client certificate in the handshake."""
    ctx = pki.client_context()
    good = front(pki.good, name="good")
    for host in ("localhost", "127.0.0.1"):
        r = https_request(good.port, "POST", CHAT, json.dumps(body()), {"Content-Type": "application/json"},
                          ctx=ctx, server_hostname=host)
        assert r.status == 200 and r.json()["object"] == "chat.completion", r
    r = https_request(good.port, "POST", CHAT, json.dumps(body(stream=True)), {"Content-Type": "application/json"},
                      ctx=ctx)
    assert r.status == 200 and r.body.rstrip().endswith(b"data: [DONE]"), r
    s1 = ctx.wrap_socket(socket.create_connection(("127.0.0.1", good.port), timeout=5), server_hostname="localhost")
    s1.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    while s1.recv(65536):
        pass
    s2 = ctx.wrap_socket(socket.create_connection(("127.0.0.1", good.port), timeout=5), server_hostname="localhost",
                         session=s1.session)
    assert s2.session_reused, "the nginx front does not resume sessions"
    s1.close()
    s2.close()
    sni = {e["sni"] for e in good.access_entries()}
    assert sni == {"localhost", "-"}, good.access_lines()

    def refusal(cert, host, ctx=ctx):
        f = front(cert)
        with pytest.raises(ssl.SSLCertVerificationError) as e:
            https_request(f.port, "GET", "/health", ctx=ctx, server_hostname=host)
        return e.value.verify_message

    assert "mismatch" in refusal(pki.wrong_host, "localhost")
    assert "mismatch" in refusal(pki.dns_only, "127.0.0.1")
    assert "expired" in refusal(pki.expired, "localhost")
    assert "not yet valid" in refusal(pki.not_yet_valid, "localhost")
    assert "issuer" in refusal(pki.untrusted, "localhost")
    assert "issuer" in refusal(pki.good, "localhost", ssl.create_default_context())  # not in the system store
    chained = front(pki.chained)
    assert https_request(chained.port, "GET", "/health", ctx=ctx).status == 200
    mtls = front(pki.good, client_ca=pki.ca_file)
    assert https_request(mtls.port, "GET", "/health", ctx=ctx).status == 400  # nginx: after the handshake
    assert https_request(mtls.port, "GET", "/health", ctx=pki.client_context(cert=pki.client)).status == 200
    for v in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        strict = StrictTlsFront(sim.port, pki.good, pki.ca_file, max_version=v).start()
        try:
            with pytest.raises(ssl.SSLError):
                https_request(strict.port, "GET", "/health", ctx=ctx)
            r = https_request(strict.port, "GET", "/health", ctx=pki.client_context(cert=pki.client))
            assert r.status == 200
        finally:
            strict.stop()


# ---------------------------------------------------------------------------- 1. https upstream
@pytest.mark.parametrize("cert,host", [("good", "localhost"), ("good", "127.0.0.1"), ("chained", "localhost")])
def test_https_upstream_serves_json_and_sse_and_resumes_sessions(pki, sim, front, ramjet_factory, cert, host):
    f = front(getattr(pki, cert))
    rj = ramjet_factory([f.url(host)], env=dict(FAST_PROBES, RJ_UPSTREAM_TLS_CA_FILE=pki.ca_file))
    rj.wait_replica(0, True, T_HEALTHY)
    # Probes alone (no request yet) open a fresh connection each time: after a few, some must have
    # resumed the TLS session, as ramjet counts it and as nginx saw it.
    m = wait_metric(rj.metrics, lambda m: m.val("ramjet_upstream_tls_handshakes_total", upstream="0",
                                                  resumed="true") > 0,
                    "ramjet_upstream_tls_handshakes_total{resumed=\"true\"} > 0 from health probes alone")
    assert any(e["reused"] == "r" for e in f.access_entries() if e["path"] != CHAT), "\n".join(
        f.access_lines()[-10:])

    r = rj.chat(body(), timeout=30)
    assert r.status == 200, r
    assert r.header("X-Ramjet-Upstream") == "0", r
    assert r.json()["object"] == "chat.completion" and r.json()["choices"], r

    c = open_stream(rj.api_port, CHAT, body(stream=True), timeout=30)
    assert c.status == 200, c.headers
    assert c.header("X-Ramjet-Upstream") == "0"
    assert "text/event-stream" in (c.header("Content-Type") or "")
    datas = sse_datas(read_events(c))
    c.close()
    assert datas and datas[-1] == "[DONE]", datas
    assert any(json.loads(d)["choices"] for d in datas[:-1] if d != "[DONE]")

    code, h = rj.health()
    assert code == 200 and h["replicas"][0]["healthy"] is True, h
    m = rj.metrics()
    assert m.val("ramjet_upstream_tls_handshakes_total", upstream="0", resumed="false") >= 1, tls_lines(m)
    for reason in REASONS:
        assert m.val("ramjet_upstream_tls_failures_total", reason=reason) == 0, tls_lines(m)
    assert m.val("ramjet_upstream_probe_failures_total", reason="tls") == 0, tls_lines(m)
    # The server's side of it: the inference requests arrived over TLS, SNI = the URL host when it
    # is a DNS name (none for an IP literal), and the front saw resumed sessions.
    inference = f.entries_for(CHAT, 2)
    entries = f.access_entries()
    assert len(inference) == 2 and all(e["status"] == "200" for e in inference), f.access_lines()
    want_sni = host if host == "localhost" else "-"
    assert {e["sni"] for e in entries} == {want_sni}, f.access_lines()[-10:]
    assert_error_lines_name_no_certificate(rj)


# ---------------------------------------------------------------------------- 2-5. refused certificates
BAD_CERTS = [
    # (id, server cert, host in the URL, CA file: "test" | "other" | None (system store), reason)
    ("system-store", "good", "localhost", None, "untrusted"),
    ("system-store-ip", "good", "127.0.0.1", None, "untrusted"),
    ("other-ca-signed", "untrusted", "localhost", "test", "untrusted"),
    ("ca-file-of-another-ca", "good", "localhost", "other", "untrusted"),
    ("wrong-host", "wrong_host", "localhost", "test", "hostname"),
    ("wrong-host-ip", "wrong_host", "127.0.0.1", "test", "hostname"),
    ("dns-only-cert-by-ip", "dns_only", "127.0.0.1", "test", "hostname"),
    ("expired", "expired", "localhost", "test", "expired"),
    ("not-yet-valid", "not_yet_valid", "localhost", "test", "not_yet_valid"),
]


@pytest.mark.parametrize("cert,host,ca,reason", [c[1:] for c in BAD_CERTS], ids=[c[0] for c in BAD_CERTS])
def test_a_refused_certificate_keeps_the_engine_out_with_its_reason(pki, sim, front, ramjet_factory,
                                                                    cert, host, ca, reason):
    f = front(getattr(pki, cert))
    env = dict(FAST_PROBES)
    if ca is not None:
        env["RJ_UPSTREAM_TLS_CA_FILE"] = pki.ca_file if ca == "test" else pki.other_ca_file
    rj = ramjet_factory([f.url(host)], env=env)
    m = wait_metric(rj.metrics, lambda m: m.val("ramjet_upstream_tls_failures_total", upstream="0",
                                                  reason=reason) > 0,
                    f"ramjet_upstream_tls_failures_total{{reason=\"{reason}\"}} > 0")
    for other in REASONS:
        if other != reason:
            assert m.val("ramjet_upstream_tls_failures_total", reason=other) == 0, tls_lines(m)
    m = wait_metric(rj.metrics, lambda m: m.val("ramjet_upstream_probe_failures_total", upstream="0",
                                                  reason="tls") > 0, "probe failures with reason tls")
    stays_unhealthy(rj, 0, 1.0)
    code, h = rj.health()
    assert code == 503 and h["healthy_replicas"] == 0, h
    assert_5xx_json(rj.chat(body(), timeout=30))
    assert m.val("ramjet_upstream_tls_handshakes_total", upstream="0", resumed="true") == 0, tls_lines(m)
    # Nothing was proxied: only handshakes (refused by ramjet) reached the front, no request.
    assert not [e for e in f.access_entries() if e["path"] == CHAT], f.access_lines()
    assert_error_lines_name_no_certificate(rj, hostnames=("wrong.example",))


# ---------------------------------------------------------------------------- 6. mTLS
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3], ids=["tls1.2", "tls1.3"])
def test_mtls_without_a_client_certificate_fails_the_handshake(pki, sim, ramjet_factory, version):
    """The engine requires a client certificate in the handshake (as vLLM/uvicorn with
    --ssl-cert-reqs 2 does). TLS 1.2: ramjet's handshake fails. TLS 1.3: ramjet's handshake
    completes and the server's certificate_required alert comes on the first read; either way it is
    a TLS failure with reason handshake."""
    strict = StrictTlsFront(sim.port, pki.good, pki.ca_file, max_version=version).start()
    try:
        rj = ramjet_factory([strict.url()], env=dict(FAST_PROBES, RJ_UPSTREAM_TLS_CA_FILE=pki.ca_file))
        m = wait_metric(rj.metrics, lambda m: m.val("ramjet_upstream_tls_failures_total", upstream="0",
                                                      reason="handshake") > 0,
                        "ramjet_upstream_tls_failures_total{reason=\"handshake\"} > 0")
        for other in REASONS[:-1]:
            assert m.val("ramjet_upstream_tls_failures_total", reason=other) == 0, tls_lines(m)
        wait_metric(rj.metrics, lambda m: m.val("ramjet_upstream_probe_failures_total", upstream="0",
                                                  reason="tls") > 0, "probe failures with reason tls")
        stays_unhealthy(rj, 0, 1.0)
        assert_5xx_json(rj.chat(body(), timeout=30))
        assert strict.handshakes and all(h.startswith("error") for h in strict.handshakes), strict.handshakes
        assert_error_lines_name_no_certificate(rj)
    finally:
        strict.stop()


@pytest.mark.parametrize("kind", ["nginx", "strict-tls1.2", "strict-tls1.3"])
def test_mtls_with_a_client_certificate_is_served(pki, sim, front, ramjet_factory, kind):
    strict = f = None
    if kind == "nginx":
        f = front(pki.good, client_ca=pki.ca_file)
        url = f.url()
    else:
        v = ssl.TLSVersion.TLSv1_2 if kind.endswith("1.2") else ssl.TLSVersion.TLSv1_3
        strict = StrictTlsFront(sim.port, pki.good, pki.ca_file, max_version=v).start()
        url = strict.url()
    try:
        rj = ramjet_factory([url], env=dict(FAST_PROBES, RJ_UPSTREAM_TLS_CA_FILE=pki.ca_file,
                                            RJ_UPSTREAM_TLS_CERT_FILE=pki.client.cert_file,
                                            RJ_UPSTREAM_TLS_KEY_FILE=pki.client.key_file))
        rj.wait_replica(0, True, T_HEALTHY)
        seen = strict.handshakes if strict else f.access_lines()
        r = rj.chat(body(), timeout=30)
        assert r.status == 200 and r.header("X-Ramjet-Upstream") == "0", (r, seen, tls_lines(rj.metrics()))
        r = rj.chat(body(stream=True), timeout=30)
        assert r.status == 200 and r.body.rstrip().endswith(b"data: [DONE]"), (r, seen, tls_lines(rj.metrics()))
        m = rj.metrics()
        for reason in REASONS:
            assert m.val("ramjet_upstream_tls_failures_total", reason=reason) == 0, tls_lines(m)
        if strict is not None:
            assert "ok" in strict.handshakes and not any(h.startswith("error") for h in strict.handshakes), \
                strict.handshakes
    finally:
        if strict is not None:
            strict.stop()
    if f is not None:
        inference = f.entries_for(CHAT, 2)
        assert len(inference) == 2 and all(e["client_verify"] == "SUCCESS" for e in inference), f.access_lines()


def test_nginx_mtls_without_a_client_certificate_is_an_http_probe_failure(pki, sim, front, ramjet_factory):
    """nginx refuses a missing client certificate at the HTTP level (400 after a completed handshake),
    not in TLS: the probes fail with reason http, no TLS failure is counted, the engine is out.
    (No request is sent: with no healthy engine ramjet fails open, and the response readmits it.)"""
    f = front(pki.good, client_ca=pki.ca_file)
    rj = ramjet_factory([f.url()], env=dict(FAST_PROBES, RJ_UPSTREAM_TLS_CA_FILE=pki.ca_file))
    poll(lambda: any(e["status"] == "400" for e in f.access_entries()), T_METRIC,
         what="a probe refused by nginx (400, no client certificate)")
    stays_unhealthy(rj, 0, 1.0)
    m = wait_metric(rj.metrics, lambda m: m.val("ramjet_upstream_probe_failures_total", upstream="0",
                                                  reason="http") > 0, "probe failures with reason http")
    assert m.val("ramjet_upstream_tls_failures_total") == 0, tls_lines(m)
    assert m.val("ramjet_upstream_tls_handshakes_total", upstream="0") > 0, tls_lines(m)
    assert all(e["client_verify"] == "NONE" for e in f.access_entries()), f.access_lines()


# ---------------------------------------------------------------------------- 7. mixed fleet
def test_a_mixed_https_and_http_fleet_serves_on_both(pki, front, ramjet_factory):
    a, b = SimProc("--speed", "2"), SimProc("--speed", "2")
    try:
        f = front(pki.good, upstream=a)
        rj = ramjet_factory([f.url(), b.url], env=dict(FAST_PROBES, RJ_UPSTREAM_TLS_CA_FILE=pki.ca_file))
        rj.wait_health(lambda c, j: all(r["healthy"] for r in j["replicas"]), T_HEALTHY, "both replicas healthy")
        seen = set()
        n = 0

        def one(i):
            return rj.chat(body(messages=[{"role": "user", "content": f"request {i}: " + "words " * (i % 7)}],
                                max_tokens=24), timeout=60)

        deadline = time.monotonic() + 90
        while seen != {"0", "1"} and time.monotonic() < deadline:
            with ThreadPoolExecutor(6) as ex:
                for r in ex.map(one, range(n, n + 6)):
                    assert r.status == 200, r
                    seen.add(r.header("X-Ramjet-Upstream"))
            n += 6
        assert seen == {"0", "1"}, f"after {n} concurrent requests only upstream(s) {seen} served"
        m = rj.metrics()
        assert m.val("ramjet_upstream_tls_handshakes_total", upstream="0") > 0, tls_lines(m)
        assert m.val("ramjet_upstream_tls_handshakes_total", upstream="1") == 0, tls_lines(m)
        assert m.val("ramjet_upstream_tls_failures_total") == 0, tls_lines(m)
        assert [e for e in f.access_entries() if e["path"] == CHAT], "no request went through the TLS front"
    finally:
        a.stop()
        b.stop()


# ---------------------------------------------------------------------------- 8. client TLS
class TlsRamjet:
    """ramjet with client TLS on: the HTTPS view of it (the fixture's helpers speak plain HTTP)."""

    def __init__(self, rj, pki, cert_file, key_file):
        self.rj, self.pki = rj, pki
        self.cert_file, self.key_file = cert_file, key_file
        self.ctx = pki.client_context()

    def request(self, method, path, body=None, headers=None, port=None, timeout=30.0, host="localhost"):
        return https_request(port or self.rj.api_port, method, path, body, headers, timeout=timeout,
                             ctx=self.ctx, server_hostname=host)

    def chat(self, b, timeout=30.0):
        return self.request("POST", CHAT, json.dumps(b), {"Content-Type": "application/json"}, timeout=timeout)

    def metrics(self):
        return https_scrape(self.rj.metrics_port, self.ctx)

    def health(self, port=None):
        r = self.request("GET", "/health", port=port, timeout=10)
        return r.status, r.json()

    def served_serial(self, port=None) -> int:
        return peer_certificate(port or self.rj.api_port, self.ctx).serial_number

    def wait_ready(self, timeout=T_HEALTHY):
        def ready():
            try:
                code, h = self.health()
            except (OSError, ssl.SSLError, ValueError):
                return None
            return code == 200 and all(r["healthy"] for r in h["replicas"])
        poll(ready, timeout, 0.1, "ramjet answering /health over HTTPS with every replica healthy")

    def reload(self, outcome: str) -> None:
        before = self.metrics().val("ramjet_tls_reloads_total", outcome=outcome)
        self.rj.proc.send_signal(signal.SIGHUP)
        wait_metric(self.metrics, lambda m: m.val("ramjet_tls_reloads_total", outcome=outcome) > before,
                    f"a SIGHUP reload with outcome {outcome}")


@pytest.fixture
def tls_rj(pki, sim, ramjet_factory, tmp_path):
    cert, key = str(tmp_path / "server.crt"), str(tmp_path / "server.key")
    write_pair(cert, key, pki.good)
    rj = ramjet_factory([sim.url], env={"RJ_TLS_CERT_FILE": cert, "RJ_TLS_KEY_FILE": key,
                                        "RJ_HEADER_TIMEOUT_MS": "1000"})
    t = TlsRamjet(rj, pki, cert, key)
    t.wait_ready()
    return t


def read_until_close(s: socket.socket, timeout: float) -> tuple:
    """(bytes received, seconds until EOF/reset); fails if the peer keeps the connection open."""
    t0 = time.monotonic()
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        raise AssertionError(f"ramjet kept the connection open for {timeout}s (received {data[:100]!r})")
    return data, time.monotonic() - t0


def test_client_tls_serves_the_api_and_the_metrics_listener_over_https(tls_rj, pki):
    r = tls_rj.chat(body())
    assert r.status == 200 and r.header("X-Ramjet-Upstream") == "0", r
    assert r.json()["object"] == "chat.completion"
    r = tls_rj.chat(body(stream=True))
    assert r.status == 200 and "text/event-stream" in (r.header("Content-Type") or ""), r
    assert r.body.rstrip().endswith(b"data: [DONE]"), r.body[-200:]
    # Hostname and IP both verify (the certificate has DNS:localhost and IP:127.0.0.1).
    assert tls_rj.request("GET", "/health", host="127.0.0.1").status == 200
    code, h = tls_rj.health()
    assert code == 200 and h["status"] == "ok", h
    code, h = tls_rj.health(port=tls_rj.rj.metrics_port)
    assert code == 200 and h["replicas"][0]["healthy"] is True, h
    m = tls_rj.metrics()
    assert m.has("ramjet_requests_total"), m.text[:500]
    assert tls_rj.served_serial() == pki.good.serial
    assert tls_rj.served_serial(tls_rj.rj.metrics_port) == pki.good.serial
    # Several requests on one keep-alive TLS connection.
    conn = http.client.HTTPSConnection("localhost", tls_rj.rj.api_port, timeout=30, context=tls_rj.ctx)
    try:
        for _ in range(3):
            conn.request("POST", CHAT, json.dumps(body()), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200
            resp.read()
    finally:
        conn.close()


def test_https_connections_that_end_after_their_response_leave_ramjet_whole(tls_rj):
    """`Connection: close` (and HTTP/1.0) end the connection right after the response, while the
    read that watched the client during the exchange is still pending on the TLS stream: the
    session must not go before that read's completion has run (under ASan a use after free
    would show here)."""
    from support.ramjet_proc import SANITIZER_MARKERS
    for i in range(12):
        conn = http.client.HTTPSConnection("localhost", tls_rj.rj.api_port, timeout=30, context=tls_rj.ctx)
        if i % 3 == 2:
            conn._http_vsn, conn._http_vsn_str = 10, "HTTP/1.0"
        try:
            b = body(stream=i % 2 == 1)
            conn.request("POST", CHAT, json.dumps(b), {"Content-Type": "application/json", "Connection": "close"})
            resp = conn.getresponse()
            assert resp.status == 200
            resp.read()
        finally:
            conn.close()
    assert tls_rj.chat(body()).status == 200
    assert tls_rj.rj.alive()
    out = tls_rj.rj.output()
    assert not any(m in out for m in SANITIZER_MARKERS), out[-3000:]


@pytest.mark.parametrize("listener", ["api", "metrics"])
def test_plain_http_to_a_tls_port_gets_no_http_answer_and_ramjet_keeps_serving(tls_rj, listener):
    port = tls_rj.rj.api_port if listener == "api" else tls_rj.rj.metrics_port
    before = tls_rj.metrics().val("ramjet_tls_handshake_failures_total", listener=listener)
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    data, _ = read_until_close(s, 15)
    s.close()
    assert not data.startswith(b"HTTP/"), f"a plain-HTTP answer on the TLS port: {data[:200]!r}"
    wait_metric(tls_rj.metrics, lambda m: m.val("ramjet_tls_handshake_failures_total", listener=listener) > before,
                f"ramjet_tls_handshake_failures_total{{listener=\"{listener}\"}} rose")
    assert tls_rj.chat(body()).status == 200
    assert tls_rj.health(port=port)[0] == 200
    assert tls_rj.rj.alive()


@pytest.mark.parametrize("what,first_bytes", [("silent", b""),
                                              # a ClientHello record header and 3 bytes of its 512
                                              ("stalled-in-handshake", b"\x16\x03\x01\x02\x00\x01\x00\x01"),
                                              ("silent-after-the-handshake", None)],
                         ids=["silent", "stalled-in-handshake", "silent-after-the-handshake"])
def test_a_client_that_sends_no_request_head_is_closed_by_the_header_timeout(tls_rj, what, first_bytes):
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", tls_rj.rj.api_port), timeout=10)
    if first_bytes is None:
        s = tls_rj.ctx.wrap_socket(s, server_hostname="localhost")
    elif first_bytes:
        s.sendall(first_bytes)
    # Meanwhile other clients are served.
    assert tls_rj.chat(body()).status == 200
    data, _ = read_until_close(s, 15)
    elapsed = time.monotonic() - t0
    s.close()
    assert not data.startswith(b"HTTP/"), data[:200]
    # RJ_HEADER_TIMEOUT_MS=1000 from the connect, generous slack for a loaded Debug + ASan build.
    assert 0.5 <= elapsed < 8.0, f"the {what} client was closed {elapsed:.2f}s after its connect"
    assert tls_rj.rj.alive()


def test_the_tls_handshake_counts_against_the_header_timeout_from_the_connect(tls_rj):
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", tls_rj.rj.api_port), timeout=10)
    _, waited = read_until_close(s, 15)
    s.close()
    elapsed = time.monotonic() - t0
    assert 0.5 <= elapsed < 6.0, f"a silent client was closed after {elapsed:.2f}s (header timeout 1 s)"


def test_sighup_reloads_the_certificate_and_a_broken_pair_keeps_the_old_one(tls_rj, pki, tmp_path):
    assert tls_rj.served_serial() == pki.good.serial
    # A keep-alive connection opened before the reload goes on with the context it started with.
    kept = http.client.HTTPSConnection("localhost", tls_rj.rj.api_port, timeout=30, context=tls_rj.ctx)
    kept.request("GET", "/health")
    assert kept.getresponse().read() and kept.sock.getpeercert(True) == pki.good.cert.public_bytes(DER)
    write_pair(tls_rj.cert_file, tls_rj.key_file, pki.good2)
    tls_rj.reload("ok")
    poll(lambda: tls_rj.served_serial() == pki.good2.serial, 10, 0.1, "the new certificate served after SIGHUP")
    kept.request("POST", CHAT, json.dumps(body()), {"Content-Type": "application/json"})
    resp = kept.getresponse()
    assert resp.status == 200 and resp.read(), "a connection from before the reload was not served"
    kept.close()
    assert tls_rj.served_serial(tls_rj.rj.metrics_port) == pki.good2.serial
    assert tls_rj.chat(body()).status == 200

    # A broken pair: good's certificate with good2's key (they do not match).
    (tmp_path / "server.crt").write_bytes(open(pki.good.cert_file, "rb").read())
    (tmp_path / "server.key").write_bytes(open(pki.good2.key_file, "rb").read())
    tls_rj.reload("error")
    # Garbage in the certificate file.
    (tmp_path / "server.crt").write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    tls_rj.reload("error")
    # A missing key file.
    (tmp_path / "server.key").unlink()
    tls_rj.reload("error")
    assert tls_rj.served_serial() == pki.good2.serial
    assert tls_rj.served_serial(tls_rj.rj.metrics_port) == pki.good2.serial
    assert tls_rj.chat(body()).status == 200
    m = tls_rj.metrics()
    assert m.val("ramjet_tls_reloads_total", outcome="ok") == 1, tls_lines(m)
    assert m.val("ramjet_tls_reloads_total", outcome="error") == 3, tls_lines(m)

    # A good pair again (the chained one: leaf + intermediate in the cert file).
    write_pair(tls_rj.cert_file, tls_rj.key_file, pki.chained)
    tls_rj.reload("ok")
    poll(lambda: tls_rj.served_serial() == pki.chained.serial, 10, 0.1, "the chained certificate served")
    assert tls_rj.chat(body()).status == 200
    assert tls_rj.rj.alive()


def test_the_openai_sdk_talks_to_ramjet_over_https(tls_rj, pki):
    openai = pytest.importorskip(
        "openai", reason="the OpenAI Python SDK is not installed (python3 -c 'import openai' fails); "
                         "this case is skipped rather than installing it")
    import httpx
    client = openai.OpenAI(base_url=f"https://localhost:{tls_rj.rj.api_port}/v1", api_key="unused",
                           max_retries=0, http_client=httpx.Client(verify=pki.ca_file))
    r = client.chat.completions.create(model="ramjet-sim", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=8)
    assert r.choices and r.choices[0].message.content
    chunks = list(client.chat.completions.create(model="ramjet-sim", max_tokens=8, stream=True,
                                                 messages=[{"role": "user", "content": "hi"}]))
    assert chunks


def tls_raw_client(port: int, ctx: ssl.SSLContext) -> RawClient:
    """support.ramjet_proc.RawClient over TLS (its socket wrapped before anything is sent)."""
    c = RawClient(port, timeout=30)
    c.s = ctx.wrap_socket(c.s, server_hostname="localhost")
    return c


def test_tls_both_ways_large_bodies_byte_exact_and_sse_relayed_as_it_comes(pki, engine_factory, front,
                                                                           ramjet_factory, tmp_path):
    """Client -HTTPS-> ramjet -HTTPS-> nginx -> mock engine: a 3 MB request body arrives byte-exact,
    a 3 MB response comes back whole, and SSE events spaced 0.4 s apart reach the client one by one
    (neither TLS leg buffers the stream)."""
    (engine,) = engine_factory(1)
    f = front(pki.good, upstream=engine)
    cert, key = str(tmp_path / "server.crt"), str(tmp_path / "server.key")
    write_pair(cert, key, pki.good)
    rj = ramjet_factory([f.url()], env=dict(FAST_PROBES, RJ_TLS_CERT_FILE=cert, RJ_TLS_KEY_FILE=key,
                                            RJ_UPSTREAM_TLS_CA_FILE=pki.ca_file))
    t = TlsRamjet(rj, pki, cert, key)
    t.wait_ready()
    big = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "x" * (3 << 20)}]}).encode()
    r = t.request("POST", CHAT, big, {"Content-Type": "application/json", "X-Mock": "echo"}, timeout=60)
    assert r.status == 200, r
    assert r.json()["body"].encode("latin-1") == big
    (req,) = engine.inference_requests()
    assert req.body == big

    c = tls_raw_client(rj.api_port, t.ctx)
    c.send_request("POST", CHAT, json.dumps({"model": "mock-model", "stream": True,
                                             "messages": [{"role": "user", "content": "hi"}]}).encode(),
                   {"Content-Type": "application/json", "X-Mock": "sse chunks=5 delay=0.4"})
    assert c.read_head() == 200, c.headers
    events = read_events(c)
    c.close()
    datas = sse_datas(events)
    assert datas[-1] == "[DONE]", datas
    got = [t_ for t_, ev in events if t_ is not None and b'"content": "tok' in ev]
    streamed = [r_ for r_ in engine.inference_requests() if r_.header("X-Mock")][-1]
    sent = [t_ for t_, piece in engine.sent_for(streamed.id) if b'"content": "tok' in piece]
    assert len(got) == len(sent) == 5, (events, sent)
    # Each event reached the client before the engine even wrote the next one (0.4 s later).
    late = [i for i in range(4) if got[i] >= sent[i + 1]]
    assert not late, f"events {late} were held back: sent at {sent}, received at {got}"


# ---------------------------------------------------------------------------- startup errors
@pytest.mark.parametrize("case", ["ca-file-missing", "upstream-cert-without-key", "client-cert-without-key",
                                  "client-key-mismatch", "https-upstream-bad-ca-file"])
def test_bad_tls_configuration_stops_startup_without_printing_keys(pki, sim, ramjet_factory, tmp_path, case):
    env = {}
    ups = [sim.url]
    if case == "ca-file-missing":
        ups = ["https://localhost:1"]
        env = {"RJ_UPSTREAM_TLS_CA_FILE": str(tmp_path / "absent.pem")}
        var = "RJ_UPSTREAM_TLS_CA_FILE"
    elif case == "upstream-cert-without-key":
        ups = ["https://localhost:1"]
        env = {"RJ_UPSTREAM_TLS_CERT_FILE": pki.client.cert_file}
        var = "RJ_UPSTREAM_TLS_"
    elif case == "client-cert-without-key":
        env = {"RJ_TLS_CERT_FILE": pki.good.cert_file}
        var = "RJ_TLS_"
    elif case == "client-key-mismatch":
        env = {"RJ_TLS_CERT_FILE": pki.good.cert_file, "RJ_TLS_KEY_FILE": pki.good2.key_file}
        var = "RJ_TLS"
    else:
        bad = tmp_path / "bad-ca.pem"
        bad.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
        ups = ["https://localhost:1"]
        env = {"RJ_UPSTREAM_TLS_CA_FILE": str(bad)}
        var = "RJ_UPSTREAM_TLS_CA_FILE"
    proc = ramjet_factory(ups, env=env, start=False)
    rc, out = proc.run_to_exit(20)
    assert rc != 0, out
    assert "listening api=" not in out, out
    assert var in out, f"the error names no {var}*: {out}"
    # The autouse check covers key bytes; garbage from our bad CA file is not echoed either.
    assert "garbage" not in out


# ---------------------------------------------------------------------------- 9. secrets
def test_no_key_material_in_the_log_with_everything_on_at_debug_level(pki, sim, tmp_path, ramjet_factory):
    """Client TLS + upstream mTLS + reloads (one broken) at debug level: no PEM marker, no private-key
    bytes in the log, /metrics or /health; error-level lines name no certificate or host."""
    strict = StrictTlsFront(sim.port, pki.good, pki.ca_file).start()
    try:
        cert, key = str(tmp_path / "server.crt"), str(tmp_path / "server.key")
        write_pair(cert, key, pki.good)
        rj = ramjet_factory([strict.url(), "https://127.0.0.1:%d" % strict.port],
                            env=dict(FAST_PROBES, RJ_LOG_LEVEL="debug", RJ_TLS_CERT_FILE=cert, RJ_TLS_KEY_FILE=key,
                                     RJ_UPSTREAM_TLS_CA_FILE=pki.ca_file,
                                     RJ_UPSTREAM_TLS_CERT_FILE=pki.client.cert_file,
                                     RJ_UPSTREAM_TLS_KEY_FILE=pki.client.key_file))
        t = TlsRamjet(rj, pki, cert, key)
        t.wait_ready()
        assert t.chat(body()).status == 200
        write_pair(cert, key, pki.good2)
        t.reload("ok")
        (tmp_path / "server.key").write_bytes(open(pki.good.key_file, "rb").read())  # mismatched now
        t.reload("error")
        s = socket.create_connection(("127.0.0.1", rj.api_port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
        read_until_close(s, 15)
        s.close()
        m = t.metrics()
        _, h = t.health()
    finally:
        strict.stop()
    rj.terminate()
    rj.wait_exit(15)
    out = rj.output()
    secrets = pki.key_secrets()
    for where, text in (("log", out), ("/metrics", m.text), ("/health", json.dumps(h))):
        assert "BEGIN" not in text, f"a PEM marker in the {where}"
        assert not [x for x in secrets if x in text], f"private key bytes in the {where}"
    assert_error_lines_name_no_certificate(rj)
