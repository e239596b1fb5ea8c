// render::TurnCache (see turn_cache.h).
#include "render/prompt/turn_cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace ramjet::render {

namespace {
constexpr size_t kTurnOverhead = 256;  // Turn, its strings' and vectors' headers, the LRU node
constexpr size_t kWindow = 64;         // bytes before a turn's last message end compared first
}  // namespace

size_t Turn::bytes() const {
  return body.capacity() + msg_end.capacity() * sizeof(uint32_t) + model.capacity() + cache_salt.capacity() +
         render.kinds.capacity() + render.ends.capacity() * sizeof(uint32_t) + text.capacity() +
         ids.capacity() * sizeof(uint32_t) + cuts.capacity() * sizeof(Tokenizer::Cut) + kTurnOverhead;
}

std::string_view Turn::rest() const {
  if (msg_end.empty() || msg_end.back() > body.size()) return {};
  return std::string_view(body).substr(msg_end.back());
}

TurnCache::TurnCache(TurnLimits limits) : limits_(limits) {}

std::unique_ptr<Turn> TurnCache::take(const TurnKey& key, std::string_view body) {
  std::unique_ptr<Turn> best;
  {
    std::lock_guard lock(mu_);
    Lru::iterator pick = lru_.end();
    size_t pick_end = 0;
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      const Turn& t = **it;
      if (!(t.key == key) || t.msg_end.empty()) continue;
      const size_t end = t.msg_end.back();
      const std::string_view rest = t.rest();
      if (end <= pick_end || end + rest.size() > body.size()) continue;
      // Cheap checks first: the bytes just before the turn's last message end, and what follows it.
      const size_t w = std::min(kWindow, end);
      if (std::memcmp(body.data() + end - w, t.body.data() + end - w, w) != 0) continue;
      if (std::memcmp(body.data() + body.size() - rest.size(), rest.data(), rest.size()) != 0) continue;
      pick = it;
      pick_end = end;
    }
    if (pick == lru_.end()) {
      ++stats_.misses;
      return nullptr;
    }
    best = std::move(*pick);
    stats_.bytes -= best->accounted;
    --stats_.entries;
    lru_.erase(pick);
  }
  // The whole prefix, outside the lock: no other thread can reach this turn now.
  if (std::memcmp(body.data(), best->body.data(), best->msg_end.back()) == 0) return best;
  std::lock_guard lock(mu_);
  stats_.bytes += best->accounted;
  ++stats_.entries;
  lru_.push_back(std::move(best));  // as it was, but least recent: it did not serve
  ++stats_.misses;
  return nullptr;
}

void TurnCache::put(std::unique_ptr<Turn> turn) {
  if (!turn) return;
  turn->accounted = turn->bytes();
  std::lock_guard lock(mu_);
  if (turn->accounted > limits_.max_bytes || limits_.max_entries == 0) {
    ++stats_.not_stored;
    return;
  }
  stats_.bytes += turn->accounted;
  ++stats_.entries;
  ++stats_.stored;
  lru_.push_front(std::move(turn));
  while (!lru_.empty() && (lru_.size() > limits_.max_entries || stats_.bytes > limits_.max_bytes)) {
    erase_locked(std::prev(lru_.end()));
    ++stats_.evictions;
  }
}

void TurnCache::count_resumed(bool resumed) {
  std::lock_guard lock(mu_);
  ++(resumed ? stats_.resumed : stats_.declined);
}

void TurnCache::erase_locked(Lru::iterator it) {
  stats_.bytes -= (*it)->accounted;
  --stats_.entries;
  lru_.erase(it);
}

TurnStats TurnCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void TurnCache::clear() {
  std::lock_guard lock(mu_);
  lru_.clear();
  stats_.entries = 0;
  stats_.bytes = 0;
}

}  // namespace ramjet::render
