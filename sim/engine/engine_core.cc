#include "sim/engine/engine_core.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "sim/engine/filler.h"

namespace ramjet::sim {

namespace {

EngineConfig sanitized(EngineConfig c) {
  // The server validates flags; these floors only keep a bad config from wedging the loop.
  c.block_size = std::max<uint32_t>(c.block_size, 1);
  c.num_gpu_blocks = std::max<uint32_t>(c.num_gpu_blocks, 2);
  c.max_num_seqs = std::max<uint32_t>(c.max_num_seqs, 1);
  c.max_num_batched_tokens = std::max<uint32_t>(c.max_num_batched_tokens, 1);
  c.max_model_len = std::max<uint32_t>(c.max_model_len, 2);
  return c;
}

}  // namespace

EngineCore::EngineCore(EngineConfig config, KvEventSink* sink)
    : config_(sanitized(std::move(config))),
      sink_(sink),
      hasher_(cache::kv::HashAlgo::kSha256Cbor, config_.hash_seed),
      pool_(config_.num_gpu_blocks, config_.block_size, config_.enable_prefix_caching),
      rng_(config_.random_seed) {
  if (config_.cpu_offload_blocks > 0 && config_.enable_prefix_caching && !config_.hybrid_mamba) {
    cpu_ = std::make_unique<CpuTier>(config_.cpu_offload_blocks);
  }
  stats_.spec_accepted_per_pos.assign(config_.timing.speculative_tokens, 0);
  scheduled_.reserve(config_.max_num_seqs);
}

uint32_t EngineCore::max_request_tokens() const {
  const uint64_t pool_tokens = static_cast<uint64_t>(pool_.usable_blocks()) * config_.block_size;
  return static_cast<uint32_t>(std::min<uint64_t>(config_.max_model_len, pool_tokens));
}

bool EngineCore::add_request(uint64_t id, std::vector<uint32_t> prompt, uint32_t max_tokens, CacheNamespace ns,
                             KvTransfer kv) {
  if (prompt.empty() || max_tokens == 0) return false;
  if (prompt.size() + static_cast<uint64_t>(max_tokens) > max_request_tokens()) return false;
  if (requests_.contains(id)) return false;
  auto r = std::make_unique<Request>();
  r->id = id;
  r->prompt_len = static_cast<uint32_t>(prompt.size());
  r->max_tokens = max_tokens;
  r->ns = std::move(ns);
  r->kv = kv;
  r->tokens = std::move(prompt);
  r->tokens.reserve(r->prompt_len + std::min<uint32_t>(max_tokens, 4096));
  r->hashes.reserve(r->tokens.capacity() / config_.block_size);
  waiting_.push_back(r.get());
  requests_.emplace(id, std::move(r));
  return true;
}

void EngineCore::free_request_blocks(Request& r) {
  // KVCacheCoordinator.free: every group in order, each in reverse.
  pool_.free_reversed(r.blocks);
  r.blocks.clear();
  r.num_cached_blocks = 0;
  pool_.free_reversed(r.mamba_blocks);
  r.mamba_blocks.clear();
  r.mamba_num_cached = 0;
  r.cache_upto = 0;
}

uint32_t EngineCore::estimate_cached_tokens(const Request& r) const {
  // The leading r.num_cached_blocks blocks carry hashes (prefix hits, then the ones r cached).
  uint64_t tokens = static_cast<uint64_t>(r.num_cached_blocks) * config_.block_size;
  if (config_.hybrid_mamba) {
    // The mamba group holds only its last states: the furthest cached one bounds the estimate.
    uint64_t mamba = 0;
    for (uint32_t i = std::min<uint32_t>(r.mamba_num_cached, static_cast<uint32_t>(r.mamba_blocks.size())); i-- > 0;) {
      if (r.mamba_blocks[i] != 0) {
        mamba = static_cast<uint64_t>(i + 1) * config_.block_size;
        break;
      }
    }
    tokens = std::min(tokens, mamba);
  }
  return static_cast<uint32_t>(tokens);
}

void EngineCore::abort(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request* r = it->second.get();
  if (r->held) {  // finished already (reported then): only its blocks remain
    release_held(id);
    return;
  }
  if (r->running) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else if (r->loading) {
    loading_.erase(std::find(loading_.begin(), loading_.end(), r));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  }
  free_request_blocks(*r);  // (a waiting request holds blocks only once pulled)
  pending_aborts_.push_back(id);
  requests_.erase(it);
}

void EngineCore::ensure_hashes(Request& r, uint32_t num_blocks) {
  const uint32_t bs = config_.block_size;
  assert(static_cast<uint64_t>(num_blocks) * bs <= r.tokens.size());
  while (r.hashes.size() < num_blocks) {
    const size_t i = r.hashes.size();
    const BlockHash& parent = i == 0 ? hasher_.none_hash() : r.hashes[i - 1];
    r.hashes.push_back(
        hash_block_in(hasher_, parent, std::span<const uint32_t>(r.tokens.data() + i * bs, bs), r.ns, i, hash_buf_));
  }
}

uint32_t EngineCore::find_cached_prefix(Request& r) {
  hit_blocks_.clear();
  mamba_hit_ = -1;
  mamba_hit_this_step_ = false;
  if (!pool_.caching()) return 0;
  // At least one token must be computed to get logits: a fully cached prompt recomputes its
  // last block (kv_cache_manager.get_computed_blocks, max_cache_hit_length = num_tokens - 1).
  const auto max_blocks = static_cast<uint32_t>((r.tokens.size() - 1) / config_.block_size);
  for (uint32_t i = 0; i < max_blocks; ++i) {
    ensure_hashes(r, i + 1);
    const int64_t b = pool_.cached_block(r.hashes[i]);
    if (b < 0) break;
    hit_blocks_.push_back(static_cast<uint32_t>(b));
  }
  if (config_.hybrid_mamba) {
    // MambaManager.find_longest_cache_hit within the full-attention hit: the last block whose
    // state is cached (right to left); the hit is cut back to it, or to nothing.
    size_t n = hit_blocks_.size();
    while (n > 0 && pool_.cached_block(r.hashes[n - 1], kMambaGroup) < 0) --n;
    hit_blocks_.resize(n);
    if (n > 0) {
      const GroupHash key{r.hashes[n - 1], kMambaGroup};
      mamba_hit_ = pool_.cached_block(key.hash, kMambaGroup);
      mamba_hit_this_step_ = std::find(mamba_cached_this_step_.begin(), mamba_cached_this_step_.end(), key) !=
                             mamba_cached_this_step_.end();
    }
  }
  return static_cast<uint32_t>(hit_blocks_.size()) * config_.block_size;
}

uint32_t EngineCore::find_offloaded(Request& r, uint32_t hit) {
  if (!cpu_) return 0;
  // vLLM's connector looks up from the first block after the GPU hit. Its cap here is the GPU
  // lookup's (a prompt keeps its last token to compute); vLLM lets the connector load a whole
  // prompt and then recomputes the last token (one token, not a block, below the count here).
  const auto max_blocks = static_cast<uint32_t>((r.tokens.size() - 1) / config_.block_size);
  const uint32_t from = hit / config_.block_size;
  if (from >= max_blocks) return 0;
  ensure_hashes(r, max_blocks);
  return cpu_->lookup(std::span<const BlockHash>(r.hashes).subspan(from, max_blocks - from)) * config_.block_size;
}

void EngineCore::offload_computed() {
  if (!cpu_) return;
  for (Request* r : scheduled_) {
    // The tokens this step computes (not its draft tokens), in full blocks.
    const uint64_t done = std::min<uint64_t>(r->num_computed + r->scheduled - r->scheduled_drafts, r->tokens.size());
    const auto num_full = static_cast<uint32_t>(done / config_.block_size);
    if (num_full <= r->cpu_next) continue;
    ensure_hashes(*r, num_full);
    cpu_->store(std::span<const BlockHash>(r->hashes).subspan(r->cpu_next, num_full - r->cpu_next), events_);
    r->cpu_next = num_full;
  }
}

uint32_t EngineCore::mamba_aligned(const Request& r, uint64_t num_computed, uint32_t num_new) const {
  if (!config_.hybrid_mamba || !pool_.caching()) return num_new;
  const uint64_t bs = config_.block_size;
  const uint64_t n = r.tokens.size();
  // Prefill only (a resumed request replays its output too); decoding is left alone.
  if (num_computed >= std::max<uint64_t>(r.prompt_len, n - 1)) return num_new;
  const uint64_t last_cache_position = n - n % bs;
  const uint64_t after = num_computed + num_new;
  if (after < last_cache_position) return static_cast<uint32_t>(num_new / bs * bs);  // align to blocks
  if (num_computed < last_cache_position && last_cache_position < after) {
    return static_cast<uint32_t>(last_cache_position - num_computed);  // stop at the last boundary
  }
  return num_new;  // prefill the last few tokens
}

void EngineCore::cache_blocks(Request& r, uint32_t num_full) {
  if (num_full <= r.num_cached_blocks && (!config_.hybrid_mamba || num_full <= r.mamba_num_cached)) return;
  ensure_hashes(r, num_full);
  // KVCacheCoordinator.cache_blocks: each group's manager in order; one BlockStored per group.
  if (num_full > r.num_cached_blocks) {
    pool_.cache_full_blocks(r.blocks, r.hashes, r.num_cached_blocks, num_full, r.tokens, StoreInfo{0, "full_attention", &r.ns},
                            events_);
    r.num_cached_blocks = num_full;
  }
  if (config_.hybrid_mamba && num_full > r.mamba_num_cached) {
    const uint32_t from = r.mamba_num_cached;
    pool_.cache_full_blocks(r.mamba_blocks, r.hashes, from, num_full, r.tokens, StoreInfo{kMambaGroup, "mamba", &r.ns},
                            events_);
    for (uint32_t i = from; i < num_full; ++i) {
      if (r.mamba_blocks[i] != 0) mamba_cached_this_step_.push_back(GroupHash{r.hashes[i], kMambaGroup});
    }
    r.mamba_num_cached = num_full;
  }
}

bool EngineCore::allocate_slots(Request& r, uint32_t num_new, std::span<const uint32_t> computed,
                                uint32_t lookahead, bool whole_sequence, bool cache_now) {
  const uint32_t bs = config_.block_size;
  const uint64_t num_computed = r.num_computed + static_cast<uint64_t>(computed.size()) * bs;
  const uint64_t need =
      std::min<uint64_t>(num_computed + num_new + lookahead, max_request_tokens());
  const uint64_t required = (need + bs - 1) / bs;
  const uint64_t have = r.blocks.size() + computed.size();
  const uint64_t new_blocks = required > have ? required - have : 0;
  // A hit on a free (evictable) cached block takes it off the free queue too.
  uint64_t evictable = 0;
  for (uint32_t b : computed) evictable += pool_.ref_count(b) == 0 ? 1 : 0;

  // The mamba group ("align" mode): no lookahead; one state block per new block boundary.
  uint64_t mamba_new = 0;
  const bool mamba_hit = !computed.empty() && mamba_hit_ >= 0;
  if (config_.hybrid_mamba) {
    // Mamba can't rely on a state another request cached in this very step: not this step.
    if (mamba_hit && mamba_hit_this_step_) return false;
    // remove_skipped_blocks: only the state of the last computed token is needed; the blocks
    // before the one holding it are freed (they stay cached until evicted).
    if (num_computed > 0) {
      const uint64_t skipped = (num_computed - 1) / bs;
      for (uint64_t i = std::min<uint64_t>(skipped, r.mamba_blocks.size()); i-- > 0;) {
        if (r.mamba_blocks[i] == 0) break;
        pool_.free_reversed(std::span<const uint32_t>(&r.mamba_blocks[i], 1));
        r.mamba_blocks[i] = 0;
      }
    }
    const uint64_t m_required = (std::min<uint64_t>(num_computed + num_new, max_request_tokens()) + bs - 1) / bs;
    const uint64_t m_have = mamba_hit ? computed.size() : r.mamba_blocks.size();
    mamba_new = m_required > m_have ? 1 : 0;
    if (mamba_hit && pool_.ref_count(static_cast<uint32_t>(mamba_hit_)) == 0) ++evictable;
  }
  if (new_blocks + mamba_new + evictable > pool_.num_free()) return false;
  if (whole_sequence) {
    // vLLM 0.32's admission gate (scheduler_reserve_full_isl, on by default): a waiting request
    // starts only when the pool could hold its whole sequence now, not just this chunk, so a
    // long prompt does not start prefilling into a pool it would have to preempt others for.
    const uint64_t full = (std::min<uint64_t>(r.tokens.size(), max_request_tokens()) + bs - 1) / bs;
    const uint64_t full_new = full > have ? full - have : 0;
    if (full_new + mamba_new + evictable > pool_.num_free()) return false;
  }

  if (!computed.empty()) {
    pool_.touch(computed);
    r.blocks.insert(r.blocks.end(), computed.begin(), computed.end());
    r.num_cached_blocks = static_cast<uint32_t>(r.blocks.size());
    if (mamba_hit) {
      const auto hit = static_cast<uint32_t>(mamba_hit_);
      pool_.touch(std::span<const uint32_t>(&hit, 1));
      r.mamba_blocks.assign(computed.size() - 1, 0);  // null blocks before the hit state
      r.mamba_blocks.push_back(hit);
      r.mamba_num_cached = static_cast<uint32_t>(r.mamba_blocks.size());
    }
  }
  pool_.get_new_blocks(static_cast<uint32_t>(new_blocks), r.blocks, events_);
  if (mamba_new > 0) {
    const uint64_t m_required = (std::min<uint64_t>(num_computed + num_new, max_request_tokens()) + bs - 1) / bs;
    if (r.mamba_blocks.size() < m_required - 1) r.mamba_blocks.resize(m_required - 1, 0);  // skipped states
    pool_.get_new_blocks(1, r.mamba_blocks, events_);
  }

  if (pool_.caching() && cache_now) {
    // Cache only finalized tokens (never draft tokens): up to the end of this step's chunk.
    const uint64_t to_cache = std::min<uint64_t>(num_computed + num_new, r.tokens.size());
    const auto num_full = static_cast<uint32_t>(to_cache / bs);
    if (config_.delay_cache_blocks) {
      r.cache_upto = std::max(r.cache_upto, num_full);  // cached once the step computed them
    } else {
      cache_blocks(r, num_full);
    }
  }
  return true;
}

void EngineCore::preempt(Request& r) {
  free_request_blocks(r);
  r.num_computed = 0;
  r.decoding = false;
  r.running = false;
  ++r.preemptions;
  ++stats_.preemptions;
  waiting_.push_front(&r);
}

void EngineCore::schedule() {
  scheduled_.clear();
  preempted_this_step_ = false;
  uint32_t budget = config_.max_num_batched_tokens;
  const uint32_t k = config_.timing.speculative_tokens;
  const uint32_t cap = max_request_tokens();

  // Running requests first (decodes and unfinished chunked prefills), in arrival order.
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request& r = *running_[i];
    const auto remaining = static_cast<uint32_t>(r.tokens.size() - r.num_computed);
    uint32_t drafts = r.decoding ? k : 0;
    if (r.tokens.size() + drafts > cap) drafts = cap - static_cast<uint32_t>(r.tokens.size());
    const uint32_t num_new = mamba_aligned(r, r.num_computed, std::min(remaining + drafts, budget));
    if (num_new == 0) {  // a chunk the budget cannot align: next step
      ++i;
      continue;
    }
    bool ok = false;
    for (;;) {
      ok = allocate_slots(r, num_new, {}, k);
      if (ok) break;
      // Out of blocks: preempt the newest running request (recompute), possibly r itself.
      Request* victim = running_.back();
      running_.pop_back();
      preempt(*victim);
      preempted_this_step_ = true;
      if (victim == &r) break;
    }
    if (!ok) break;
    r.scheduled = num_new;
    r.scheduled_drafts = num_new > remaining ? num_new - remaining : 0;
    r.scheduled_prefill = !r.decoding;
    scheduled_.push_back(&r);
    budget -= num_new;
    ++i;
  }

