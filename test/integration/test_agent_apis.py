"""Agent traffic end to end (issue 15): the OpenAI Responses API and the Anthropic Messages API.

First ramjet-sim alone (standard library HTTP): /v1/responses and /v1/messages answer as vLLM 0.32 does
(requests converted as vLLM 0001948b, sim/server/agent_convert.h): the exact SSE event sequences and their
terminal events, usage in each API's own field names (Messages: Anthropic's split of the prompt into
input_tokens, cache_read_input_tokens and cache_creation_input_tokens), cached tokens on a repeated prompt,
the tool-call answer, each API's error shape (request-validation errors in the OpenAI shape on both, as vLLM's
HTTP front answers them), /sim/render, and a client that goes away mid-stream cancels the engine request.

Then the official SDKs, unmodified (openai 6.49.0 `client.responses.create`, @anthropic-ai/sdk 1.16.0
`client.messages.create` / `client.messages.stream`, driven by test/clients/agent_client.mjs), through ramjet
to ramjet-sim engines:
  * a tool round trip per API and mode (the model calls the function; the client sends the result back as
    the next turn), and ramjet's accounting of each request (route journal finish record and Prometheus
    counters) equals what the SDK reports: prompt / cached / completion tokens, the finish bucket for the
    SDK's status / stop_reason, and a TTFT that is a generated token's (the engines' steps are slowed to
    100 ms, so a first "token" before the first step is visible);
  * aborting an SDK stream cancels the engine request (sim /sim/stats) and ramjet counts a client disconnect;
  * multi-turn conversations over four engines stay on their first turn's engine, their cached tokens growing
    (also with Claude Code's per-request billing block in system[0]).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support.e2e import open_stream
from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc

CLIENTS = Path(__file__).resolve().parent.parent / "clients"
SCRIPT = CLIENTS / "agent_client.mjs"
NODE = shutil.which("node")
_missing = [p for p in ("openai", "@anthropic-ai/sdk")
            if not (CLIENTS / "node_modules" / p / "package.json").is_file()]
needs_sdks = pytest.mark.skipif(NODE is None or bool(_missing),
                                reason="Node.js and test/clients/node_modules (scripts/setup: npm ci --prefix "
                                       "test/clients) are needed for the SDK tests")

T_NODE = 120.0
SLOW_MS = 100       # every engine step takes at least this long in the SDK tests (TTFT is visible)
MODEL = "ramjet-sim"
# A system prompt of several of ramjet's 2 KiB fingerprint blocks, so prefix routing has something to follow.
SYSTEM = "You answer weather questions with the get_weather tool. " + " ".join(
    f"Rule {i}: be precise about city {i}." for i in range(160))
TOOL_OPENAI = {"type": "function", "name": "get_weather", "description": "The weather of a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
               "strict": False}
TOOL_ANTHROPIC = {"name": "get_weather", "description": "The weather of a city",
                  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"]}}
_CLEAN_ENV = ("NODE_EXTRA_CA_CERTS", "NODE_OPTIONS", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
              "http_proxy", "https_proxy", "all_proxy", "no_proxy", "OPENAI_BASE_URL", "OPENAI_API_KEY",
              "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


# ---------------------------------------------------------------------------- helpers
def post(port: int, path: str, body, timeout: float = 30.0):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http_request(port, "POST", path, data, {"Content-Type": "application/json"}, timeout=timeout)


def sse(body: bytes) -> list:
    """[(event name, data json)] of a whole SSE body; asserts every event has both lines."""
    out = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        out.append((lines[0][len("event: "):], json.loads(lines[1][len("data: "):])))
    return out


def collapse(names: list) -> list:
    """Runs of the same event name as one `name+` entry (the delta count depends on the engine's steps)."""
    out = []
    for n in names:
        if out and out[-1].rstrip("+") == n:
            out[-1] = n + "+"
        else:
            out.append(n)
    return out


def stats(sim) -> dict:
    return sim.admin("/sim/stats", {})


def stop_clean(sims) -> None:
    """Stops the engines; their output (ASan/UBSan builds) must hold no sanitizer report."""
    for s in sims:
        s.stop()
    for s in sims:
        assert not re.search(r"AddressSanitizer|LeakSanitizer|runtime error:", s.output()), s.output()[-3000:]


def agent(tmp_path, kind: str, base: str, params: dict, *, stream: bool = False, abort_after=None) -> dict:
    """One SDK call through test/clients/agent_client.mjs; its JSON line."""
    f = tmp_path / f"params-{time.monotonic_ns()}.json"
    f.write_text(json.dumps(params))
    args = [NODE, str(SCRIPT), kind, base, str(f)]
    if stream:
        args.append("--stream")
    if abort_after is not None:
        args += ["--abort-after", str(abort_after)]
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
    p = subprocess.run(args, env=env, cwd=str(CLIENTS), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=T_NODE)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert p.returncode == 0 and len(lines) == 1, f"agent_client.mjs exited {p.returncode}\n{p.stdout}\n{p.stderr}"
    r = json.loads(lines[0])
    assert r["ok"] is True and r["status"] == 200, r
    return r


class Journal:
    """The route journal file: finish records joined to their start record (sequential requests)."""

    def __init__(self, path: str):
        self.path = path

    def records(self) -> list:
        if not os.path.exists(self.path):
            return []
        return [json.loads(x) for x in open(self.path, encoding="utf-8").read().splitlines()]

    def finished(self, n: int) -> list:
        """The first n requests as {"start": .., "finish": ..}, waiting for their finish records."""
        def done():
            recs = self.records()
            fin = [r for r in recs if r["event"] == "finish"]
            return recs if len(fin) >= n else None
        recs = poll(done, 15, 0.05, f"{n} finish records in the journal")
        starts = {r["seq"]: r for r in recs if r["event"] == "start"}
        return [{"start": starts[r["seq"]], "finish": r} for r in recs if r["event"] == "finish"][:n]


# ---------------------------------------------------------------------------- the sim alone
@pytest.fixture
def sim():
    s = SimProc("--speed", "20", "--enable-prompt-tokens-details")
    yield s
    stop_clean([s])


def test_sim_responses_stream_is_vllms_event_sequence_with_usage_and_no_done(sim):
    body = {"model": MODEL, "instructions": "Be brief.", "input": "Tell me about load balancers.",
            "max_output_tokens": 3, "stream": True}
    r = post(sim.port, "/v1/responses", body)
    assert r.status == 200 and r.header("content-type").startswith("text/event-stream"), r
    assert b"[DONE]" not in r.body
    evs = sse(r.body)
    names = [n for n, _ in evs]
    assert collapse(names) == ["response.created", "response.in_progress", "response.output_item.added",
                               "response.content_part.added", "response.output_text.delta+",
                               "response.output_text.done", "response.content_part.done",
                               "response.output_item.done", "response.completed"], names
    assert [d["sequence_number"] for _, d in evs] == list(range(len(evs)))
    assert all(d["type"] == n for n, d in evs)
    assert evs[0][1]["response"]["status"] == "in_progress" and evs[0][1]["response"]["usage"] is None
    text = "".join(d["delta"] for n, d in evs if n == "response.output_text.delta")
    done = dict(evs)["response.output_text.done"]
    assert done["text"] == text and text
    final = evs[-1][1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["instructions"] == "Be brief." and final["max_output_tokens"] == 3
    assert [o["type"] for o in final["output"]] == ["message"] and final["output"][0]["content"][0]["text"] == text
    u = final["usage"]
    rendered = post(sim.port, "/sim/render?api=responses", body).json()
    assert u["input_tokens"] == len(rendered["prompt_token_ids"]) and u["output_tokens"] == 3
    assert u["total_tokens"] == u["input_tokens"] + 3
    # vLLM's SimpleContext leaves the per-turn lists empty; a cold prompt writes its full blocks.
    assert u["input_tokens_details"] == {"cached_tokens": 0, "cache_write_tokens": u["input_tokens"] // 16 * 16,
                                         "input_tokens_per_turn": [], "cached_tokens_per_turn": []}
    assert u["output_tokens_details"] == {"reasoning_tokens": 0, "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                          "tool_output_tokens_per_turn": []}
    assert rendered["messages"] == [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Tell me about load balancers."}]


def test_sim_messages_stream_is_vllms_event_sequence_without_ping_or_done(sim):
    body = {"model": MODEL, "max_tokens": 3, "stream": True, "system": "Be brief.",
            "messages": [{"role": "user", "content": "Tell me about load balancers."}]}
    r = post(sim.port, "/v1/messages", body)
    assert r.status == 200 and r.header("content-type").startswith("text/event-stream"), r
    assert b"[DONE]" not in r.body
    evs = sse(r.body)
    names = [n for n, _ in evs]
    assert collapse(names) == ["message_start", "content_block_start", "content_block_delta+",
                               "content_block_stop", "message_delta", "message_stop"], names
    assert all(d["type"] == n for n, d in evs)
    start = evs[0][1]["message"]
    # vLLM 0.32 sets type and role explicitly (its exclude_unset dump keeps them).
    assert list(start) == ["id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"], start
    prompt = len(post(sim.port, "/sim/render?api=messages", body).json()["prompt_token_ids"])
    # message_start: the chat stream's first usage (the whole prompt); message_delta: Anthropic's
    # split of it (prompt = input + cache read + cache creation; a cold prompt writes its full blocks).
    assert start["usage"] == {"input_tokens": prompt, "output_tokens": 0}
    assert evs[1][1] == {"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": 0}
    written = prompt // 16 * 16
    assert dict(evs)["message_delta"] == {"type": "message_delta",
                                          "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                                          "usage": {"input_tokens": prompt - written, "output_tokens": 3,
                                                    "cache_creation_input_tokens": written,
                                                    "cache_read_input_tokens": 0}}
    assert evs[-1][1] == {"type": "message_stop"}


def test_sim_answers_a_tool_turn_with_a_call_and_the_turn_after_the_result_with_text(sim):
    turn1 = {"model": MODEL, "max_tokens": 4, "tools": [TOOL_ANTHROPIC],
             "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    r = post(sim.port, "/v1/messages", dict(turn1, stream=True))
    evs = sse(r.body)
    assert collapse([n for n, _ in evs]) == ["message_start", "content_block_start", "content_block_delta+",
                                             "content_block_stop", "message_delta", "message_stop"]
    block = evs[1][1]["content_block"]
    assert block["type"] == "tool_use" and block["name"] == "get_weather" and block["input"] == {}
    args = "".join(d["delta"]["partial_json"] for n, d in evs if n == "content_block_delta")
    assert set(json.loads(args)) == {"input"}
    assert dict(evs)["message_delta"]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    full = post(sim.port, "/v1/messages", turn1).json()
    assert full["stop_reason"] == "tool_use" and [b["type"] for b in full["content"]] == ["tool_use"]
    call = full["content"][0]
    turn2 = dict(turn1, messages=turn1["messages"] + [
        {"role": "assistant", "content": full["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "21 C"}]}])
    after = post(sim.port, "/v1/messages", turn2).json()
    assert [b["type"] for b in after["content"]] == ["text"] and after["stop_reason"] == "max_tokens"
    rendered = post(sim.port, "/sim/render?api=messages", turn2).json()
    assert rendered["messages"][1:] == [
        {"role": "assistant", "tool_calls": [{"id": call["id"], "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps(call["input"])}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "21 C"}]
    u = after["usage"]
    assert u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] == \
        len(rendered["prompt_token_ids"])

    r1 = {"model": MODEL, "input": "Weather in Paris?", "max_output_tokens": 4, "tools": [TOOL_OPENAI],
          "stream": True}
    evs = sse(post(sim.port, "/v1/responses", r1).body)
    assert collapse([n for n, _ in evs]) == ["response.created", "response.in_progress", "response.output_item.added",
                                             "response.function_call_arguments.delta+",
                                             "response.function_call_arguments.done", "response.output_item.done",
                                             "response.completed"]
    final = evs[-1][1]["response"]
    (fc,) = final["output"]
    assert final["status"] == "completed" and fc["type"] == "function_call" and fc["name"] == "get_weather"
    assert fc["arguments"] == dict(evs)["response.function_call_arguments.done"]["arguments"]
    r2 = {"model": MODEL, "max_output_tokens": 4, "tools": [TOOL_OPENAI],
          "input": [{"role": "user", "content": "Weather in Paris?"}, fc,
                    {"type": "function_call_output", "call_id": fc["call_id"], "output": "21 C"}]}
    after = post(sim.port, "/v1/responses", r2).json()
    assert [o["type"] for o in after["output"]] == ["message"] and after["status"] == "incomplete"
    assert post(sim.port, "/sim/render?api=responses", r2).json()["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [{"id": fc["call_id"], "function": {
            "name": "get_weather", "arguments": fc["arguments"]}, "type": "function"}]},
        {"role": "tool", "content": "21 C", "tool_call_id": fc["call_id"]}]


def test_sim_reports_cached_tokens_of_a_repeated_prompt_in_each_apis_fields(sim):
    long_text = " ".join(f"word{i}" for i in range(120))
    resp = {"model": MODEL, "input": long_text, "max_output_tokens": 2}
    first, second = post(sim.port, "/v1/responses", resp).json(), post(sim.port, "/v1/responses", resp).json()
    p = first["usage"]["input_tokens"]
    assert first["usage"]["input_tokens_details"]["cached_tokens"] == 0
    # Whole 16-token blocks, and never the last prompt token (vLLM recomputes it).
    assert second["usage"]["input_tokens_details"]["cached_tokens"] == (p - 1) // 16 * 16 > 0
    assert second["usage"]["input_tokens_details"]["cache_write_tokens"] == 0
    msg = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": long_text}]}
    first = post(sim.port, "/v1/messages", msg).json()["usage"]
    hits = stats(sim)["prefix_cache_hits"]
    again = post(sim.port, "/v1/messages", msg).json()["usage"]
    # Anthropic's usage (vLLM 0.32 with --enable-prompt-tokens-details): the prompt is input_tokens
    # + cache_read_input_tokens + cache_creation_input_tokens; the engine's prefix cache hit them.
    p = first["input_tokens"] + first["cache_read_input_tokens"] + first["cache_creation_input_tokens"]
    # (the Responses requests above cached the same user text: part of it is read, the rest written)
    assert first["cache_read_input_tokens"] + first["cache_creation_input_tokens"] == p // 16 * 16
    assert again["cache_read_input_tokens"] == (p - 1) // 16 * 16 > 0 and again["cache_creation_input_tokens"] == 0
    assert again["input_tokens"] == p - again["cache_read_input_tokens"]
    assert stats(sim)["prefix_cache_hits"] - hits == again["cache_read_input_tokens"]


def fastapi_400(error: dict, param: str) -> dict:
    """vLLM's answer to a request-validation error, the same on every API (its HTTP front's)."""
    return {"error": {"message": f"1 validation error:\n  {error}", "type": "Bad Request", "param": param, "code": 400}}


def test_sim_errors_come_in_each_apis_own_shape(sim):
    cases = [
        ("/v1/messages", b"{not json", 400, fastapi_400(
            {"type": "json_invalid", "loc": "body.1", "msg": "JSON decode error", "input": "<dict of 0 items>",
             "ctx": {"error": "Expecting property name enclosed in double quotes"}}, "body.1")),
        ("/v1/messages", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, 400, fastapi_400(
            {"type": "missing", "loc": "body.max_tokens", "msg": "Field required", "input": "<dict of 2 items>"},
            "body.max_tokens")),
        ("/v1/messages", {"model": "nope", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}, 404,
         {"type": "error", "error": {"type": "NotFoundError",
                                     "message": f"The model `nope` does not exist. Valid aliases: {MODEL}."}}),
        ("/v1/responses", b"[]", 400, fastapi_400(
            {"type": "model_attributes_type", "loc": "body",
             "msg": "Input should be a valid dictionary or object to extract fields from", "input": "<list of 0 items>"},
            "body")),
        ("/v1/responses", {"input": 7}, 400, {"error": {"message": "input must be a string or an array of items",
                                                        "type": "BadRequestError", "param": "input", "code": 400}}),
        ("/v1/responses", {"input": "hi", "previous_response_id": "resp_abc"}, 404,
         {"error": {"message": "Response with id 'resp_abc' not found.", "type": "invalid_request_error",
                    "param": "response_id", "code": 404}}),
    ]
    for path, body, status, want in cases:
        r = post(sim.port, path, body)
        assert (r.status, r.json()) == (status, want), (path, body)
    for body in ({"model": MODEL, "max_tokens": 2 ** 64 - 1, "messages": [{"role": "user", "content": "hi"}]},
                 {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": "t", "content": {"not": "a list"}}]}]},
                 {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
                 {"model": MODEL, "max_tokens": 2, "messages": [{"role": "tool", "content": "x"}]}):
        r = post(sim.port, "/v1/messages", body)
        assert r.status == 400 and r.json()["type"] == "error" and r.json()["error"]["type"] == "BadRequestError", r
    assert stats(sim)["prompt_tokens"] == 0, "no refused request reached the engine"


def test_sim_client_gone_mid_stream_cancels_the_engine_request(sim):
    for path, body, delta in (
            ("/v1/responses", {"input": "go on", "max_output_tokens": 5000, "stream": True}, b"output_text.delta"),
            ("/v1/messages", {"model": MODEL, "max_tokens": 5000, "stream": True,
                              "messages": [{"role": "user", "content": "go on"}]}, b"content_block_delta")):
        before = stats(sim)["requests_cancelled"]
        c = open_stream(sim.port, path, body)
        seen = b""
        for _, piece in c.chunks():
            seen += piece
            if delta in seen:
                break
        c.close()
        poll(lambda: stats(sim)["requests_cancelled"] == before + 1, 10, 0.05, f"{path}: the cancel in /sim/stats")
        poll(lambda: stats(sim)["running"] == 0, 10, 0.05, "no request left running")
        assert stats(sim)["generation_tokens"] < 5000


# ---------------------------------------------------------------------------- SDKs through ramjet
@pytest.fixture
def slow_sims():
    made = [SimProc("--speed", "20", "--enable-prompt-tokens-details", "--fault-slow-ms", str(SLOW_MS))
            for _ in range(2)]
    yield made
    stop_clean(made)


@pytest.fixture
def journaled(ramjet_factory, tmp_path):
    def make(sims):
        path = str(tmp_path / "route.jsonl")
        rj = ramjet_factory([s.url for s in sims], env={"RJ_ROUTE_JOURNAL": "true", "RJ_ROUTE_JOURNAL_FILE": path})
        rj.wait_health(lambda c, j: c == 200 and all(r["healthy"] for r in j["replicas"]), 30, "replicas healthy")
        return rj, Journal(path)
    return make


COUNTERS = ("ramjet_prompt_tokens_total", "ramjet_cached_prompt_tokens_total", "ramjet_completion_tokens_total")


def counters(rj, endpoint: str) -> dict:
    m = rj.metrics()
    out = {n: m.val(n) for n in COUNTERS}
    for reason in ("stop", "length", "tool_calls", "cancelled", "other"):
        out[reason] = m.val("ramjet_finish_reasons_total", endpoint=endpoint, reason=reason)
    out["disconnects"] = m.val("ramjet_client_disconnects_total", endpoint=endpoint)
    return out


def sdk_usage(kind: str, data: dict) -> tuple:
    """(prompt, cached, completion, finish bucket) as the SDK reports them."""
    u = data["usage"]
    if kind == "openai":
        bucket = {"completed": "stop", "incomplete": "length"}[data["status"]]
        return u["input_tokens"], u["input_tokens_details"]["cached_tokens"], u["output_tokens"], bucket
    bucket = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}[data["stop_reason"]]
    # Anthropic's input_tokens leaves the cache reads and writes out of the prompt.
    read, created = u.get("cache_read_input_tokens") or 0, u.get("cache_creation_input_tokens") or 0
    return u["input_tokens"] + read + created, u.get("cache_read_input_tokens"), u["output_tokens"], bucket


def check_accounting(kind: str, endpoint: str, call: dict, rec: dict, before: dict, after: dict, stream: bool):
    prompt, cached, completion, bucket = sdk_usage(kind, call["data"])
    start, fin = rec["start"], rec["finish"]
    assert start["endpoint"] == endpoint and str(fin["upstream"]) == call["upstream"], rec
    assert fin["result"] == "complete" and fin["status"] == 200, fin
    got = (fin["prompt_tokens"], fin["cached_tokens"], fin["completion_tokens"])
    assert got == (prompt, cached, completion), ("journal vs SDK usage", got, call["data"]["usage"])
    assert after["ramjet_prompt_tokens_total"] - before["ramjet_prompt_tokens_total"] == prompt
    assert after["ramjet_cached_prompt_tokens_total"] - before["ramjet_cached_prompt_tokens_total"] == (cached or 0)
    assert after["ramjet_completion_tokens_total"] - before["ramjet_completion_tokens_total"] == completion
    moved = {r: after[r] - before[r] for r in ("stop", "length", "tool_calls", "cancelled", "other")
             if after[r] != before[r]}
    assert moved == {bucket: 1}, ("finish bucket vs the SDK's", moved, bucket)
    print(f"{endpoint}: SDK usage {call['data']['usage']} {bucket}; journal {got} ttft {fin['ttft_ms']} ms "
          f"(SDK first delta {call['ttft_ms']} ms)")
    if stream:
        # A generated token's time: after the engine's first (>= SLOW_MS) step, before the client saw it.
        assert fin["ttft_ms"] is not None and SLOW_MS * 0.9 <= fin["ttft_ms"] <= call["ttft_ms"] + 50, \
            ("ramjet's TTFT", fin["ttft_ms"], "the SDK's first delta", call["ttft_ms"])
    else:
        assert fin["ttft_ms"] is None, fin


@needs_sdks
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_openai_responses_tool_round_trip_and_ramjets_accounting(slow_sims, journaled, tmp_path, stream):
    rj, journal = journaled(slow_sims)
    base = f"http://127.0.0.1:{rj.api_port}/v1"
    params = {"model": MODEL, "instructions": SYSTEM,
              "max_output_tokens": 6, "tools": [TOOL_OPENAI],
              "input": [{"role": "user", "content": "What is the weather in Paris?"}]}
    calls = []
    before = counters(rj, "responses")
    c1 = agent(tmp_path, "openai", base, params, stream=stream)
    mid = counters(rj, "responses")
    (fc,) = c1["data"]["output"]
    assert fc["type"] == "function_call" and fc["name"] == "get_weather" and c1["data"]["status"] == "completed"
    assert set(json.loads(fc["arguments"])) == {"input"}
    if stream:
        assert collapse(c1["events"]) == ["response.created", "response.in_progress", "response.output_item.added",
                                          "response.function_call_arguments.delta+",
                                          "response.function_call_arguments.done", "response.output_item.done",
                                          "response.completed"], c1["events"]
    params["input"] = params["input"] + c1["data"]["output"] + [
        {"type": "function_call_output", "call_id": fc["call_id"], "output": json.dumps({"celsius": 21})}]
    c2 = agent(tmp_path, "openai", base, params, stream=stream)
    after = counters(rj, "responses")
    (msg,) = c2["data"]["output"]
    assert msg["type"] == "message" and msg["content"][0]["text"] and c2["data"]["status"] == "incomplete"
    assert c2["upstream"] == c1["upstream"], "the second turn follows the first one's prefix"
    assert c2["data"]["usage"]["input_tokens_details"]["cached_tokens"] > 0
    r1, r2 = journal.finished(2)
    check_accounting("openai", "responses", c1, r1, before, mid, stream)
    check_accounting("openai", "responses", c2, r2, mid, after, stream)


@needs_sdks
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_anthropic_messages_tool_round_trip_and_ramjets_accounting(slow_sims, journaled, tmp_path, stream):
    rj, journal = journaled(slow_sims)
    base = f"http://127.0.0.1:{rj.api_port}"
    params = {"model": MODEL, "max_tokens": 6, "system": SYSTEM,
              "tools": [TOOL_ANTHROPIC], "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
    before = counters(rj, "messages")
    c1 = agent(tmp_path, "anthropic", base, params, stream=stream)
    mid = counters(rj, "messages")
    (use,) = c1["data"]["content"]
    assert use["type"] == "tool_use" and use["name"] == "get_weather" and c1["data"]["stop_reason"] == "tool_use"
    if stream:
        assert collapse(c1["events"]) == ["message_start", "content_block_start", "content_block_delta+",
                                          "content_block_stop", "message_delta", "message_stop"], c1["events"]
    params["messages"] = params["messages"] + [
        {"role": "assistant", "content": c1["data"]["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "21 C"}]}]
    c2 = agent(tmp_path, "anthropic", base, params, stream=stream)
    after = counters(rj, "messages")
    (text,) = c2["data"]["content"]
    assert text["type"] == "text" and text["text"] and c2["data"]["stop_reason"] == "max_tokens"
    assert c2["upstream"] == c1["upstream"], "the second turn follows the first one's prefix"
    assert c2["data"]["usage"]["cache_read_input_tokens"] > 0, "Anthropic's cache fields (vLLM 0.32)"
    r1, r2 = journal.finished(2)
    check_accounting("anthropic", "messages", c1, r1, before, mid, stream)
    check_accounting("anthropic", "messages", c2, r2, mid, after, stream)


@needs_sdks
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_aborting_an_sdk_stream_cancels_the_engine_request(slow_sims, journaled, tmp_path, kind):
    rj, journal = journaled(slow_sims)
    endpoint = "responses" if kind == "openai" else "messages"
    if kind == "openai":
        base, params = f"http://127.0.0.1:{rj.api_port}/v1", {"model": MODEL, "input": "Go on.",
                                                              "max_output_tokens": 400}
    else:
        base, params = f"http://127.0.0.1:{rj.api_port}", {"model": MODEL, "max_tokens": 400,
                                                           "messages": [{"role": "user", "content": "Go on."}]}
    before = counters(rj, endpoint)
    c = agent(tmp_path, kind, base, params, abort_after=2)
    assert c["aborted"] is True and c["data"] is None, c
    engine = slow_sims[int(c["upstream"])]
    poll(lambda: stats(engine)["requests_cancelled"] == 1, 15, 0.05, "the engine request cancelled (/sim/stats)")
    poll(lambda: stats(engine)["running"] == 0, 15, 0.05, "nothing left running on the engine")
    assert stats(engine)["generation_tokens"] < 400
    (rec,) = journal.finished(1)
    assert rec["finish"]["result"] == "client_disconnect", rec["finish"]
    after = counters(rj, endpoint)
    assert after["disconnects"] - before["disconnects"] == 1


@needs_sdks
@pytest.mark.parametrize("kind", ["openai", "anthropic", "anthropic-billing"])
def test_prefix_routing_keeps_each_agent_conversation_on_its_engine(ramjet_factory, tmp_path, kind):
    """anthropic-billing: Claude Code's system[0] block `x-anthropic-billing-header: ...; cch=<per request>`,
    which vLLM drops before rendering (the engines' caches hit) and ramjet's fingerprints leave out too
    (before they did, every turn of such a conversation was a new prefix and the turns scattered)."""
    billing = kind == "anthropic-billing"
    kind = "anthropic" if billing else kind
    sims = [SimProc("--speed", "50", "--enable-prompt-tokens-details") for _ in range(4)]
    try:
        rj = ramjet_factory([s.url for s in sims])
        rj.wait_health(lambda c, j: c == 200 and all(r["healthy"] for r in j["replicas"]), 30, "replicas healthy")
        base = f"http://127.0.0.1:{rj.api_port}" + ("/v1" if kind == "openai" else "")
        seen = {}
        for conv in range(3):
            system = f"Conversation {conv}. " + " ".join(f"rule{conv}-{i} applies." for i in range(150))
            history = []
            for turn in range(3):
                history.append({"role": "user", "content": f"Question {turn} of conversation {conv}?"})
                if kind == "openai":
                    params = {"model": MODEL, "instructions": system, "max_output_tokens": 8, "input": history}
                else:
                    params = {"model": MODEL, "max_tokens": 8, "system": system, "messages": history}
                    if billing:
                        params["system"] = [
                            {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.0; cch={conv}{turn}af3;"},
                            {"type": "text", "text": system}]
                engine_hits = [stats(s)["prefix_cache_hits"] for s in sims]
                c = agent(tmp_path, kind, base, params)
                up = int(c["upstream"])
                # The engine's own count of this request's cached tokens (requests run one at a time).
                cached = stats(sims[up])["prefix_cache_hits"] - engine_hits[up]
                if kind == "openai":
                    assert c["data"]["usage"]["input_tokens_details"]["cached_tokens"] == cached
                    history = history + [{"role": "assistant", "content": c["data"]["output"][0]["content"][0]["text"]}]
                    prompt = c["data"]["usage"]["input_tokens"]
                else:
                    history = history + [{"role": "assistant", "content": c["data"]["content"][0]["text"]}]
                    u = c["data"]["usage"]  # Anthropic's split of the prompt
                    assert u["cache_read_input_tokens"] == cached
                    prompt = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
                seen.setdefault(conv, []).append((up, cached, prompt))
        print(f"{kind}: per conversation [(engine, engine-cached tokens, prompt tokens) per turn]: {seen}")
        for conv, turns in seen.items():
            ups = [u for u, _, _ in turns]
            assert ups == [ups[0]] * len(ups), (f"conversation {conv} moved between engines", seen)
            cached = [c for _, c, _ in turns]
            prompts = [p for _, _, p in turns]
            assert prompts == sorted(set(prompts)), ("each turn's prompt grows", seen)
            assert cached[0] == 0 and cached[1] > 0 and cached[2] > cached[1], \
                (f"conversation {conv}: cached tokens grow turn by turn", seen)
    finally:
        stop_clean(sims)
