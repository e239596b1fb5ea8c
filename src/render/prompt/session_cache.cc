// render::SessionCache: see session_cache.h.
#include "render/prompt/session_cache.h"

#include <cstring>
#include <utility>

#include <xxhash.h>

namespace ramjet::render {

struct SessionCache::Entry {
  uint64_t id = 0;
  uint64_t tokenizer = 0;            // Tokenizer::serial()
  std::string text;                  // up to the last cut
  std::vector<uint32_t> ids;         // encode(text)
  std::vector<Tokenizer::Cut> cuts;  // every cut of the text it was stored for, up to text.size()
  std::vector<uint64_t> keys;        // chained hash at each cut (index keys)
  size_t bytes = 0;
};

namespace {

// The index key of every cut: XXH3 of the bytes since the previous cut, seeded with the
// previous key (the first seeded with the tokenizer), so a key stands for the whole prefix.
std::vector<uint64_t> chain_keys(uint64_t tokenizer, std::string_view text,
                                 const std::vector<Tokenizer::Cut>& cuts) {
  std::vector<uint64_t> keys(cuts.size());
  uint64_t h = XXH3_64bits(&tokenizer, sizeof tokenizer);
  size_t prev = 0;
  for (size_t j = 0; j < cuts.size(); ++j) {
    h = XXH3_64bits_withSeed(text.data() + prev, cuts[j].byte - prev, h);
    keys[j] = h;
    prev = cuts[j].byte;
  }
  return keys;
}

}  // namespace

SessionCache::SessionCache(SessionCacheLimits limits, RenderPrefixLimits prefix_limits, TurnLimits turn_limits)
    : limits_(limits), prefixes_(prefix_limits), turns_(turn_limits) {}
SessionCache::~SessionCache() = default;

size_t SessionCache::entry_bytes(size_t text_bytes, size_t ids, size_t cuts) {
  // text + ids + per cut (Cut, key, and an index slot with its share of the table) + fixed
  // overhead (Entry, LRU node, id map slot).
  return text_bytes + ids * sizeof(uint32_t) +
         cuts *
             (sizeof(Tokenizer::Cut) + sizeof(uint64_t) + 2 * (sizeof(uint64_t) + sizeof(Slot))) +
         256;
}

std::optional<TokenizerError> SessionCache::encode(const Tokenizer& tok, std::string_view text,
                                                   std::vector<uint32_t>& out,
                                                   bool add_special_tokens,
                                                   TextCuts* cuts_out) {
  if (cuts_out) {
    cuts_out->cuts.clear();
    cuts_out->complete = false;
  }
  // The same checks, in the same order, as Tokenizer::encode_into.
  std::vector<Tokenizer::Cut> cuts;
  if (auto e = tok.find_cuts(text, cuts)) return e;
  std::vector<uint32_t> before, after;
  if (add_special_tokens) {
    if (auto e = tok.special_ids_around(before, after)) return e;
  }
  const uint64_t serial = tok.serial();
  const std::vector<uint64_t> keys = chain_keys(serial, text, cuts);

  // Longest cached cut of this text.
  std::shared_ptr<const Entry> hit;
  size_t hit_cut = 0;  // index into cuts / hit->cuts
  if (!cuts.empty()) {
    std::lock_guard lock(mu_);
    for (size_t j = cuts.size(); j-- > 0;) {
      const auto slot = index_.find(keys[j]);
      if (slot == index_.end()) continue;
      const auto node = by_id_.find(slot->second.entry);
      if (node == by_id_.end()) continue;
      hit = *node->second;
      hit_cut = slot->second.cut;
      // The index says "some entry has this prefix"; check it is this one, byte for byte.
      if (hit->tokenizer != serial || hit_cut >= hit->cuts.size() ||
          hit->cuts[hit_cut].byte != cuts[j].byte || hit_cut != j) {
        hit.reset();
        ++stats_.mismatches;
      }
      break;
    }
  }
  const size_t reuse_bytes = hit ? hit->cuts[hit_cut].byte : 0;
  if (hit && std::memcmp(hit->text.data(), text.data(), reuse_bytes) != 0) {
    hit.reset();
    std::lock_guard lock(mu_);
    ++stats_.mismatches;
  }
  const size_t prefix_bytes = hit ? reuse_bytes : 0;
  const size_t prefix_ids = hit ? hit->cuts[hit_cut].ids : 0;

  // ids: special ids before, the cached prefix, the rest encoded, special ids after.
  const size_t out_start = out.size();
  out.insert(out.end(), before.begin(), before.end());
  const size_t body = out.size();
  if (hit)
    out.insert(out.end(), hit->ids.begin(), hit->ids.begin() + static_cast<ptrdiff_t>(prefix_ids));
  std::vector<Tokenizer::Cut> rest_cuts;
  if (auto e = tok.encode_with_cuts(text.substr(prefix_bytes), out, rest_cuts)) {
    out.resize(out_start);
    return e;
  }
  out.insert(out.end(), after.begin(), after.end());

  // The new entry: this text up to its last cut, when that is past the reused prefix. Its cuts
  // are the text's own (find_cuts); the ids counts come from the entry (up to the reused cut)
  // and from encoding the rest, whose cuts must be the text's cuts after the reused one.
  const size_t first_new = hit ? hit_cut + 1 : 0;
  std::shared_ptr<Entry> entry;
  bool too_large = false;
  bool consistent = rest_cuts.size() == cuts.size() - first_new;
  for (size_t j = first_new; consistent && j < cuts.size(); ++j) {
    Tokenizer::Cut& c = rest_cuts[j - first_new];
    c.byte += prefix_bytes;
    c.ids += prefix_ids;
    consistent = c.byte == cuts[j].byte;
  }
  if (consistent && cuts_out) {
    std::vector<Tokenizer::Cut>& all = cuts_out->cuts;
    all.reserve(cuts.size());
    if (hit) all.assign(hit->cuts.begin(), hit->cuts.begin() + static_cast<ptrdiff_t>(first_new));
    all.insert(all.end(), rest_cuts.begin(), rest_cuts.end());
    cuts_out->complete = true;
  }
  if (consistent && first_new < cuts.size()) {
    const Tokenizer::Cut last = rest_cuts.back();
    entry = std::make_shared<Entry>();
    entry->tokenizer = serial;
    entry->bytes = entry_bytes(last.byte, last.ids, cuts.size());
    if (entry->bytes <= limits_.max_bytes && limits_.max_entries > 0) {
      entry->text.assign(text.substr(0, last.byte));
      entry->ids.assign(out.begin() + static_cast<ptrdiff_t>(body),
                        out.begin() + static_cast<ptrdiff_t>(body + last.ids));
      entry->cuts.reserve(cuts.size());
      if (hit)
        entry->cuts.assign(hit->cuts.begin(),
                           hit->cuts.begin() + static_cast<ptrdiff_t>(first_new));
      entry->cuts.insert(entry->cuts.end(), rest_cuts.begin(), rest_cuts.end());
      entry->keys = keys;
    } else {
      entry.reset();
      too_large = true;
    }
  }

  std::lock_guard lock(mu_);
  if (hit) {
    ++stats_.hits;
  } else {
    ++stats_.misses;
  }
  stats_.reused_bytes += prefix_bytes;
  stats_.encoded_bytes += text.size() - prefix_bytes;
  if (!consistent) ++stats_.inconsistent;
  if (too_large) ++stats_.not_stored;
  if (entry) {
    // The new entry holds the reused prefix too (its keys now point to it); an entry whose text
    // is all a prefix of the new one is superseded by it.
    store_locked(std::move(entry), hit && hit_cut + 1 == hit->cuts.size() ? hit->id : 0);
  } else if (hit) {
    if (const auto node = by_id_.find(hit->id); node != by_id_.end()) {
      lru_.splice(lru_.begin(), lru_, node->second);
    }
  }
  return std::nullopt;
}

void SessionCache::store_locked(std::shared_ptr<Entry> e, uint64_t replaces) {
  e->id = next_id_++;
  for (uint32_t j = 0; j < e->keys.size(); ++j) index_.insert_or_assign(e->keys[j], Slot{e->id, j});
  lru_.push_front(e);
  by_id_.emplace(e->id, lru_.begin());
  ++stats_.entries;
  stats_.bytes += e->bytes;
  if (replaces != 0 && by_id_.count(replaces)) {
    erase_locked(replaces);
    ++stats_.replaced;
  }
  while (lru_.size() > 1 &&
         (lru_.size() > limits_.max_entries || stats_.bytes > limits_.max_bytes)) {
    erase_locked(lru_.back()->id);
    ++stats_.evictions;
  }
}

void SessionCache::erase_locked(uint64_t id) {
  const auto node = by_id_.find(id);
  if (node == by_id_.end()) return;
  const Entry& e = **node->second;
  for (const uint64_t key : e.keys) {
    const auto slot = index_.find(key);
    if (slot != index_.end() && slot->second.entry == id) index_.erase(slot);
  }
  stats_.bytes -= e.bytes;
  --stats_.entries;
  lru_.erase(node->second);
  by_id_.erase(node);
}

SessionCacheStats SessionCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void SessionCache::clear() {
  prefixes_.clear();
  turns_.clear();
  std::lock_guard lock(mu_);
  lru_.clear();
  by_id_.clear();
  index_.clear();
  stats_.entries = 0;
  stats_.bytes = 0;
}

}  // namespace ramjet::render
