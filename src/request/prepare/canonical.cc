// request/prepare/canonical: canonical prompt bytes and chained FNV-1a fingerprints. One writer
// template serialises into a sink: the hashing sink (production) never materialises the bytes,
// the string sink (tests, debugging) returns them. Nothing here allocates per JSON value.
#include "request/prepare/canonical.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>

#include <boost/container/small_vector.hpp>
#include <boost/json.hpp>

namespace ramjet::request {
namespace {

namespace json = boost::json;

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

inline uint64_t fnv1a(uint64_t h, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

// The state of a chunk's hash after the previous fingerprint's 8 little-endian bytes.
inline uint64_t chunk_seed(uint64_t previous) {
  uint64_t h = kFnvOffset;
  for (int i = 0; i < 8; ++i) {
    h ^= (previous >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
  return h;
}

// serde_json escapes '"', '\\' and the C0 controls; '/' , DEL and non-ASCII pass through.
constexpr std::array<bool, 256> kNeedsEscape = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[c] = true;
  t['"'] = true;
  t['\\'] = true;
  return t;
}();

// The escape sequence for one byte that kNeedsEscape flags; returns its length.
inline size_t escape_sequence(unsigned char c, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out[0] = '\\';
  switch (c) {
    case '"':
      out[1] = '"';
      return 2;
    case '\\':
      out[1] = '\\';
      return 2;
    case '\b':
      out[1] = 'b';
      return 2;
    case '\f':
      out[1] = 'f';
      return 2;
    case '\n':
      out[1] = 'n';
      return 2;
    case '\r':
      out[1] = 'r';
      return 2;
    case '\t':
      out[1] = 't';
      return 2;
    default:
      out[1] = 'u';
      out[2] = '0';
      out[3] = '0';
      out[4] = kHex[c >> 4];
      out[5] = kHex[c & 0xf];
      return 6;
  }
}

// Hashes bytes as they arrive; emits one fingerprint per full chunk and stops at `max` bytes.
class ChainSink {
 public:
  ChainSink(uint64_t chunk, uint64_t max, std::vector<uint64_t>& out)
      : chunk_(chunk), max_(max), out_(out), h_(chunk_seed(0)) {}

  bool full() const { return total_ >= max_; }
  uint64_t total() const { return total_; }

  void put(const char* p, size_t n) {
    n = static_cast<size_t>(std::min<uint64_t>(n, max_ - total_));
    total_ += n;
    auto* bytes = reinterpret_cast<const unsigned char*>(p);
    while (n > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, chunk_ - in_chunk_));
      h_ = fnv1a(h_, bytes, take);
      in_chunk_ += take;
      bytes += take;
      n -= take;
      if (in_chunk_ == chunk_) emit();
    }
  }
  void put(char c) {
    if (total_ >= max_) return;
    ++total_;
    h_ = (h_ ^ static_cast<unsigned char>(c)) * kFnvPrime;
    if (++in_chunk_ == chunk_) emit();
  }
  // String contents with serde_json escaping, scanned and hashed in one pass: the escape test
  // is independent of the hash state, so it hides behind the multiply's latency.
  void put_escaped(const char* p, size_t n) {
    auto* bytes = reinterpret_cast<const unsigned char*>(p);
    while (n > 0 && total_ < max_) {
      const size_t limit =
          static_cast<size_t>(std::min<uint64_t>({n, chunk_ - in_chunk_, max_ - total_}));
      uint64_t h = h_;
      size_t i = 0;
      for (; i < limit; ++i) {
        const unsigned char c = bytes[i];
        if (kNeedsEscape[c]) [[unlikely]] {
          break;
        }
        h = (h ^ c) * kFnvPrime;
      }
      h_ = h;
      in_chunk_ += i;
      total_ += i;
      bytes += i;
      n -= i;
      if (in_chunk_ == chunk_) emit();
      if (i < limit) {
        char seq[6];
        put(seq, escape_sequence(*bytes, seq));
        ++bytes;
        --n;
      }
    }
  }
  void finish() {
    if (in_chunk_ > 0) emit();
  }
  // Forget everything written so far (the writer gave up: the raw bytes are hashed instead).
  void reset() {
    out_.clear();
    total_ = 0;
    in_chunk_ = 0;
    h_ = chunk_seed(0);
  }

 private:
  void emit() {
    out_.push_back(h_);
    h_ = chunk_seed(h_);
    in_chunk_ = 0;
  }

  uint64_t chunk_;
  uint64_t max_;
  std::vector<uint64_t>& out_;
  uint64_t h_;
  uint64_t total_ = 0;
  uint64_t in_chunk_ = 0;
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
constexpr std::string_view kTopLevelKeys[] = {
    "tools",         "functions",           "tool_choice",
    "function_call", "parallel_tool_calls", "reasoning_effort",
    "thinking",      "response_format"};

// ryu/serde_json layout from the shortest round-trip digits that std::to_chars produces.
size_t format_double(double d, char* out) {
  char sci[40];
  auto r = std::to_chars(sci, sci + sizeof sci, d, std::chars_format::scientific);
  const char* p = sci;
  char* o = out;
  if (*p == '-') *o++ = *p++;
  char digits[24];
  size_t len = 0;
  for (; *p != 'e'; ++p) {
    if (*p != '.') digits[len++] = *p;
  }
  int exp10 = 0;
  std::from_chars(p + 1 + (p[1] == '+' ? 1 : 0), r.ptr, exp10);
  const int length = static_cast<int>(len);
  const int kk = exp10 + 1;  // 10^(kk-1) <= |d| < 10^kk
  const int k = kk - length;
  if (0 <= k && kk <= 16) {  // 1234e7 -> 12340000000.0
    std::memcpy(o, digits, len);
    o += len;
    for (int i = 0; i < k; ++i) *o++ = '0';
    *o++ = '.';
    *o++ = '0';
  } else if (0 < kk && kk <= 16) {  // 1234e-2 -> 12.34
    std::memcpy(o, digits, static_cast<size_t>(kk));
    o += kk;
    *o++ = '.';
    std::memcpy(o, digits + kk, len - static_cast<size_t>(kk));
    o += len - static_cast<size_t>(kk);
  } else if (-5 < kk && kk <= 0) {  // 1234e-6 -> 0.001234
    *o++ = '0';
    *o++ = '.';
    for (int i = 0; i < -kk; ++i) *o++ = '0';
    std::memcpy(o, digits, len);
    o += len;
  } else {  // 1e30, 1.234e33, 1e-7
    *o++ = digits[0];
    if (len > 1) {
      *o++ = '.';
      std::memcpy(o, digits + 1, len - 1);
      o += len - 1;
    }
    *o++ = 'e';
    o = std::to_chars(o, o + 8, kk - 1).ptr;
  }
  return static_cast<size_t>(o - out);
}

// Writes canonical bytes into a sink. Returns false (and the caller falls back to the raw body)
// on a non-finite number or nesting beyond the limit. Stops early once the sink is full.
template <class Sink>
class Writer {
 public:
  Writer(Sink& sink, uint32_t max_depth) : sink_(sink), max_depth_(max_depth) {}

  bool prompt(const json::object& obj, const json::array* messages, const json::value* system) {
    if (system != nullptr) {
      static constexpr char kSynthetic[] = "message\0role\0\"system\"\0content\0";
      sink_.put(kSynthetic, sizeof kSynthetic - 1);
      if (!value(*system, 0)) return false;
      sink_.put('\0');
    }
    size_t i = 0;
    const size_t n = messages ? messages->size() : 0;
    for (; i < n && !sink_.full(); ++i) {
      const json::object* m = (*messages)[i].if_object();
      if (m == nullptr || !is_lead_role(*m)) break;
      if (!message(*m)) return false;
    }
    for (std::string_view key : kTopLevelKeys) {
      if (sink_.full()) return true;
      if (!field(obj, key)) return false;
    }
    for (; i < n && !sink_.full(); ++i) {
      if (const json::object* m = (*messages)[i].if_object()) {
        if (!message(*m)) return false;
      }
    }
    return true;
  }

 private:
  static bool is_lead_role(const json::object& m) {
    const json::value* role = m.if_contains("role");
    if (role == nullptr || !role->is_string()) return false;
    const json::string& r = role->get_string();
    return r == "system" || r == "developer";
  }

  bool message(const json::object& m) {
    sink_.put("message\0", 8);
    for (std::string_view key : kMessageKeys) {
      if (!field(m, key)) return false;
    }
    return true;
  }

  bool field(const json::object& obj, std::string_view key) {
    const json::value* v = obj.if_contains(key);
    if (v == nullptr || v->is_null()) return true;
    sink_.put(key.data(), key.size());
    sink_.put('\0');
    if (!value(*v, 0)) return false;
    sink_.put('\0');
    return true;
  }

  bool value(const json::value& v, uint32_t depth) {
    if (sink_.full()) return true;
    switch (v.kind()) {
      case json::kind::null:
        sink_.put("null", 4);
        return true;
      case json::kind::bool_:
        if (v.get_bool()) {
          sink_.put("true", 4);
        } else {
          sink_.put("false", 5);
        }
        return true;
      case json::kind::int64: {
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof buf, v.get_int64());
        sink_.put(buf, static_cast<size_t>(r.ptr - buf));
        return true;
      }
      case json::kind::uint64: {
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof buf, v.get_uint64());
        sink_.put(buf, static_cast<size_t>(r.ptr - buf));
        return true;
      }
      case json::kind::double_:
        return number(v.get_double());
      case json::kind::string:
        string(v.get_string());
        return true;
      case json::kind::array:
        return array(v.get_array(), depth + 1);
      case json::kind::object:
        return object(v.get_object(), depth + 1);
    }
    return true;
  }

