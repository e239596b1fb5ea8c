// cache/index/approx_index: the approximate prefix index. Per engine, an LRU
// set of chain fingerprints (request/prepare/canonical.h) learned from completed responses;
// overlap() is the number of leading request fingerprints an engine holds. Deciding *when* to
// observe (complete 200 responses only) is request/stream's job; scoring overlap is route's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace ramjet::cache {

struct ApproxIndexLimits {
  // RJ_ROUTE_INDEX_CAPACITY: fingerprints kept per engine (~2 KiB of prompt each); the least
  // recently observed one is evicted beyond it. 0 disables the index (overlap is always 0).
  uint32_t capacity = 100000;
};

// Thread safety: any thread may call any method. Each engine has its own reader/writer lock;
// overlap() and entries() take it shared, so routing reads on different io threads never wait
// for each other, and observe() releases it every kObserveBatch fingerprints so a long chain
// never holds readers back for more than a short batch. The intended use is still one writer
// per engine (its completions are applied in order).
class ApproxIndex {
 public:
  static constexpr size_t kObserveBatch = 64;

  explicit ApproxIndex(size_t engines, ApproxIndexLimits limits = {});
  ~ApproxIndex();
  ApproxIndex(const ApproxIndex&) = delete;
  ApproxIndex& operator=(const ApproxIndex&) = delete;

  size_t engines() const { return shards_.size(); }
  const ApproxIndexLimits& limits() const { return limits_; }

  // Leading fingerprints of `chain` present on `engine`, stopping at the first miss, or at the
  // first one past the engine's horizon (set_horizon). Reading does not refresh recency (only a
  // served request does).
  uint32_t overlap(size_t engine, std::span<const uint64_t> chain) const;

  // The engine's eviction horizon (RJ_ROUTE_HORIZON=auto), in fingerprints: an engine whose prefix
  // cache holds about `fingerprints` blocks' worth of prompt keeps a block until that many new
  // blocks were allocated after its last use (vLLM's LRU free queue). Each fingerprint inserted
  // into the engine's shard (a prompt chunk it did not hold: a new allocation there) ticks the
  // shard's clock; one older than the horizon by that clock counts as evicted. 0: no horizon.
  void set_horizon(size_t engine, uint64_t fingerprints);
  uint64_t horizon(size_t engine) const;

  // Inserts or refreshes every fingerprint of `chain`, in order, as most recently used.
  void observe(size_t engine, std::span<const uint64_t> chain);

  size_t entries(size_t engine) const;
  bool contains(size_t engine, uint64_t fingerprint) const;
  void clear(size_t engine);  // forget an engine's state (e.g. it restarted with an empty cache)

 private:
  class Shard;
  Shard& shard(size_t engine) const;

  ApproxIndexLimits limits_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace ramjet::cache
