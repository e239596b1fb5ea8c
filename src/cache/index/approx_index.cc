// cache/index/approx_index: one shard per engine. A shard is a flat hash map (fingerprint ->
// slot) plus an array-backed doubly linked LRU list; slots are reused on eviction, so once an
// engine's index is full, observe() allocates nothing.
#include "cache/index/approx_index.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>

#include <boost/unordered/unordered_flat_map.hpp>

namespace ramjet::cache {

class alignas(64) ApproxIndex::Shard {
 public:
  explicit Shard(uint32_t capacity) : capacity_(capacity) {
    const size_t initial = std::min<size_t>(capacity, 4096);
    slots_.reserve(initial);
    nodes_.reserve(initial);
  }

  uint32_t overlap(std::span<const uint64_t> chain) const {
    const uint64_t horizon = horizon_.load(std::memory_order_relaxed);
    std::shared_lock lock(mu_);
    uint32_t n = 0;
    for (uint64_t fp : chain) {
      const auto it = slots_.find(fp);
      if (it == slots_.end()) break;
      if (horizon != 0 && clock_ - nodes_[it->second].stamp >= horizon) break;  // evicted by now
      ++n;
    }
    return n;
  }

  void set_horizon(uint64_t h) { horizon_.store(h, std::memory_order_relaxed); }
  uint64_t horizon() const { return horizon_.load(std::memory_order_relaxed); }

  void observe(std::span<const uint64_t> chain) {
    if (capacity_ == 0) return;
    for (size_t at = 0; at < chain.size(); at += kObserveBatch) {
      std::unique_lock lock(mu_);
      const size_t end = std::min(chain.size(), at + kObserveBatch);
      for (size_t i = at; i < end; ++i) touch(chain[i]);
    }
  }

  size_t entries() const {
    std::shared_lock lock(mu_);
    return slots_.size();
  }

  bool contains(uint64_t fp) const {
    std::shared_lock lock(mu_);
    return slots_.contains(fp);
  }

  void clear() {
    std::unique_lock lock(mu_);
    slots_.clear();
    nodes_.clear();
    head_ = tail_ = kNil;
  }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Node {
    uint64_t fingerprint;
    uint32_t prev;  // towards the most recently used end
    uint32_t next;  // towards the least recently used end
    uint64_t stamp = 0;  // clock_ at its last observation
  };

  void touch(uint64_t fp) {
    if (auto it = slots_.find(fp); it != slots_.end()) {
      nodes_[it->second].stamp = clock_;
      if (it->second != head_) {
        unlink(it->second);
        push_front(it->second);
      }
      return;
    }
    ++clock_;  // a chunk the engine did not hold: a new allocation there
    uint32_t slot;
    if (nodes_.size() < capacity_) {
      slot = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back(Node{fp, kNil, kNil});
    } else {  // full: reuse the least recently used slot
      slot = tail_;
      unlink(slot);
      slots_.erase(nodes_[slot].fingerprint);
      nodes_[slot].fingerprint = fp;
    }
    nodes_[slot].stamp = clock_;
    slots_.emplace(fp, slot);
    push_front(slot);
  }

  void unlink(uint32_t slot) {
    Node& n = nodes_[slot];
    (n.prev != kNil ? nodes_[n.prev].next : head_) = n.next;
    (n.next != kNil ? nodes_[n.next].prev : tail_) = n.prev;
    n.prev = n.next = kNil;
  }

  void push_front(uint32_t slot) {
    Node& n = nodes_[slot];
    n.prev = kNil;
    n.next = head_;
    if (head_ != kNil) nodes_[head_].prev = slot;
    head_ = slot;
    if (tail_ == kNil) tail_ = slot;
  }

  const uint32_t capacity_;
  mutable std::shared_mutex mu_;
  boost::unordered_flat_map<uint64_t, uint32_t> slots_;
  std::vector<Node> nodes_;
  uint32_t head_ = kNil;
  uint32_t tail_ = kNil;
  uint64_t clock_ = 0;                 // fingerprints inserted (under mu_)
  std::atomic<uint64_t> horizon_{0};   // set_horizon (0: none)
};

ApproxIndex::ApproxIndex(size_t engines, ApproxIndexLimits limits) : limits_(limits) {
  shards_.reserve(engines);
  for (size_t i = 0; i < engines; ++i) shards_.push_back(std::make_unique<Shard>(limits.capacity));
}

ApproxIndex::~ApproxIndex() = default;

ApproxIndex::Shard& ApproxIndex::shard(size_t engine) const {
  // Engine ordinals come from the fleet this index was built for: anything else is a bug.
  if (engine >= shards_.size()) std::abort();
  return *shards_[engine];
}

uint32_t ApproxIndex::overlap(size_t engine, std::span<const uint64_t> chain) const {
  return shard(engine).overlap(chain);
}

void ApproxIndex::set_horizon(size_t engine, uint64_t fingerprints) { shard(engine).set_horizon(fingerprints); }

uint64_t ApproxIndex::horizon(size_t engine) const { return shard(engine).horizon(); }

void ApproxIndex::observe(size_t engine, std::span<const uint64_t> chain) {
  shard(engine).observe(chain);
}

size_t ApproxIndex::entries(size_t engine) const {
  return shard(engine).entries();
}

bool ApproxIndex::contains(size_t engine, uint64_t fingerprint) const {
  return shard(engine).contains(fingerprint);
}

void ApproxIndex::clear(size_t engine) {
  shard(engine).clear();
}

}  // namespace ramjet::cache
