"""Routing end to end: ramjet's prefix policy in front of real ramjet-sim engines.

Every scenario runs ramjet (default RJ_AFFINITY=prefix) in front of several ramjet-sim
processes (vLLM HTTP/SSE, a real prefix-cache block pool) and asserts on what a client and an
operator can see: the `X-Ramjet-Upstream` header (engine ordinal), ramjet's /metrics
(`ramjet_route_decisions_total{outcome}`, `ramjet_upstream_load_units`,
`ramjet_route_single_flight_leads_total`, `ramjet_route_index_entries`) and the engines' own
view (`usage.prompt_tokens_details.cached_tokens`, `POST /sim/resident`).

The rule under test (src/request/route/prefix_load.cc): score = min(max(overlap, single_flight),
RJ_ROUTE_MAX_OVERLAP_BLOCKS) - RJ_ROUTE_ALPHA * reserved load units; candidates are ordered by
eligibility, score, raw overlap, decode profile, then rotation (which advances only when it
settled a tie). A fingerprint block is 2 KiB of canonical prompt; a request reserves
ceil(uncached bytes / 32 KiB) units (1..8), shrunk to 1 at a streaming response's first token.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time

import pytest

from support.e2e import CHAT, open_stream, sse_datas, stream_content
from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc

# The `tiny` preset (16-token blocks, 2 ms decode steps) at 20x real time: fast and cache-exact.
FAST = ("--preset", "tiny", "--speed", "20", "--enable-prompt-tokens-details")
# Real time, for streams that must stay open while the test looks at ramjet.
SLOW_DECODE = ("--preset", "tiny", "--speed", "1", "--enable-prompt-tokens-details")
# Room for prompts beyond tiny's 16K-token context (100 KiB is ~30K tokens).
BIG_CONTEXT = ("--max-model-len", "65536", "--num-gpu-blocks-override", "16384")

LOAD_UNIT_BYTES = 32768  # RJ_ROUTE_LOAD_UNIT_BYTES default
MAX_LOAD_UNITS = 8       # RJ_ROUTE_MAX_LOAD_UNITS default


# ------------------------------------------------------------------------------------ helpers
def filler(tag: str, nbytes: int) -> str:
    """nbytes of prompt text unique to `tag` from its first byte (every word carries the tag)."""
    words = []
    size = 0
    i = 0
    while size < nbytes:
        w = f"{tag}.{i} "
        words.append(w)
        size += len(w)
        i += 1
    return "".join(words)[:nbytes]


def system(tag: str, nbytes: int) -> dict:
    return {"role": "system", "content": filler(tag, nbytes)}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def body(messages, max_tokens=8, stream=False, **kw) -> dict:
    b = {"model": "ramjet-sim", "messages": list(messages), "stream": stream}
    if max_tokens is not None:
        b["max_tokens"] = max_tokens
    b.update(kw)
    return b


def expected_units(b: dict, cached_bytes: int = 0) -> int:
    """The reservation ramjet makes for body `b` (its bytes as sent; no shim changes them)."""
    n = max(0, len(json.dumps(b).encode()) - cached_bytes)
    return min(max(math.ceil(n / LOAD_UNIT_BYTES), 1), MAX_LOAD_UNITS)


class Reply:
    def __init__(self, r):
        assert r.status == 200, r
        self.raw = r
        self.ordinal = int(r.header("X-Ramjet-Upstream"))
        self.json = r.json()
        self.usage = self.json["usage"]
        self.content = self.json["choices"][0]["message"]["content"]

    @property
    def cached(self) -> int:
        return (self.usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)

    @property
    def cached_share(self) -> float:
        return self.cached / self.usage["prompt_tokens"]


def send(rj, messages, max_tokens=8, timeout=30.0, **kw) -> Reply:
    b = body(messages, max_tokens=max_tokens, **kw)
    return Reply(http_request(rj.api_port, "POST", CHAT, json.dumps(b).encode(),
                              {"Content-Type": "application/json"}, timeout=timeout))


def outcomes(rj) -> dict:
    return {labels["outcome"]: v for labels, v in rj.metrics().find("ramjet_route_decisions_total")}


def outcome_delta(before: dict, after: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def load_units(rj, ordinal: int) -> float:
    return rj.metrics().val("ramjet_upstream_load_units", upstream=ordinal)


def index_entries(rj) -> float:
    return rj.metrics().sum("ramjet_route_index_entries")


def resident(sim, messages) -> int:
    return sim.admin("/sim/resident", {"messages": list(messages)})["resident_tokens"]


class StreamReader:
    """Reads an open SSE response on a thread; records when the first generated token and the
    end of the stream arrived."""

    def __init__(self, client):
        self.client = client
        self.first_token_t = None
        self.end_t = None
        self.text = ""
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            buf = b""
            for t, piece in self.client.chunks():
                buf += piece
                while b"\n\n" in buf:
                    ev, buf = buf.split(b"\n\n", 1)
                    self.text += stream_content(d for d in sse_datas([(t, ev)]) if d != "[DONE]")
                    if self.text and self.first_token_t is None:
                        self.first_token_t = t
            self.end_t = time.monotonic()
        except Exception as e:  # noqa: BLE001 - reported by join()
            self.error = e

    def join(self, timeout=30.0):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the stream did not end"
        assert self.error is None, self.error
        return self


def burst(rj, b: dict, n: int) -> list:
    """n identical requests released together from n threads; returns their ordinals."""
    data = json.dumps(b).encode()
    gate = threading.Barrier(n)
    got = [None] * n

    def one(i):
        gate.wait()
        got[i] = http_request(rj.api_port, "POST", CHAT, data, {"Content-Type": "application/json"}, timeout=30)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return [Reply(r).ordinal for r in got]


@pytest.fixture
def sim_factory():
    made = []

    def make(n: int, *args: str) -> list:
        out = [SimProc(*args) for _ in range(n)]
        made.extend(out)
        return out

    yield make
    for s in made:
        s.stop()


# ------------------------------------------------------------------------ 1. conversations
def test_a_conversation_stays_on_one_engine_while_unrelated_one_off_requests_spread(sim_factory, ramjet_factory):
    sims = sim_factory(4, *FAST)
    rj = ramjet_factory(sims)
    one_offs: list = []
    errors: list = []
    done = threading.Event()

    def one_off_traffic():  # one at a time, for as long as the conversation lasts (>= 12)
        try:
            i = 0
            while not done.is_set() or i < 12:
                one_offs.append(send(rj, [user(filler(f"oneoff{i}", 400))], max_tokens=4).ordinal)
                i += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    bg = threading.Thread(target=one_off_traffic, daemon=True)
    bg.start()
    history = [system("conversation", 16 * 1024)]  # 8 fingerprint blocks before the first turn
    turns = []
    try:
        for turn in range(6):
            history.append(user(f"turn {turn}: " + filler(f"question{turn}", 300)))
            r = send(rj, history, max_tokens=24)
            turns.append(r)
            history.append({"role": "assistant", "content": r.content})  # the client sends it back
    finally:
        done.set()
        bg.join(60)
    assert not errors, errors

    assert len({r.ordinal for r in turns}) == 1, [r.ordinal for r in turns]
    # The engine really had the conversation: every later turn hit its prefix cache.
    assert all(r.cached_share >= 0.8 for r in turns[1:]), [(r.cached, r.usage["prompt_tokens"]) for r in turns]
    # One-offs are new prefixes: rotation spreads them over the fleet, the conversation's
    # engine included.
    assert len(set(one_offs)) >= 3, one_offs
    assert outcomes(rj).get("overlap", 0) >= 5


def test_a_streamed_conversation_teaches_the_index_like_a_plain_one(sim_factory, ramjet_factory):
    # Most agent traffic streams: a streamed response (head first, body later) must teach the
    # index when it completes, exactly as a JSON one does.
    sims = sim_factory(4, *FAST)
    rj = ramjet_factory(sims)
    history = [system("streamed", 16 * 1024)]
    placed = []
    before = outcomes(rj)
    for turn in range(4):
        history.append(user(f"turn {turn}"))
        b = body(history, max_tokens=6, stream=True)
        r = http_request(rj.api_port, "POST", CHAT, json.dumps(b).encode(), {"Content-Type": "application/json"})
        datas = sse_datas([(0.0, r.body)])
        assert r.status == 200 and datas[-1] == "[DONE]"
        placed.append(r.header("X-Ramjet-Upstream"))
        history.append({"role": "assistant", "content": stream_content(datas)})
    assert len(set(placed)) == 1, placed
    assert outcome_delta(before, outcomes(rj)).get("overlap", 0) == 3, outcome_delta(before, outcomes(rj))
    assert index_entries(rj) >= 8


# ----------------------------------------------------------------------------- 2. apps
def test_each_app_sticks_to_its_first_engine_and_new_apps_are_spread_over_the_fleet(sim_factory, ramjet_factory):
    sims = sim_factory(4, *FAST)
    rj = ramjet_factory(sims)
    apps = [system(f"app{a}", 24 * 1024) for a in range(4)]  # 12 blocks each, under the cap
    placed: dict = {a: [] for a in range(4)}
    shares: dict = {a: [] for a in range(4)}
    sessions = {(a, s): [] for a in range(4) for s in range(3)}
    order = sorted(sessions)
    random.Random(7).shuffle(order)  # interleaved, and not in step with any rotation
    for turn in range(2):
        for a, s in order:
            h = sessions[(a, s)]
            h.append(user(f"app {a} session {s} turn {turn}: " + filler(f"a{a}s{s}t{turn}", 200)))
            r = send(rj, [apps[a], *h], max_tokens=16)
            h.append({"role": "assistant", "content": r.content})
            placed[a].append(r.ordinal)
            shares[a].append(r.cached_share)

    for a in range(4):
        assert set(placed[a]) == {placed[a][0]}, (a, placed[a])
        # After the app's first request, its system prompt comes from the engine's cache.
        assert min(shares[a][1:]) >= 0.8, (a, shares[a])
    firsts = [placed[a][0] for a in range(4)]
    assert len(set(firsts)) >= 3, firsts
    # Each app's prompt was prefilled on its own engine only: no other engine holds it.
    for a in range(4):
        for j, sim in enumerate(sims):
            held = resident(sim, [apps[a]])
            assert (held > 0) == (j == firsts[a]), (a, j, held, firsts)


# ---------------------------------------------------------------------- 3. cold prefill
def test_a_cold_32_kib_prefill_repels_small_requests_to_the_other_engine(sim_factory, ramjet_factory):
    # A 16-token step budget makes tiny's prefill of ~10K prompt tokens take ~1.4 s of wall time,
    # while a small request needs a few 2 ms steps.
    sims = sim_factory(2, "--preset", "tiny", "--speed", "1", "--max-num-batched-tokens", "16")
    rj = ramjet_factory(sims)
    big = body([user(filler("cold-prefill", 32 * 1024))], max_tokens=4, stream=True)
    t0 = time.monotonic()
    reader = StreamReader(open_stream(rj.api_port, CHAT, big))
    a = int(reader.client.header("X-Ramjet-Upstream"))
    units = expected_units(big)
    assert units == 2
    assert load_units(rj, a) == units

    before = outcomes(rj)
    smalls = [send(rj, [user(f"small unique request {i}")], max_tokens=1).ordinal for i in range(6)]
    still_prefilling = reader.first_token_t is None
    after = outcomes(rj)
    reader.join()

    assert smalls == [1 - a] * 6, (a, smalls)
    assert still_prefilling, "the big prefill finished before the small requests: the sim is too fast"
    assert reader.first_token_t - t0 >= 1.0, "prefill shorter than 1 s"
    # Cold everywhere, so only the big request's reservation separated the engines.
    assert outcome_delta(before, after) == {"load": 6}


# ------------------------------------------------------------------------ 4. load spike
def test_a_load_spike_on_the_warm_engine_sends_the_next_request_for_its_prefix_elsewhere(sim_factory, ramjet_factory):
    # Defaults: cap 32 blocks, alpha 4. An 80 KiB app prefix is 40 blocks, capped to 32, so the
    # warm engine keeps the prefix until its reserved load reaches 8 units (32 - 4*8 = 0: a tie,
    # settled by raw overlap) and loses it at 9 (32 - 36 < 0; uncapped, 40 - 36 would still
    # win). Each held stream reserves 1 unit: its uncached bytes are small, and phase-aware
    # load keeps 1 unit after the first token.
    sims = sim_factory(2, *SLOW_DECODE, *BIG_CONTEXT)
    rj = ramjet_factory(sims)
    app = system("spike-app", 80 * 1024)
    a = send(rj, [app, user("warm the prefix")], max_tokens=2).ordinal
    holders = []
    try:
        for i in range(9):
            c = open_stream(rj.api_port, CHAT, body([app, user(f"hold {i}")], max_tokens=4000, stream=True))
            holders.append(c)
            assert int(c.header("X-Ramjet-Upstream")) == a, f"holder {i} (load {i}) left the warm engine"
        poll(lambda: load_units(rj, a) == 9, what="9 load units on the warm engine")
        before = outcomes(rj)
        probe = send(rj, [app, user("one more for the warm prefix")], max_tokens=2)
        after = outcomes(rj)
        assert probe.ordinal == 1 - a, "alpha x load (36) did not override the capped affinity (32)"
        assert outcome_delta(before, after) == {"load": 1}
    finally:
        for c in holders:
            c.close()
    rj.wait_idle(5)


# ----------------------------------------------------------------------- 5. single-flight
SF_ENV = {
    "RJ_THREADS": "1",  # decisions in arrival order, one at a time
    # Default alpha (4) and cap (32): a follower whose whole prompt its leader is prefilling
    # earns the full cap there and reserves 1 unit, so the burst stays together until the
    # leader's engine is 8 units behind (32 - 4 x 8 = 0 still ties and wins on raw blocks).
}


def sf_burst_sims(sim_factory):
    # 100 ms per engine step: the leader is still prefilling when the whole burst is decided.
    return sim_factory(4, *FAST, "--fault-slow-ms", "100")


def test_a_burst_of_identical_new_prefixes_follows_its_single_flight_leader(sim_factory, ramjet_factory):
    sims = sf_burst_sims(sim_factory)
    rj = ramjet_factory(sims, env=SF_ENV)
    b = body([system("single-flight", 16 * 1024), user("the same question")], max_tokens=4)
    placed = burst(rj, b, 8)
    m = rj.metrics()
    assert len(set(placed)) == 1, placed
    assert m.val("ramjet_route_single_flight_leads_total") == 1
    assert outcomes(rj).get("single_flight", 0) == 7, outcomes(rj)


def test_without_single_flight_the_same_burst_spreads_over_the_engines(sim_factory, ramjet_factory):
    sims = sf_burst_sims(sim_factory)
    rj = ramjet_factory(sims, env=dict(SF_ENV, RJ_ROUTE_SINGLE_FLIGHT="false"))
    b = body([system("single-flight", 16 * 1024), user("the same question")], max_tokens=4)
    placed = burst(rj, b, 8)
    assert len(set(placed)) >= 2, placed
    assert rj.metrics().val("ramjet_route_single_flight_leads_total") == 0
    assert outcomes(rj).get("single_flight", 0) == 0


# ------------------------------------------------------------------------ 6. profiles
def test_short_outputs_go_to_mtp_engines_long_ones_to_standard_and_a_warm_cache_wins(sim_factory, ramjet_factory):
    mtp = sim_factory(2, "--preset", "tiny-mtp", "--speed", "20", "--default-max-tokens", "64")
    std = sim_factory(2, "--preset", "tiny", "--speed", "20", "--default-max-tokens", "64")
    rj = ramjet_factory(mtp + std, env={"RJ_UPSTREAM_PROFILES": "mtp,mtp,standard,standard"})
    before = outcomes(rj)
    short = [send(rj, [user(f"short {i}")], max_tokens=128).ordinal for i in range(6)]
    long_ = [send(rj, [user(f"long {i}")], max_tokens=1024 if i % 2 else None).ordinal for i in range(6)]
    assert set(short) == {0, 1}, short
    assert set(long_) == {2, 3}, long_
    # The profile decided each of them (rotation then picked within the preferred pair).
    assert outcome_delta(before, outcomes(rj)) == {"profile": 12}

    doc = system("profile-doc", 8 * 1024)
    s = send(rj, [doc, user("summarise at length")], max_tokens=None).ordinal
    assert s in (2, 3)
    before = outcomes(rj)
    warm_short = send(rj, [doc, user("one line, please")], max_tokens=128).ordinal
    assert warm_short == s, "a short request left the standard engine that holds its prefix"
    assert outcome_delta(before, outcomes(rj)) == {"overlap": 1}
    assert send(rj, [user("short again")], max_tokens=128).ordinal in (0, 1)


# --------------------------------------------------------------------- 7. phase-aware load
def stream_and_sample_load(sim_factory, ramjet_factory, env):
    """Streams a 100 KiB prompt through one engine (~0.7 s prefill, ~1 s decode); returns the
    expected reservation, the reader and the load_units samples taken until the stream ended."""
    sims = sim_factory(1, "--preset", "tiny", "--speed", "1", *BIG_CONTEXT, "--fault-slow-ms", "80")
    rj = ramjet_factory(sims, env=env)
    b = body([user(filler("phase", 100 * 1024))], max_tokens=14, stream=True)
    units = expected_units(b)
    reader = StreamReader(open_stream(rj.api_port, CHAT, b))
    samples = []  # (scrape started, scrape ended, value)
    while reader.end_t is None and reader.thread.is_alive():
        t = time.monotonic()
        v = load_units(rj, 0)
        samples.append((t, time.monotonic(), v))
        time.sleep(0.02)
    reader.join()
    rj.wait_idle(3)
    assert reader.first_token_t is not None
    return units, reader, samples


def phases(reader, samples):
    """The load values sampled well inside prefill and well inside decode (50-100 ms away from
    the first token and the end: ramjet shrinks right after relaying the token, a moment before
    this process's reader thread timestamps it)."""
    prefill = [v for t0, t1, v in samples if t1 < reader.first_token_t - 0.05]
    decode = [v for t0, t1, v in samples if reader.first_token_t + 0.1 < t0 and t1 < reader.end_t - 0.05]
    return prefill, decode


def test_a_streaming_reservation_shrinks_to_one_unit_at_the_first_token(sim_factory, ramjet_factory):
    units, reader, samples = stream_and_sample_load(sim_factory, ramjet_factory, {})
    assert units == 4
    prefill, decode = phases(reader, samples)
    assert len(prefill) >= 5 and set(prefill) == {4}, str(prefill)
    assert len(decode) >= 5 and set(decode) == {1}, str(decode)


def test_without_phase_aware_load_a_stream_keeps_its_full_reservation_to_the_end(sim_factory, ramjet_factory):
    units, reader, samples = stream_and_sample_load(sim_factory, ramjet_factory,
                                                    {"RJ_ROUTE_PHASE_AWARE_LOAD": "false"})
    prefill, decode = phases(reader, samples)
    assert len(prefill) >= 5 and set(prefill) == {units}, str(prefill)
    assert len(decode) >= 5 and set(decode) == {units}, str(decode)


# ---------------------------------------------------------------------- 8. observation
def assert_repeat_is_cold_then_learned(rj, messages):
    """The prompt is unknown to ramjet: a complete repeat is routed cold, then teaches the
    index, and the next repeat follows it."""
    before = outcomes(rj)
    first = send(rj, messages, max_tokens=2)
    d = outcome_delta(before, outcomes(rj))
    assert "overlap" not in d and "single_flight" not in d, d
    assert index_entries(rj) > 0
    before = outcomes(rj)
    again = send(rj, messages, max_tokens=2)
    assert again.ordinal == first.ordinal
    assert outcome_delta(before, outcomes(rj)) == {"overlap": 1}


def test_a_stream_the_client_abandons_does_not_teach_the_index(sim_factory, ramjet_factory):
    sims = sim_factory(2, *SLOW_DECODE)
    rj = ramjet_factory(sims)
    messages = [system("abandoned", 8 * 1024), user("tell me everything")]
    c = open_stream(rj.api_port, CHAT, body(messages, max_tokens=4000, stream=True))
    a = int(c.header("X-Ramjet-Upstream"))
    events = read_events_until_content(c)
    assert events, "no generated token before the client left"
    c.close()
    rj.wait_idle(5)
    assert index_entries(rj) == 0
    # The engine did prefill the prompt; ramjet only learns from complete responses.
    assert resident(sims[a], messages) > 0
    assert_repeat_is_cold_then_learned(rj, messages)


def read_events_until_content(client) -> list:
    got = []
    buf = b""
    for t, piece in client.chunks():
        buf += piece
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            got.append(ev)
            if stream_content(d for d in sse_datas([(t, ev)]) if d != "[DONE]"):
                return got
    return got


def test_an_engine_error_response_does_not_teach_the_index(sim_factory, ramjet_factory):
    sims = sim_factory(2, *FAST)
    rj = ramjet_factory(sims)
    for s in sims:
        s.admin("/sim/fault", {"error_rate": 1, "error_status": 500})
    messages = [system("errored", 8 * 1024), user("this one fails")]
    for stream in (False, True):
        r = http_request(rj.api_port, "POST", CHAT, json.dumps(body(messages, stream=stream)).encode(),
                         {"Content-Type": "application/json"})
        assert r.status == 500, r
    assert index_entries(rj) == 0
    for s in sims:
        s.admin("/sim/fault", {"error_rate": 0})
    assert_repeat_is_cold_then_learned(rj, messages)
