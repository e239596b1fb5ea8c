// render::RenderPrefixCache (see render_prefix_cache.h).
#include "render/template/render_prefix_cache.h"

#include <utility>

namespace ramjet::render {

namespace {
constexpr size_t kEntryOverhead = 128;  // Entry, LRU node, index slot
}  // namespace

RenderPrefixCache::RenderPrefixCache(RenderPrefixLimits limits) : limits_(limits) {}

std::optional<RenderPrefixCache::Hit> RenderPrefixCache::find(const PrefixKey& key) {
  std::lock_guard lock(mu_);
  const auto it = index_.find(key.lo);
  if (it == index_.end() || !(it->second->key == key)) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return Hit{it->second->text, it->second->bytes};
}

void RenderPrefixCache::count(bool hit) {
  std::lock_guard lock(mu_);
  ++(hit ? stats_.hits : stats_.misses);
}

void RenderPrefixCache::store(const PrefixKey& key, std::shared_ptr<const std::string> text, size_t bytes) {
  if (!text || bytes > text->size()) return;
  const size_t accounted = text->size() + kEntryOverhead;
  std::lock_guard lock(mu_);
  if (accounted > limits_.max_bytes || limits_.max_entries == 0) {
    ++stats_.not_stored;
    return;
  }
  if (const auto it = index_.find(key.lo); it != index_.end()) erase_locked(it->second);
  lru_.push_front(Entry{key, std::move(text), bytes, accounted});
  index_.emplace(key.lo, lru_.begin());
  ++stats_.entries;
  stats_.bytes += accounted;
  while (!lru_.empty() && (lru_.size() > limits_.max_entries || stats_.bytes > limits_.max_bytes)) {
    erase_locked(std::prev(lru_.end()));
    ++stats_.evictions;
  }
}

void RenderPrefixCache::erase_locked(Lru::iterator it) {
  index_.erase(it->key.lo);
  stats_.bytes -= it->accounted;
  --stats_.entries;
  lru_.erase(it);
}

RenderPrefixStats RenderPrefixCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void RenderPrefixCache::clear() {
  std::lock_guard lock(mu_);
  lru_.clear();
  index_.clear();
  stats_.entries = 0;
  stats_.bytes = 0;
}

}  // namespace ramjet::render
