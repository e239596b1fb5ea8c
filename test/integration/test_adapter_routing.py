"""LoRA adapters as a score term (issue 29).

An engine serves a LoRA adapter's request at once when the adapter is active there (its weights
loaded: it has running or waiting requests); elsewhere the adapter loads first, and an engine
whose max_loras slots all hold other active adapters makes the request wait until one of them
drains (vLLM's scheduler skips it). vLLM names the active adapters in vllm:lora_requests_info;
ramjet reads it with the engine scrape and charges RJ_ROUTE_ADAPTER_LOAD_UNITS load units where
the adapter must load, twice that where the slots are full.

Two ramjet-sim engines (real time, tiny preset) each serve `alpha` with the adapters `sql` and
`law` and one adapter slot (`--max-loras 1`, vLLM's default), scheduling as vLLM does. A long
`sql` stream holds one engine; short `sql` requests follow it there although that engine is
busier (journal outcome `adapter`), `law` requests go to the other engine (the busy one is
full), and an adapter-blind ramjet (RJ_ROUTE_ADAPTER_LOAD_UNITS=0) sends `sql` by load alone.
"""

from __future__ import annotations

import json
import time

import pytest

from support.e2e import CHAT, open_stream
from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc

SIM = ("--preset", "tiny", "--speed", "1", "--served-model-name", "alpha",
       "--lora-modules", "sql=/adapters/sql", "law=/adapters/law", "--max-loras", "1")
SCRAPE_MS = 100


@pytest.fixture
def sims():
    made = [SimProc(*SIM), SimProc(*SIM)]
    yield made
    for s in made:
        s.stop()


def body(model: str, tag: str, max_tokens: int, stream: bool) -> dict:
    return {"model": model, "stream": stream, "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"{tag}: " + " ".join(f"{tag}{i}" for i in range(40))}]}


def short(rj, model: str, tag: str) -> str:
    r = http_request(rj.api_port, "POST", CHAT, json.dumps(body(model, tag, 4, False)).encode(),
                     {"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200, r
    return r.header("X-Ramjet-Upstream")


def active_adapters(sim) -> str:
    """The running adapters of the sim's latest vllm:lora_requests_info label set."""
    text = http_request(sim.port, "GET", "/metrics").body.decode()
    best, running = -1.0, ""
    for line in text.splitlines():
        if line.startswith("vllm:lora_requests_info{"):
            labels, value = line.rsplit(" ", 1)
            if float(value) > best:
                best = float(value)
                running = labels.split('running_lora_adapters="', 1)[1].split('"', 1)[0]
    return running


def test_an_adapter_request_goes_where_its_adapter_is_active(sims, ramjet_factory, tmp_path):
    journal = tmp_path / "route.jsonl"
    rj = ramjet_factory([s.url for s in sims], env={
        "RJ_ENGINE_SCRAPE_INTERVAL_MS": str(SCRAPE_MS), "RJ_ROUTE_JOURNAL": "true",
        "RJ_ROUTE_JOURNAL_FILE": str(journal)})
    blind = ramjet_factory([s.url for s in sims], env={
        "RJ_ENGINE_SCRAPE_INTERVAL_MS": str(SCRAPE_MS), "RJ_ROUTE_ADAPTER_LOAD_UNITS": "0"})

    def adapters_known(r):
        resp = r.request("GET", "/v1/models")
        ids = {c["id"] for c in resp.json()["data"]} if resp.status == 200 else set()
        return {"sql", "law"} <= ids
    for r in (rj, blind):
        poll(lambda: adapters_known(r), timeout=10, what="ramjet lists the adapters")

    stream = open_stream(rj.api_port, CHAT, body("sql", "long", 4000, True), timeout=30)
    try:
        assert stream.status == 200, stream.status
        busy = dict(stream.headers)["X-Ramjet-Upstream"]
        other = "1" if busy == "0" else "0"
        poll(lambda: active_adapters(sims[int(busy)]) == "sql", 10, what="the busy engine reports sql active")
        time.sleep(5 * SCRAPE_MS / 1000)  # ramjet's scrape reads it

        # sql follows its active adapter onto the busier engine; law avoids the full one.
        assert [short(rj, "sql", f"s{i}") for i in range(4)] == [busy] * 4
        assert [short(rj, "law", f"l{i}") for i in range(3)] == [other] * 3
        # Adapter-blind, the same sql requests go by load (the busy engine's running stream
        # counts as foreign load there).
        assert [short(blind, "sql", f"b{i}") for i in range(3)] == [other] * 3
    finally:
        stream.close()

    def starts():
        records = [json.loads(l) for l in open(journal) if '"event":"start"' in l]
        return [d for d in records if d["endpoint"] == "chat"]  # (the /v1/models polls are decisions too)
    chats = poll(lambda: starts() if len(starts()) >= 8 else None, what="every decision")[1:]  # (after the stream's)
    assert len(chats) == 7, chats
    def slot(d, ordinal):
        return next(c["adapter"] for c in d["candidates"] if c["upstream"] == ordinal)
    for d in chats[:4]:  # sql
        assert d["outcome"] == "adapter", d
        assert slot(d, int(busy)) == "active" and slot(d, int(other)) == "free", d
        assert d["adapter_load_units"] == 2
    for d in chats[4:]:  # law: the busy engine's one slot holds sql
        assert d["chosen"] == int(other), d
        assert slot(d, int(busy)) == "full", d
    assert rj.metrics().get("ramjet_route_decisions_total", outcome="adapter") == 4
    # Adapter names stay out of the journal (its terms are closed-set labels).
    text = journal.read_text()
    assert '"sql"' not in text and '"law"' not in text
