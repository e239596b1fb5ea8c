// sim/engine prefix hash: what vLLM adds to a block's hash beyond its tokens, for the namespaces
// the simulator serves (vllm/v1/core/kv_cache_utils.py, generate_block_hash_extra_keys and
// hash_block_tokens). A request's namespace is its LoRA adapter (every block's extra keys start
// with the adapter's name) and its cache_salt (only the block that starts at token 0). The
// extra keys of a block are the tuple (lora_name?, cache_salt?) or None when empty; the hash is
// hash_fn((parent, tuple(tokens), extra_keys)), so with sha256_cbor the CBOR input is
// [bstr parent, [uint...], null | [tstr...]]. KV events carry the same tuple, MessagePack-encoded
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
  std::string lora_name;   // the adapter's name (the request's `model`), or ""
  int64_t lora_id = 0;     // vLLM's lora_int_id (1, 2, ... in --lora-modules order); 0 = none
  std::string cache_salt;  // the request's cache_salt, or ""
  bool lora() const { return !lora_name.empty(); }
  bool empty() const { return lora_name.empty() && cache_salt.empty(); }
  friend bool operator==(const CacheNamespace&, const CacheNamespace&) = default;
};

// The extra-key strings of block `block_index` (generate_block_hash_extra_keys for a text-only
// request): the LoRA name, then the cache_salt on block 0. Empty = None.
std::vector<std::string> block_extra_keys(const CacheNamespace& ns, uint64_t block_index);

// The MessagePack encoding of that tuple (what a BlockStored's extra_keys entry holds), nullopt
// for None.
std::optional<std::string> extra_keys_msgpack(const CacheNamespace& ns, uint64_t block_index);

// hash_block_tokens with extra keys: hash_fn(cbor([bstr parent, [uint tokens...], extra])),
// extra = null when `extra` is empty, else an array of text strings. With no extra keys this is
// BlockHasher::hash_block.
cache::kv::BlockHash hash_block_with_keys(cache::kv::BlockHasher& hasher, const cache::kv::BlockHash& parent,
                                          std::span<const uint32_t> tokens, std::span<const std::string> extra,
                                          std::vector<uint8_t>& scratch);

}  // namespace ramjet::sim
