"""SGLang data-parallel ranks (RJ_UPSTREAM_ENGINE=sglang): ramjet in front of a ramjet-sim that
behaves as SGLang's --dp-size 4 does (--engine-kind sglang, docs/sim.md §8.2) pins each request to
the rank it chose with "routed_dp_rank" in the JSON body, not the header; a client's own
routed_dp_rank / data_parallel_rank members (and header) never reach the engine. A vLLM engine in
the same fleet still gets X-Data-Parallel-Rank and an unchanged body."""

from __future__ import annotations

import json
import signal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.ramjet_proc import conversation_cache, http_request, poll
from support.sim_proc import SimProc

KV = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:0",
                 "replay_endpoint": "tcp://*:0", "topic": "kv", "buffer_steps": 1000})


def sim(ranks: int, kind: str) -> SimProc:
    return SimProc("--speed", "50", "--enable-prompt-tokens-details", "--data-parallel-size", str(ranks),
                   "--engine-kind", kind, "--kv-events-config", KV)


@pytest.fixture
def sgl4():
    s = sim(4, "sglang")
    yield s
    s.stop()


@pytest.fixture
def vllm2():
    s = sim(2, "vllm")
    yield s
    s.stop()


def start(factory, sims, sizes: str, engines: str, **env):
    r = factory([s.url for s in sims], env={"RJ_UPSTREAM_DP_SIZE": sizes, "RJ_UPSTREAM_ENGINE": engines,
                                            "RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join("discover" for _ in sims),
                                            "RJ_KV_EVENT_TIMEOUT_MS": "2000", "RJ_PROBE_INTERVAL_MS": "200",
                                            **env})
    total = sum(int(n) for n in sizes.split(","))
    r.wait_health(lambda c, j: len(j["replicas"]) == total and all(x.get("kv_trusted") for x in j["replicas"]),
                  15, "every rank discovered and trusted")
    return r


def chat(tag: str, **extra) -> dict:
    return {"model": "ramjet-sim", "max_tokens": 4, **extra,
            "messages": [{"role": "system", "content": f"Conversation {tag}. " + "Be careful. " * 30},
                         {"role": "user", "content": f"A question of {tag} about prefix caches."}]}


