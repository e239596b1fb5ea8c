"""ramjet's /metrics after a scripted workload through ramjet + two ramjet-sim engines (--gpus 2).

What an operator relies on: the text parses with prometheus_client's parser; every family that
docs/metrics.md lists is there; closed label sets are complete from the start; ramjet's counters
agree with what the client counted itself (requests, tokens and bytes from the responses); the
ramjet_engine_* gauges agree with the engines' own /metrics; GET /metrics/upstream/{i} passes an
engine's text through (404 for a bad ordinal, 502 when the engine does not answer).
"""

from __future__ import annotations

import http.client
import json
import math
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.metric_docs import documented_families
from support.ramjet_proc import Metrics, http_request, poll
from support.sim_proc import SimProc

# tiny preset (16-token blocks) at 20x real time, cached-token details on, two synthetic GPUs.
SIM_ARGS = ("--preset", "tiny", "--speed", "20", "--enable-prompt-tokens-details", "--gpus", "2")
ENV = {"RJ_ENGINE_SCRAPE_INTERVAL_MS": "100", "RJ_UPSTREAM_PROFILES": "mtp,standard"}
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def filler(tag: str, nbytes: int) -> str:
    out, i = [], 0
    while sum(map(len, out)) < nbytes:
        out.append(f"{tag}.{i} ")
        i += 1
    return "".join(out)[:nbytes]


@pytest.fixture
def sims():
    made = [SimProc(*SIM_ARGS), SimProc(*SIM_ARGS)]
    yield made
    for s in made:
        s.stop()


@pytest.fixture
def rj(sims, ramjet_factory):
    return ramjet_factory(sims, env=ENV)


def raw_metrics(rj) -> str:
    r = http_request(rj.metrics_port, "GET", "/metrics", timeout=5)
    assert r.status == 200
    assert r.header("Content-Type").startswith("text/plain; version=0.0.4")
    return r.body.decode()


def typed_families(text: str) -> dict:
    return {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}


def labelsets(m: Metrics, name: str, *keys: str) -> set:
    return {tuple(l[k] for k in keys) for l, _ in m.find(name)}


# ---------------------------------------------------------------------------------- workload
class Client:
    """Sends requests and keeps its own counts (thread-safe)."""

    def __init__(self, rj):
        self.rj = rj
        self.lock = threading.Lock()
        self.requests = Counter()        # (endpoint, code, stream) -> n
        self.by_upstream = Counter()     # (ordinal, class) -> n
        self.prompt = self.cached = self.completion = 0
        self.usages = 0                  # 200 responses that reported usage
        self.streams_with_tokens = 0     # 200 streamed responses that generated tokens
        self.streams_tpot = 0            # ... with at least 2 completion tokens
        self.chat_streams = 0
        self.bytes_sent = self.bytes_received = 0

    def send(self, path: str, body: dict):
        data = json.dumps(body).encode()
        r = http_request(self.rj.api_port, "POST", path, data, {"Content-Type": "application/json"}, timeout=60)
        endpoint = "chat" if path == CHAT else "completions"
        stream = bool(body.get("stream"))
        usage = None
        if r.status == 200 and stream:
            datas = [l[6:] for l in r.body.decode().split("\n") if l.startswith("data: ")]
            assert datas[-1] == "[DONE]", datas[-3:]
            for d in datas[:-1]:
                u = json.loads(d).get("usage")
                if u:
                    usage = u
        elif r.status == 200:
            usage = r.json()["usage"]
        with self.lock:
            self.requests[(endpoint, str(r.status), "true" if stream else "false")] += 1
            self.by_upstream[(r.upstream, f"{r.status // 100}xx")] += 1
            self.bytes_sent += len(data)
            self.bytes_received += len(r.body)
            if usage:
                self.usages += 1
                self.prompt += usage["prompt_tokens"]
                self.completion += usage["completion_tokens"]
                self.cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                if stream and usage["completion_tokens"] > 0:
                    self.streams_with_tokens += 1
                    self.streams_tpot += usage["completion_tokens"] >= 2
                    self.chat_streams += endpoint == "chat"
        return r


