"""Client API keys (RJ_API_KEYS_FILE): 401 before anything reaches an engine, Bearer and x-api-key,
plain and hashed keys, /health without a key, the engines get RJ_UPSTREAM_TOKEN instead of the
client's key, SIGHUP reload (a broken file keeps the old keys), startup errors naming the line,
and keys never in ramjet's log or /metrics."""

import hashlib
import json
import secrets
import signal

import pytest

from support.e2e import CHAT, all_inference, chat, enc, engine_of
from support.ramjet_proc import RawClient, poll

PLAIN = "sk-plain-" + secrets.token_hex(12)      # alice
HASHED = "sk-hashed-" + secrets.token_hex(12)    # ci, listed as its SHA-256
UNNAMED = "sk-unnamed-" + secrets.token_hex(12)  # no name
ROTATED = "sk-rotated-" + secrets.token_hex(12)  # only in the file written before a SIGHUP
BROKEN = "sk-broken-" + secrets.token_hex(12)    # on a bad line of a broken file
WRONG = "sk-wrong-" + secrets.token_hex(12)
ENGINE_TOKEN = "engine-token-" + secrets.token_hex(8)
ALL_KEYS = (PLAIN, HASHED, UNNAMED, ROTATED, BROKEN, WRONG)


def sha256_hex(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


KEY_FILE = (
    "# client keys for the test\n"
    "\n"
    f"alice {PLAIN}\n"
    f"ci sha256:{sha256_hex(HASHED)}\n"
    f"   {UNNAMED}   \n"
)


@pytest.fixture
def key_file(tmp_path):
    p = tmp_path / "api_keys"
    p.write_text(KEY_FILE)
    return p


@pytest.fixture
def keyed(engines, ramjet_factory, key_file):
    """ramjet in front of the two `engines` with keys on and an upstream token."""
    return ramjet_factory(engines, env={"RJ_API_KEYS_FILE": str(key_file), "RJ_UPSTREAM_TOKEN": ENGINE_TOKEN,
                                        "RJ_LOG_LEVEL": "debug"})


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def auth_metrics(rj) -> dict:
    m = rj.metrics()
    return {o: m.val("ramjet_client_auth_total", outcome=o) for o in ("accepted", "missing", "invalid")}


def assert_no_key_leaked(rj) -> None:
    text = rj.metrics().text
    out = rj.output()
    for key in ALL_KEYS + (sha256_hex(HASHED), ENGINE_TOKEN):
        assert key not in out, "a key or token appears in ramjet's log output"
        assert key not in text, "a key or token appears on /metrics"
        assert key[:12] not in text
    status, health = rj.health()
    assert status == 200
    assert not any(key in json.dumps(health) for key in ALL_KEYS)


def assert_unauthorized(r, what: str) -> None:
    assert r.status == 401, (what, r)
    assert r.header("WWW-Authenticate") == "Bearer", r
    assert r.header("Content-Type") == "application/json"
    assert r.header("X-Ramjet-Upstream") is None
    err = r.json()["error"]
    assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key" and err["message"], err


def test_request_without_a_key_gets_401_json_and_reaches_no_engine(keyed, engines):
    assert_unauthorized(keyed.chat(chat()), "chat without a key")
    assert_unauthorized(keyed.request("GET", "/v1/models"), "models without a key")
    # Every path but /health: an unknown one is not told apart from a served one.
    assert_unauthorized(keyed.request("GET", "/metrics"), "unknown path without a key")
    assert_unauthorized(keyed.request("POST", "/health", b"{}"), "POST /health without a key")
    assert "missing API key" in keyed.chat(chat()).json()["error"]["message"]
    assert not all_inference(engines)
    assert all(r.path in ("/health", "/v1/models") and r.header("Authorization") == f"Bearer {ENGINE_TOKEN}"
               for e in engines for r in e.all_requests()), "only ramjet's own probes reach the engines"
    assert auth_metrics(keyed) == {"accepted": 0, "missing": 5, "invalid": 0}
    m = keyed.metrics()
    assert m.val("ramjet_requests_inflight") == 0
    assert_no_key_leaked(keyed)


def test_a_wrong_key_gets_401_in_either_header(keyed, engines):
    assert_unauthorized(keyed.chat(chat(), headers=bearer(WRONG)), "wrong bearer key")
    assert_unauthorized(keyed.chat(chat(), headers={"x-api-key": WRONG}), "wrong x-api-key")
    assert_unauthorized(keyed.chat(chat(), headers={"Authorization": PLAIN}), "key without the Bearer scheme")
    assert_unauthorized(keyed.chat(chat(), headers={"Authorization": f"Basic {PLAIN}"}), "another scheme")
    # The hash written in the file is not itself a key.
    assert_unauthorized(keyed.chat(chat(), headers=bearer(sha256_hex(HASHED))), "the hash as a key")
    assert_unauthorized(keyed.chat(chat(), headers=bearer("sha256:" + sha256_hex(HASHED))), "the file's text")
    assert keyed.chat(chat(), headers=bearer(WRONG)).json()["error"]["message"] == "invalid API key"
    assert not all_inference(engines)
    assert auth_metrics(keyed) == {"accepted": 0, "missing": 0, "invalid": 7}
    assert_no_key_leaked(keyed)


@pytest.mark.parametrize("key,name", [(PLAIN, "alice"), (HASHED, "ci"), (UNNAMED, "unnamed")])
def test_valid_plain_and_hashed_keys_pass_in_either_header_and_engines_get_the_upstream_token(keyed, engines,
                                                                                            key, name):
    for headers in (bearer(key), {"x-api-key": key}, {"X-API-Key": key, "Authorization": f"Bearer {WRONG}"}):
        r = keyed.chat(chat(), headers=dict(headers, **{"X-Custom": "kept"}))
        assert r.status == 200, (headers.keys(), r)
        e = engine_of(engines, r)
        req = e.inference_requests()[-1]
        assert req.header_all("Authorization") == [f"Bearer {ENGINE_TOKEN}"], req.headers
        assert req.header("x-api-key") is None, req.headers
        assert req.header("X-Custom") == "kept"
        assert key not in repr(req.headers) and WRONG not in repr(req.headers)
    # GET /v1/models with a key: ramjet answers from the engines' cards, which it asked for with
    # the engines' token (or, before it has them, forwards the call with that token).
    r = keyed.request("GET", "/v1/models", headers=dict(bearer(key), **{"X-Test-Models": "1"}))
    assert r.status == 200, r
    calls = [q for e in engines for q in e.all_requests("/v1/models")]
    assert calls and all(q.header_all("Authorization") == [f"Bearer {ENGINE_TOKEN}"] for q in calls), calls
    assert all(key not in repr(q.headers) for q in calls)
    m = keyed.metrics()
    assert m.val("ramjet_client_requests_by_key_total", key=name) == 4
    assert sum(v for _, v in m.find("ramjet_client_requests_by_key_total")) == 4
    assert {l["key"] for l, _ in m.find("ramjet_client_requests_by_key_total")} == {"alice", "ci", "unnamed"}
    assert auth_metrics(keyed) == {"accepted": 4, "missing": 0, "invalid": 0}
    assert_no_key_leaked(keyed)


def test_health_works_without_a_key(keyed, engines):
    status, health = keyed.health()
    assert status == 200 and health["status"] == "ok", health
    r = keyed.request("HEAD", "/health")
    assert r.status == 200
    assert auth_metrics(keyed) == {"accepted": 0, "missing": 0, "invalid": 0}


def test_a_cors_preflight_needs_no_key(keyed, engines):
    r = keyed.request("OPTIONS", CHAT, headers={"Origin": "https://app.example", "X-Mock": "echo",
                                                "Access-Control-Request-Method": "POST"})
    assert r.status == 200, r
    (req,) = all_inference(engines)
    # Forwarded without ramjet's own token: only a request that presented a key carries it.
    assert req.method == "OPTIONS" and req.header("Authorization") is None, req
    assert auth_metrics(keyed) == {"accepted": 0, "missing": 0, "invalid": 0}
    # A plain OPTIONS is no preflight: it needs a key.
    assert_unauthorized(keyed.request("OPTIONS", CHAT), "OPTIONS without Access-Control-Request-Method")


def test_without_an_upstream_token_the_engines_get_no_authorization(engines, ramjet_factory, key_file):
    rj = ramjet_factory(engines, env={"RJ_API_KEYS_FILE": str(key_file)})
    r = rj.chat(chat(), headers=dict(bearer(PLAIN), **{"x-api-key": PLAIN}))
    assert r.status == 200, r
    req = engine_of(engines, r).inference_requests()[-1]
    assert req.header("Authorization") is None and req.header("x-api-key") is None, req.headers


def test_with_keys_off_the_client_headers_are_forwarded_as_before(rj, engines):
    r = rj.chat(chat(), headers=dict(bearer(PLAIN), **{"x-api-key": UNNAMED}))
    assert r.status == 200, r
    req = engine_of(engines, r).inference_requests()[-1]
    assert req.header_all("Authorization") == [f"Bearer {PLAIN}"]
    assert req.header_all("x-api-key") == [UNNAMED]
    assert not rj.metrics().has("ramjet_client_auth_total")


def test_a_refused_request_with_a_body_closes_its_connection_cleanly(keyed, engines):
    body = enc(chat("x" * 200_000))
    c = RawClient(keyed.api_port)
    # The head alone first, then the body: ramjet answers on the head and drops the rest.
    c.send(f"POST {CHAT} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n".encode())
    c.send(body[:1000])
    r = c.read_response()
    assert_unauthorized(r, "keep-alive request without a key")
    assert r.header("Connection") == "close"
    c.send(body[1000:])  # still accepted by the kernel: ramjet drains before it closes
    assert c.read_all_until_close(5) == b""
    c.close()
    # Expect: 100-continue: no 100 is sent, the body never comes.
    c = RawClient(keyed.api_port)
    c.send(f"POST {CHAT} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n"
           f"x-api-key: {WRONG}\r\n\r\n".encode())
    assert_unauthorized(c.read_response(), "100-continue with a wrong key")
    c.close()
    assert not all_inference(engines)
    # The next connection is served as usual.
    assert keyed.chat(chat(), headers=bearer(PLAIN)).status == 200


def reload(rj, outcome: str, before: float) -> None:
    rj.proc.send_signal(signal.SIGHUP)
    poll(lambda: rj.metrics().val("ramjet_api_keys_reloads_total", outcome=outcome) > before, 5,
         what=f"a SIGHUP reload with outcome {outcome}")


def test_sighup_swaps_in_a_new_key_file(keyed, engines, key_file):
    assert keyed.chat(chat(), headers=bearer(PLAIN)).status == 200
    key_file.write_text(f"alice {ROTATED}\nci sha256:{sha256_hex(HASHED)}\n")
    reload(keyed, "ok", 0)
    assert_unauthorized(keyed.chat(chat(), headers=bearer(PLAIN)), "a key removed by the reload")
    assert_unauthorized(keyed.chat(chat(), headers=bearer(UNNAMED)), "another key removed by the reload")
    assert keyed.chat(chat(), headers=bearer(ROTATED)).status == 200
    assert keyed.chat(chat(), headers={"x-api-key": HASHED}).status == 200
    m = keyed.metrics()
    assert m.val("ramjet_client_requests_by_key_total", key="alice") == 2  # counted on across the swap
    assert not m.find("ramjet_client_requests_by_key_total", key="unnamed")
    assert m.val("ramjet_api_keys_reloads_total", outcome="error") == 0
    assert keyed.alive()
    assert_no_key_leaked(keyed)


def test_sighup_with_a_broken_file_keeps_the_old_keys(keyed, engines, key_file):
    key_file.write_text(f"# rotated\nalice {ROTATED}\nbob {BROKEN} trailing-words\n")
    reload(keyed, "error", 0)
    assert keyed.chat(chat(), headers=bearer(PLAIN)).status == 200
    assert keyed.chat(chat(), headers={"x-api-key": HASHED}).status == 200
    assert_unauthorized(keyed.chat(chat(), headers=bearer(ROTATED)), "a key of the rejected file")
    key_file.write_text("# nothing left\n")
    reload(keyed, "error", 1)
    key_file.unlink()
    reload(keyed, "error", 2)
    assert keyed.chat(chat(), headers=bearer(UNNAMED)).status == 200
    m = keyed.metrics()
    assert m.val("ramjet_api_keys_reloads_total", outcome="ok") == 0
    assert m.val("ramjet_api_keys_reloads_total", outcome="error") == 3
    out = keyed.output()
    assert "line 3" in out, "the log names the bad line"
    assert "trailing-words" not in out
    assert keyed.alive()
    assert_no_key_leaked(keyed)


@pytest.mark.parametrize("text,expect", [
    (f"alice {PLAIN}\nbob {BROKEN} more\n", "line 2: expected"),
    (f"# c\n\nbad/name {BROKEN}\n", "line 3: a key name holds"),
    (f"x sha256:{BROKEN}\n", "line 1: sha256: must be followed by exactly 64 hex digits"),
    (f"a {BROKEN}\nb {BROKEN}\n", "line 2: the same key as line 1"),
    ("# only comments\n\n", "no keys"),
])
def test_a_bad_key_file_stops_startup_naming_the_line_only(engines, ramjet_factory, tmp_path, text, expect):
    p = tmp_path / "keys"
    p.write_text(text)
    proc = ramjet_factory(engines, env={"RJ_API_KEYS_FILE": str(p)}, start=False)
    rc, out = proc.run_to_exit(10)
    assert rc == 2, out
    assert "configuration error: RJ_API_KEYS_FILE: " in out and expect in out, out
    assert BROKEN not in out and PLAIN not in out and "bad/name" not in out


def test_a_missing_key_file_stops_startup(engines, ramjet_factory, tmp_path):
    proc = ramjet_factory(engines, env={"RJ_API_KEYS_FILE": str(tmp_path / "absent")}, start=False)
    rc, out = proc.run_to_exit(10)
    assert rc == 2, out
    assert "RJ_API_KEYS_FILE: " in out and "absent: No such file or directory" in out, out


def test_the_openai_sdk_authenticates_with_its_api_key(keyed, engines):
    openai = pytest.importorskip(
        "openai", reason="the OpenAI Python SDK is not installed (python3 -c 'import openai' fails); "
                         "this part is skipped rather than installing it")
    base = f"http://127.0.0.1:{keyed.api_port}/v1"
    good = openai.OpenAI(base_url=base, api_key=PLAIN, max_retries=0)
    r = good.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    assert r.choices
    bad = openai.OpenAI(base_url=base, api_key=WRONG, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.chat.completions.create(model="mock-model", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 401
    (req,) = all_inference(engines)
    assert req.header_all("Authorization") == [f"Bearer {ENGINE_TOKEN}"]
    assert_no_key_leaked(keyed)