  // Then waiting requests, FCFS, unless this step had to preempt.
  if (preempted_this_step_) return;
  // LoRA (max_loras > 0): the adapters of the running batch take its slots; a waiting request of
  // another adapter while every slot is taken is skipped this step and keeps its place (vLLM's
  // scheduler: "Scheduling would exceed max_loras, skip").
  std::vector<std::string_view> loras;
  std::vector<Request*> skipped;
  auto use_lora = [&](const Request& q) {
    if (config_.max_loras == 0 || !q.ns.lora()) return;
    if (std::find(loras.begin(), loras.end(), q.ns.lora_name) == loras.end()) loras.push_back(q.ns.lora_name);
  };
  for (const Request* q : running_) use_lora(*q);
  while (!waiting_.empty() && budget > 0 && running_.size() < config_.max_num_seqs) {
    Request& r = *waiting_.front();
    if (config_.max_loras > 0 && r.ns.lora() && loras.size() >= config_.max_loras &&
        std::find(loras.begin(), loras.end(), r.ns.lora_name) == loras.end()) {
      waiting_.pop_front();
      skipped.push_back(&r);
      continue;
    }
    if (r.pulled) {
      // A pulled remote prefill (vLLM: a WAITING request with computed tokens, no lookup).
      resume_loaded(r);
      const uint32_t num_new = std::min(static_cast<uint32_t>(r.tokens.size()) - r.num_computed, budget);
      if (!allocate_slots(r, num_new, {}, 0, /*whole_sequence=*/true)) break;
      waiting_.pop_front();
      running_.push_back(&r);
      use_lora(r);
      r.running = true;
      r.scheduled = num_new;
      r.scheduled_drafts = 0;
      r.scheduled_prefill = true;
      scheduled_.push_back(&r);
      budget -= num_new;
      continue;
    }
    assert(r.num_computed == 0 && r.blocks.empty());
    const uint32_t hit = find_cached_prefix(r);
    if (r.kv == KvTransfer::kRemotePrefill) {
      if (!admit_remote_prefill(r, hit)) break;
      continue;
    }
    // Blocks the CPU tier holds after the GPU hit are loaded into new GPU blocks instead of
    // prefilled: they take slots, not budget, and enter the prefix cache as full blocks.
    const uint32_t loaded = find_offloaded(r, hit);
    const uint32_t num_new =
        mamba_aligned(r, hit, std::min(static_cast<uint32_t>(r.tokens.size()) - hit - loaded, budget));
    if (num_new == 0) break;
    if (!allocate_slots(r, loaded + num_new, hit_blocks_, 0, /*whole_sequence=*/true)) break;
    // vLLM 0.32 records the lookup at admission (a request that has to wait is not counted on
    // every attempt), and counts resumed requests separately.
    if (r.preemptions == 0) {
      stats_.prefix_cache_queries += r.tokens.size();
      stats_.prefix_cache_hits += hit;
      // With a connector every admission asks it for the rest (NIXL: no match, 0 hits).
      if (config_.kv_connector) stats_.external_prefix_cache_queries += r.tokens.size() - hit;
    }
    stats_.cpu_loaded_tokens += loaded;
    waiting_.pop_front();
    running_.push_back(&r);
    use_lora(r);
    r.running = true;
    r.num_computed = hit + loaded;
    r.loaded = loaded;
    // vLLM: num_computed_tokens = local + external, and num_cached_tokens takes it.
    if (r.cached_tokens < 0) r.cached_tokens = hit + loaded;
    // update_state_after_alloc: after a load the connector offers the blocks from its end on.
    if (loaded > 0) r.cpu_next = std::max(r.cpu_next, (hit + loaded) / config_.block_size);
    r.scheduled = num_new;
    r.scheduled_drafts = 0;
    r.scheduled_prefill = true;
    scheduled_.push_back(&r);
    budget -= num_new;
  }
  waiting_.insert(waiting_.begin(), skipped.begin(), skipped.end());
}