def workload(client: Client) -> list:
    """Chat and completions, streamed and not, repeated prefixes (cache hits), and a 404. The
    first request of each prefix goes alone, so the repeats that follow concurrently find it in
    the engines' prefix cache and in ramjet's index."""
    first, rest = [], []
    for app in range(4):
        system = {"role": "system", "content": filler(f"app{app}", 6 * 1024)}
        for turn in range(4):
            msgs = [system, {"role": "user", "content": f"question {turn} for app {app}"}]
            stream = (app + turn) % 2 == 0
            b = {"model": "ramjet-sim", "messages": msgs, "max_tokens": 3 + turn, "stream": stream}
            if stream:
                b["stream_options"] = {"include_usage": True}
            (first if turn == 0 else rest).append((CHAT, b))
    for k in range(4):
        b = {"model": "ramjet-sim", "prompt": filler(f"completion{k % 2}", 5 * 1024), "max_tokens": 5,
             "stream": k % 2 == 1}
        if b["stream"]:
            b["stream_options"] = {"include_usage": True}
        (first if k < 2 else rest).append((COMPLETIONS, b))
    rest.append((CHAT, {"model": "no-such-model", "stream": False,
                        "messages": [{"role": "user", "content": filler("unknown", 4096)}]}))
    replies = [client.send(*j) for j in first]
    with ThreadPoolExecutor(4) as pool:
        return replies + list(pool.map(lambda j: client.send(*j), rest))


# ---------------------------------------------------------------------------------- tests
def test_metrics_parse_and_every_documented_family_is_present_with_closed_label_sets(rj, sims):
    before = raw_metrics(rj)
    families = list(text_string_to_metric_families(before))  # raises on anything malformed
    assert families
    # Closed sets are complete before the first request.
    m0 = Metrics(before)
    assert labelsets(m0, "ramjet_route_decisions_total", "outcome") == {
        ("single",), ("load",), ("rr",), ("overlap",), ("profile",), ("single_flight",), ("spread",), ("adapter",), ("decode",)}
    assert labelsets(m0, "ramjet_route_profile_choices_total", "profile") == {("none",), ("mtp",), ("standard",)}
    assert labelsets(m0, "ramjet_upstream_requests_total", "upstream", "class") == {
        (u, c) for u in ("0", "1") for c in ("1xx", "2xx", "3xx", "4xx", "5xx")}
    assert labelsets(m0, "ramjet_upstream_info", "upstream", "profile") == {("0", "mtp"), ("1", "standard")}
    assert all(v == 1 for _, v in m0.find("ramjet_upstream_info"))
    assert labelsets(m0, "ramjet_engine_scrape_errors_total", "upstream", "reason") == {
        (u, r) for u in ("0", "1") for r in ("connect", "timeout", "http", "too_large", "protocol", "parse")}
    assert labelsets(m0, "ramjet_cache_ttft_seconds_count", "endpoint", "outcome") == {
        (e, o) for e in ("chat", "completions", "responses", "messages") for o in ("full", "partial", "cold", "unknown")}
    assert labelsets(m0, "ramjet_upstream_state", "upstream", "state") == {
        (u, s) for u in ("0", "1") for s in ("healthy", "warming", "unhealthy", "ejected")}

    workload(Client(rj))
    rj.wait_idle()
    # The engine gauges appear once a scrape has read them.
    def with_engine_gauges():
        t = raw_metrics(rj)
        return t if "ramjet_engine_kv_cache_usage{" in t else None
    text = poll(with_engine_gauges, what="engine gauges on /metrics")
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert parsed
    typed = typed_families(text)
    # The journal's, the tokenizer's and the KV events' series exist only when they are switched on
    # (test_journal.py, test_tokenizer.py, test_kv_events.py), and so do exact routing's and the
    # engine catalog's (test_kv_events.py, test_kv_fidelity.py), and the client API keys' with
    # RJ_API_KEYS_FILE (test_api_keys.py), and the listeners' TLS series with RJ_TLS_CERT_FILE
    # (test_tls.py), and engine membership's and DNS discovery's when engines can join later
    # (test_dns_discovery.py), and the companions' with RJ_EXACT_INVENTORY=companion (and the
    # ramjet-companion process's own, on its endpoint: test_companion.py), and the peer replicas'
    # with RJ_PEERS (test_engine_load.py), and the waiting room's with RJ_ADMISSION_ENGINE_* (test_admission.py),
    # and the idle drain's with RJ_IDLE_DRAIN_MODE (test_parking.py), and the decode cost's with
    # RJ_ROUTE_DECODE_COST (test_decode_cost.py); the tokenizer's info gauge always does.
    missing = ((documented_families(("Route journal", "Local tokenization", "KV events", "Exact predictions",
                                      "Exact tokenize budget", "Waiting room", "Idle drain (engine parking)",
                                      "Engine catalog", "Client API keys", "Listener TLS", "Engine membership",
                                      "DNS discovery", "Companions", "Peer replicas",
                                      "ramjet-companion (its own --metrics endpoint)", "Decode cost")) | {"ramjet_tokenizer_info"})
               - {"ramjet_exact_route_total", "ramjet_exact_route_canary_total", "ramjet_exact_provisional_blocks_total",
                  "ramjet_exact_provisional_hits_total",
                  "ramjet_session_affinity_total"}  # (RJ_SESSION_AFFINITY_MODE on or shadow only)
               - set(typed))
    assert not missing, f"documented but not on /metrics: {sorted(missing)}"
    undocumented = {n for n in typed if n.startswith("ramjet_")} - documented_families(())
    assert not undocumented, f"on /metrics but not in docs/metrics.md: {sorted(undocumented)}"
    assert "127.0.0.1" not in text and "localhost" not in text
    # Histograms are cumulative and end at their count.
    m = Metrics(text)
    for name, kind in typed.items():
        if kind != "histogram":
            continue
        series = {}
        for labels, v in m.find(name + "_bucket"):
            key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
            le = math.inf if labels["le"] == "+Inf" else float(labels["le"])
            series.setdefault(key, []).append((le, v))
        for key, buckets in series.items():
            buckets.sort()
            counts = [v for _, v in buckets]
            assert counts == sorted(counts), (name, key, buckets)
            assert buckets[-1][0] == math.inf
            assert m.get(name + "_count", **dict(key)) == counts[-1], (name, key)


