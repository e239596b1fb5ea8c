"""RJ_ROUTE_HORIZON=auto (issue 29): a fingerprint earns credit only within its engine's eviction
horizon, the engine's KV pool (vllm:cache_config_info from the engine scrape) in prompt bytes.
On a sim with a small pool, a prompt after which ramjet sent the engine more new prompt than the
pool holds was evicted there; with the horizon its overlap is 0 in the decision (journal), without
it the index still credits it — and the engine's own usage says it was indeed recomputed."""

from __future__ import annotations

import json

import pytest

from support.ramjet_proc import poll
from support.sim_proc import SimProc

BLOCKS = 64  # x 16 tokens: a 1,024-token pool


@pytest.fixture
def sim():
    s = SimProc("--speed", "50", "--enable-prompt-tokens-details", "--num-gpu-blocks-override", str(BLOCKS))
    yield s
    s.stop()


def prompt(tag: str) -> dict:
    return {"model": "ramjet-sim", "max_tokens": 4,
            "messages": [{"role": "user", "content": f"{tag} " + " ".join(f"{tag}{i}" for i in range(90))}]}


def starts(path) -> list:
    return [json.loads(l) for l in open(path) if '"event":"start"' in l]


@pytest.mark.parametrize("horizon", ["off", "auto"])
def test_a_prefix_past_the_engines_horizon_earns_nothing(ramjet_factory, sim, tmp_path, horizon):
    journal = tmp_path / "route.jsonl"
    rj = ramjet_factory([sim.url], env={"RJ_ROUTE_HORIZON": horizon, "RJ_ENGINE_SCRAPE_INTERVAL_MS": "100",
                                        "RJ_ROUTE_CHUNK_BYTES": "128", "RJ_ROUTE_JOURNAL": "true",
                                        "RJ_ROUTE_JOURNAL_FILE": str(journal)})
    first = rj.chat(prompt("alpha"))
    assert first.status == 200
    again = rj.chat(prompt("alpha"))
    warm = json.loads(again.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert warm > 64
    held = poll(lambda: starts(journal)[1:2], what="the second decision")[0]["candidates"][0]["overlap_blocks"]
    assert held > 0, "within the horizon: the whole prefix earns credit"
    # More new prompt than the pool holds: the sim evicts alpha's blocks.
    for tag in ("beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota"):
        assert rj.chat(prompt(tag)).status == 200
    third = rj.chat(prompt("alpha"))
    cached = json.loads(third.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached <= 32 < warm, "the engine recomputed it (all but the chat template's first blocks): evicted"
    overlap = poll(lambda: starts(journal)[10:11], what="the last decision")[0]["candidates"][0]["overlap_blocks"]
    if horizon == "auto":
        assert overlap == 0, "past the horizon: no credit for what the engine evicted"
        assert rj.metrics().val("ramjet_route_index_horizon", upstream="0") > 0
    else:
        assert overlap == held, "without a horizon the index still credits it"