def through(rj, body, headers: dict | None = None, path: str = "/v1/chat/completions"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http_request(rj.api_port, "POST", path, data, {"Content-Type": "application/json", **(headers or {})},
                        timeout=30)


def served(s, ranks: int) -> dict:
    """{rank: requests finished} from the sim's per-rank counter."""
    out = {k: 0.0 for k in range(ranks)}
    for fam in text_string_to_metric_families(s.request("GET", "/metrics").body.decode()):
        for x in fam.samples:
            if x.name == "vllm:request_success_total":
                out[int(x.labels["engine"])] += x.value
    return out


def pins(s) -> dict:
    """Requests the sim pinned to a rank, by what named it: {"header": n, "body": n}."""
    return s.admin("/sim/stats", {})["rank_pins"]


def test_the_sim_as_sglang_reads_the_body_refuses_a_rank_out_of_range_and_deals_the_rest_round_robin(sgl4):
    before = served(sgl4, 4)
    for _ in range(4):
        assert sgl4.request("POST", "/v1/chat/completions", chat("rr")).status == 200
    after = served(sgl4, 4)
    assert {k: after[k] - before[k] for k in range(4)} == {0: 1, 1: 1, 2: 1, 3: 1}
    r = sgl4.request("POST", "/v1/chat/completions", chat("pinned", routed_dp_rank=2))
    assert r.status == 200 and served(sgl4, 4)[2] == after[2] + 1
    r = sgl4.request("POST", "/v1/chat/completions", chat("far", routed_dp_rank=7, stream=True))
    assert r.status == 400
    assert r.json() == {"object": "error", "message": "routed_dp_rank=7 out of range [0, 4)",
                        "type": "BadRequestError", "param": None, "code": 400}
    r = sgl4.request("POST", "/v1/chat/completions", chat("hdr"), headers={"X-Data-Parallel-Rank": "1"})
    assert r.status == 200
    assert pins(sgl4) == {"header": 1, "body": 1}


def test_sglang_ranks_are_pinned_in_the_body_and_vllm_ranks_by_the_header(sgl4, vllm2, ramjet_factory):
    # Round robin over the six ordinals (four SGLang ranks, two vLLM ranks): every one is used.
    rj = start(ramjet_factory, [sgl4, vllm2], "4,2", "sglang,vllm", RJ_AFFINITY="round_robin")
    sgl_before, vllm_before = served(sgl4, 4), served(vllm2, 2)
    placed = {k: 0 for k in range(6)}
    for i in range(12):
        # A client's own rank would be refused (7: out of range) or pin the request (3) if it
        # reached either engine; ramjet's choice must hold.
        member = {"routed_dp_rank": 7} if i % 3 == 0 else {"data_parallel_rank": 3} if i % 3 == 1 else {}
        r = through(rj, chat(f"mixed-{i}", **member), {"X-Data-Parallel-Rank": "3" if i % 2 else "7"})
        assert r.status == 200, r.body
        placed[int(r.header("X-Ramjet-Upstream"))] += 1
    assert all(n == 2 for n in placed.values()), placed
    sgl_after, vllm_after = served(sgl4, 4), served(vllm2, 2)
    assert {k: sgl_after[k] - sgl_before[k] for k in range(4)} == {k: placed[k] for k in range(4)}
    assert {k: vllm_after[k] - vllm_before[k] for k in range(2)} == {k: placed[4 + k] for k in range(2)}
    # SGLang ranks were named by the body alone; vLLM ranks by the header alone.
    assert pins(sgl4) == {"header": 0, "body": 8}
    assert pins(vllm2) == {"header": 4, "body": 0}


def test_a_conversation_stays_on_its_sglang_rank_and_its_cache_grows(sgl4, ramjet_factory):
    rj = start(ramjet_factory, [sgl4], "4", "sglang")
    body = chat("agent-11")
    body["messages"][0]["content"] += " ".join(f"rule {i}: keep invariant {i * 7 % 13}." for i in range(600))
    turns = []
    for turn in range(4):
        if turn:
            body["messages"] += [{"role": "assistant", "content": f"Answer {turn}: look at the parser."},
                                 {"role": "user", "content": f"Question {turn}: and then?"}]
        # The client asks for rank 0 each time; ramjet's rank stands.
        turns.append({**body, "messages": list(body["messages"]), "routed_dp_rank": 0})
    cached = conversation_cache(rj, lambda b: through(rj, b), turns)
    assert cached[0] == 0 and all(b > a for a, b in zip(cached, cached[1:])), cached
    assert pins(sgl4) == {"header": 0, "body": 4}


def test_a_whole_sglang_engine_gets_no_rank_and_loses_the_clients(sgl4, ramjet_factory):
    rj = ramjet_factory([sgl4.url], env={"RJ_UPSTREAM_ENGINE": "sglang"})
    before = served(sgl4, 4)
    for i in range(4):
        r = through(rj, chat(f"whole-{i}", routed_dp_rank=9, data_parallel_rank=9), {"X-Data-Parallel-Rank": "9"})
        assert r.status == 200, r.body
    after = served(sgl4, 4)
    assert {k: after[k] - before[k] for k in range(4)} == {0: 1, 1: 1, 2: 1, 3: 1}  # SGLang's round robin
    assert pins(sgl4) == {"header": 0, "body": 0}
    # A body that is not a JSON object goes as it came (the engine answers for it).
    r = through(rj, b"[1, 2]")
    assert r.status == 400 and pins(sgl4) == {"header": 0, "body": 0}


def test_the_rank_generation_probe_pins_sglang_ranks_in_the_body(sgl4, ramjet_factory):
    ramjet_factory([sgl4.url], env={"RJ_UPSTREAM_DP_SIZE": "4", "RJ_UPSTREAM_ENGINE": "sglang",
                                    "RJ_PROBE_RANK_GENERATION": "true", "RJ_PROBE_INTERVAL_MS": "200"})
    poll(lambda: pins(sgl4)["body"] >= 8, timeout=15, what="the probes' pinned completions")
    assert pins(sgl4)["header"] == 0


def test_a_reload_changes_what_an_engine_is_in_place(tmp_path, sgl4, ramjet_factory):
    conf = tmp_path / "ramjet.env"
    conf.write_text(f"RJ_UPSTREAM={sgl4.url}\nRJ_UPSTREAM_DP_SIZE=4\nRJ_UPSTREAM_ENGINE=vllm\n")
    rj = ramjet_factory(env={"RJ_CONFIG_FILE": str(conf), "RJ_PROBE_INTERVAL_MS": "200"})

    def in_service():
        return sorted(r["index"] for r in rj.health()[1]["replicas"] if r["healthy"] and not r.get("leaving"))

    poll(lambda: in_service() == [0, 1, 2, 3], timeout=15, what="four ranks in service")
    assert through(rj, chat("as-vllm")).status == 200
    assert pins(sgl4) == {"header": 1, "body": 0}  # declared vLLM: pinned by the header
    conf.write_text(f"RJ_UPSTREAM={sgl4.url}\nRJ_UPSTREAM_DP_SIZE=4\nRJ_UPSTREAM_ENGINE=sglang\n")
    rj.proc.send_signal(signal.SIGHUP)
    poll(lambda: rj.metrics().get("ramjet_config_reloads_total", outcome="applied") == 1, timeout=10,
         what="the reload applied")
    assert in_service() == [0, 1, 2, 3]  # the same ordinals, still in service: nothing left or joined
    assert through(rj, chat("as-sglang")).status == 200
    assert pins(sgl4) == {"header": 1, "body": 1}