def test_counters_agree_with_the_clients_own_counts(rj, sims):
    client = Client(rj)
    replies = workload(client)
    assert sum(r.status == 200 for r in replies) == len(replies) - 1
    rj.wait_idle()
    m = rj.metrics()

    for (endpoint, code, stream), n in client.requests.items():
        assert m.val("ramjet_requests_total", endpoint=endpoint, code=code, stream=stream) == n, (endpoint, code, stream)
    # (GET /health from wait_idle() counts as endpoint="health")
    assert m.sum("ramjet_requests_total", endpoint="chat") + m.sum("ramjet_requests_total", endpoint="completions") \
        == len(replies)
    assert m.val("ramjet_prompt_tokens_total") == client.prompt
    assert m.val("ramjet_completion_tokens_total") == client.completion
    assert m.val("ramjet_cached_prompt_tokens_total") == client.cached
    assert client.cached > 0, "repeated prefixes hit the engines' prefix cache"
    assert m.val("ramjet_request_body_bytes_total") == client.bytes_sent
    assert m.val("ramjet_response_body_bytes_total") == client.bytes_received

    # The request for a model no engine serves was answered by ramjet itself: 404, no engine dialed.
    assert client.by_upstream[(None, "4xx")] == 1
    assert m.val("ramjet_request_rejections_total", reason="unknown_model") == 1
    routed = len(replies) - 1
    # Per upstream, by status class, from the X-Ramjet-Upstream header of each reply.
    for (ordinal, cls), n in client.by_upstream.items():
        if ordinal is not None:
            assert m.val("ramjet_upstream_requests_total", upstream=ordinal, **{"class": cls}) == n, (ordinal, cls)
    assert m.sum("ramjet_upstream_requests_total") == routed
    # The winner's declared profile: engine 0 is mtp, engine 1 standard (no retries here).
    served = Counter(r.upstream for r in replies)
    assert m.val("ramjet_route_profile_choices_total", profile="mtp") == served["0"]
    assert m.val("ramjet_route_profile_choices_total", profile="standard") == served["1"]
    assert m.val("ramjet_route_profile_choices_total", profile="none") == 0
    assert m.sum("ramjet_route_decisions_total") == routed

    # Histograms: one observation per request, per prefix-routed request, per streamed response.
    assert m.val("ramjet_request_duration_seconds_count") == routed
    assert m.val("ramjet_route_overlap_blocks_count") == routed
    assert m.val("ramjet_route_affinity_blocks_count") == routed
    assert m.val("ramjet_route_overlap_blocks_bucket", le="0") < routed, "repeated prefixes overlap"
    assert m.val("ramjet_ttft_seconds_count") == client.streams_with_tokens
    assert m.val("ramjet_time_per_output_token_seconds_count") == client.streams_tpot > 0
    assert m.sum("ramjet_cache_ttft_seconds_count", endpoint="chat") == client.chat_streams
    assert m.sum("ramjet_cache_ttft_seconds_count") == client.streams_with_tokens
    assert m.val("ramjet_context_tokens_count") == client.usages
    assert m.val("ramjet_output_tokens_count") == client.usages
    assert m.val("ramjet_output_tokens_sum") == client.completion


