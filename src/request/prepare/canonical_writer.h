// request/prepare/canonical_writer: the canonical prompt bytes (canonical.h) and the chained
// XXH3 sink as templates over a JSON view (json_view.h), so the Boost.JSON DOM
// (canonical.cc) and common/json_tape (prepare.cc's fast path) share one statement of the rules.
// Internal to request/prepare. Nothing here allocates per JSON value.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/bytes.h"
#include "common/json_tape.h"
#include "common/utf8.h"
#include "request/prepare/canonical.h"
#include "request/prepare/json_view.h"

// The sink keeps an XXH3_state_t by value, so its layout comes from this header while the code is
// libxxhash0's: safe because libxxhash-dev depends on the libxxhash0 of its own version (=). (An
// XXH_INLINE_ALL build would decouple them, but xxhash 0.8.1 does not compile so at -Og.)
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
// Where libxxhash has its runtime dispatch (RAMJET_XXH3_DISPATCH, found by cmake: Debian builds
// its amd64 shared library with DISPATCH=1), the one-shot hash and the streaming update go through
// it (the header renames the two calls): AVX2 or AVX-512 where the CPU has them, SSE2 otherwise.
// The plain entry points are SSE2 only; the values are the same (reset and digest stay plain, as
// xxHash means them to).
#if defined(RAMJET_XXH3_DISPATCH)
#include <xxh_x86dispatch.h>
#endif

namespace ramjet::request::detail {

// serde_json escapes '"', '\\' and the C0 controls; '/' , DEL and non-ASCII pass through.
constexpr std::array<bool, 256> kNeedsEscape = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = true;
  t['"'] = true;
  t['\\'] = true;
  return t;
}();

#if defined(__SSE2__)
// Bit j set when the byte at p + j needs an escape (kNeedsEscape), for the 16 bytes at p.
inline unsigned escape_mask16(const unsigned char* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i controls = _mm_set1_epi8(0x1f);
  const __m128i flagged = _mm_or_si128(_mm_cmpeq_epi8(_mm_max_epu8(v, controls), controls),  // v <= 0x1f
                                       _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                    _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
  return static_cast<unsigned>(_mm_movemask_epi8(flagged));
}
#endif

// How many of the n bytes at p come before the first one kNeedsEscape flags (n: none does).
inline size_t clean_prefix(const unsigned char* p, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= n; i += 16) {
    if (const unsigned mask = escape_mask16(p + i); mask != 0) return i + static_cast<size_t>(__builtin_ctz(mask));
  }
  if (i < n && n >= 16) {  // the last 1-15 bytes: the 16 that end at p + n, less those already seen
    const unsigned mask = escape_mask16(p + n - 16) >> (16 - (n - i));
    return mask != 0 ? i + static_cast<size_t>(__builtin_ctz(mask)) : n;
  }
#endif
  while (i < n && !kNeedsEscape[p[i]]) ++i;
  return i;
}

// The letter of a two-byte escape ('n' for '\n'), or 0 where serde_json writes \u00XX.
constexpr std::array<char, 256> kShortEscape = [] {
  std::array<char, 256> t{};
  t['"'] = '"';
  t['\\'] = '\\';
  t['\b'] = 'b';
  t['\f'] = 'f';
  t['\n'] = 'n';
  t['\r'] = 'r';
  t['\t'] = 't';
  return t;
}();

// The escape sequence for one byte that kNeedsEscape flags; returns its length.
inline size_t escape_sequence(unsigned char c, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out[0] = '\\';
  if (kShortEscape[c] != 0) {
    out[1] = kShortEscape[c];
    return 2;
  }
  out[1] = 'u';
  out[2] = '0';
  out[3] = '0';
  out[4] = kHex[c >> 4];
  out[5] = kHex[c & 0xf];
  return 6;
}

