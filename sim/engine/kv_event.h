// The KV-cache events a simulated engine emits, as vLLM's block pool produces them
// (vllm-contracts.md §1.3). The engine fills them; sim/kv encodes and publishes them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace ramjet::sim {

// A block hash: the full 32-byte internal digest (sha256 over the chained block content).
// vLLM publishes either the low 64 bits (last 8 bytes read big-endian; default) or the raw bytes.
using Digest = std::array<uint8_t, 32>;
uint64_t external_u64(const Digest& d);

struct BlockStored {
  std::vector<Digest> block_hashes;          // newly full blocks, in order
  std::optional<Digest> parent_block_hash;   // nullopt when the first block is block 0
  std::vector<uint32_t> token_ids;           // block_size * block_hashes.size() tokens
  uint32_t block_size = 16;
  std::string medium = "GPU";
  uint32_t group_idx = 0;
  std::string kv_cache_spec_kind = "full_attention";
};

struct BlockRemoved {
  std::vector<Digest> block_hashes;
  std::string medium = "GPU";
  uint32_t group_idx = 0;
};

struct AllBlocksCleared {};

using KvEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

// Receives one batch per engine step, only when the step produced events (vLLM publishes
// nothing for empty steps). `ts` is wall-clock seconds (time.time()).
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual void publish(double ts, std::vector<KvEvent> events) = 0;
};

}  // namespace ramjet::sim