  bool number(double d) {
    if (!std::isfinite(d)) return false;
    char buf[40];
    size_t n = format_double(d, buf);
    sink_.put(buf, n);
    return true;
  }

  void string(std::string_view s) {
    sink_.put('"');
    sink_.put_escaped(s.data(), s.size());
    sink_.put('"');
  }

  bool array(const json::array& a, uint32_t depth) {
    if (depth > max_depth_) return false;
    sink_.put('[');
    bool first = true;
    for (const json::value& e : a) {
      if (sink_.full()) return true;
      if (!first) sink_.put(',');
      first = false;
      if (!value(e, depth)) return false;
    }
    sink_.put(']');
    return true;
  }

  bool object(const json::object& o, uint32_t depth) {
    if (depth > max_depth_) return false;
    sink_.put('{');
    // Keys in byte order. The pointers live in one scratch stack shared by every level, so
    // indices (not iterators) are used across the recursive calls that may grow it.
    const size_t base = scratch_.size();
    for (const json::key_value_pair& kv : o) scratch_.push_back(&kv);
    std::sort(scratch_.begin() + static_cast<std::ptrdiff_t>(base), scratch_.end(),
              [](const json::key_value_pair* a, const json::key_value_pair* b) {
                return a->key() < b->key();
              });
    bool ok = true;
    for (size_t i = base; i < scratch_.size() && ok && !sink_.full(); ++i) {
      if (i != base) sink_.put(',');
      const json::key_value_pair* kv = scratch_[i];
      string(kv->key());
      sink_.put(':');
      ok = value(kv->value(), depth);
    }
    scratch_.resize(base);
    if (ok) sink_.put('}');
    return ok;
  }