// Hashes bytes as they arrive; emits one fingerprint per full chunk and stops at `max` bytes.
// A chunk's fingerprint is XXH3-64 of its bytes seeded with the previous chunk's fingerprint (0
// before the first). Pieces gather in a 2 KiB buffer. While nothing of the current chunk has been
// hashed, a last chunk that is all in the buffer is hashed in one XXH3_64bits_withSeed call: a
// prompt whose canonical bytes fit the buffer and one chunk (with the default 2 KiB chunks, any
// prompt of up to 2 KiB). Otherwise the buffer is fed to XXH3's streaming state whenever it fills,
// which gives what one call over the whole chunk gives however the bytes are cut, and a long run
// of string bytes that needs no escape and does not fit is hashed straight from the parsed body.
// Either way each byte is hashed once, in order.
class ChainSink {
 public:
  ChainSink(uint64_t chunk, uint64_t max, std::vector<uint64_t>& out)
      : chunk_(chunk), max_(max), out_(out) {
    XXH3_INITSTATE(&state_);  // as xxhash.h asks of a state not made by XXH3_createState()
  }
  ChainSink(const ChainSink&) = delete;
  ChainSink& operator=(const ChainSink&) = delete;

  bool full() const { return total_ + len_ >= max_; }
  uint64_t total() const { return std::min<uint64_t>(total_ + len_, max_); }

  void put(const char* p, size_t n) {
    if (len_ + n <= kBuffer) [[likely]] {
      copy_small(buffer_ + len_, reinterpret_cast<const unsigned char*>(p), n);
      len_ += n;
      return;
    }
    drain();
    if (n <= kCopyMax) {
      copy_small(buffer_, reinterpret_cast<const unsigned char*>(p), n);
      len_ = n;
      return;
    }
    hash(reinterpret_cast<const unsigned char*>(p), n);
  }
  void put(char c) {
    if (len_ == kBuffer) [[unlikely]] drain();
    buffer_[len_++] = static_cast<unsigned char>(c);
  }
  // A member whose value is a string without escapes, `key` NUL `"raw"` NUL as the writer's
  // pieces would put it, in one piece with one test for room; false (nothing put) when the
  // buffer has not the room: the writer puts it piece by piece. (`key` is a literal: its NUL
  // follows it.)
  bool try_put_string_field(std::string_view key, std::string_view raw) {
    const size_t k = key.size();
    if (len_ + k + raw.size() + 4 > kBuffer) return false;
    unsigned char* const d = buffer_ + len_;
    copy_small(d, reinterpret_cast<const unsigned char*>(key.data()), k + 1);
    d[k + 1] = '"';
    copy_small(d + k + 2, reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
    d[k + 2 + raw.size()] = '"';
    d[k + 3 + raw.size()] = '\0';
    len_ += k + raw.size() + 4;
    return true;
  }
  // String contents with serde_json escaping: each run of bytes that needs no escape (found 16
  // at a time) goes in as it is, each escaped byte as its sequence; no escaped copy is made.
  void put_escaped(const char* p, size_t n) {
    auto* bytes = reinterpret_cast<const unsigned char*>(p);
#if defined(__SSE2__)
    // A short string: copied in, then checked 16 bytes at a time in the buffer (the source may
    // end anywhere; the buffer always has the room).
    if (n < 16) {
      if (len_ + 16 > kBuffer) [[unlikely]] drain();
      copy_small(buffer_ + len_, bytes, n);
      if ((escape_mask16(buffer_ + len_) & ((1u << n) - 1)) == 0) {
        len_ += n;
        return;
      }
    }
#endif
    while (n > 0 && !full()) {
      const size_t i = clean_prefix(bytes, n);
      put(reinterpret_cast<const char*>(bytes), i);
      if (i == n) return;
      if (len_ + 6 > kBuffer) drain();
      len_ += escape_sequence(bytes[i], reinterpret_cast<char*>(buffer_ + len_));
      bytes += i + 1;
      n -= i + 1;
    }
  }
  void finish() {
    // A last chunk that is all in the buffer (a short prompt's only one) is hashed in one call,
    // without the streaming state.
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len_, max_ - total_));
    if (in_chunk_ == 0 && n <= chunk_) {
      if (n > 0) {
        seed_ = XXH3_64bits_withSeed(buffer_, n, seed_);
        out_.push_back(seed_);
        total_ += n;
      }
      len_ = 0;
      return;
    }
    drain();
    if (in_chunk_ > 0) emit();
  }
  // Forget everything written so far (the writer gave up: the raw bytes are hashed instead).
  void reset() {
    out_.clear();
    total_ = 0;
    in_chunk_ = 0;
    len_ = 0;
    seed_ = 0;
  }

 private:
  // A default chunk (RJ_ROUTE_CHUNK_BYTES 2048) fits: a prompt that short is hashed in one call.
  static constexpr size_t kBuffer = 2048;
  static constexpr size_t kCopyMax = 64;  // a longer piece that does not fit is hashed where it is

  // Up to 32 bytes with at most two overlapping loads and stores of one width (no call).
  static void copy_small(unsigned char* d, const unsigned char* p, size_t n) {
    auto two = [&](auto word) {
      constexpr size_t w = sizeof word;
      decltype(word) a, b;
      std::memcpy(&a, p, w);
      std::memcpy(&b, p + n - w, w);
      std::memcpy(d, &a, w);
      std::memcpy(d + n - w, &b, w);
    };
    if (n > 32) {
      std::memcpy(d, p, n);
    } else if (n >= 16) {
      struct Wide {
        uint64_t x, y;
      };
      two(Wide{});
    } else if (n >= 8) {
      two(uint64_t{});
    } else if (n >= 4) {
      two(uint32_t{});
    } else if (n > 0) {
      d[0] = p[0];
      d[n / 2] = p[n / 2];
      d[n - 1] = p[n - 1];
    }
  }
  [[gnu::noinline]] void drain() {
    hash(buffer_, len_);
    len_ = 0;
  }
  // Hashes n bytes (those past `max` are dropped), emitting at every chunk boundary.
  void hash(const unsigned char* p, size_t n) {
    n = static_cast<size_t>(std::min<uint64_t>(n, max_ - total_));
    total_ += n;
    while (n > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, chunk_ - in_chunk_));
      if (in_chunk_ == 0) XXH3_64bits_reset_withSeed(&state_, seed_);  // the chunk's first bytes
      XXH3_64bits_update(&state_, p, take);
      in_chunk_ += take;
      p += take;
      n -= take;
      if (in_chunk_ == chunk_) emit();
    }
  }
  void emit() {
    seed_ = XXH3_64bits_digest(&state_);
    out_.push_back(seed_);
    in_chunk_ = 0;
  }

  XXH3_state_t state_;  // the current chunk's hash, once its first bytes are hashed (in_chunk_ > 0)
  uint64_t seed_ = 0;     // the previous fingerprint
  uint64_t chunk_;
  uint64_t max_;
  std::vector<uint64_t>& out_;
  uint64_t total_ = 0;     // bytes hashed
  uint64_t in_chunk_ = 0;  // of which in the current chunk
  size_t len_ = 0;         // bytes waiting in buffer_
  unsigned char buffer_[kBuffer];
};

