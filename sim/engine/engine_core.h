// sim/engine core: the scheduler of one simulated vLLM v1 engine (vllm/v1/core/sched/scheduler.py
// and kv_cache_manager.py, restated): requests, the waiting and running queues, the per-step
// token budget with chunked prefill, block allocation with prefix-cache hits, preemption by
// recompute, speculative decoding, and the step's KV events. Engine (engine.h) is a thin
// wrapper; tests use this class directly to reach the block pool. Single-threaded.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "cache/kv/block_hash.h"
#include "sim/engine/block_pool.h"
#include "sim/engine/cpu_tier.h"
#include "sim/engine/engine.h"
#include "sim/engine/timing.h"

namespace ramjet::sim {

class EngineCore {
 public:
  EngineCore(EngineConfig config, KvEventSink* sink);

  bool add_request(uint64_t id, std::vector<uint32_t> prompt, uint32_t max_tokens, CacheNamespace ns = {},
                   KvTransfer kv = KvTransfer::kNone);
  void abort(uint64_t id);
  std::optional<RequestOutput> finish_kv_load(uint64_t id, bool ok);
  bool release_held(uint64_t id);
  bool idle() const { return waiting_.empty() && running_.empty(); }
  StepResult step(double now_wall_s);
  bool reset_prefix_cache(double now_wall_s);
  std::vector<RequestOutput> sleep(double now_wall_s);
  uint32_t resident_prefix_tokens(std::span<const uint32_t> tokens, const CacheNamespace& ns = {});
  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }

  const BlockPool& pool() const { return pool_; }
  const CpuTier* cpu_tier() const { return cpu_.get(); }  // null without --cpu-offload-blocks
  // Longest prompt + output a request may ask for: max_model_len, bounded by the pool.
  uint32_t max_request_tokens() const;

  static constexpr uint32_t kMambaGroup = 1;  // the mamba group of a hybrid layout

 private:
  struct Request {
    uint64_t id = 0;
    std::vector<uint32_t> tokens;   // prompt, then generated tokens
    uint32_t prompt_len = 0;
    uint32_t max_tokens = 0;
    uint32_t num_output = 0;
    uint32_t num_computed = 0;      // tokens whose KV is computed
    std::vector<uint32_t> blocks;   // physical blocks, in logical order
    std::vector<BlockHash> hashes;     // chained hashes of the full blocks of `tokens` (lazy)
    uint32_t num_cached_blocks = 0; // leading blocks registered in the prefix cache
    CacheNamespace ns;              // LoRA adapter and cache_salt: the blocks' extra keys
    // Hybrid layout: the mamba group's blocks (0 = the null block: a state not kept), and how
    // many leading ones were offered to the prefix cache.
    std::vector<uint32_t> mamba_blocks;
    uint32_t mamba_num_cached = 0;
    uint32_t cache_upto = 0;        // --delay-cache-blocks: full blocks to cache after scheduling
    int64_t cached_tokens = -1;     // prefix hit at first scheduling (GPU + CPU tier)
    uint32_t cpu_next = 0;          // the next full block to offer the CPU tier
    uint32_t loaded = 0;            // per-step scratch: tokens loaded from the CPU tier
    int64_t created_cache_tokens = -1;  // num_cache_creation_tokens, fixed at the first output
    uint32_t preemptions = 0;
    KvTransfer kv = KvTransfer::kNone;  // cleared once a remote prefill's pull ended
    bool loading = false;           // waiting for its pull (in loading_)
    bool pulled = false;            // its pull is done: to be cached and resumed by schedule()
    uint32_t kv_hit = 0;            // remote prefill: local hit + pulled tokens
    bool held = false;              // finished remote decode: blocks kept for the pull
    bool running = false;
    bool decoding = false;          // sampled since it last (re)started: decodes, with drafts
    bool prefill_reported = false;
    // Per-step scratch.
    uint32_t scheduled = 0;
    uint32_t scheduled_drafts = 0;
    bool scheduled_prefill = false;
  };

  void ensure_hashes(Request& r, uint32_t num_blocks);
  // Prefix-cache hit for a request with no computed tokens: fills hit_blocks_ (and, hybrid,
  // mamba_hit_). vLLM's coordinator: the full-attention hit, cut back to the last block whose
  // mamba state is cached as well.
  uint32_t find_cached_prefix(Request& r);
  // vLLM's _mamba_block_aligned_split: a prefill chunk of a hybrid layout ends on a block
  // boundary, or at the prompt's last block boundary, so the state there gets cached.
  uint32_t mamba_aligned(const Request& r, uint64_t num_computed, uint32_t num_new) const;
  // Caches r's newly full blocks up to num_full in every group (one BlockStored per group).
  void cache_blocks(Request& r, uint32_t num_full);
  // vLLM's allocate_slots: slots for num_new tokens (+ lookahead) after the hit `computed`, and
  // the newly full blocks cached. `whole_sequence`: also require room for the whole sequence
  // (full_sequence_must_fit, the admission gate of a waiting request). False = no room.
  // `cache_now` false: the blocks are not cached yet (an asynchronous load's delay_cache_blocks).
  bool allocate_slots(Request& r, uint32_t num_new, std::span<const uint32_t> computed,
                      uint32_t lookahead, bool whole_sequence = false, bool cache_now = true);
  void preempt(Request& r);
  // A remote prefill's admission: allocate its prompt's blocks, park it in loading_ (false: no
  // room, it stays at the head of the queue).
  bool admit_remote_prefill(Request& r, uint32_t hit);
  // A pulled request resumes: its blocks enter the cache, only its last prompt token is left.
  void resume_loaded(Request& r);
  void schedule();
  void free_request_blocks(Request& r);
  // The CPU tier's part of a hit: tokens after the GPU hit `hit` it holds (the connector's
  // get_num_new_matched_tokens), at most up to the prompt's last full block before its last token.
  uint32_t find_offloaded(Request& r, uint32_t hit);
  // Offers the blocks the step computes to the CPU tier (its stores and evictions go in events_).
  void offload_computed();
  // KVCacheManager.estimate_cached_tokens: the tokens covered by r's cached blocks (the furthest
  // block that carries a hash, per group; the smallest over the groups).
  uint32_t estimate_cached_tokens(const Request& r) const;

  EngineConfig config_;
  KvEventSink* sink_;
  cache::kv::BlockHasher hasher_;  // vLLM sha256_cbor
  BlockPool pool_;
  std::unique_ptr<CpuTier> cpu_;
  Rng rng_;
  boost::unordered_flat_map<uint64_t, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  std::vector<uint64_t> pending_aborts_;
  std::vector<Request*> loading_;       // remote prefills waiting for their pull
  std::vector<KvLoad> kv_loads_;        // this step's admitted pulls
  uint32_t held_ = 0;                   // finished remote decodes holding blocks
  // Per-step scratch, reused.
  std::vector<Request*> scheduled_;
  std::vector<uint32_t> hit_blocks_;
  int64_t mamba_hit_ = -1;            // the hit's mamba state block (hybrid), or -1
  bool mamba_hit_this_step_ = false;  // ...cached by another request in this very step
  std::vector<GroupHash> mamba_cached_this_step_;  // MambaManager.cached_blocks_this_step
  std::vector<uint8_t> hash_buf_;
  std::vector<KvEvent> events_;
  bool preempted_this_step_ = false;
  EngineStats stats_;
};

}  // namespace ramjet::sim
