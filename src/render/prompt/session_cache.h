// render::SessionCache: a bounded cache of encoded conversation prefixes, so that a follow-up
// turn of a conversation (the whole conversation resent plus a few new messages) only encodes
// what is new. Results are identical to Tokenizer::encode_into on the whole text.
//
// An entry is a rendered text cut at its last Tokenizer::Cut (right after an added token such
// as <|im_end|>), with its ids and the ids count at every cut. A lookup finds the cuts of the
// new text (Tokenizer::find_cuts: a scan for added tokens, no encoding), hashes the text up to
// each cut (XXH3, chained from cut to cut) and probes an index of every cached cut from the
// longest down; the first cut whose entry holds the same bytes (memcmp) gives the ids of the
// prefix, and only the rest is encoded. Because the cut is one of the new text's own cuts,
// encode(text) == ids(prefix) ++ encode(rest) holds whatever the entry's text continued with.
// A cut that several entries share (a common system prompt) is indexed to the newest of them;
// evicting that one unindexes it, and the older entries are then found only through their
// longer cuts until another entry stores the shared prefix again.
//
// Owns: entries, their index, LRU order and limits. Leaves rendering to render::chat_template
// and the splitting rule to render::Tokenizer. Thread-safe: one mutex around the index; hashing,
// the memcmp, copying ids and encoding run outside it (entries are immutable once stored).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "render/prompt/turn_cache.h"
#include "render/template/render_prefix_cache.h"
#include "render/tokenize/tokenizer.h"

namespace ramjet::render {

struct SessionCacheLimits {
  size_t max_entries = 1024;
  size_t max_bytes = 256u << 20;  // accounted bytes of all entries (text + ids + index)
};

struct SessionCacheStats {
  uint64_t hits = 0;           // encodes that reused a cached prefix
  uint64_t misses = 0;         // encodes that found none (including texts with no cut)
  uint64_t evictions = 0;      // entries dropped to stay within the limits
  uint64_t replaced = 0;       // entries dropped because a new entry extends them
  uint64_t not_stored = 0;     // new entries not kept: over max_bytes alone, or max_entries 0
  uint64_t mismatches = 0;     // index hits whose bytes differed (hash collisions)
  uint64_t inconsistent = 0;   // texts whose cuts disagreed with an entry's (never expected)
  uint64_t entries = 0;        // current entries
  uint64_t bytes = 0;          // current accounted bytes
  uint64_t reused_bytes = 0;   // text bytes whose ids came from the cache
  uint64_t encoded_bytes = 0;  // text bytes encoded
};

class SessionCache {
 public:
  explicit SessionCache(SessionCacheLimits limits = {}, RenderPrefixLimits prefix_limits = {},
                        TurnLimits turn_limits = {});
  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;

  // Appends the ids of `rendered` to `out`, exactly as tok.encode_into(rendered, out,
  // add_special_tokens) does (same errors; `out` unchanged on error), reusing the longest cached
  // prefix and storing the text up to its last cut. Entries are per tokenizer (Tokenizer::
  // serial()). With `cuts`: every cut of `rendered` with the ids before it (counted from the
  // first id of the text, after add_special_tokens' own), complete unless the encode failed or
  // the text's cuts disagreed with an entry's (never expected).
  struct TextCuts {
    std::vector<Tokenizer::Cut> cuts;
    bool complete = false;
  };
  std::optional<TokenizerError> encode(const Tokenizer& tok, std::string_view rendered,
                                       std::vector<uint32_t>& out, bool add_special_tokens = false,
                                       TextCuts* cuts = nullptr);

  SessionCacheStats stats() const;
  void clear();  // also clears render_prefixes() and turns()

  // Rendered conversation prefixes for a native formatter (render/template/qwen3_native.h), kept
  // beside the encoded ones: a follow-up turn then renders only its new messages and encodes only
  // its new bytes. Bounded by its own limits.
  RenderPrefixCache& render_prefixes() { return prefixes_; }
  // Exact routing's last turn of each conversation (render/prompt/turn_cache.h): a follow-up
  // whose body extends one renders and encodes only its new messages. Bounded by its own limits.
  TurnCache& turns() { return turns_; }

  // Bytes an entry of `text_bytes` bytes, `ids` ids and `cuts` cuts is accounted for.
  static size_t entry_bytes(size_t text_bytes, size_t ids, size_t cuts);

 private:
  struct Entry;
  struct Slot {
    uint64_t entry = 0;  // Entry::id
    uint32_t cut = 0;    // index into Entry::cuts
  };
  using Lru = std::list<std::shared_ptr<const Entry>>;  // most recent first

  void store_locked(std::shared_ptr<Entry> e, uint64_t replaces);
  void erase_locked(uint64_t id);

  const SessionCacheLimits limits_;
  mutable std::mutex mu_;
  Lru lru_;
  boost::unordered_flat_map<uint64_t, Lru::iterator> by_id_;
  boost::unordered_flat_map<uint64_t, Slot> index_;  // chained hash at a cut -> entry and cut
  uint64_t next_id_ = 1;
  SessionCacheStats stats_;
  RenderPrefixCache prefixes_;
  TurnCache turns_;
};

}  // namespace ramjet::render
