"""ramjet-sim serves several model names and several data-parallel ranks as vLLM 0.32 does.

--served-model-name a b: aliases of one model (one prefix cache); --data-parallel-size N: N engine
cores behind one port, each with its own scheduler, prefix cache, step loop and KV-event
publisher, placed by X-Data-Parallel-Rank or by vLLM's DP load balancing (docs/sim.md §8.2)."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import msgpack
import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc, sim_bin

KV = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0",
                 "replay_endpoint": "tcp://*:0", "topic": "kv"})


def messages(tag: str) -> list:
    """A prompt of several full blocks, distinct per tag."""
    return [{"role": "system", "content": f"Conversation {tag}. " + "You are a careful assistant. " * 12},
            {"role": "user", "content": "Tell me about prefix caches."}]


def chat_body(tag: str, model: str = "ramjet-sim", **kw) -> dict:
    body = {"model": model, "messages": messages(tag), "max_tokens": 4}
    body.update(kw)
    return body


def post(sim, body, rank=None, path="/v1/chat/completions", timeout=30.0):
    headers = {} if rank is None else {"X-Data-Parallel-Rank": str(rank)}
    return sim.request("POST", path, body, headers=headers, timeout=timeout)


def cached(r) -> int:
    assert r.status == 200, r.body
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def samples(sim, name: str) -> dict:
    """{(engine, finished_reason or None): value} of one metric family."""
    text = sim.request("GET", "/metrics").body.decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[(s.labels["engine"], s.labels.get("finished_reason"))] = s.value
    return out


# ------------------------------------------------------------------------- several served names
def test_several_served_names_are_listed_and_served_and_a_third_is_vllms_404():
    s = SimProc("--speed", "50", "--enable-prompt-tokens-details", "--model", "org/base",
                "--served-model-name", "a", "b", "--lora-modules", "ad=/adapters/ad")
    try:
        cards = s.request("GET", "/v1/models").json()["data"]
        assert [c["id"] for c in cards] == ["a", "b", "ad"]
        assert [c["root"] for c in cards] == ["org/base", "org/base", "/adapters/ad"]
        assert [c["parent"] for c in cards] == [None, None, "a"]
        assert cards[0]["max_model_len"] == cards[1]["max_model_len"] and cards[2]["max_model_len"] is None

        # Aliases of one model: either name is served, the answer names the first, and they share
        # one prefix cache.
        first = post(s, chat_body("x", model="a"))
        assert cached(first) == 0 and first.json()["model"] == "a"
        second = post(s, chat_body("x", model="b"))
        assert cached(second) >= 16 and second.json()["model"] == "a"
        comp = post(s, {"model": "b", "prompt": "hello there", "max_tokens": 2}, path="/v1/completions")
        assert comp.status == 200 and comp.json()["model"] == "a"
        # The adapter keeps its own name and namespace.
        lora = post(s, chat_body("x", model="ad"))
        assert cached(lora) == 0 and lora.json()["model"] == "ad"

        for path, body in (("/v1/chat/completions", chat_body("x", model="c")),
                           ("/v1/completions", {"model": "c", "prompt": "hi"})):
            r = post(s, body, path=path)
            assert r.status == 404
            assert r.body == (b'{"error":{"message":"The model `c` does not exist. Valid aliases: a, b.",'
                              b'"type":"NotFoundError","param":"model","code":404}}')
        assert set(samples(s, "vllm:num_requests_running")) == {("0", None)}
        assert 'model_name="a"' in s.request("GET", "/metrics").body.decode()
    finally:
        s.stop()


def test_an_adapter_named_like_a_served_name_stops_the_start():
    p = subprocess.run([sim_bin(), "--port", "0", "--served-model-name", "a", "b", "--lora-modules", "b=/x"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2
    assert "The lora adapter 'b' conflicts with a served base model." in p.stderr


# ------------------------------------------------------------------------------ data parallel
@pytest.fixture
def dp4():
    s = SimProc("--speed", "50", "--enable-prompt-tokens-details", "--data-parallel-size", "4",
                "--kv-events-config", KV)
    yield s
    s.stop()


def test_kv_event_sources_lists_every_rank_with_its_own_publisher(dp4):
    src = dp4.request("GET", "/kv_event_sources").json()
    assert sorted(src) == ["0", "1", "2", "3"]
    endpoints = {src[k]["endpoint"] for k in src} | {src[k]["replay_endpoint"] for k in src}
    assert len(endpoints) == 8  # a PUB and a replay ROUTER per rank
    assert all(src[k]["topic"] == "kv" and src[k]["enable_kv_cache_events"] for k in src)


def test_each_ranks_publisher_tags_its_batches_with_its_rank(dp4):
    src = dp4.request("GET", "/kv_event_sources").json()
    ctx = zmq.Context()
    try:
        subs = {}
        for k in range(4):
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"kv")
            sub.connect("tcp://127.0.0.1:" + src[str(k)]["endpoint"].rsplit(":", 1)[1])
            subs[k] = sub
        time.sleep(0.3)  # the ZMQ slow-joiner window
        for k in (3, 1):  # ranks 0 and 2 get nothing
            assert post(dp4, chat_body(f"events-{k}"), rank=k).status == 200
        for k in range(4):
            got = []
            while subs[k].poll(300 if k in (0, 2) else 3000):
                topic, _seq, payload = subs[k].recv_multipart()
                got.append(msgpack.unpackb(payload, raw=False))
            if k in (0, 2):
                assert got == [], f"rank {k} published for a request pinned elsewhere"
            else:
                assert got and all(b[2] == k for b in got), (k, [b[2] for b in got])
                assert got[0][1][0]["type"] == "BlockStored"
    finally:
        ctx.destroy(linger=0)


def test_a_pinned_request_runs_on_its_rank_and_only_that_rank_caches_it(dp4):
    assert cached(post(dp4, chat_body("pin"), rank=2)) == 0
    assert cached(post(dp4, chat_body("pin"), rank=2)) >= 16  # the same rank: a hit
    assert cached(post(dp4, chat_body("pin"), rank=1)) == 0   # another rank's cache is its own
    resident = dp4.admin("/sim/resident", {"messages": messages("pin")})["resident_by_rank"]
    assert resident["0"] == 0 and resident["3"] == 0 and resident["1"] >= 16 and resident["2"] >= 16
    queries = samples(dp4, "vllm:prefix_cache_queries_total")
    hits = samples(dp4, "vllm:prefix_cache_hits_total")
    assert queries[("0", None)] == 0 and queries[("3", None)] == 0 and queries[("1", None)] > 0
    assert hits[("2", None)] > 0 and hits[("1", None)] == 0
    done = samples(dp4, "vllm:request_success_total")
    assert done[("2", "length")] == 2 and done[("1", "length")] == 1 and done[("0", "length")] == 0


def test_without_a_header_requests_spread_over_the_ranks(dp4):
    for i in range(8):
        assert post(dp4, chat_body(f"spread-{i}")).status == 200
    done = samples(dp4, "vllm:request_success_total")
    per_rank = [done[(str(k), "length")] for k in range(4)]
    assert sum(per_rank) == 8 and min(per_rank) >= 1 and max(per_rank) <= 3, per_rank
    running = samples(dp4, "vllm:num_requests_running")
    assert sorted(running) == [(str(k), None) for k in range(4)]
    # A concurrent burst of streams lands on every rank too.
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        post(dp4, chat_body(f"burst-{i}", max_tokens=40, stream=True)).status)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200] * 8
    after = samples(dp4, "vllm:request_success_total")
    assert all(after[(str(k), "length")] - done[(str(k), "length")] >= 1 for k in range(4)), after


def test_an_out_of_range_rank_is_vllms_400_and_a_non_integer_header_is_ignored(dp4):
    r = post(dp4, chat_body("oor"), rank=7)
    assert r.status == 400
    assert r.body == (b'{"error":{"message":"data_parallel_rank 7 is out of range [0, 4).",'
                      b'"type":"BadRequestError","param":null,"code":400}}')
    # Streaming: vLLM raises it inside the stream generator (a 200 with one error event).
    r = post(dp4, chat_body("oor", stream=True), rank=-1)
    assert r.status == 200
    assert r.body.decode().split("\n\n")[:2] == [
        'data: {"error": {"message": "data_parallel_rank -1 is out of range [0, 4).", "type": "BadRequestError", '
        '"param": null, "code": 400}}', "data: [DONE]"]
    assert post(dp4, chat_body("oor"), rank="two").status == 200
    assert post(dp4, {"model": "ramjet-sim", "prompt": "x", "max_tokens": 1}, rank=4, path="/v1/completions").status == 400


def test_a_wedged_rank_stalls_only_the_requests_sent_to_it(dp4):
    dp4.admin("/sim/fault", {"pause": True, "rank": 1})
    stuck = {}
    t = threading.Thread(target=lambda: stuck.update(r=post(dp4, chat_body("wedged"), rank=1, timeout=30)))
    t.start()
    try:
        for k in (0, 2, 3):
            assert post(dp4, chat_body(f"free-{k}"), rank=k, timeout=10).status == 200
        assert http_request(dp4.port, "GET", "/health").status == 200
        waiting = samples(dp4, "vllm:num_requests_waiting")
        assert waiting[("1", None)] == 1 and waiting[("0", None)] == 0
        time.sleep(0.5)
        assert t.is_alive() and not stuck, "a request on the wedged rank was answered"
        stats = dp4.admin("/sim/stats", {"rank": 1})
        assert stats["steps"] == 0 and stats["waiting"] == 1
    finally:
        dp4.admin("/sim/fault", {"pause": False, "rank": 1})
    t.join(10)
    assert stuck["r"].status == 200


def test_a_rank_started_alone_is_that_rank_with_one_engine():
    s = SimProc("--speed", "50", "--data-parallel-size", "4", "--data-parallel-rank", "2", "--kv-events-config", KV)
    ctx = zmq.Context()
    try:
        src = s.request("GET", "/kv_event_sources").json()
        assert list(src) == ["2"]
        assert set(samples(s, "vllm:num_requests_running")) == {("2", None)}
        # vLLM's engine client holds one engine here: the header indexes it, so only 0 is in range.
        assert post(s, chat_body("alone"), rank=0).status == 200
        r = post(s, chat_body("alone"), rank=2)
        assert r.status == 400 and r.json()["error"]["message"] == "data_parallel_rank 2 is out of range [0, 1)."
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect("tcp://127.0.0.1:" + src["2"]["endpoint"].rsplit(":", 1)[1])
        time.sleep(0.3)
        assert post(s, chat_body("alone-2")).status == 200
        assert sub.poll(3000)
        assert msgpack.unpackb(sub.recv_multipart()[2], raw=False)[2] == 2
    finally:
        ctx.destroy(linger=0)
        s.stop()


def test_a_rank_outside_the_size_stops_the_start():
    p = subprocess.run([sim_bin(), "--port", "0", "--data-parallel-size", "2", "--data-parallel-rank", "2"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "data_parallel_rank (2) must be in the range [0, 2)" in p.stderr
