// Frozen copy of the Boost.JSON-only request preparation (prepare.cc and canonical.cc as of
// 7328639, before the simdjson fast path), kept as the oracle of the differential tests
// (src/request/prepare/prepare_differential_test.cc and test/fuzz/fuzz_prepare.cc): prepare() must
// reproduce it byte for byte, field for field. Not used in production; do not change it to make a
// test pass. One deliberate change since: the chain hash is XXH3 (seeded with the previous
// fingerprint) where it was FNV-1a, as in production (canonical.h); this copy hashes each whole
// chunk at once where production streams.
#include "oracle/prepare_reference.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <boost/json.hpp>
#include <xxhash.h>

namespace ramjet::request::reference {
namespace {
namespace json = boost::json;

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

// Gathers each chunk's bytes and hashes the whole chunk at once when it is full (XXH3-64 seeded
// with the previous fingerprint, 0 before the first): the one-shot statement of the chain that
// production's streaming sink must agree with. Stops at `max` bytes.
class ChainSink {
 public:
  ChainSink(uint64_t chunk, uint64_t max, std::vector<uint64_t>& out)
      : chunk_(chunk), max_(max), out_(out) {}

  bool full() const { return total_ >= max_; }
  uint64_t total() const { return total_; }

  void put(const char* p, size_t n) {
    n = static_cast<size_t>(std::min<uint64_t>(n, max_ - total_));
    total_ += n;
    while (n > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, chunk_ - block_.size()));
      block_.append(p, take);
      p += take;
      n -= take;
      if (block_.size() == chunk_) emit();
    }
  }
  void put(char c) { put(&c, 1); }
  void put_escaped(const char* p, size_t n) {
    for (size_t i = 0; i < n && !full(); ++i) {
      const auto c = static_cast<unsigned char>(p[i]);
      if (!kNeedsEscape[c]) {
        put(p[i]);
        continue;
      }
      char seq[6];
      put(seq, escape_sequence(c, seq));
    }
  }
  void finish() {
    if (!block_.empty()) emit();
  }
  // Forget everything written so far (the writer gave up: the raw bytes are hashed instead).
  void reset() {
    out_.clear();
    total_ = 0;
    block_.clear();
    previous_ = 0;
  }

 private:
  void emit() {
    previous_ = XXH3_64bits_withSeed(block_.data(), block_.size(), previous_);
    out_.push_back(previous_);
    block_.clear();
  }

  uint64_t chunk_;
  uint64_t max_;
  std::vector<uint64_t>& out_;
  std::string block_;  // the current chunk's bytes
  uint64_t previous_ = 0;
  uint64_t total_ = 0;
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
      if (!(system->is_array() ? system_blocks(system->get_array()) : value(*system, 0))) return false;
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

