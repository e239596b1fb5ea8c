"""Prefill/decode disaggregation through ramjet (issue 31; RJ_UPSTREAM_ROLE, RJ_DISAGG_*).

With a prefill engine listed, a request whose decode engine would compute more than
RJ_DISAGG_MIN_UNCACHED_TOKENS of its prompt goes in two legs, as vLLM's P/D proxies send them
(docs/sim.md §8.4): the prefill leg asks a prefill engine for a remote decode (one token, not
streamed), and its answer's kv_transfer_params go into the decode leg, which is the client's
request as sent and what the client sees. Otherwise the decode engine serves it whole.

Mock engines show the exact bytes of each leg and the failure paths (a refused leg, a failing
prefill engine, an answer without parameters, a client that leaves during the prefill leg);
ramjet-sim's roles (a producer that holds blocks until pulled, a consumer that pulls instead of
computing and publishes the pulled blocks) show the whole thing working: the pull, a repeated
prompt then served whole where its decode engine holds it (by fingerprints and by the exact index
of both pools' KV events), and a prefill engine that dies mid-leg.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from support.disagg import ASK_REMOTE_DECODE
from support.ramjet_proc import RawClient, poll, scrape, settle
from support.sim_proc import SimProc, kv_event_env, kv_events_config

JSON = {"Content-Type": "application/json"}
# What a vLLM prefill engine answers (measured: docs/sim.md §8.4), as the mocks answer it.
ANSWER = {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [[1, 2, 3]],
          "remote_engine_id": "prefill-e", "remote_request_id": "cmpl-x-0-abc", "remote_host": "127.0.0.1",
          "remote_port": 5600, "tp_size": 1, "dcp_size": 1, "pp_size": 1, "remote_num_tokens": 90,
          "remote_blocks_expiry_time": None, "transfer_mode": "pull", "remote_prefill_cached_tokens": 0}
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}


def disagg_env(roles: str, **extra) -> dict:
    env = {"RJ_UPSTREAM_ROLE": roles, "RJ_DISAGG_MIN_UNCACHED_TOKENS": "0"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def client_body(api: str, stream: bool, text: str = "hello there") -> dict:
    """A client's request with everything a prefill leg replaces, and kv_transfer_params of its own
    (which no engine may ever see)."""
    body = {"model": "mock-model", "stream": stream, "temperature": 0.5,
            "kv_transfer_params": {"remote_host": "10.9.9.9", "remote_port": 1, "do_remote_prefill": True}}
    if api == "chat":
        body.update(messages=[{"role": "user", "content": text}], max_tokens=50, max_completion_tokens=40, min_tokens=2)
    elif api == "completions":
        body.update(prompt=text, max_tokens=50, min_tokens=2)
    elif api == "responses":
        body.update(input=text, max_output_tokens=50)
    else:
        body.update(messages=[{"role": "user", "content": text}], max_tokens=50)
    if stream and api in ("chat", "completions"):
        body["stream_options"] = {"include_usage": True}
    return body


def expected_prefill_leg(api: str, client: dict) -> dict:
    leg = {k: v for k, v in client.items()
           if k not in ("stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens",
                        "min_tokens", "min_completion_tokens", "kv_transfer_params")}
    leg.update(kv_transfer_params=dict(ASK_REMOTE_DECODE), stream=False)
    if api == "responses":
        leg["max_output_tokens"] = 1
    else:
        leg["max_tokens"] = 1
    if api == "chat":
        leg["max_completion_tokens"] = 1
    return leg


def header(req, name: str):
    return next((v for k, v in req.headers if k.lower() == name), None)


def post(rj, api: str, body: dict, headers=None, timeout: float = 20):
    return rj.request("POST", PATHS[api], json.dumps(body).encode(), dict(JSON, **(headers or {})), timeout=timeout)


def disagg_counts(rj) -> dict:
    m = rj.metrics()
    return {c: m.val("ramjet_disagg_requests_total", choice=c)
            for c in ("remote", "cached", "no_prefill", "prefill_busy", "fallback", "no_decode")}


def leg_counts(rj) -> dict:
    m = rj.metrics()
    return {o: m.val("ramjet_disagg_prefill_legs_total", outcome=o)
            for o in ("ok", "failed", "no_params", "refused", "client_gone")}


# --- the legs' bytes (mock engines) ---------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_the_two_legs_carry_vllms_fields(ramjet_factory, engine_factory, api, stream):
    prefill, decode = engine_factory(2)
    prefill.kv_answer = ANSWER
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode"))
    body = client_body(api, stream)
    r = post(rj, api, body, {"X-Request-Id": "req-7"})
    assert r.status == 200, r.body
    assert r.upstream == "1", "the client sees the decode engine's answer"
    assert r.header("X-Ramjet-Prefill-Upstream") == "0"
    (p,) = prefill.inference_requests()
    (d,) = decode.inference_requests()
    assert p.path == d.path == PATHS[api]
    assert p.json() == expected_prefill_leg(api, body)
    assert d.json() == dict(body, kv_transfer_params=ANSWER), "the client's request, the prefill answer's params"
    assert header(p, "x-request-id") == header(d, "x-request-id") == "req-7"
    if stream:
        assert r.body.rstrip().endswith(b"[DONE]") or api in ("responses", "messages")
    assert disagg_counts(rj)["remote"] == 1
    assert leg_counts(rj)["ok"] == 1
    hist = rj.metrics().val("ramjet_disagg_prefill_leg_seconds_count")
    assert hist == 1


def test_a_request_served_whole_never_carries_the_clients_transfer_params(ramjet_factory, engine_factory):
    prefill, decode = engine_factory(2)
    prefill.kv_answer = ANSWER
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode", RJ_DISAGG_MIN_UNCACHED_TOKENS=512))
    body = client_body("chat", False)  # a few tokens: nothing worth a prefill leg
    r = post(rj, "chat", body)
    assert r.status == 200 and r.upstream == "1"
    assert prefill.inference_requests() == []
    (d,) = decode.inference_requests()
    want = dict(body)
    del want["kv_transfer_params"]
    assert d.json() == want
    assert disagg_counts(rj)["cached"] == 1


def test_a_refused_prefill_leg_reaches_the_client_and_no_decode_leg_starts(ramjet_factory, engine_factory):
    prefill, decode = engine_factory(2)
    prefill.kv_answer = ANSWER
    prefill.mode = "status=400"
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode"))
    r = post(rj, "chat", client_body("chat", True))
    assert r.status == 400
    assert json.loads(r.body) == json.loads(prefill.error_body(400))
    assert len(prefill.inference_requests()) == 1, "the request's own fault: not retried"
    assert decode.inference_requests() == []
    assert leg_counts(rj)["refused"] == 1
    assert rj.metrics().val("ramjet_requests_total", endpoint="chat", code="400", stream="true") == 1


def test_a_failing_prefill_engine_moves_the_leg_to_another(ramjet_factory, engine_factory):
    p0, p1, decode = engine_factory(3)
    for p in (p0, p1):
        p.kv_answer = dict(ANSWER, remote_engine_id=p.name)
    p0.mode = "status=500"
    p1.mode = "status=500"
    rj = ramjet_factory([p0, p1, decode], env=disagg_env("prefill,prefill,decode"))
    # One of them fails: the other takes the leg.
    first = p0 if int(time.time()) % 2 else p1
    first.mode = "auto"
    for _ in range(4):
        r = post(rj, "completions", client_body("completions", False))
        assert r.status == 200, r.body
        d = decode.inference_requests()[-1]
        assert d.json()["kv_transfer_params"]["remote_engine_id"] == first.name
    legs = leg_counts(rj)
    assert legs["ok"] == 4
    assert disagg_counts(rj)["remote"] == 4


@pytest.mark.parametrize("policy", ["aggregate", "error"])
def test_when_every_prefill_leg_fails(ramjet_factory, engine_factory, policy):
    p0, p1, decode = engine_factory(3)
    for p in (p0, p1):
        p.kv_answer = ANSWER
        p.mode = "status=500"
    rj = ramjet_factory([p0, p1, decode],
                        env=disagg_env("prefill,prefill,decode", RJ_DISAGG_PREFILL_FAILURE=policy,
                                       RJ_OUTLIER_CONSECUTIVE_FAILURES=100))
    r = post(rj, "chat", client_body("chat", False))
    assert len(p0.inference_requests()) == len(p1.inference_requests()) == 1, "two prefill engines tried, once each"
    assert leg_counts(rj)["failed"] == 2
    if policy == "aggregate":
        assert r.status == 200 and r.upstream == "2"
        (d,) = decode.inference_requests()
        assert "kv_transfer_params" not in d.json(), "served whole: the decode engine computes the prompt itself"
        assert disagg_counts(rj)["fallback"] == 1
    else:
        assert r.status == 502
        assert decode.inference_requests() == []


def test_the_transfer_params_are_single_use_a_retried_decode_leg_is_served_whole(ramjet_factory, engine_factory):
    prefill, d0, d1 = engine_factory(3)
    prefill.kv_answer = ANSWER
    d0.queue = ["status=503"]
    d1.queue = ["status=503"]
    rj = ramjet_factory([prefill, d0, d1], env=disagg_env("prefill,decode,decode", RJ_OUTLIER_CONSECUTIVE_FAILURES=100))
    r = post(rj, "chat", client_body("chat", False))
    assert r.status == 503, "both decode engines answered 503: the last answer passes through"
    sent = sorted(((req.t, req) for e in (d0, d1) for req in e.inference_requests()), key=lambda p: p[0])
    assert len(sent) == 2
    assert sent[0][1].json()["kv_transfer_params"] == ANSWER, "the first decode leg pulls"
    assert "kv_transfer_params" not in sent[1][1].json(), "the retry is served whole: the params were used"
    assert len(prefill.inference_requests()) == 1, "never a second prefill leg"
    assert rj.metrics().val("ramjet_requests_blamed_total", endpoint="chat", reason="status_503") == 1


def test_a_request_placed_on_a_prefill_engine_is_served_whole_there(ramjet_factory, engine_factory):
    prefill, decode = engine_factory(2)
    prefill.kv_answer = ANSWER
    decode.health = 503
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode"))
    rj.wait_replica(1, healthy=False)
    body = client_body("chat", False)
    r = post(rj, "chat", body)
    assert r.status == 200 and r.upstream == "0"
    (p,) = prefill.inference_requests()
    assert "kv_transfer_params" not in p.json() and p.json()["stream"] is False and p.json()["max_tokens"] == 50
    assert decode.inference_requests() == []
    assert disagg_counts(rj)["no_decode"] == 1


def test_a_pool_without_a_prefill_engine_is_not_disaggregated(ramjet_factory, engine_factory):
    a, b = engine_factory(2)
    a.kv_answer = b.kv_answer = ANSWER
    rj = ramjet_factory([a, b], env=disagg_env("both,decode"))
    assert post(rj, "completions", client_body("completions", False)).status == 200
    assert len(a.inference_requests()) + len(b.inference_requests()) == 1
    assert sum(disagg_counts(rj).values()) == 0


def test_a_prefill_answer_without_transfer_params_is_served_whole(ramjet_factory, engine_factory):
    prefill, decode = engine_factory(2)  # no kv_answer: an engine started without a KV connector
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode"))
    r = post(rj, "completions", client_body("completions", True))
    assert r.status == 200 and r.upstream == "1"
    assert leg_counts(rj)["no_params"] == 1
    assert disagg_counts(rj)["fallback"] == 1
    assert "without usable kv_transfer_params" in rj.output()


def test_a_client_that_leaves_during_the_prefill_leg_starts_no_decode_leg(ramjet_factory, engine_factory):
    prefill, decode = engine_factory(2)
    prefill.kv_answer = ANSWER
    prefill.mode = "hang"
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode"))
    c = RawClient(rj.api_port)
    c.send_request("POST", PATHS["chat"], json.dumps(client_body("chat", True)).encode(), JSON)
    (req,) = prefill.wait_for_inference(1)
    c.close()
    prefill.wait_conn_eof(req.conn_id, timeout=3)  # the leg's connection closed: vLLM aborts the request
    poll(lambda: leg_counts(rj)["client_gone"] == 1, what="the leg counted as client_gone")
    time.sleep(0.3)
    assert decode.inference_requests() == []
    rj.wait_idle()


def test_no_prefill_engine_in_service_serves_requests_whole(ramjet_factory, engine_factory):
    prefill, decode = engine_factory(2)
    prefill.kv_answer = ANSWER
    prefill.health = 503
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode"))
    rj.wait_replica(0, healthy=False)
    r = post(rj, "chat", client_body("chat", False))
    assert r.status == 200 and r.upstream == "1"
    assert prefill.inference_requests() == []
    assert disagg_counts(rj)["no_prefill"] == 1


def test_busy_prefill_engines_serve_requests_whole(ramjet_factory, engine_factory):
    prefill, decode = engine_factory(2)
    prefill.kv_answer = ANSWER
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode", RJ_DISAGG_PREFILL_MAX_INFLIGHT=1))
    slow = threading.Thread(target=lambda: post(rj, "chat", client_body("chat", False), {"X-Mock": "slow delay=1.5"}))
    slow.start()
    prefill.wait_for_inference(1)
    r = post(rj, "chat", client_body("chat", False))
    assert r.status == 200 and r.upstream == "1"
    slow.join(10)
    assert len(prefill.inference_requests()) == 1
    assert disagg_counts(rj)["prefill_busy"] == 1 and disagg_counts(rj)["remote"] == 1


def test_the_journal_records_the_choice(ramjet_factory, engine_factory, tmp_path):
    prefill, decode = engine_factory(2)
    prefill.kv_answer = ANSWER
    journal = tmp_path / "journal.jsonl"
    rj = ramjet_factory([prefill, decode], env=disagg_env("prefill,decode", RJ_ROUTE_JOURNAL="true", RJ_ROUTE_JOURNAL_FILE=journal))
    assert post(rj, "chat", client_body("chat", False)).status == 200
    lines = poll(lambda: [json.loads(l) for l in journal.read_text().splitlines() if '"finish"' in l]
                 if journal.exists() else None, what="the finish record")
    finish = lines[-1]
    d = finish["disagg"]
    assert d["choice"] == "remote" and d["prefill_upstream"] == 0 and d["prefill_ms"] > 0
    assert d["uncached_tokens"] > 0
    assert finish["upstream"] == 1


# --- on ramjet-sim's roles ----------------------------------------------------------------------

BLOCK = 16


def role_sim(kind: str, engine_id: str = "") -> SimProc:
    args = ["--kv-role", kind, "--kv-side-channel-host", "127.0.0.1", "--enable-prompt-tokens-details",
            "--block-size", str(BLOCK), "--kv-events-config", kv_events_config(), "--speed", "20"]
    if engine_id:
        args += ["--kv-engine-id", engine_id]
    return SimProc(*args)


@pytest.fixture
def fleet():
    sims = [role_sim("kv_producer", "prefill-0"), role_sim("kv_producer", "prefill-1"),
            role_sim("kv_consumer"), role_sim("kv_consumer")]
    yield sims
    for s in sims:
        s.stop()


def sim_prompt(tag: str, words: int = 120) -> dict:
    return {"model": "ramjet-sim", "max_tokens": 6,
            "messages": [{"role": "user", "content": tag + " " + " ".join(f"w{i}" for i in range(words))}]}


def pulls(sim) -> int:
    return sim.admin("/sim/stats", {})["kv_transfer"]["pulls_served"]


@pytest.mark.parametrize("index", ["fingerprints", "exact"])
def test_on_sims_a_new_prompt_is_pulled_and_a_repeated_one_served_whole(ramjet_factory, fleet, index):
    env = disagg_env("prefill,prefill,decode,decode", RJ_DISAGG_MIN_UNCACHED_TOKENS=64, RJ_ROUTE_CHUNK_BYTES=128)
    if index == "exact":
        env.update(kv_event_env(fleet))
        env.update(RJ_EXACT_ROUTE_MODE="on", RJ_EXACT_ROUTE_MIN_BYTES="0")
    rj = ramjet_factory([s.url for s in fleet], env=env)
    if index == "exact":
        settle(rj)
    body = sim_prompt("first-" + index)
    r = post(rj, "chat", body, timeout=30)
    assert r.status == 200, r.body
    d = int(r.upstream)
    assert d in (2, 3)
    usage = json.loads(r.body)["usage"]
    prompt = usage["prompt_tokens"]
    assert usage["completion_tokens"] == 6 and usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert sum(pulls(s) for s in fleet[:2]) == 1, "one producer served the pull"
    # The whole prompt came over the wire: the consumer computed only its last token.
    assert scrape(fleet[d].port).sum("vllm:external_prefix_cache_hits_total") == prompt
    assert disagg_counts(rj)["remote"] == 1
    assert r.header("X-Ramjet-Prefill-Upstream") in ("0", "1")
    if index == "exact":
        # The receipt is the prefill engine's prediction (nothing held), as cached_tokens is its hit.
        assert r.header("X-Ramjet-Route") == "exact; predicted_cached_tokens=0", r.header("X-Ramjet-Route")
        # Both pools published the prompt's blocks: the producer's own, the consumer's pulled ones.
        settle(rj)
    # The same prompt again: its decode engine holds it, so it is served whole, there.
    r2 = post(rj, "chat", body, timeout=30)
    assert r2.status == 200, r2.body
    assert int(r2.upstream) == d
    u2 = json.loads(r2.body)["usage"]
    assert u2["prompt_tokens_details"]["cached_tokens"] == (prompt - 1) // BLOCK * BLOCK
    assert sum(pulls(s) for s in fleet[:2]) == 1, "no second prefill leg"
    assert disagg_counts(rj)["cached"] == 1
    assert r2.header("X-Ramjet-Prefill-Upstream") is None
    if index == "exact":
        assert r2.header("X-Ramjet-Route").startswith("exact; predicted_cached_tokens=")


def test_on_sims_a_prefill_engine_that_dies_mid_leg_hands_it_to_the_other(ramjet_factory, fleet):
    rj = ramjet_factory([s.url for s in fleet],
                        env=disagg_env("prefill,prefill,decode,decode", RJ_PROBE_INTERVAL_MS=5000))
    for s in fleet[:2]:
        s.admin("/sim/fault", {"pause": True})  # requests queue, no step runs
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", post(rj, "completions", {
        "model": "ramjet-sim", "prompt": "dies " + " ".join(f"x{i}" for i in range(100)), "max_tokens": 4}, timeout=30)))
    t.start()

    def waiting():
        for i, s in enumerate(fleet[:2]):
            if scrape(s.port).sum("vllm:num_requests_waiting") >= 1:
                return i + 1
        return None
    victim = poll(waiting, timeout=10, what="a prefill leg queued on a producer") - 1
    fleet[victim].stop()  # dies with the leg in flight
    other = fleet[1 - victim]
    poll(lambda: scrape(other.port).sum("vllm:num_requests_waiting") >= 1, timeout=10, what="the leg moved")
    other.admin("/sim/fault", {"pause": False})
    t.join(30)
    r = out["r"]
    assert r.status == 200, r.body
    assert int(r.upstream) in (2, 3)
    assert pulls(other) == 1
    legs = leg_counts(rj)
    assert legs["failed"] == 1 and legs["ok"] == 1
    assert disagg_counts(rj)["remote"] == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["responses", "messages"])
def test_on_sims_the_agent_apis_go_in_two_legs(ramjet_factory, fleet, api, stream):
    rj = ramjet_factory([s.url for s in fleet], env=disagg_env("prefill,prefill,decode,decode"))
    text = f"agent-{api}-{stream} " + " ".join(f"w{i}" for i in range(120))
    body = {"model": "ramjet-sim", "stream": stream}
    if api == "responses":
        body.update(input=text, max_output_tokens=6)
    else:
        body.update(messages=[{"role": "user", "content": text}], max_tokens=6)
    r = post(rj, api, body, timeout=30)
    assert r.status == 200, r.body
    d = int(r.upstream)
    assert d in (2, 3)
    assert sum(pulls(s) for s in fleet[:2]) == 1
    assert scrape(fleet[d].port).sum("vllm:external_prefix_cache_hits_total") > 0
    assert scrape(fleet[d].port).sum("vllm:generation_tokens_total") == 6
    if stream:
        last = [l for l in r.body.decode().splitlines() if l.startswith("event: ")][-1]
        assert last == ("event: response.completed" if api == "responses" else "event: message_stop")
    assert disagg_counts(rj)["remote"] == 1


def test_on_sims_a_client_that_leaves_during_the_decode_leg_stops_it(ramjet_factory, fleet):
    rj = ramjet_factory([s.url for s in fleet], env=disagg_env("prefill,prefill,decode,decode"))
    body = dict(sim_prompt("leaves"), stream=True, max_tokens=3000)
    body["model"] = "ramjet-sim"
    c = RawClient(rj.api_port)
    c.send_request("POST", PATHS["chat"], json.dumps(body).encode(), JSON)
    assert c.read_head() == 200
    d = int(c.header("X-Ramjet-Upstream"))
    got = b""
    it = c.chunks()
    while got.count(b"\n\n") < 3:  # the decode leg is generating
        got += next(it)[1]
    assert sum(pulls(s) for s in fleet[:2]) == 1
    c.close()
    poll(lambda: scrape(fleet[d].port).sum("vllm:num_requests_running") == 0, timeout=5,
         what="the decode engine stopped the request")
    assert scrape(fleet[d].port).sum("vllm:generation_tokens_total") < 3000
    poll(lambda: rj.metrics().val("ramjet_client_disconnects_total", endpoint="chat") == 1, what="counted")
    rj.wait_idle()
