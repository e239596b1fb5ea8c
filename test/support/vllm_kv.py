"""vLLM's KV-event classes as the Python test oracles model them (vllm/distributed/kv_events.py):
each event type's fields in declaration order with their defaults (REQUIRED: no default, always
encoded). msgspec's map layout writes "type" then the fields that differ from their default;
array_like writes the tag then every field. Shared by sim/kv/test_kv_conformance.py (the sim's
encoder) and src/cache/kv/test_kv_decode.py (ramjet's decoder)."""

REQUIRED = object()

FIELDS = {
    "BlockStored": [
        ("block_hashes", REQUIRED), ("parent_block_hash", REQUIRED), ("token_ids", REQUIRED),
        ("block_size", REQUIRED), ("lora_id", REQUIRED), ("medium", REQUIRED),
        ("lora_name", REQUIRED), ("extra_keys", None), ("group_idx", None),
        ("kv_cache_spec_kind", None), ("kv_cache_spec_sliding_window", None),
        ("locality", None), ("ownership", None),
    ],
    "BlockRemoved": [
        ("block_hashes", REQUIRED), ("medium", REQUIRED), ("group_idx", None),
        ("locality", None), ("ownership", None),
    ],
    "AllBlocksCleared": [],
}