  // Added after 0.4.0: Anthropic system blocks less Claude Code's per-request billing header
  // (a text block starting "x-anthropic-billing-header"), which vLLM drops before rendering.
  bool system_blocks(const json::array& a) {
    if (1 > max_depth_) return false;
    sink_.put('[');
    bool first = true;
    for (const json::value& e : a) {
      if (sink_.full()) return true;
      const json::object* o = e.if_object();
      const json::value* type = o ? o->if_contains("type") : nullptr;
      const json::value* text = o ? o->if_contains("text") : nullptr;
      if (type && type->is_string() && type->get_string() == "text" && text && text->is_string() &&
          std::string_view(text->get_string()).starts_with("x-anthropic-billing-header"))
        continue;
      if (!first) sink_.put(',');
      first = false;
      if (!value(e, 1)) return false;
    }
    sink_.put(']');
    return true;
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


Fingerprints ref_fingerprint_request(Endpoint /*endpoint*/, const boost::json::value& root,
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

// The reasoning_effort values vLLM's ChatCompletionRequest accepts (its protocol.py's Literal).
constexpr std::array<std::string_view, 7> kReasoningEfforts = {"none", "minimal", "low", "medium",
                                                               "high", "xhigh",   "max"};

// The parse arena and parser, one per thread: a DOM never outlives the prepare() or
// rewrite_models_context() call that built it (neither suspends nor nests), so small and
// medium bodies parse without touching the heap. Larger DOMs grow the arena with heap blocks
// that are freed when the call returns.
constexpr std::size_t kArenaBytes = 64 * 1024;

unsigned char* thread_arena() {
  thread_local const std::unique_ptr<unsigned char[]> arena(new unsigned char[kArenaBytes]);
  return arena.get();
}

// The parser keeps its internal stack between parses; it is rebuilt when the depth limit changes.
json::parser& thread_parser(std::size_t max_depth) {
  thread_local std::optional<json::parser> parser;
  thread_local std::size_t depth = 0;
  if (!parser || depth != max_depth) {
    json::parse_options opts;
    opts.max_depth = max_depth;
    parser.emplace(json::storage_ptr(), opts);
    depth = max_depth;
  }
  return *parser;
}

// Parses `text` with its nodes in `mr`; false on any syntax, UTF-8 or depth error. `out` must
// already use `mr` (a value moved into one with another storage is deep-copied). The storage is
// a monotonic resource by type, so destroying the DOM does not walk it.
bool parse_into(std::string_view text, json::monotonic_resource& mr, std::size_t max_depth,
                json::value& out) {
  json::parser& p = thread_parser(max_depth);
  p.reset(json::storage_ptr(&mr));
  boost::system::error_code ec;
  p.write(text.data(), text.size(), ec);
  if (!ec) out = p.release();
  p.reset();  // drop any partial DOM and the reference to `mr` now
  return !ec;
}

// A JSON number at or above the strip threshold (integers compared exactly, doubles as double).
bool number_at_least(const json::value& v, uint64_t threshold) {
  switch (v.kind()) {
    case json::kind::uint64:
      return v.get_uint64() >= threshold;
    case json::kind::int64:
      return v.get_int64() >= 0 && static_cast<uint64_t>(v.get_int64()) >= threshold;
    case json::kind::double_:
      return v.get_double() >= static_cast<double>(threshold);
    default:
      return false;
  }
}

// Non-negative JSON integers only (doubles such as 100.0 are "invalid", as in the reference).
std::optional<uint64_t> non_negative_integer(const json::value& v) {
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<uint64_t>(v.get_int64());
  return std::nullopt;
}

bool strip_if_oversized(json::object& obj, std::string_view key, uint64_t threshold) {
  auto it = obj.find(key);
  if (it == obj.end() || !number_at_least(it->value(), threshold)) return false;
  obj.stable_erase(it);
  return true;
}

// A content array whose parts are all {"type":"text","text":<string>} (extra keys allowed);
// an empty array is not all-text. Any other part (image_url, video_url, input_audio, a bare
// string, an unknown type) leaves the whole content untouched.
bool all_text_parts(const json::array& parts) {
  if (parts.empty()) return false;
  for (const json::value& part : parts) {
    const json::object* p = part.if_object();
    if (p == nullptr) return false;
    const json::value* type = p->if_contains("type");
    if (type == nullptr || !type->is_string() || type->get_string() != "text") return false;
    const json::value* text = p->if_contains("text");
    if (text == nullptr || !text->is_string()) return false;
  }
  return true;
}

// Flattens all-text content arrays into one string. Parts are joined with no separator, as
// the reference does (it appends each part's text to one buffer).
uint32_t flatten_contents(json::object& obj) {
  json::value* messages = obj.if_contains("messages");
  if (messages == nullptr || !messages->is_array()) return 0;
  uint32_t flattened = 0;
  for (json::value& message : messages->get_array()) {
    json::object* m = message.if_object();
    if (m == nullptr) continue;
    json::value* content = m->if_contains("content");
    if (content == nullptr || !content->is_array() || !all_text_parts(content->get_array())) {
      continue;
    }
    json::string text(content->storage());
    for (const json::value& part : content->get_array()) {
      text.append(part.get_object().at("text").get_string());
    }
    *content = std::move(text);
    ++flattened;
  }
  return flattened;
}

bool valid_reasoning_effort(const json::value& v) {
  if (v.is_null()) return true;  // null means "unset" to vLLM: leave it alone
  if (!v.is_string()) return false;
  for (std::string_view allowed : kReasoningEfforts) {
    if (v.get_string() == allowed) return true;
  }
  return false;
}

void apply_shims(json::object& obj, uint64_t threshold, ShimReport& report) {
  report.max_tokens_stripped = strip_if_oversized(obj, "max_tokens", threshold);
  report.max_completion_tokens_stripped =
      strip_if_oversized(obj, "max_completion_tokens", threshold);
  report.contents_flattened = flatten_contents(obj);
  auto effort = obj.find("reasoning_effort");
  if (effort != obj.end() && !valid_reasoning_effort(effort->value())) {
    obj.stable_erase(effort);
    report.reasoning_effort_dropped = true;
  }
}

// The top-level members prepare() reads, found in one pass over the object (a json::object's
// keys are unique, so this is what a lookup per name would return).
struct TopLevel {
  const json::value* stream = nullptr;
  const json::value* messages = nullptr;
  const json::value* max_tokens = nullptr;
  const json::value* reasoning_effort = nullptr;
  const json::value* max_output_tokens = nullptr;
  const json::value* max_completion_tokens = nullptr;
};

TopLevel top_level(const json::object& obj) {
  TopLevel t;
  for (const json::key_value_pair& member : obj) {
    const std::string_view key = member.key();
    const json::value* v = &member.value();
    switch (key.size()) {
      case 6:
        if (key == "stream") t.stream = v;
        break;
      case 8:
        if (key == "messages") t.messages = v;
        break;
      case 10:
        if (key == "max_tokens") t.max_tokens = v;
        break;
      case 16:
        if (key == "reasoning_effort") t.reasoning_effort = v;
        break;
      case 17:
        if (key == "max_output_tokens") t.max_output_tokens = v;
        break;
      case 21:
        if (key == "max_completion_tokens") t.max_completion_tokens = v;
        break;
      default:
        break;
    }
  }
  return t;
}

// Whether apply_shims() would change anything, read-only (the same conditions, in one pass).
bool shims_apply(const TopLevel& top, uint64_t threshold) {
  if (top.max_tokens && number_at_least(*top.max_tokens, threshold)) return true;
  if (top.max_completion_tokens && number_at_least(*top.max_completion_tokens, threshold)) return true;
  if (top.reasoning_effort && !valid_reasoning_effort(*top.reasoning_effort)) return true;
  if (top.messages && top.messages->is_array()) {
    for (const json::value& message : top.messages->get_array()) {
      const json::object* m = message.if_object();
      if (m == nullptr) continue;
      const json::value* content = m->if_contains("content");
      if (content != nullptr && content->is_array() && all_text_parts(content->get_array())) return true;
    }
  }
  return false;
}

// Reference 2.7: the first present, non-null field decides; a malformed one is "invalid"
// (nullopt) with no fallback to the next field.
std::optional<uint64_t> output_limit(std::initializer_list<const json::value*> fields) {
  for (const json::value* v : fields) {
    if (v == nullptr || v->is_null()) continue;
    return non_negative_integer(*v);
  }
  return std::nullopt;
}

std::optional<uint64_t> requested_output_limit(Endpoint endpoint, const TopLevel& top) {
  switch (endpoint) {
    case Endpoint::kChat:
      return output_limit({top.max_completion_tokens, top.max_tokens});
    case Endpoint::kCompletions:
    case Endpoint::kMessages:
      return output_limit({top.max_tokens});
    case Endpoint::kResponses:
      return output_limit({top.max_output_tokens});
    default:
      return std::nullopt;
  }
}

// Boost.JSON parses an overflowing literal such as 1e400 as infinity and 1.81 serialises it as
// the non-JSON token "Infinity"; such a tree cannot be re-serialised faithfully. Iterative, so
// a deep (but depth-limited) body cannot exhaust the stack.
bool all_numbers_finite(const json::value& root) {
  std::vector<const json::value*> todo{&root};
  while (!todo.empty()) {
    const json::value* v = todo.back();
    todo.pop_back();
    switch (v->kind()) {
      case json::kind::double_:
        if (!std::isfinite(v->get_double())) return false;
        break;
      case json::kind::array:
        for (const json::value& child : v->get_array()) todo.push_back(&child);
        break;
      case json::kind::object:
        for (const auto& member : v->get_object()) todo.push_back(&member.value());
        break;
      default:
        break;
    }
  }
  return true;
}

}  // namespace

PreparedRequest prepare_reference(Endpoint endpoint, std::string body, const PrepareConfig& config) {
  PreparedRequest out;
  out.endpoint = endpoint;

  json::monotonic_resource mr(thread_arena(), kArenaBytes);
  json::value root = json::value(json::storage_ptr(&mr));
  if (!parse_into(body, mr, config.limits.max_json_depth, root) || !root.is_object()) {
    out.malformed_json = is_inference(endpoint);
    out.body = std::move(body);
    if (config.fingerprint && is_inference(endpoint)) {
      out.fingerprints = ref_fingerprint_request(endpoint, json::value(), out.body, config.fingerprints);
    }
    return out;
  }
  out.json_object = true;

  TopLevel top = top_level(root.get_object());
  if ((endpoint == Endpoint::kChat || endpoint == Endpoint::kCompletions) &&
      shims_apply(top, config.max_tokens_strip)) {
    apply_shims(root.get_object(), config.max_tokens_strip, out.shims);
    if (out.shims.any() && !all_numbers_finite(root)) {
      // Rare: the body can only be forwarded as sent, so the facts come from the unshimmed
      // body too (this parse cannot fail: the same bytes parsed a moment ago).
      out.shims = ShimReport{};
      if (!parse_into(body, mr, config.limits.max_json_depth, root) || !root.is_object()) {
        std::abort();  // impossible: these bytes parsed as an object a moment ago
      }
    }
    top = top_level(root.get_object());  // the facts come from the post-shim object
  }
  const json::object& obj = root.get_object();
  if (top.stream && top.stream->is_bool()) out.stream = top.stream->get_bool();
  out.max_output_tokens = requested_output_limit(endpoint, top);

  if (out.shims.any()) {
    out.body = json::serialize(obj);
    out.rewritten = true;
  } else {
    out.body = std::move(body);
  }
  // The same parse feeds the fingerprints: the post-shim DOM and the bytes that are forwarded.
  if (config.fingerprint && is_inference(endpoint)) {
    out.fingerprints = ref_fingerprint_request(endpoint, root, out.body, config.fingerprints);
  }
  return out;
}

std::vector<uint64_t> reference_fnv_chain(std::string_view bytes, size_t chunk) {
  std::vector<uint64_t> out;
  uint64_t prev = 0;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < 8; ++i) h = (h ^ ((prev >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
    for (const unsigned char c : bytes.substr(at, chunk)) h = (h ^ c) * 0x100000001b3ULL;
    out.push_back(prev = h);
  }
  return out;
}

}  // namespace ramjet::request::reference
