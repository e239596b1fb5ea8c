// sim/engine prefix hash: what vLLM adds to a block's hash beyond its tokens, for the namespaces
// the simulator serves (vllm/v1/core/kv_cache_utils.py 0.32: generate_block_hash_extra_keys,
// hash_block_tokens, to_event_extra_keys). A request's namespace is its LoRA adapter (every
// block) and its cache_salt (only the block that starts at token 0). The hash sees TAGGED keys:
// the tuple (("lora", name, path)?, ("cache_salt", salt)?) or None when empty, so with
// sha256_cbor the CBOR input is [bstr parent, [uint...], null | [[tstr...]...]]. KV events
// carry the untagged keys (to_event_extra_keys: the adapter's name, the salt), MessagePack-encoded
// (msgspec: an array of str), once per reported block.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/kv/block_hash.h"

namespace ramjet::sim {

// The namespace a request's blocks are cached in. Empty strings mean "none".
struct CacheNamespace {
  std::string lora_name{};   // the adapter's name (the request's `model`), or ""
  int64_t lora_id = 0;       // vLLM's lora_int_id (1, 2, ... in --lora-modules order); 0 = none
  std::string cache_salt{};  // the request's cache_salt, or ""
  std::string lora_path{};   // the adapter's path (--lora-modules): part of its hash key, not of events
  bool lora() const { return !lora_name.empty(); }
  bool empty() const { return lora_name.empty() && cache_salt.empty(); }
  friend bool operator==(const CacheNamespace&, const CacheNamespace&) = default;
};

// The extra keys of block `block_index` as KV events publish them (to_event_extra_keys of
// generate_block_hash_extra_keys for a text-only request): the LoRA name, then the cache_salt on
// block 0. Empty = None.
std::vector<std::string> block_extra_keys(const CacheNamespace& ns, uint64_t block_index);

// The MessagePack encoding of that tuple (what a BlockStored's extra_keys entry holds), nullopt
// for None.
std::optional<std::string> extra_keys_msgpack(const CacheNamespace& ns, uint64_t block_index);

// hash_block_tokens of block `block_index` in namespace `ns`: hash_fn(cbor([bstr parent,
// [uint tokens...], extra])), extra = null without keys, else the tagged keys
// [["lora", name, path]?, ["cache_salt", salt]?]. Without keys this is BlockHasher::hash_block.
cache::kv::BlockHash hash_block_in(cache::kv::BlockHasher& hasher, const cache::kv::BlockHash& parent,
                                   std::span<const uint32_t> tokens, const CacheNamespace& ns,
                                   uint64_t block_index, std::vector<uint8_t>& scratch);

}  // namespace ramjet::sim