// Collects the bytes (truncated at `max`).
class StringSink {
 public:
  StringSink(uint64_t max, std::string& out) : max_(max), out_(out) {}
  bool full() const { return out_.size() >= max_; }
  uint64_t total() const { return out_.size(); }
  void put(const char* p, size_t n) {
    out_.append(p, static_cast<size_t>(std::min<uint64_t>(n, max_ - out_.size())));
  }
  void put(char c) {
    if (out_.size() < max_) out_.push_back(c);
  }
  void put_escaped(const char* p, size_t n) {
    const char* run = p;
    const char* const end = p + n;
    for (; p < end && !full(); ++p) {
      const auto c = static_cast<unsigned char>(*p);
      if (!kNeedsEscape[c]) [[likely]] {
        continue;
      }
      put(run, static_cast<size_t>(p - run));
      char seq[6];
      put(seq, escape_sequence(c, seq));
      run = p + 1;
    }
    if (!full()) put(run, static_cast<size_t>(end - run));
  }
  void finish() {}
  void reset() { out_.clear(); }

 private:
  uint64_t max_;
  std::string& out_;
};

constexpr std::string_view kMessageKeys[] = {
    "role",      "name",       "content",       "reasoning_content",
    "reasoning", "tool_calls", "function_call", "tool_call_id"};
