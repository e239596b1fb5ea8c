// sim/engine core, prefill/decode disaggregation (docs/sim.md §8.4): the parts of EngineCore that
// follow vLLM 0.32's NixlConnector (pull mode) — a decode leg's admission without compute, its
// resumption once pulled, a failed pull's policy, and the release of a prefill leg's held
// blocks. What the scheduler does with them is engine_core.cc's.
#include <algorithm>

#include "sim/engine/engine_core.h"

namespace ramjet::sim {

bool EngineCore::admit_remote_prefill(Request& r, uint32_t hit) {
  // NixlConnectorScheduler.get_num_new_matched_tokens: the whole prompt beyond the (block-aligned)
  // local hit is external and loaded asynchronously; the scheduler allocates its slots with
  // delay_cache_blocks (cached once they arrive) and parks it in WAITING_FOR_REMOTE_KVS. It
  // takes no token budget and no running slot.
  const auto prompt = static_cast<uint32_t>(r.tokens.size());
  const uint32_t external = prompt - hit;  // > 0: a hit leaves at least one token
  if (!allocate_slots(r, external, hit_blocks_, 0, /*whole_sequence=*/true, /*cache_now=*/false)) return false;
  if (r.preemptions == 0) {
    stats_.prefix_cache_queries += prompt;
    stats_.prefix_cache_hits += hit;
    stats_.external_prefix_cache_queries += prompt - hit;
    stats_.external_prefix_cache_hits += external;
  }
  // PrefillStats.set: cached = local + external (the API may report the producer's instead).
  if (r.cached_tokens < 0) r.cached_tokens = prompt;
  r.num_computed = hit;
  r.kv_hit = prompt;
  r.loading = true;
  waiting_.pop_front();
  loading_.push_back(&r);
  kv_loads_.push_back(KvLoad{r.id, hit, external});
  return true;
}

void EngineCore::resume_loaded(Request& r) {
  // Scheduler._update_waiting_for_remote_kv: the pulled blocks enter the prefix cache now (their
  // BlockStored goes out with this step), and a fully loaded prompt recomputes its last token
  // so the next one can be sampled.
  r.pulled = false;
  r.kv = KvTransfer::kNone;
  if (pool_.caching()) cache_blocks(r, r.kv_hit / config_.block_size);
  r.num_computed = r.kv_hit == r.tokens.size() ? r.kv_hit - 1 : r.kv_hit;
}

std::optional<RequestOutput> EngineCore::finish_kv_load(uint64_t id, bool ok) {
  auto it = requests_.find(id);
  if (it == requests_.end() || !it->second->loading) return std::nullopt;
  Request& r = *it->second;
  loading_.erase(std::find(loading_.begin(), loading_.end(), &r));
  r.loading = false;
  if (ok) {
    // Scheduler._update_from_kv_xfer_finished: ready for the next schedule(), which caches the
    // blocks and resumes it (resume_loaded).
    r.pulled = true;
    waiting_.push_front(&r);
    return std::nullopt;
  }
  // A failed pull (_handle_failed_recving): no valid computed token, the blocks go back.
  free_request_blocks(r);
  r.num_computed = 0;
  r.kv = KvTransfer::kNone;
  if (config_.kv_load_recompute) {
    r.cached_tokens = -1;  // prefill stats are taken again at the next admission
    waiting_.push_front(&r);
    return std::nullopt;
  }
  RequestOutput out;  // FINISHED_ERROR, reported at once
  out.id = id;
  out.finish = FinishReason::kError;
  out.cached_tokens = static_cast<uint32_t>(std::max<int64_t>(r.cached_tokens, 0));
  requests_.erase(it);
  return out;
}

bool EngineCore::release_held(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || !it->second->held) return false;
  free_request_blocks(*it->second);  // (cached blocks stay cached, now evictable)
  requests_.erase(it);
  --held_;
  return true;
}

}  // namespace ramjet::sim