StepResult EngineCore::step(double now_wall_s) {
  StepResult res;
  res.outputs.reserve(pending_aborts_.size() + running_.size() + 8);
  for (uint64_t id : pending_aborts_) {
    RequestOutput out;
    out.id = id;
    out.finish = FinishReason::kAbort;
    res.outputs.push_back(out);
  }
  pending_aborts_.clear();

  events_.clear();
  kv_loads_.clear();
  mamba_cached_this_step_.clear();  // MambaManager.new_step_starts
  schedule();
  if (config_.delay_cache_blocks) {
    // The step computed the scheduled chunks: their full blocks enter the prefix cache now.
    for (Request* r : scheduled_) cache_blocks(*r, r->cache_upto);
  }
  offload_computed();

  StepShape shape;
  for (const Request* r : scheduled_) {
    ++shape.seqs;
    shape.context_tokens += r->num_computed + r->scheduled;
    if (r->scheduled_prefill) shape.prefill_tokens += r->scheduled - r->scheduled_drafts;
    shape.draft_tokens += r->scheduled_drafts;
    shape.max_drafts = std::max(shape.max_drafts, r->scheduled_drafts);
    shape.loaded_tokens += r->loaded;
    res.scheduled_tokens += r->scheduled;
  }
  res.duration_s = step_duration(config_.timing, shape);

  // "Execute" and advance: a request whose computed tokens reach its last token samples.
  bool any_finished = false;
  for (Request* r : scheduled_) {
    r->loaded = 0;
    RequestOutput out;
    out.id = r->id;
    r->num_computed += r->scheduled - r->scheduled_drafts;
    if (r->num_computed == r->tokens.size()) {
      uint32_t accepted = 0;
      if (r->scheduled_drafts > 0) {
        accepted = sample_accepted(config_.timing, r->scheduled_drafts, rng_);
        ++stats_.spec_drafts;
        stats_.spec_draft_tokens += r->scheduled_drafts;
        stats_.spec_accepted_tokens += accepted;
        for (uint32_t p = 0; p < accepted && p < stats_.spec_accepted_per_pos.size(); ++p) {
          ++stats_.spec_accepted_per_pos[p];
        }
        r->num_computed += accepted;  // verified drafts keep their KV; rejected ones do not
      }
      const uint32_t n = std::min(1 + accepted, r->max_tokens - r->num_output);
      for (uint32_t j = 0; j < n; ++j) r->tokens.push_back(filler_token_id(r->num_output + j));
      r->num_output += n;
      out.new_tokens = n;
      stats_.generation_tokens += n;
      r->decoding = true;
      if (!r->prefill_reported) {
        r->prefill_reported = true;
        out.prefill_done = true;
        stats_.prompt_tokens += r->prompt_len;
      }
      if (r->num_output >= r->max_tokens) {
        out.finish = FinishReason::kLength;
        any_finished = true;
        if (r->kv == KvTransfer::kRemoteDecode) {
          // NixlConnectorScheduler.request_finished: delay_free_blocks, remote_num_tokens =
          // num_computed_tokens, remote_block_ids = every block of the request.
          out.held = true;
          out.held_blocks = r->blocks;
          out.held_tokens = r->num_computed;
        }
      }
    }
    out.cached_tokens = static_cast<uint32_t>(std::max<int64_t>(r->cached_tokens, 0));
    if (r->created_cache_tokens < 0 && (out.new_tokens > 0 || out.finish != FinishReason::kNone)) {
      // PrefillStats.finalize, with the first output the engine emits for the request.
      const uint32_t covered = std::min(estimate_cached_tokens(*r), r->prompt_len);
      r->created_cache_tokens = std::max<int64_t>(0, static_cast<int64_t>(covered) - std::max<int64_t>(r->cached_tokens, 0));
    }
    out.created_cache_tokens = static_cast<uint32_t>(std::max<int64_t>(r->created_cache_tokens, 0));
    res.outputs.push_back(out);
  }

  if (any_finished) {
    for (Request* r : scheduled_) {
      if (r->num_output < r->max_tokens) continue;
      r->running = false;
      if (r->kv == KvTransfer::kRemoteDecode) {
        r->held = true;  // until release_held: pulled, or its lease expired
        ++held_;
      } else {
        free_request_blocks(*r);
      }
    }
    std::erase_if(running_, [](const Request* r) { return !r->running; });
    for (Request* r : scheduled_) {
      if (!r->running && !r->held && r->num_output >= r->max_tokens) requests_.erase(r->id);
    }
  }
  scheduled_.clear();
  res.running = static_cast<uint32_t>(running_.size());
  res.kv_loads = std::move(kv_loads_);
  kv_loads_.clear();

  if (!events_.empty()) {
    if (sink_ != nullptr) sink_->publish(now_wall_s, std::move(events_));
    events_.clear();
  }
  return res;
}

