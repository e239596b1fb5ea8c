#include "sim/engine/cpu_tier.h"

#include <algorithm>

namespace ramjet::sim {

uint32_t CpuTier::lookup(std::span<const BlockHash> hashes) {
  uint32_t n = 0;
  for (const BlockHash& h : hashes) {
    auto it = where_.find(h);
    if (it == where_.end()) break;
    lru_.splice(lru_.end(), lru_, it->second);
    ++n;
  }
  return n;
}

void CpuTier::store(std::span<const BlockHash> hashes, std::vector<KvEvent>& events) {
  fresh_.clear();
  for (const BlockHash& h : hashes) {
    if (auto it = where_.find(h); it != where_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
    } else if (std::find(fresh_.begin(), fresh_.end(), h) == fresh_.end()) {
      fresh_.push_back(h);
    }
  }
  if (fresh_.empty() || fresh_.size() > capacity_) return;
  if (lru_.size() + fresh_.size() > capacity_) {
    BlockRemoved removed;
    removed.medium = "CPU";
    removed.group_idx = 0;
    while (lru_.size() + fresh_.size() > capacity_) {
      removed.block_hashes.push_back(lru_.front());
      where_.erase(lru_.front());
      lru_.pop_front();
    }
    events.emplace_back(std::move(removed));
  }
  BlockStored stored;
  stored.medium = "CPU";
  stored.group_idx = 0;
  stored.block_size = 0;
  for (const BlockHash& h : fresh_) {
    lru_.push_back(h);
    where_.emplace(h, std::prev(lru_.end()));
    stored.block_hashes.push_back(h);
  }
  events.emplace_back(std::move(stored));
}

std::string CpuTier::check_invariants() const {
  if (lru_.size() > capacity_) return "more blocks than capacity";
  if (lru_.size() != where_.size()) return "LRU list and map sizes differ";
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    auto w = where_.find(*it);
    if (w == where_.end() || w->second != it) return "a listed hash is not mapped to its place";
  }
  return "";
}

}  // namespace ramjet::sim
