"""KV-event fidelity end to end: ramjet's exact index against the vLLM behaviours ramjet-sim models.

Each test warms one ramjet-sim engine behind ramjet's back (straight to the engine) and proves, with
the X-Ramjet-Route receipt and the engine's own usage.prompt_tokens_details.cached_tokens, what
ramjet's exact placement makes of the engine's KV events:
- duplicate physical copies of a block (two identical requests computed in the same step with
  --delay-cache-blocks, one BlockStored per copy): the block stays while one copy remains and
  leaves with the last one;
- a hybrid layout (--hybrid-mamba, Qwen3.8's 784-token blocks): the mamba group's events are
  skipped and counted, placement works on the full-attention group;
- LoRA adapters (--lora-modules) and cache_salt: a prompt cached under an adapter or a salt is
  found for requests in that namespace only.
"""

from __future__ import annotations

import json
import threading

import pytest

from support.ramjet_proc import http_request, poll
from support.sim_proc import SimProc
from test_kv_events import kv_config, resident_blocks, settle, start

BS = 16
ENV = {"RJ_EXACT_ROUTE_MIN_BYTES": "1024"}  # prompts of a few KB are placed exactly


def kv_sim(*extra: str) -> SimProc:
    return SimProc("--speed", "50", "--kv-events-config", kv_config(), "--enable-prompt-tokens-details", *extra)


@pytest.fixture
def made():
    sims: list[SimProc] = []
    yield sims
    for s in sims:
        s.stop()


