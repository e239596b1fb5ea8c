// cache/index/provisional: blocks an engine is about to hold (speculative residency). When exact
// routing places a request, the blocks of its prompt the engine does not report yet are entered
// for that engine, keyed like the exact index (exact_chain: the engine's block size and the
// request's namespace), with a short time to live. The next request with that prefix — a burst of
// one session's turns, or sub-agents sharing a fresh context — that arrives before the engine's
// BlockStored events then finds them there instead of scattering. The events confirm them (the
// exact index answers for those blocks from then on); entries the engine never stores (an aborted
// request, an early eviction) lapse at their deadline.
//
// A lookup continues a match where the exact index's stopped: how many further blocks of the
// chain were entered and have not lapsed. Entries of one placement are a run of consecutive blocks
// and share a deadline, so presence along a chain is monotone and a galloping search finds its end.
//
// Bounded: at most max_keys entries per engine; entering beyond it first drops lapsed entries and
// then the oldest. Any thread: one mutex per table (an enter or a match is one short critical
// section of hash-map operations, O(new blocks) and O(log blocks)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <unordered_map>

namespace ramjet::cache {

struct ProvisionalLimits {
  uint32_t max_keys = 65536;  // entries per engine (1M tokens at 16-token blocks)
  int64_t ttl_ms = 8000;      // how long an entry waits for the engine's BlockStored; 0 = off
};

class ProvisionalBlocks {
 public:
  explicit ProvisionalBlocks(ProvisionalLimits limits = {}) : limits_(limits) {}

  // Enters chain[from..] (keys of consecutive blocks), each lapsing at now_ms + ttl. Returns how
  // many were entered (0 when off or nothing to enter).
  size_t enter(std::span<const uint64_t> chain, size_t from, int64_t now_ms);
  // How many blocks of chain, starting at `from`, are entered and unlapsed (consecutively).
  size_t match(std::span<const uint64_t> chain, size_t from, int64_t now_ms) const;

  size_t size() const;
  const ProvisionalLimits& limits() const { return limits_; }

 private:
  bool live(uint64_t key, int64_t now_ms) const;  // under mu_
  void purge(int64_t now_ms);                     // under mu_

  ProvisionalLimits limits_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, int64_t> deadline_;  // key -> when it lapses
  std::deque<std::pair<uint64_t, int64_t>> order_;  // (key, deadline) as entered: oldest first
};

}  // namespace ramjet::cache
