// render::RenderPrefixCache: a bounded cache of rendered conversation prefixes, so that a native
// formatter renders only the messages a follow-up turn added. The formatter decides what a key
// stands for (a 128-bit hash of the parsed messages it covers, the tools and the formatter's
// identity) and which prefixes are safe to reuse; this cache only holds the texts.
//
// Owns: entries (a shared rendered text and the length of its reusable prefix), LRU order and
// limits. Entries of one request share one text buffer; each is accounted for the whole buffer,
// so the byte limit over-counts rather than under-counts. Thread-safe (one mutex; lookups copy a
// shared_ptr, never the text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/unordered/unordered_flat_map.hpp>

namespace ramjet::render {

struct RenderPrefixLimits {
  size_t max_entries = 4096;
  size_t max_bytes = 64u << 20;  // accounted bytes (text buffers + fixed overhead per entry)
};

struct RenderPrefixStats {
  uint64_t hits = 0;
  uint64_t misses = 0;       // lookups of a request that found no entry
  uint64_t evictions = 0;    // entries dropped to stay within the limits
  uint64_t not_stored = 0;   // entries larger than max_bytes alone
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

struct PrefixKey {
  uint64_t lo = 0, hi = 0;
  bool operator==(const PrefixKey&) const = default;
};

class RenderPrefixCache {
 public:
  explicit RenderPrefixCache(RenderPrefixLimits limits = {});
  RenderPrefixCache(const RenderPrefixCache&) = delete;
  RenderPrefixCache& operator=(const RenderPrefixCache&) = delete;

  struct Hit {
    std::shared_ptr<const std::string> text;  // the buffer; the prefix is its first `bytes`
    size_t bytes = 0;
  };
  // The entry stored under `key` (and marks it recently used). Not counted as a hit or a miss:
  // a request probes several keys; it reports its outcome with count().
  std::optional<Hit> find(const PrefixKey& key);
  void count(bool hit);
  // Stores text[0, bytes) under `key` (replacing an entry with the same key).
  void store(const PrefixKey& key, std::shared_ptr<const std::string> text, size_t bytes);

  RenderPrefixStats stats() const;
  void clear();

 private:
  struct Entry {
    PrefixKey key{};
    std::shared_ptr<const std::string> text{};
    size_t bytes = 0;
    size_t accounted = 0;
  };
  using Lru = std::list<Entry>;  // most recent first
  void erase_locked(Lru::iterator it);

  const RenderPrefixLimits limits_;
  mutable std::mutex mu_;
  Lru lru_;
  boost::unordered_flat_map<uint64_t, Lru::iterator> index_;  // key.lo -> entry (key.hi checked)
  RenderPrefixStats stats_;
};

}  // namespace ramjet::render
