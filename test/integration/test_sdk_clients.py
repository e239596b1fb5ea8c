"""The official client SDKs against ramjet, end to end, for each TLS and key case (issue 17).

The clients are the official Node SDKs (openai, @anthropic-ai/sdk, pinned in test/clients/package-lock.json,
installed by scripts/setup), driven through test/clients/sdk_client.mjs: one chat request per run, one
JSON line out ({"ok": true, "text": ..., "upstream": ...} or {"ok": false, "error_type": <SDK error class>,
"status": ...}). The Python OpenAI SDK is not installed here; the Node SDKs are the same Stainless-generated
clients (same error classes, same headers).

Cases, each with real processes (ramjet-sim engines, or a mock engine where the engine's view of the
request is asserted, behind ramjet; nginx as the engines' TLS front):
  * OpenAI SDK over plain HTTP with RJ_API_KEYS_FILE: the right key is served (JSON and SSE), a wrong one
    raises AuthenticationError (401) and reaches no engine;
  * Anthropic SDK on /v1/messages with its key in x-api-key: a wrong key is AuthenticationError (401); the
    right one is served by ramjet-sim's /v1/messages (engine 0), and by a mock engine that speaks
    /v1/messages (the agent APIs themselves: test_agent_apis.py);
  * OpenAI SDK over HTTPS to ramjet (RJ_TLS_CERT_FILE/RJ_TLS_KEY_FILE, the test CA in NODE_EXTRA_CA_CERTS):
    served; without the CA the SDK fails with a connection error (certificate not trusted) and
    ramjet_tls_handshake_failures_total{listener="api"} rises;
  * OpenAI SDK through ramjet to https:// engines (RJ_UPSTREAM_TLS_CA_FILE): served; with TLS both ways and
    RJ_UPSTREAM_TOKEN the engine sees the upstream token and never the client's key.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from support.ramjet_proc import poll
from support.sim_proc import SimProc
from support.tls import TlsFront, https_request, https_scrape, make_pki, write_pair

CLIENTS = Path(__file__).resolve().parent.parent / "clients"
SCRIPT = CLIENTS / "sdk_client.mjs"
NODE = shutil.which("node")
SDK_PACKAGES = ("openai", "@anthropic-ai/sdk")
_missing = [p for p in SDK_PACKAGES if not (CLIENTS / "node_modules" / p / "package.json").is_file()]
if NODE is None:
    pytest.skip("node is not installed: the SDK client tests need Node.js (scripts/setup installs the SDKs)",
                allow_module_level=True)
if _missing:
    pytest.skip(f"test/clients/node_modules lacks {', '.join(_missing)}: run scripts/setup "
                "(npm ci --prefix test/clients)", allow_module_level=True)

KEY = "sk-sdk-" + secrets.token_hex(12)
WRONG = "sk-wrong-" + secrets.token_hex(12)
ENGINE_TOKEN = "engine-token-" + secrets.token_hex(8)
# Debug + ASan on a loaded 2-core machine: generous deadlines everywhere.
T_READY = 30.0
T_NODE = 120.0
FAST_PROBES = {"RJ_PROBE_INTERVAL_MS": "100", "RJ_PROBE_TIMEOUT_MS": "3000",
               "RJ_UPSTREAM_CONNECT_TIMEOUT_MS": "3000"}
# Variables that would change what the node process trusts or where it connects.
_CLEAN_ENV = ("NODE_EXTRA_CA_CERTS", "NODE_TLS_REJECT_UNAUTHORIZED", "NODE_OPTIONS", "HTTP_PROXY", "HTTPS_PROXY",
              "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
              "OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY",
              "ANTHROPIC_AUTH_TOKEN")


# ---------------------------------------------------------------------------- the SDK client
def sdk(kind: str, base_url: str, api_key: str, *, stream: bool = False, extra_ca: str | None = None,
        ca_arg: str | None = None, model: str | None = None) -> dict:
    """Runs test/clients/sdk_client.mjs once; returns its JSON line. extra_ca: NODE_EXTRA_CA_CERTS for the
    node process; ca_arg: the script's --ca option (it re-runs itself with NODE_EXTRA_CA_CERTS)."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
    if extra_ca:
        env["NODE_EXTRA_CA_CERTS"] = extra_ca
    args = [NODE, str(SCRIPT), kind, base_url, api_key]
    if stream:
        args.append("--stream")
    if ca_arg:
        args += ["--ca", ca_arg]
    if model:
        args += ["--model", model]
    p = subprocess.run(args, env=env, cwd=str(CLIENTS), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=T_NODE)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert p.returncode == 0 and len(lines) == 1, \
        f"sdk_client.mjs {kind} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return json.loads(lines[0])


def assert_served(r: dict, what: str, upstream: str = "0") -> None:
    assert r["ok"] is True and r["status"] == 200, (what, r)
    assert r["text"], (what, "an empty completion", r)
    assert r["upstream"] == upstream, (what, r)


