"""Offload tiers end to end: ramjet-sim engines with a CPU offload tier (--cpu-offload-blocks, vLLM's
OffloadingConnector with the CPU spec) publish their CPU stores and evictions as KV events (medium
CPU, hashes only); ramjet's exact index keeps those copies per tier. A conversation whose prefix
one engine evicted from its GPU pool but keeps in CPU memory still goes back to that engine (its
CPU tokens weighted by RJ_KV_TIER_WEIGHT_CPU), the receipt says which tier holds the prediction,
and the engine's cached_tokens — which counts what its connector loaded — agrees with it. With the
CPU weight 0 the same engine is no better than a cold one: the placement is a rotation."""

from __future__ import annotations

import json

from support.ramjet_proc import poll
from support.sim_proc import SimProc
from test_kv_events import TOPIC, kv_config, local, through

BLOCK = 16
GPU_BLOCKS = 512                      # the sims' pool: 511 usable blocks
POOL_TOKENS = (GPU_BLOCKS - 1) * BLOCK


def tier_sim() -> SimProc:
    return SimProc("--speed", "50", "--kv-events-config", kv_config(), "--enable-prompt-tokens-details",
                   "--num-gpu-blocks-override", str(GPU_BLOCKS), "--cpu-offload-blocks", "4096")


def start(ramjet_factory, sims, **env):
    rj = ramjet_factory([s.url for s in sims], env={
        "RJ_KV_EVENT_LIVE_ENDPOINTS": ",".join(local(s.kv_endpoint) for s in sims),
        "RJ_KV_EVENT_REPLAY_ENDPOINTS": ",".join(local(s.kv_replay) for s in sims),
        "RJ_KV_EVENT_TOPIC": TOPIC,
        "RJ_AFFINITY": "prefix",
        "RJ_EXACT_ROUTE_MIN_BYTES": "2048",
        "RJ_PROBE_INTERVAL_MS": "200",
        **env,
    })
    rj.wait_health(lambda c, j: all(r.get("kv_trusted") for r in j["replicas"]), 10, "every engine's index trusted")
    return rj


def conversation(k: int, *turns: str) -> dict:
    """A ~6 KB agent prompt of its own (about 90 to 140 blocks), then the user turns."""
    system = f"Agent {k} manual. " + " ".join(f"rule {k}.{i}: keep invariant {i * 7 % 13}." for i in range(200))
    messages = [{"role": "system", "content": system}]
    for i, t in enumerate(turns):
        if i:
            messages.append({"role": "assistant", "content": "done"})
        messages.append({"role": "user", "content": t})
    return {"model": "ramjet-sim", "max_tokens": 1, "messages": messages}


def metric(rj, name: str, **labels) -> float:
    return rj.metrics().get(name, **labels) or 0


def warm_then_evict(rj, sim: SimProc, engine: int, k: int) -> int:
    """Conversation k's first turn straight to the engine (ramjet only hears its KV events), then a
    prompt of token ids that needs every block of the pool: the GPU evicts all it cached, the CPU
    tier keeps it. Returns the first turn's prompt tokens once ramjet's index shows both."""
    up = str(engine)
    before = metric(rj, "ramjet_kv_tier_blocks_total", upstream=up, tier="cpu", op="stored")
    r = sim.request("POST", "/v1/chat/completions", conversation(k, "first question"))
    assert r.status == 200, r.body
    prompt_tokens = json.loads(r.body)["usage"]["prompt_tokens"]
    assert prompt_tokens // BLOCK < GPU_BLOCKS // 2, prompt_tokens
    poll(lambda: metric(rj, "ramjet_kv_tier_blocks_total", upstream=up, tier="cpu", op="stored")
         >= before + prompt_tokens // BLOCK, timeout=10, what="the first turn's CPU copies in ramjet's index")
    evictor = [60000 + k] + [(k * 131 + i) % 50000 + 1 for i in range(POOL_TOKENS - 2)]
    r = sim.request("POST", "/v1/completions", {"model": "ramjet-sim", "prompt": evictor, "max_tokens": 1})
    assert r.status == 200, r.body
    # Only the evictor's full blocks stay on the GPU; everything else went (and ramjet saw it go).
    poll(lambda: metric(rj, "ramjet_kv_index_tier_resident_blocks", upstream=up, tier="gpu") == (POOL_TOKENS - 1) // BLOCK,
         timeout=10, what="the GPU evictions in ramjet's index")
    return prompt_tokens


def next_turns(rj, sims, first_k: int, n: int) -> list[tuple[str, str, int]]:
    """n conversations warmed on engine 1 and evicted from its GPU, then their next turns through
    ramjet: (engine placed on, receipt, engine's cached_tokens) each."""
    out = []
    for k in range(first_k, first_k + n):
        warm_then_evict(rj, sims[1], 1, k)
        r = through(rj, conversation(k, "first question", "second question"))
        cached = json.loads(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"]
        out.append((r.header("X-Ramjet-Upstream"), r.header("X-Ramjet-Route") or "", cached))
    return out


def receipt_fields(receipt: str) -> dict:
    parts = [p.strip() for p in receipt.split(";")]
    return {p.split("=", 1)[0]: p.split("=", 1)[1] for p in parts[1:] if "=" in p} | {"outcome": parts[0]}


def test_a_prefix_evicted_from_the_gpu_but_held_in_cpu_brings_its_next_turn_back(ramjet_factory):
    sims = [tier_sim(), tier_sim()]
    try:
        rj = start(ramjet_factory, sims)
        for upstream, receipt, cached in next_turns(rj, sims, 0, 3):
            assert upstream == "1", (upstream, receipt)
            f = receipt_fields(receipt)
            assert f["outcome"] == "exact", receipt
            predicted = int(f["predicted_cached_tokens"])
            # The whole prediction is in the CPU tier: the GPU kept none of it.
            assert f.get("tier_tokens") == f"gpu:0,cpu:{predicted},disk:0", receipt
            # The engine's cached_tokens counts what its connector loaded: it is the prediction.
            assert predicted > 50 * BLOCK and predicted - 2 * BLOCK <= cached <= predicted, (predicted, cached)
        m = rj.metrics()
        assert m.get("ramjet_exact_predictions_total", upstream="1", result="agree") >= 3
        assert m.sum("ramjet_exact_predictions_total", result="miss") == 0
        assert m.get("ramjet_kv_tier_blocks_total", upstream="1", tier="cpu", op="stored") > 0
        assert m.get("ramjet_kv_tier_blocks_total", upstream="1", tier="gpu", op="removed") > 0
        assert m.get("ramjet_kv_events_skipped_total", upstream="1", reason="unsupported_medium") == 0
    finally:
        for s in sims:
            s.stop()


def test_with_cpu_weight_zero_the_cpu_holder_is_no_better_than_a_cold_engine(ramjet_factory):
    sims = [tier_sim(), tier_sim()]
    try:
        rj = start(ramjet_factory, sims, RJ_KV_TIER_WEIGHT_CPU="0")
        results = next_turns(rj, sims, 100, 3)
        landed = [upstream for upstream, _, _ in results]
        # No affinity for CPU-held tokens: a tie, which the rotation breaks both ways.
        assert landed.count("1") < 3 and landed.count("0") >= 1, results
        for upstream, receipt, cached in results:
            if upstream == "1":  # the prediction still counts the CPU tokens, and still agrees
                predicted = int(receipt_fields(receipt)["predicted_cached_tokens"])
                assert predicted - 2 * BLOCK <= cached <= predicted, (receipt, cached)
    finally:
        for s in sims:
            s.stop()