// The GPU prefix cache only: vLLM's reset_prefix_cache resets the connector's tiers only when
// asked (reset_connector), and publishes nothing for it; the CPU tier keeps its blocks.
bool EngineCore::reset_prefix_cache(double now_wall_s) {
  std::vector<KvEvent> events;
  if (!pool_.reset_prefix_cache(events)) return false;
  if (sink_ != nullptr) sink_->publish(now_wall_s, std::move(events));
  return true;
}

std::vector<RequestOutput> EngineCore::sleep(double now_wall_s) {
  // vLLM's EngineCore.sleep(level >= 1, mode="abort"): pause_scheduler finishes every request as
  // aborted, then resets the prefix cache (its AllBlocksCleared), then the executor frees the
  // memory. Reported here at once: a sleeping engine takes no steps.
  std::vector<uint64_t> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, r] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) abort(id);
  std::vector<RequestOutput> out;
  for (uint64_t id : pending_aborts_) {
    RequestOutput o;
    o.id = id;
    o.finish = FinishReason::kAbort;
    out.push_back(o);
  }
  pending_aborts_.clear();
  reset_prefix_cache(now_wall_s);  // every block is free now: it cannot refuse
  return out;
}

uint32_t EngineCore::resident_prefix_tokens(std::span<const uint32_t> tokens, const CacheNamespace& ns) {
  if (!pool_.caching()) return 0;
  const uint32_t bs = config_.block_size;
  BlockHash parent = hasher_.none_hash();
  uint32_t n = 0, reusable = 0;
  for (size_t off = 0; off + bs <= tokens.size(); off += bs) {
    parent = hash_block_in(hasher_, parent, tokens.subspan(off, bs), ns, n, hash_buf_);
    if (pool_.cached_block(parent) < 0) break;
    ++n;
    if (!config_.hybrid_mamba || pool_.cached_block(parent, kMambaGroup) >= 0) reusable = n;
  }
  return reusable * bs;
}