// The top-level fields in canonical order, then the two the prompt is made of (read in the same
// pass over the root).
constexpr std::string_view kRootKeys[] = {
    "tools",         "functions",           "tool_choice",
    "function_call", "parallel_tool_calls", "reasoning_effort",
    "thinking",      "response_format",     "messages",
    "system"};
// Writer::field() puts a key with the NUL its literal ends with.
constexpr bool nul_terminated(std::span<const std::string_view> keys) {
  for (const std::string_view k : keys) {
    if (k.data()[k.size()] != '\0') return false;
  }
  return true;
}
static_assert(nul_terminated(kMessageKeys) && nul_terminated(kRootKeys));
constexpr size_t kTopLevelFields = 8;
constexpr size_t kRootMessages = 8;
constexpr size_t kRootSystem = 9;

// For each name length below 32, which of `keys` have it (bit i: keys[i]).
template <size_t N>
constexpr std::array<uint32_t, 32> length_masks(const std::string_view (&keys)[N]) {
  static_assert(N <= 32);
  std::array<uint32_t, 32> masks{};
  for (size_t i = 0; i < N; ++i) {
    if (keys[i].size() >= masks.size()) throw "a key of 32 bytes or more";  // (not a constant)
    masks[keys[i].size()] |= uint32_t{1} << i;
  }
  return masks;
}
constexpr auto kMessageKeyLengths = length_masks(kMessageKeys);
constexpr auto kRootKeyLengths = length_masks(kRootKeys);

// What find_each() found: at[i] holds the member of keys[i] where bit i of `present` is set.
// The set bits are walked in order (keys[] is in canonical order), so a message with two
// members costs two steps, not one per key.
template <class V, size_t N>
struct Found {
  std::array<V, N> at{};
  uint32_t present = 0;
  bool has(size_t i) const { return (present >> i & 1) != 0; }
  std::optional<V> get(size_t i) const { return has(i) ? std::optional<V>(at[i]) : std::nullopt; }
};

// find() of each of several keys in one pass over an object's members (the last member of a
// key, as find() returns): a message or the root is read once, not once per key, and a name is
// compared only with the keys of its length.
template <class V, size_t N>
Found<V, N> find_each(const V& obj, const std::string_view (&keys)[N], const std::array<uint32_t, 32>& lengths) {
  Found<V, N> out;
  for (const auto& member : obj.members()) {
    const std::string_view k = member.first;
    if (k.size() >= lengths.size()) continue;
    for (uint32_t m = lengths[k.size()]; m != 0; m &= m - 1) {
      const int i = std::countr_zero(m);
      if (same(k, keys[i])) {
        out.at[static_cast<size_t>(i)] = member.second;
        out.present |= uint32_t{1} << i;
        break;
      }
    }
  }
  return out;
}

// ryu/serde_json layout of a finite double (canonical.cc).
size_t format_double(double d, char* out);

// What writing the canonical bytes came to.
enum class WriteResult {
  kCanonical,  // canonical bytes written
  kRaw,        // the rules say raw bytes (non-finite number, nesting beyond the limit)
  kUnsure,     // the view cannot tell what Boost.JSON would have parsed (a tape double or
               // duplicate keys in a serialised object): redo the request on the Boost path
};

// Writes canonical bytes into a sink. Stops early once the sink is full.
template <class Sink, class V>
class Writer {
 public:
  Writer(Sink& sink, uint32_t max_depth) : sink_(sink), max_depth_(max_depth) {}

  using RootFields = Found<V, std::size(kRootKeys)>;
  using MessageFields = Found<V, std::size(kMessageKeys)>;