def test_engine_gauges_match_the_engines_own_metrics(rj, sims):
    workload(Client(rj))
    rj.wait_idle()

    def engine_view(sim) -> dict:
        fams = {f.name: f for f in text_string_to_metric_families(sim.request("GET", "/metrics").body.decode())}

        def total(name):
            return sum(s.value for s in fams[name].samples if s.name in (name, name + "_total"))
        return {
            "running": total("vllm:num_requests_running"),
            "waiting": total("vllm:num_requests_waiting"),
            "kv": total("vllm:kv_cache_usage_perc"),
            "ratio": total("vllm:prefix_cache_hits") / total("vllm:prefix_cache_queries"),
        }

    def agree():
        m = rj.metrics()
        for i, sim in enumerate(sims):
            want = engine_view(sim)
            got = {
                "running": m.get("ramjet_engine_requests_running", upstream=i),
                "waiting": m.get("ramjet_engine_requests_waiting", upstream=i),
                "kv": m.get("ramjet_engine_kv_cache_usage", upstream=i),
                "ratio": m.get("ramjet_engine_prefix_cache_hit_ratio", upstream=i),
            }
            if any(v is None or not math.isclose(v, want[k], rel_tol=1e-9, abs_tol=1e-12) for k, v in got.items()):
                return None
            if m.get("ramjet_engine_scrape_up", upstream=i) != 1:
                return None
        return m

    m = poll(agree, timeout=5, what="ramjet_engine_* equal to the engines' /metrics")
    assert m.sum("ramjet_engine_scrape_errors_total") == 0
    assert any(m.get("ramjet_engine_prefix_cache_hit_ratio", upstream=i) > 0 for i in (0, 1))


def test_a_busy_engine_shows_running_requests(ramjet_factory):
    slow = SimProc("--preset", "tiny", "--speed", "1", "--gpus", "2")
    try:
        rj = ramjet_factory([slow], env=dict(ENV, RJ_UPSTREAM_PROFILES=None))
        body = {"model": "ramjet-sim", "messages": [{"role": "user", "content": "tell me a long story"}],
                "max_tokens": 2000, "stream": True}
        def stream():
            try:
                http_request(rj.api_port, "POST", CHAT, json.dumps(body).encode(),
                             {"Content-Type": "application/json"}, timeout=60)
            except (OSError, http.client.HTTPException):
                pass  # cut when the engine stops at the end of the test

        t = threading.Thread(target=stream)
        t.daemon = True
        t.start()
        m = poll(lambda: (lambda m: m if m.get("ramjet_engine_requests_running", upstream=0) == 1 else None)(
            rj.metrics()), timeout=5, what="ramjet_engine_requests_running == 1 while a stream decodes")
        assert m.get("ramjet_engine_kv_cache_usage", upstream=0) > 0, "a running request holds KV blocks"
    finally:
        slow.stop()


def test_upstream_passthrough_returns_the_engines_own_text(rj, sims):
    r = http_request(rj.metrics_port, "GET", "/metrics/upstream/0", timeout=5)
    assert r.status == 200, r.body[:300]
    assert r.header("Content-Type").startswith("text/plain")
    text = r.body.decode()
    assert "\nvllm:num_requests_running{" in text and 'DCGM_FI_DEV_GPU_UTIL{gpu="1"' in text
    own = sims[0].request("GET", "/metrics").body.decode()
    assert {f.name for f in text_string_to_metric_families(text)} == \
        {f.name for f in text_string_to_metric_families(own)}
    r1 = http_request(rj.metrics_port, "GET", "/metrics/upstream/1", timeout=5)
    assert r1.status == 200 and b"vllm:kv_cache_usage_perc" in r1.body
    for bad in ("2", "99", "-1", "x", "", "01x", "18446744073709551616"):
        r = http_request(rj.metrics_port, "GET", "/metrics/upstream/" + bad, timeout=5)
        assert r.status == 404, (bad, r.status)
        assert r.json()["error"]["type"] == "not_found_error"