def chat_body(k: int, turn: str = "first question", model: str = "ramjet-sim", words: int = 160, **extra) -> dict:
    system = f"Agent {k} manual. " + " ".join(f"rule {k}.{i}: keep invariant {i * 7 % 13}." for i in range(words))
    return {"model": model, "max_tokens": 1, **extra,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": turn}]}


def prompt_tokens(sim: SimProc, body: dict) -> int:
    r = sim.request("POST", "/tokenize", {"messages": body["messages"]})
    assert r.status == 200, r.body
    return json.loads(r.body)["count"]


def unaligned(sim: SimProc, k: int, block: int = BS, **kw) -> dict:
    """A body whose prompt does not end on a block boundary (so a repeat hits every full block)."""
    for i in range(64):
        body = chat_body(k, f"first question {'x' * i}", **kw)
        if prompt_tokens(sim, body) % block:
            return body
    raise AssertionError("no unaligned prompt")


def direct(sim: SimProc, body: dict):
    r = sim.request("POST", "/v1/chat/completions", body)
    assert r.status == 200, r.body
    return json.loads(r.body)


def through(rj, body: dict) -> tuple[str, int, int]:
    """(upstream, predicted_cached_tokens, engine cached_tokens) of one request through ramjet,
    placed once the KV batches of what came before were applied (as test_kv_events.through)."""
    settle(rj)
    r = http_request(rj.api_port, "POST", "/v1/chat/completions", json.dumps(body).encode(),
                     {"Content-Type": "application/json"}, timeout=30)
    assert r.status == 200, r.body
    receipt = r.header("X-Ramjet-Route") or ""
    fields = dict(f.strip().split("=", 1) for f in receipt.split(";")[1:] if "=" in f)
    assert receipt.split(";")[0] == "exact", receipt
    usage = json.loads(r.body)["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return r.header("X-Ramjet-Upstream"), int(fields["predicted_cached_tokens"]), cached


def counter(rj, name: str, engine: int, **labels) -> float:
    return rj.metrics().get(name, upstream=str(engine), **labels) or 0


def stored(rj, engine: int) -> float:
    return counter(rj, "ramjet_kv_blocks_applied_total", engine, op="stored")


def removed(rj, engine: int) -> float:
    return counter(rj, "ramjet_kv_blocks_applied_total", engine, op="removed")


def skipped(rj, engine: int, reason: str) -> float:
    return counter(rj, "ramjet_kv_events_skipped_total", engine, reason=reason)


def pressure(sim: SimProc, blocks: int, base: int) -> None:
    """A token-id prompt of exactly `blocks` full blocks (ids no text produces): it takes that many
    blocks from the head of the engine's free queue, evicting whatever cached block they hold."""
    body = {"model": "ramjet-sim", "max_tokens": 1, "prompt": [base + i for i in range(blocks * BS)]}
    r = sim.request("POST", "/v1/completions", body)
    assert r.status == 200, r.body


def stats(sim: SimProc) -> dict:
    return json.loads(sim.request("GET", "/sim/stats").body)


# ----------------------------------------------------------------------------- (a) copies
def test_a_block_stays_while_one_copy_remains_and_leaves_with_the_last(ramjet_factory, made):
    made += [kv_sim(), kv_sim("--delay-cache-blocks", "--num-gpu-blocks-override", "512"), kv_sim()]
    sim = made[1]
    rj = start(ramjet_factory, made, env=ENV)
    body = unaligned(sim, 1)
    n = prompt_tokens(sim, body) // BS

    # Two identical requests admitted in one step: neither finds the other's blocks cached, both
    # compute and cache every block: two BlockStored per hash.
    sim.admin("/sim/fault", {"pause": True})
    threads = [threading.Thread(target=direct, args=(sim, body)) for _ in range(2)]
    for t in threads:
        t.start()
    poll(lambda: stats(sim)["waiting"] == 2, timeout=5, what="both requests queued")
    sim.admin("/sim/fault", {"pause": False})
    for t in threads:
        t.join(30)
    poll(lambda: stored(rj, 1) == 2 * n, timeout=5, what="both copies applied")
    assert resident_blocks(rj, 1) == n, "two copies of n blocks are n blocks"
    st = stats(sim)
    assert st["cached_blocks"] == 2 * n and st["running"] == 0

    # Evict exactly the first request's copies. vLLM 0.32's free queue: the two partial blocks
    # (never cached, so reused first, the last freed at the head), the never-used blocks, the
    # first request's n blocks (its last block first), then the second request's.
    never_used = st["free_blocks"] - st["cached_blocks"] - 2
    k1 = 2 + never_used + n
    pressure(sim, k1, 300_000)
    poll(lambda: removed(rj, 1) == n, timeout=5, what="n copies removed")
    assert resident_blocks(rj, 1) == n + k1, "every block of the prompt still has a copy"
    assert skipped(rj, 1, "unknown_removal") == 0
    # The repeat hits the second copy (taken off the queue) and computes its partial block in the
    # queue's head: the pressure's last block, evicted.
    before = removed(rj, 1)
    upstream, predicted, cached = through(rj, body)
    assert upstream == "1" and predicted == n * BS and cached == n * BS, (upstream, predicted, cached)

    # Now the queue holds that partial block, the pressure's other k1 - 1 blocks, then the
    # remaining copies from the last block down: evict the last j of them and those blocks leave
    # ramjet's index.
    j = n // 2
    pressure(sim, k1 + j, 400_000)
    poll(lambda: removed(rj, 1) == before + k1 + j, timeout=5, what="the last copies removed")
    assert skipped(rj, 1, "unknown_removal") == 0
    upstream, predicted, cached = through(rj, body)
    assert upstream == "1" and predicted == (n - j) * BS and cached == (n - j) * BS, (upstream, predicted, cached)


# ----------------------------------------------------------------------------- (b) hybrid
def test_a_hybrid_engines_mamba_events_are_skipped_and_placement_uses_full_attention(ramjet_factory, made):
    block = 784  # Qwen3.8's attention block
    made += [kv_sim("--hybrid-mamba", "--block-size", str(block), "--num-gpu-blocks-override", "17") for _ in range(3)]
    rj = start(ramjet_factory, made, env=ENV)
    body = unaligned(made[2], 2, block=block, words=350)
    p = prompt_tokens(made[2], body)
    assert p > 2 * block
    direct(made[2], body)
    poll(lambda: stored(rj, 2) >= p // block, timeout=5, what="the full-attention blocks applied")
    assert stored(rj, 2) == p // block, "only group 0's blocks enter the index"
    assert skipped(rj, 2, "non_main_attention") >= 1, "the mamba group's states are skipped"
    for reason in ("shape", "unknown_group", "unknown_kind", "block_size_mismatch", "orphaned_parent"):
        assert skipped(rj, 2, reason) == 0, reason
    upstream, predicted, cached = through(rj, body)
    assert upstream == "2" and predicted == p // block * block, (upstream, predicted)
    assert cached == predicted, "the engine's hit ends at its last cached state, the prompt's last boundary"
    # Evicting the prompt's blocks: group 0's removals apply, the mamba group's are skipped.
    before = skipped(rj, 2, "non_main_attention")
    pressure_body = {"model": "ramjet-sim", "max_tokens": 1, "prompt": [300_000 + t for t in range(12 * block)]}
    assert made[2].request("POST", "/v1/completions", pressure_body).status == 200
    poll(lambda: removed(rj, 2) >= p // block and skipped(rj, 2, "non_main_attention") > before, timeout=5,
         what="both groups' removals seen")
    assert skipped(rj, 2, "unknown_removal") == 0


# ----------------------------------------------------------------------------- (c) LoRA
def lora_sims() -> list[SimProc]:
    return [kv_sim("--lora-modules", "sql-lora=/adapters/sql", "chat-lora=/adapters/chat") for _ in range(3)]


def test_a_prompt_cached_under_an_adapter_is_found_for_that_adapter_only(ramjet_factory, made):
    made += lora_sims()
    models = json.loads(made[0].request("GET", "/v1/models").body)["data"]
    assert [m["id"] for m in models] == ["ramjet-sim", "sql-lora", "chat-lora"]
    assert models[1]["parent"] == "ramjet-sim" and models[1]["root"] == "/adapters/sql"
    rj = start(ramjet_factory, made, env=ENV)
    body = unaligned(made[1], 3, model="sql-lora")
    n = prompt_tokens(made[1], body) // BS
    answer = direct(made[1], body)
    assert answer["model"] == "sql-lora"
    poll(lambda: stored(rj, 1) >= n, timeout=5, what="the adapter's blocks applied")
    assert skipped(rj, 1, "extra_keys") == 0

    # The adapter: placed on the engine that holds it, and the engine confirms.
    upstream, predicted, cached = through(rj, body)
    assert upstream == "1" and predicted == n * BS and cached == n * BS, (upstream, predicted, cached)
    # The base model: the adapter's blocks are not its cache, on any engine.
    upstream, predicted, cached = through(rj, {**body, "model": "ramjet-sim"})
    assert predicted == 0 and cached == 0, (upstream, predicted, cached)
    assert rj.metrics().sum("ramjet_exact_predictions_total", result="miss") == 0


def test_an_adapter_request_is_not_matched_against_base_model_blocks(ramjet_factory, made):
    made += lora_sims()
    rj = start(ramjet_factory, made, env=ENV)
    base = unaligned(made[2], 4)
    n = prompt_tokens(made[2], base) // BS
    direct(made[2], base)  # the base model's blocks on engine 2; no engine ever cached sql-lora
    poll(lambda: stored(rj, 2) >= n, timeout=5, what="the base model's blocks applied")
    # The engines' model lists (GET /v1/models) say sql-lora is an adapter: its own namespace on
    # every engine, although no engine's events ever named it.
    poll(lambda: rj.metrics().get("ramjet_catalog_adapters", upstream="2") == 2, timeout=5,
         what="engine 2's adapters listed")
    upstream, predicted, cached = through(rj, {**base, "model": "sql-lora"})
    # vLLM hashes the adapter's name into every block: engine 2 holds nothing of this request.
    assert cached == 0, "the engine's own report"
    assert predicted == 0, (upstream, predicted)


# ----------------------------------------------------------------------------- (d) cache_salt
def test_a_salted_prompt_is_found_for_its_salt_only(ramjet_factory, made):
    made += [kv_sim() for _ in range(3)]
    rj = start(ramjet_factory, made, env=ENV)
    body = unaligned(made[1], 5, cache_salt="tenant-a")
    n = prompt_tokens(made[1], body) // BS
    direct(made[1], body)
    poll(lambda: stored(rj, 1) >= n, timeout=5, what="the salted blocks applied")
    assert skipped(rj, 1, "extra_keys") == 0

    unsalted = {k: v for k, v in body.items() if k != "cache_salt"}
    for other in (unsalted, {**body, "cache_salt": "tenant-b"}):
        upstream, predicted, cached = through(rj, other)
        assert predicted == 0 and cached == 0, (other.get("cache_salt"), upstream, predicted, cached)
    upstream, predicted, cached = through(rj, body)
    assert upstream == "1" and predicted == n * BS and cached == n * BS, (upstream, predicted, cached)
    # vLLM refuses an empty salt.
    r = made[0].request("POST", "/v1/chat/completions", {**body, "cache_salt": ""})
    assert r.status == 400 and "cache_salt" in json.loads(r.body)["error"]["message"]