def assert_auth_error(r: dict, what: str) -> None:
    assert r["ok"] is False, (what, r)
    assert r["error_type"] == "AuthenticationError" and r["status"] == 401, (what, r)
    assert r["upstream"] is None, (what, "a refused request names no engine", r)


def assert_no_key_leaked(rj) -> None:
    out = rj.output()
    for k in (KEY, WRONG, ENGINE_TOKEN):
        assert k not in out, "a key or the upstream token appears in ramjet's log output"


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


@pytest.fixture
def key_file(tmp_path):
    p = tmp_path / "api_keys"
    p.write_text(f"# the SDK tests' client key\nsdk {KEY}\n")
    return str(p)


@pytest.fixture
def sim():
    s = SimProc("--speed", "20")
    yield s
    s.stop()


@pytest.fixture
def fronts(tmp_path):
    """make(upstream_port, cert) -> a started nginx TLS front; stopped at teardown."""
    made = []

    def make(upstream_port, cert):
        f = TlsFront(upstream_port, cert, tmp_path, name=f"front{len(made)}")
        made.append(f)
        return f.start()

    yield make
    for f in made:
        f.stop()


def plain_ramjet(ramjet_factory, upstreams, env):
    rj = ramjet_factory(upstreams, env=dict(FAST_PROBES, **env))
    rj.wait_health(lambda c, j: c == 200 and all(r["healthy"] for r in j["replicas"]), T_READY,
                   "every replica healthy")
    return rj


def tls_ramjet(ramjet_factory, tmp_path, pki, upstreams, env):
    """ramjet with HTTPS on both listeners (the test PKI's good certificate), ready over HTTPS."""
    cert, key = str(tmp_path / "server.crt"), str(tmp_path / "server.key")
    write_pair(cert, key, pki.good)
    rj = ramjet_factory(upstreams, env=dict(FAST_PROBES, RJ_TLS_CERT_FILE=cert, RJ_TLS_KEY_FILE=key, **env))
    ctx = pki.client_context()

    def ready():
        try:
            r = https_request(rj.api_port, "GET", "/health", timeout=10, ctx=ctx, server_hostname="127.0.0.1")
            return r.status == 200 and all(x["healthy"] for x in r.json()["replicas"])
        except (OSError, ssl.SSLError, ValueError):
            return False

    poll(ready, T_READY, 0.1, "ramjet answering /health over HTTPS with every replica healthy")
    return rj, ctx


def auth_counts(m) -> dict:
    return {o: m.val("ramjet_client_auth_total", outcome=o) for o in ("accepted", "missing", "invalid")}


# ---------------------------------------------------------------------------- plain HTTP, keys on
def test_openai_sdk_over_http_with_api_keys(sim, ramjet_factory, key_file):
    rj = plain_ramjet(ramjet_factory, [sim.url], {"RJ_API_KEYS_FILE": key_file})
    base = f"http://127.0.0.1:{rj.api_port}/v1"
    assert_served(sdk("openai", base, KEY), "the right key")
    assert_auth_error(sdk("openai", base, WRONG), "a wrong key")
    r = sdk("openai", base, KEY, stream=True)
    assert_served(r, "the right key, streaming")
    assert r["chunks"] >= 2, r
    assert auth_counts(rj.metrics()) == {"accepted": 2, "missing": 0, "invalid": 1}
    assert_no_key_leaked(rj)


def test_anthropic_sdk_on_v1_messages_with_x_api_key(sim, ramjet_factory, key_file):
    """The right key in x-api-key passes ramjet's check and ramjet-sim's /v1/messages answers (JSON and
    SSE); a wrong one is the SDK's AuthenticationError."""
    rj = plain_ramjet(ramjet_factory, [sim.url], {"RJ_API_KEYS_FILE": key_file})
    base = f"http://127.0.0.1:{rj.api_port}"
    assert_auth_error(sdk("anthropic", base, WRONG), "a wrong key in x-api-key")
    assert_served(sdk("anthropic", base, KEY), "anthropic, the right key")
    r = sdk("anthropic", base, KEY, stream=True)
    assert_served(r, "anthropic, the right key, streaming")
    assert r["chunks"] >= 4, r
    assert auth_counts(rj.metrics()) == {"accepted": 2, "missing": 0, "invalid": 1}
    assert_no_key_leaked(rj)


def test_anthropic_sdk_is_served_by_an_engine_that_speaks_v1_messages(engine_factory, ramjet_factory, key_file):
    """The same SDK against a mock engine that answers /v1/messages (non-streaming: the mock's SSE is
    OpenAI-shaped). Without RJ_UPSTREAM_TOKEN the engine gets no credentials at all."""
    (engine,) = engine_factory(1)
    rj = plain_ramjet(ramjet_factory, [engine], {"RJ_API_KEYS_FILE": key_file})
    base = f"http://127.0.0.1:{rj.api_port}"
    r = sdk("anthropic", base, KEY, model="mock-model")
    assert_served(r, "anthropic, the right key")
    assert r["text"].startswith("tok0"), r
    assert_auth_error(sdk("anthropic", base, WRONG, model="mock-model"), "anthropic, a wrong key")
    (req,) = engine.inference_requests()
    assert req.path == "/v1/messages", req
    assert req.header("x-api-key") is None and req.header("Authorization") is None, req.headers
    assert req.header("anthropic-version"), ("the SDK's own headers are forwarded", req.headers)
    assert_no_key_leaked(rj)