  // `root`: the root's members of kRootKeys; `messages` an array view or null, `system` a
  // non-null value or null.
  WriteResult prompt(const RootFields& root, const std::optional<V>& messages, const std::optional<V>& system) {
    if (system) {
      static constexpr char kSynthetic[] = "message\0role\0\"system\"\0content\0";
      sink_.put(kSynthetic, sizeof kSynthetic - 1);
      const WriteResult r = system->is(JsonKind::kArray) ? system_blocks(*system) : value(*system, 0);
      if (r != WriteResult::kCanonical) return r;
      sink_.put('\0');
    }
    if (!messages) return top_level(root);
    auto range = messages->elements();
    auto it = range.begin();
    const auto end = range.end();
    // The first message that does not lead, read while looking for the end of the lead run.
    std::optional<MessageFields> next;
    for (; it != end && !sink_.full(); ++it) {
      const V m = *it;
      if (!m.is(JsonKind::kObject)) break;
      const MessageFields fields = find_each(m, kMessageKeys, kMessageKeyLengths);
      if (!is_lead_role(fields)) {
        next = fields;
        break;
      }
      if (WriteResult r = message(fields); r != WriteResult::kCanonical) return r;
    }
    if (WriteResult r = top_level(root); r != WriteResult::kCanonical || sink_.full()) return r;
    if (next) {
      if (WriteResult r = message(*next); r != WriteResult::kCanonical) return r;
      ++it;
    }
    for (; it != end && !sink_.full(); ++it) {
      const V m = *it;
      if (m.is(JsonKind::kObject)) {
        if (WriteResult r = message(find_each(m, kMessageKeys, kMessageKeyLengths)); r != WriteResult::kCanonical) {
          return r;
        }
      }
    }
    return WriteResult::kCanonical;
  }

 private:
  WriteResult top_level(const RootFields& root) {
    for (uint32_t m = root.present & ((uint32_t{1} << kTopLevelFields) - 1); m != 0; m &= m - 1) {
      if (sink_.full()) return WriteResult::kCanonical;
      const auto i = static_cast<size_t>(std::countr_zero(m));
      if (WriteResult r = field(kRootKeys[i], root.at[i]); r != WriteResult::kCanonical) return r;
    }
    return WriteResult::kCanonical;
  }

  // A message whose role member (kMessageKeys[0]) is "system" or "developer".
  static bool is_lead_role(const MessageFields& found) {
    if (!found.has(0) || !found.at[0].is(JsonKind::kString)) return false;
    const std::string_view r = found.at[0].as_string();
    return r == "system" || r == "developer";
  }

  WriteResult message(const MessageFields& found) {
    sink_.put("message\0", 8);
    for (uint32_t m = found.present; m != 0; m &= m - 1) {
      const auto i = static_cast<size_t>(std::countr_zero(m));
      if (WriteResult r = field(kMessageKeys[i], found.at[i]); r != WriteResult::kCanonical) return r;
    }
    return WriteResult::kCanonical;
  }

  // The member `v` of `key` (a literal of kMessageKeys or kRootKeys: its NUL follows it).
  WriteResult field(std::string_view key, const V& v) {
    if (v.is(JsonKind::kNull)) return WriteResult::kCanonical;
    if constexpr (requires { sink_.try_put_string_field(key, v.raw_string()); }) {
      // Most members: written in one piece.
      if (v.is(JsonKind::kString) && !v.raw_escaped() && sink_.try_put_string_field(key, v.raw_string())) {
        return WriteResult::kCanonical;
      }
    }
    sink_.put(key.data(), key.size() + 1);  // with its NUL
    if (WriteResult r = value(v, 0); r != WriteResult::kCanonical) return r;
    sink_.put('\0');
    return WriteResult::kCanonical;
  }