EngineStats EngineCore::stats() const {
  EngineStats s = stats_;
  s.running = static_cast<uint32_t>(running_.size());
  s.waiting = static_cast<uint32_t>(waiting_.size() + loading_.size());
  s.loading = static_cast<uint32_t>(loading_.size());
  s.held_requests = held_;
  if (held_ > 0) {
    for (const auto& [id, r] : requests_) s.held_blocks += r->held ? static_cast<uint32_t>(r->blocks.size()) : 0;
  }
  s.kv_cache_usage = pool_.usage();
  s.num_gpu_blocks = pool_.num_blocks();
  s.block_size = config_.block_size;
  s.free_blocks = pool_.num_free();
  s.cached_blocks = pool_.num_cached();
  s.cpu_offload_blocks = cpu_ ? cpu_->capacity() : 0;
  s.cpu_cached_blocks = cpu_ ? cpu_->size() : 0;
  if (config_.max_loras > 0) {  // vLLM's LoRARequestStates: every adapter with a request
    auto add = [&s](const Request* q) {
      if (q->ns.lora() && std::find(s.loras.begin(), s.loras.end(), q->ns.lora_name) == s.loras.end()) {
        s.loras.push_back(q->ns.lora_name);
      }
    };
    for (const Request* q : running_) add(q);
    for (const Request* q : waiting_) add(q);
  }
  return s;
}

}  // namespace ramjet::sim