 private:
  Sink& sink_;
  uint32_t max_depth_;
  boost::container::small_vector<const json::key_value_pair*, 64> scratch_;
};

// Shared driver: canonical bytes when the body has a prompt shape, else (or on failure) raw.
template <class Sink>
bool write_prompt(const json::value& root, std::string_view body, const FingerprintConfig& config,
                  Sink& sink) {
  auto raw = [&] {
    sink.reset();
    sink.put(body.data(), body.size());
    sink.finish();
    return true;
  };
  const json::object* obj = root.if_object();
  if (obj == nullptr) return raw();
  const json::array* messages = nullptr;
  if (const json::value* m = obj->if_contains("messages"); m != nullptr && !m->is_null()) {
    messages = m->if_array();
    if (messages == nullptr) return raw();
  }
  const json::value* system = obj->if_contains("system");
  if (system != nullptr && system->is_null()) system = nullptr;
  if (messages == nullptr && system == nullptr) return raw();
  Writer<Sink> writer(sink, config.limits.max_depth);
  if (!writer.prompt(*obj, messages, system)) return raw();
  sink.finish();
  return false;
}

}  // namespace

Fingerprints fingerprint_request(Endpoint /*endpoint*/, const boost::json::value& root,
                                 std::string_view body, const FingerprintConfig& config) {
  Fingerprints out;
  if (config.chunk_bytes == 0) return out;
  const uint64_t expected = std::min<uint64_t>(body.size(), config.max_prefix_bytes);
  out.chain.reserve(static_cast<size_t>(expected / config.chunk_bytes + 1));
  ChainSink sink(config.chunk_bytes, config.max_prefix_bytes, out.chain);
  out.raw_fallback = write_prompt(root, body, config, sink);
  out.canonical_bytes = sink.total();
  return out;
}

std::string canonical_prompt_bytes(const boost::json::value& root, std::string_view body,
                                   const FingerprintConfig& config, bool* raw_fallback) {
  std::string out;
  StringSink sink(config.max_prefix_bytes, out);
  const bool raw = write_prompt(root, body, config, sink);
  if (raw_fallback != nullptr) *raw_fallback = raw;
  return out;
}

std::vector<uint64_t> chain_fingerprints(std::string_view bytes, uint64_t chunk_bytes) {
  std::vector<uint64_t> out;
  if (chunk_bytes == 0) return out;
  ChainSink sink(chunk_bytes, UINT64_MAX, out);
  sink.put(bytes.data(), bytes.size());
  sink.finish();
  return out;
}

std::string format_double_like_serde(double d) {
  char buf[40];
  return std::string(buf, format_double(d, buf));
}

}  // namespace ramjet::request