# ---------------------------------------------------------------------------- HTTPS to ramjet
def test_openai_sdk_over_https_trusts_ramjet_only_with_the_test_ca(sim, ramjet_factory, tmp_path, pki, key_file):
    rj, ctx = tls_ramjet(ramjet_factory, tmp_path, pki, [sim.url], {"RJ_API_KEYS_FILE": key_file})
    base = f"https://127.0.0.1:{rj.api_port}/v1"
    assert_served(sdk("openai", base, KEY, extra_ca=pki.ca_file), "HTTPS with the test CA")
    assert_served(sdk("openai", base, KEY, stream=True, ca_arg=pki.ca_file), "HTTPS, streaming, --ca")
    assert_auth_error(sdk("openai", base, WRONG, extra_ca=pki.ca_file), "HTTPS, a wrong key")

    def failures():
        return https_scrape(rj.metrics_port, ctx).val("ramjet_tls_handshake_failures_total", listener="api")

    before = failures()
    r = sdk("openai", base, KEY)      # no NODE_EXTRA_CA_CERTS: the test CA is not trusted
    assert r["ok"] is False and r["status"] is None and r["error_type"] == "APIConnectionError", r
    assert any(w in r["cause"] for w in ("SELF_SIGNED_CERT_IN_CHAIN", "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
                                         "UNABLE_TO_GET_ISSUER_CERT", "certificate")), r
    poll(lambda: failures() > before, 30, 0.1, "ramjet_tls_handshake_failures_total{listener=\"api\"} rising")
    assert_served(sdk("openai", base, KEY, extra_ca=pki.ca_file), "HTTPS after a refused handshake")
    m = https_scrape(rj.metrics_port, ctx)
    assert auth_counts(m) == {"accepted": 3, "missing": 0, "invalid": 1}, auth_counts(m)
    assert_no_key_leaked(rj)


# ---------------------------------------------------------------------------- HTTPS to the engines
def test_openai_sdk_through_ramjet_to_an_https_engine(sim, fronts, ramjet_factory, pki, key_file):
    f = fronts(sim.port, pki.good)
    rj = plain_ramjet(ramjet_factory, [f.url()], {"RJ_API_KEYS_FILE": key_file,
                                                  "RJ_UPSTREAM_TLS_CA_FILE": pki.ca_file})
    base = f"http://127.0.0.1:{rj.api_port}/v1"
    assert_served(sdk("openai", base, KEY), "to an https engine")
    r = sdk("openai", base, KEY, stream=True)
    assert_served(r, "to an https engine, streaming")
    assert r["chunks"] >= 2, r
    served = f.entries_for("/v1/chat/completions", 2)
    assert len(served) == 2 and all(e["status"] == "200" and e["proto"].startswith("TLS") for e in served), \
        f.access_lines()
    assert_no_key_leaked(rj)


def test_tls_both_ways_the_engine_never_sees_the_clients_key(engine_factory, fronts, ramjet_factory, tmp_path,
                                                            pki, key_file):
    """SDK -> HTTPS ramjet -> https:// engine (nginx in front of a mock engine, which records what it got):
    the engine sees RJ_UPSTREAM_TOKEN, never the client's key."""
    (engine,) = engine_factory(1)
    f = fronts(engine.port, pki.good)
    rj, _ = tls_ramjet(ramjet_factory, tmp_path, pki, [f.url()],
                       {"RJ_API_KEYS_FILE": key_file, "RJ_UPSTREAM_TLS_CA_FILE": pki.ca_file,
                        "RJ_UPSTREAM_TOKEN": ENGINE_TOKEN})
    base = f"https://127.0.0.1:{rj.api_port}/v1"
    assert_served(sdk("openai", base, KEY, extra_ca=pki.ca_file, model="mock-model"), "TLS both ways")
    assert_served(sdk("openai", base, KEY, stream=True, extra_ca=pki.ca_file, model="mock-model"),
                  "TLS both ways, streaming")
    assert_served(sdk("anthropic", f"https://127.0.0.1:{rj.api_port}", KEY, extra_ca=pki.ca_file,
                      model="mock-model"), "TLS both ways, anthropic")
    reqs = engine.inference_requests()
    assert [r.path for r in reqs] == ["/v1/chat/completions", "/v1/chat/completions", "/v1/messages"], reqs
    for req in reqs:
        assert req.header_all("Authorization") == [f"Bearer {ENGINE_TOKEN}"], req.headers
        assert req.header("x-api-key") is None, req.headers
        seen = json.dumps([list(h) for h in req.headers]) + req.body.decode("utf-8", "replace")
        assert KEY not in seen, "the client's key reached the engine"
    for req in engine.all_requests():
        assert KEY not in json.dumps([list(h) for h in req.headers]), "the client's key reached the engine"
    assert_no_key_leaked(rj)
