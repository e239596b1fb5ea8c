"""Fingerprints in the engine's cache namespaces (issue 28).

vLLM hashes a request's LoRA adapter and its `cache_salt` into every block it caches: a prompt
cached under the base model is no hit for the same prompt under an adapter or another salt. The
approximate index keeps them apart the same way, so a prompt one namespace warmed earns nothing
for another. One ramjet-sim (which namespaces its prefix cache as vLLM does) serving `alpha` and
the adapter `alpha-sql`: the journal's overlap for each decision and the sim's own cached tokens
agree, request by request.
"""

from __future__ import annotations

import json

import pytest

from support.ramjet_proc import poll
from support.sim_proc import SimProc


@pytest.fixture
def sim():
    s = SimProc("--speed", "50", "--enable-prompt-tokens-details", "--served-model-name", "alpha",
                "--lora-modules", "alpha-sql=/adapters/sql")
    yield s
    s.stop()


PROMPT = "namespaces " + " ".join(f"word{i}" for i in range(120))


def ask(rj, model: str, salt: str | None = None):
    b = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": PROMPT}]}
    if salt is not None:
        b["cache_salt"] = salt
    r = rj.chat(b)
    assert r.status == 200, r
    return json.loads(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_an_adapters_and_a_salted_requests_earn_credit_only_in_their_own_namespace(ramjet_factory, sim, tmp_path):
    journal = tmp_path / "route.jsonl"
    rj = ramjet_factory([sim.url], env={"RJ_ROUTE_CHUNK_BYTES": "128", "RJ_ROUTE_JOURNAL": "true",
                                        "RJ_ROUTE_JOURNAL_FILE": str(journal)})

    def adapters_known():
        r = rj.request("GET", "/v1/models")
        ids = [c["id"] for c in r.json()["data"]] if r.status == 200 else []
        return "alpha-sql" in ids
    poll(adapters_known, timeout=10, what="ramjet's /v1/models lists the adapter")

    # (model, salt): does the index credit it, does the engine hit it.
    steps = [("alpha", None, False),      # new everywhere
             ("alpha", None, True),       # the base model's own history
             ("alpha-sql", None, False),  # the adapter: another namespace
             ("alpha-sql", None, True),
             ("alpha", "tenant-1", False),  # a salt: another namespace again
             ("alpha", "tenant-1", True),
             ("alpha", "tenant-2", False),
             ("alpha-sql", "tenant-1", False),  # an adapter and a salt: its own
             ("alpha", None, True)]       # the base model's history is still there
    cached = [ask(rj, model, salt) for model, salt, _ in steps]

    def starts():
        records = [json.loads(l) for l in open(journal) if '"event":"start"' in l]
        return [d for d in records if d["endpoint"] == "chat"]  # (the /v1/models polls are decisions too)
    decisions = poll(lambda: starts() if len(starts()) >= len(steps) else None, what="every decision")
    overlaps = [d["candidates"][0]["overlap_blocks"] for d in decisions[:len(steps)]]
    for (model, salt, warm), overlap, hit in zip(steps, overlaps, cached):
        what = f"{model} salt={salt}: overlap {overlap}, engine cached {hit}"
        if warm:
            assert overlap > 0 and hit > 100, what
        else:
            assert overlap == 0 and hit == 0, what
    # Names and salts stay out of the journal.
    text = journal.read_text()
    assert "tenant-1" not in text and "alpha-sql" not in text