  WriteResult value(const V& v, uint32_t depth) {
    if (sink_.full()) return WriteResult::kCanonical;
    switch (v.kind()) {
      case JsonKind::kNull:
        sink_.put("null", 4);
        return WriteResult::kCanonical;
      case JsonKind::kBool:
        if (v.as_bool()) {
          sink_.put("true", 4);
        } else {
          sink_.put("false", 5);
        }
        return WriteResult::kCanonical;
      case JsonKind::kInt64: {
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof buf, v.as_int64());
        sink_.put(buf, static_cast<size_t>(r.ptr - buf));
        return WriteResult::kCanonical;
      }
      case JsonKind::kUint64: {
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof buf, v.as_uint64());
        sink_.put(buf, static_cast<size_t>(r.ptr - buf));
        return WriteResult::kCanonical;
      }
      case JsonKind::kDouble:
        if constexpr (!V::kExactDoubles) {
          return WriteResult::kUnsure;
        } else {
          return number(v.as_double());
        }
      case JsonKind::kString:
        if constexpr (requires { v.raw_string(); }) {
          raw_string(v.raw_string(), v.raw_escaped());
        } else {
          string(v.as_string());
        }
        return WriteResult::kCanonical;
      case JsonKind::kArray:
        return array(v, depth + 1);
      case JsonKind::kObject:
        return object(v, depth + 1);
    }
    return WriteResult::kCanonical;
  }

  WriteResult number(double d) {
    if (!std::isfinite(d)) return WriteResult::kRaw;
    char buf[40];
    size_t n = format_double(d, buf);
    sink_.put(buf, n);
    return WriteResult::kCanonical;
  }

  void string(std::string_view s) {
    sink_.put('"');
    sink_.put_escaped(s.data(), s.size());
    sink_.put('"');
  }

  // A string as a validated body spells it (a view with raw strings: json_tape's), written as
  // string() writes its value without unescaping it first. Outside its escapes such a string has
  // no quote, backslash or control character, so those bytes are serde_json's as they are; each
  // escape becomes serde_json's spelling of its character (the short escape or \u00XX for the
  // few it escapes, the character's UTF-8 bytes for the rest).
  void raw_string(std::string_view raw, bool escaped) {
    sink_.put('"');
    if (!escaped) {
      sink_.put(raw.data(), raw.size());
    } else {
      const char* p = raw.data();
      const char* const end = p + raw.size();
      while (p < end && !sink_.full()) {
        const char* bs = static_cast<const char*>(std::memchr(p, '\\', static_cast<size_t>(end - p)));
        if (bs == nullptr) bs = end;
        sink_.put(p, static_cast<size_t>(bs - p));
        if (bs == end) break;
        uint32_t cp = 0;
        p = bs + json_tape::escape_at(bs, end, &cp);  // validated by the tape
        char out[6];
        if (cp < 0x80) {
          const auto c = static_cast<unsigned char>(cp);
          if (kNeedsEscape[c]) {
            sink_.put(out, escape_sequence(c, out));
          } else {
            sink_.put(static_cast<char>(c));
          }
        } else {
          utf8_.clear();
          append_utf8(utf8_, cp);
          sink_.put(utf8_.data(), utf8_.size());
        }
      }
    }
    sink_.put('"');
  }

  // Anthropic system blocks less Claude Code's per-request billing header (a text block starting
  // "x-anthropic-billing-header", different in every request), which vLLM drops before rendering:
  // kept, it would make each turn of a conversation a new prefix. (Added after 0.4.0.)
  WriteResult system_blocks(const V& a) {
    if (1 > max_depth_) return WriteResult::kRaw;
    sink_.put('[');
    bool first = true;
    for (const V e : a.elements()) {
      if (sink_.full()) return WriteResult::kCanonical;
      if (e.is(JsonKind::kObject)) {
        const std::optional<V> type = e.find("type");
        const std::optional<V> text = e.find("text");
        if (type && type->is(JsonKind::kString) && type->as_string() == "text" && text &&
            text->is(JsonKind::kString) && billing_header(*text))
          continue;
      }
      if (!first) sink_.put(',');
      first = false;
      if (WriteResult r = value(e, 1); r != WriteResult::kCanonical) return r;
    }
    sink_.put(']');
    return WriteResult::kCanonical;
  }

  // A text that starts "x-anthropic-billing-header": read from the raw spelling where it has no
  // escape that far (a long system text is then not unescaped just for this).
  static bool billing_header(const V& text) {
    static constexpr std::string_view kPrefix = "x-anthropic-billing-header";
    if constexpr (requires { text.raw_string(); }) {
      const std::string_view raw = text.raw_string();
      if (!text.raw_escaped() || raw.substr(0, kPrefix.size()).find('\\') == std::string_view::npos) {
        return raw.starts_with(kPrefix);
      }
    }
    return text.as_string().starts_with(kPrefix);
  }

  WriteResult array(const V& a, uint32_t depth) {
    if (depth > max_depth_) return WriteResult::kRaw;
    sink_.put('[');
    bool first = true;
    for (const V e : a.elements()) {
      if (sink_.full()) return WriteResult::kCanonical;
      if (!first) sink_.put(',');
      first = false;
      if (WriteResult r = value(e, depth); r != WriteResult::kCanonical) return r;
    }
    sink_.put(']');
    return WriteResult::kCanonical;
  }

  WriteResult object(const V& o, uint32_t depth) {
    if (depth > max_depth_) return WriteResult::kRaw;
    sink_.put('{');
    // Keys in byte order. The members live in one scratch stack shared by every level, so
    // indices (not iterators) are used across the recursive calls that may grow it.
    const size_t base = scratch_.size();
    for (const auto& member : o.members()) scratch_.push_back(member);
    std::sort(scratch_.begin() + static_cast<std::ptrdiff_t>(base), scratch_.end(),
              [](const Member& a, const Member& b) { return a.first < b.first; });
    if constexpr (!V::kUniqueKeys) {
      // Boost.JSON would have kept only the last of equal keys: let the Boost path decide.
      for (size_t i = base + 1; i < scratch_.size(); ++i) {
        if (scratch_[i - 1].first == scratch_[i].first) {
          scratch_.resize(base);
          return WriteResult::kUnsure;
        }
      }
    }
    WriteResult r = WriteResult::kCanonical;
    for (size_t i = base; i < scratch_.size() && r == WriteResult::kCanonical && !sink_.full(); ++i) {
      if (i != base) sink_.put(',');
      const Member member = scratch_[i];
      string(member.first);
      sink_.put(':');
      r = value(member.second, depth);
    }
    scratch_.resize(base);
    if (r == WriteResult::kCanonical) sink_.put('}');
    return r;
  }

  using Member = std::pair<std::string_view, V>;
  Sink& sink_;
  uint32_t max_depth_;
  std::string utf8_;  // raw_string(): an escaped character's UTF-8 bytes
  boost::container::small_vector<Member, 64> scratch_;
};

