#include "cache/index/provisional.h"

#include <algorithm>

namespace ramjet::cache {

bool ProvisionalBlocks::live(uint64_t key, int64_t now_ms) const {
  auto it = deadline_.find(key);
  return it != deadline_.end() && it->second > now_ms;
}

void ProvisionalBlocks::purge(int64_t now_ms) {
  // order_ may hold a key several times (entered again later): only the record whose deadline is
  // the key's current one removes it.
  auto drop_front = [&] {
    const auto [key, deadline] = order_.front();
    order_.pop_front();
    auto it = deadline_.find(key);
    if (it != deadline_.end() && it->second == deadline) deadline_.erase(it);
  };
  while (!order_.empty() && order_.front().second <= now_ms) drop_front();
  while (!order_.empty() && (deadline_.size() > limits_.max_keys || order_.size() > 2 * size_t{limits_.max_keys})) {
    drop_front();
  }
}

size_t ProvisionalBlocks::enter(std::span<const uint64_t> chain, size_t from, int64_t now_ms) {
  if (limits_.ttl_ms <= 0 || limits_.max_keys == 0 || from >= chain.size()) return 0;
  // A prompt longer than the table keeps its leading blocks (the ones a follow-up reuses first).
  const size_t end = std::min(chain.size(), from + size_t{limits_.max_keys});
  const int64_t deadline = now_ms + limits_.ttl_ms;
  std::lock_guard lock(mu_);
  for (size_t i = from; i < end; ++i) {
    deadline_[chain[i]] = deadline;
    order_.emplace_back(chain[i], deadline);
  }
  purge(now_ms);
  return end - from;
}

size_t ProvisionalBlocks::match(std::span<const uint64_t> chain, size_t from, int64_t now_ms) const {
  if (limits_.ttl_ms <= 0 || from >= chain.size()) return 0;
  std::lock_guard lock(mu_);
  if (deadline_.empty() || !live(chain[from], now_ms)) return 0;
  // Gallop: live at from + lo, find the first dead position.
  size_t lo = 0, step = 1, hi = chain.size() - from;  // live(lo), hi: dead or the end
  while (lo + step < hi) {
    if (!live(chain[from + lo + step], now_ms)) {
      hi = lo + step;
      break;
    }
    lo += step;
    step *= 2;
  }
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (live(chain[from + mid], now_ms)) lo = mid;
    else hi = mid;
  }
  return lo + 1;
}

size_t ProvisionalBlocks::size() const {
  std::lock_guard lock(mu_);
  return deadline_.size();
}

}  // namespace ramjet::cache