def test_an_engine_that_does_not_answer_is_a_502_and_a_scrape_error(rj, sims):
    poll(lambda: rj.metrics().get("ramjet_engine_scrape_up", upstream=1) == 1, what="engine 1 scraped")
    sims[1].stop()
    r = http_request(rj.metrics_port, "GET", "/metrics/upstream/1", timeout=10)
    assert r.status == 502, r.body
    err = r.json()["error"]
    assert err["type"] == "upstream_error" and err["code"] == 502
    assert "127.0.0.1" not in r.body.decode() and str(sims[1].port) not in r.body.decode()
    def scrape_down():
        m = rj.metrics()
        return m if m.get("ramjet_engine_scrape_up", upstream=1) == 0 else None
    m = poll(scrape_down, what="engine 1 scrape down")
    poll(lambda: rj.metrics().val("ramjet_engine_scrape_errors_total", upstream=1, reason="connect") >= 1,
         what="connect errors counted")
    assert m.get("ramjet_engine_scrape_up", upstream=0) == 1
    assert http_request(rj.metrics_port, "GET", "/metrics/upstream/0", timeout=5).status == 200


def test_single_flight_followers_are_counted(ramjet_factory):
    slow = [SimProc(*SIM_ARGS, "--fault-slow-ms", "100") for _ in range(2)]
    try:
        rj = ramjet_factory(slow, env=dict(ENV, RJ_THREADS="1"))  # decisions in arrival order
        body = json.dumps({"model": "ramjet-sim", "max_tokens": 4, "messages": [
            {"role": "system", "content": filler("single-flight", 16 * 1024)},
            {"role": "user", "content": "the same question"}]}).encode()
        gate = threading.Barrier(6)

        def one(_):
            gate.wait()
            return http_request(rj.api_port, "POST", CHAT, body, {"Content-Type": "application/json"}, timeout=60)

        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(one, range(6)))
        assert all(r.status == 200 for r in replies)
        rj.wait_idle()
        m = rj.metrics()
        assert m.val("ramjet_route_single_flight_leads_total") == 1
        assert m.val("ramjet_route_single_flight_followers_total") == 5
        assert m.val("ramjet_route_decisions_total", outcome="single_flight") == 5
    finally:
        for s in slow:
            s.stop()


def test_counters_agree_with_ramjet_bench_on_a_scripted_run(rj, sims, tmp_path):
    # The benchmark client's own counts of a short shared-prefix run (requests, output and
    # prompt tokens, cached tokens, per-engine split) equal ramjet's counters.
    import os
    import subprocess

    bench = os.environ.get("BENCH_BIN")
    if not bench:
        pytest.skip("ramjet-bench not built")
    before = rj.metrics()
    out = tmp_path / "bench.json"
    subprocess.run([bench, "--target", f"http://127.0.0.1:{rj.api_port}", "--workload", "shared-prefix",
                    "--apps", "2", "--prefix-kib", "4", "--turns", "3", "--concurrency", "4",
                    "--duration", "2", "--max-tokens", "16", "--seed", "3", "--out-json", str(out), "--quiet"],
                   check=True, capture_output=True, timeout=60)
    rj.wait_idle()
    after = rj.metrics()
    step = json.loads(out.read_text())["runs"][0]["steps"][0]
    assert step["errors"] == 0 and step["ok"] > 20, step
    d = lambda name, **l: after.sum(name, **l) - before.sum(name, **l)  # noqa: E731
    assert d("ramjet_requests_total", endpoint="chat") == step["ok"]
    assert d("ramjet_completion_tokens_total") == step["output_tokens"]
    assert d("ramjet_prompt_tokens_total") == step["prompt_tokens"]
    assert d("ramjet_cached_prompt_tokens_total") == step["cached_tokens"] > 0
    # Per engine: the bench's split exactly (the model lookups it sends before the run are
    # answered by ramjet from the engines' cards, no engine dialed).
    assert d("ramjet_requests_total", endpoint="models") >= 1
    assert d("ramjet_upstream_requests_total") == step["ok"]
    for ordinal, n in step["engines"].items():
        assert d("ramjet_upstream_requests_total", upstream=ordinal) == n, ordinal