// Shared driver: canonical bytes when the body has a prompt shape, else (or on kRaw) the raw
// body. Returns kCanonical or kRaw with the sink finished, or kUnsure (sink contents undefined).
template <class Sink, class V>
WriteResult write_prompt(const std::optional<V>& root, std::string_view body,
                         const FingerprintConfig& config, Sink& sink) {
  auto raw = [&] {
    sink.reset();
    sink.put(body.data(), body.size());
    sink.finish();
    return WriteResult::kRaw;
  };
  if (!root || !root->is(JsonKind::kObject)) return raw();
  const auto fields = find_each(*root, kRootKeys, kRootKeyLengths);
  std::optional<V> messages = fields.get(kRootMessages);
  if (messages && messages->is(JsonKind::kNull)) messages.reset();
  if (messages && !messages->is(JsonKind::kArray)) return raw();
  std::optional<V> system = fields.get(kRootSystem);
  if (system && system->is(JsonKind::kNull)) system.reset();
  if (!messages && !system) return raw();
  Writer<Sink, V> writer(sink, config.limits.max_depth);
  const WriteResult r = writer.prompt(fields, messages, system);
  if (r == WriteResult::kRaw) return raw();
  if (r == WriteResult::kUnsure) return r;
  sink.finish();
  return WriteResult::kCanonical;
}

// fingerprint_request() over any view; false when the view was unsure (`out` is then garbage).
template <class V>
bool fingerprint_view(const std::optional<V>& root, std::string_view body,
                      const FingerprintConfig& config, Fingerprints& out) {
  out.chain.clear();  // (its storage kept: the caller may lend a previous request's)
  out.canonical_bytes = 0;
  out.raw_fallback = false;
  if (config.chunk_bytes == 0) return true;
  const uint64_t expected = std::min<uint64_t>(body.size(), config.max_prefix_bytes);
  out.chain.reserve(static_cast<size_t>(expected / config.chunk_bytes + 1));
  ChainSink sink(config.chunk_bytes, config.max_prefix_bytes, out.chain);
  const WriteResult r = write_prompt(root, body, config, sink);
  if (r == WriteResult::kUnsure) return false;
  out.raw_fallback = r == WriteResult::kRaw;
  out.canonical_bytes = sink.total();
  return true;
}

}  // namespace ramjet::request::detail
