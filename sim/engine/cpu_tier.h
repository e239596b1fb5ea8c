// sim/engine cpu tier: vLLM's CPU KV offloading — the OffloadingConnector with the CPU spec and
// its LRUOffloadingManager (vllm/v1/kv_offload/, vllm/distributed/kv_transfer/kv_connector/v1/
// offloading/scheduler.py), restated for one engine with an offloaded block of one GPU block (the
// CPU spec's default block_size). What it owns: which block hashes the CPU tier holds, their LRU
// order, and the KV events its stores and evictions cause. When blocks are offered and loaded is
// the scheduler's (engine_core.cc); what a load costs, the timing model's.
//
// Choices copied from vLLM:
// - stores follow computation, not GPU eviction: every step, each scheduled request's newly
//   computed full blocks are offered (OffloadingConnectorScheduler._get_reqs_to_store); blocks
//   already held are only touched (prepare_store filters them);
// - room is made by evicting the least recently used blocks (one BlockRemoved with their hashes);
//   when the new blocks do not fit at all the store is skipped (prepare_store returns None);
// - a lookup is the contiguous run of held blocks from a start block, and touches them;
// - the events are the connector's default (no self-describing events): a BlockStored with the
//   hashes only — no parent, token_ids [], block_size 0, medium "CPU", group_idx 0 — and a
//   BlockRemoved with the hashes and medium "CPU" (offloading/events.py _placeholder_stored,
//   _take_removed_event). vLLM publishes the store when the transfer completes, a step or more
//   later; here it goes out in the step that computed the blocks, after their GPU BlockStored.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "sim/engine/block_pool.h"
#include "sim/engine/kv_sink.h"

namespace ramjet::sim {

class CpuTier {
 public:
  explicit CpuTier(uint32_t capacity_blocks) : capacity_(capacity_blocks) {}

  uint32_t capacity() const { return capacity_; }
  uint32_t size() const { return static_cast<uint32_t>(lru_.size()); }
  bool holds(const BlockHash& h) const { return where_.contains(h); }

  // The leading hashes the tier holds (a contiguous run), each touched (most recently used).
  uint32_t lookup(std::span<const BlockHash> hashes);
  // Offers computed blocks: held ones are touched, the others stored, evicting the least recently
  // used blocks first; appends the events (a BlockRemoved for the evicted, a BlockStored for the
  // stored). Nothing is stored when the new blocks exceed the whole tier.
  void store(std::span<const BlockHash> hashes, std::vector<KvEvent>& events);

  // "" when the LRU list and the map agree and the size is within capacity; for tests.
  std::string check_invariants() const;

 private:
  uint32_t capacity_;
  std::list<BlockHash> lru_;  // front: least recently used
  boost::unordered_flat_map<BlockHash, std::list<BlockHash>::iterator, DigestHash> where_;
  std::vector<BlockHash> fresh_;  // store()'s scratch
};

}  // namespace ramjet::sim
