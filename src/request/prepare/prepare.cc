// request/prepare: one JSON parse of the request body, the chat/completions shims, and the
// request facts (stream, output limit), then the fingerprints from the same parse.
//
// Two parses, one set of rules. The fast path reads the body with common/json_tape (the reader
// that validates as simdjson's DOM parser does) and reads the facts, the shim conditions and the
// canonical bytes through a read-only view (json_view.h, canonical_writer.h). When a shim must
// rewrite the body, or the tape cannot show what Boost.JSON would have parsed (any error, a
// double that is read or serialised, duplicate keys in a serialised object), the request is redone
// on the Boost.JSON path, which mutates and re-serialises. Both paths give the
// same bytes and facts as the Boost-only implementation kept in test/oracle/prepare_reference.cc
// (prepare_differential_test.cc, fuzz_prepare.cc). The Boost DOM lives in a per-call monotonic
// arena over a per-thread buffer and never leaves this file; an unchanged body is returned as the
// caller's original bytes.
#include "request/prepare/prepare.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "common/bytes.h"
#include "common/json_tape.h"
#include "request/prepare/canonical_writer.h"
#include "request/prepare/json_view.h"

namespace ramjet::request {
namespace {

namespace json = boost::json;
using detail::BoostView;
using detail::JsonKind;

// Depth bound for the /v1/models walk (the parse enforces it, so the recursion is bounded).
constexpr std::size_t kModelsMaxDepth = 64;

// The reasoning_effort values vLLM's ChatCompletionRequest accepts (its protocol.py's Literal).
constexpr std::array<std::string_view, 7> kReasoningEfforts = {"none", "minimal", "low", "medium",
                                                               "high", "xhigh",   "max"};

// One prepare() call's parse memory (prepare.h's contract): what its tape or its Boost.JSON heap
// may hold in all. Up to kParseFreeBytes (what a thread keeps between parses anyway) it is
// granted at once; past that, up to `per_byte` per body byte, each growth is asked of `memory`.
class ParseTally final : public json_tape::Allowance {
 public:
  ParseTally(size_t body_bytes, ParseMemory* memory) : body_(body_bytes), memory_(memory) {}

  // The bytes a parse may hold per body byte (kParseBytesPerBodyByte, the tape's; three times it
  // for Boost.JSON's document).
  void per_byte(uint64_t ratio) { cap_ = std::max<uint64_t>(kParseFreeBytes, ratio * body_); }

  // `needed`: what the document's values have taken so far (the ratio's measure); `bytes`: what
  // the parse would then hold (a tape's capacity doubles; Boost's heap says what it takes).
  bool allow(size_t needed, size_t bytes) override {
    if (bytes <= kParseFreeBytes) return true;
    if (!fits(needed)) return false;
    if (memory_ != nullptr && bytes > granted_) {
      if (!memory_->grow_to(bytes)) {
        refusal_ = ParseRefusal::kMemory;
        return false;
      }
      granted_ = bytes;
    }
    return true;
  }
  // Whether a read document whose values took `needed` bytes is within the ratio (a tape's
  // growth is asked at its doublings only: its last entries are checked here); else it is too
  // dense.
  bool fits(uint64_t needed) {
    if (needed <= cap_) return true;  // (cap_ is never below kParseFreeBytes)
    refusal_ = ParseRefusal::kTooDense;
    return false;
  }
  ParseRefusal refusal() const { return refusal_; }

 private:
  uint64_t body_;
  ParseMemory* memory_;
  uint64_t cap_ = 0;
  uint64_t granted_ = 0;
  ParseRefusal refusal_ = ParseRefusal::kNone;
};

// The heap under the Boost path: its documents' blocks past the arena, and the parser's stack.
// It counts what it holds on this thread and, during a prepare() call, asks that call's tally
// before holding more (a refusal is a std::bad_alloc, caught in prepare()).
class CountedHeap final : public json::memory_resource {
 public:
  ParseTally* tally = nullptr;
  size_t held() const { return held_; }

 private:
  // Each block carries its size in front (Boost 1.81's monotonic_resource gives back a block with
  // a size other than it asked for: held_ counts what was taken).
  static std::size_t header(std::size_t align) { return std::max(align, sizeof(std::max_align_t)); }
  void* do_allocate(std::size_t n, std::size_t align) override {
    const std::size_t total = header(align) + n;
    if (tally != nullptr && !tally->allow(held_ + total, held_ + total)) throw std::bad_alloc();
    auto* block = static_cast<unsigned char*>(::operator new(total, std::align_val_t(align)));
    std::memcpy(block, &total, sizeof total);
    held_ += total;
    return block + header(align);
  }
  void do_deallocate(void* p, std::size_t /*n*/, std::size_t align) override {
    unsigned char* const block = static_cast<unsigned char*>(p) - header(align);
    std::size_t total = 0;
    std::memcpy(&total, block, sizeof total);
    held_ -= total;
    ::operator delete(block, std::align_val_t(align));
  }
  bool do_is_equal(const json::memory_resource& other) const noexcept override { return this == &other; }

  size_t held_ = 0;
};

// The parse arena, parser and heap, one per thread: a DOM never outlives the prepare() or
// rewrite_models_context() call that built it (neither suspends nor nests), so small and
// medium bodies parse without touching the heap. Larger DOMs grow the arena with blocks of the
// counted heap that are freed when the call returns; a parser whose stack grew past
// kRetainedParserBytes is let go after the call.
constexpr std::size_t kArenaBytes = 64 * 1024;
constexpr std::size_t kRetainedParserBytes = 1u << 20;

struct ThreadParser {
  CountedHeap heap;  // declared first: it outlives the parser that uses it
  std::optional<json::parser> parser;
  std::size_t depth = 0;
};

ThreadParser& thread_parser_state() {
  thread_local ThreadParser t;
  return t;
}

unsigned char* thread_arena() {
  thread_local const std::unique_ptr<unsigned char[]> arena(new unsigned char[kArenaBytes]);
  return arena.get();
}

// The parser keeps its internal stack between parses; it is rebuilt when the depth limit changes.
json::parser& thread_parser(std::size_t max_depth) {
  ThreadParser& t = thread_parser_state();
  if (!t.parser || t.depth != max_depth) {
    json::parse_options opts;
    opts.max_depth = max_depth;
    t.parser.emplace(json::storage_ptr(&t.heap), opts);
    t.depth = max_depth;
  }
  return *t.parser;
}

// After a call: a parser whose stack grew past kRetainedParserBytes is let go (its heap frees it).
void release_large_parser(ThreadParser& t) {
  if (t.heap.held() > kRetainedParserBytes) t.parser.reset();
}

// A monotonic arena over this thread's buffer, its blocks past it from the counted heap.
json::monotonic_resource thread_monotonic() {
  return json::monotonic_resource(thread_arena(), kArenaBytes, json::storage_ptr(&thread_parser_state().heap));
}

// Parses `text` with its nodes in `mr`; false on any syntax, UTF-8 or depth error. `out` must
// already use `mr` (a value moved into one with another storage is deep-copied). The storage is
// a monotonic resource by type, so destroying the DOM does not walk it. A refused allocation
// throws (std::bad_alloc) through here.
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

// A read-only view of a json_tape value (json_view.h). The tape keeps every duplicate key where
// Boost.JSON keeps the last, so find() returns the last match; its doubles are correctly rounded
// where Boost 1.81's are not, so kExactDoubles is false. Integers are kinded as simdjson's DOM
// kinds them (int64 when they fit, else uint64), the contract the fast path was written to.
class TapeView {
 public:
  using Tape = json_tape::Tape;
  using Index = Tape::Index;
  static constexpr bool kUniqueKeys = false;
  static constexpr bool kExactDoubles = false;

  TapeView() = default;
  TapeView(const Tape* t, Index i) : t_(t), i_(i) {}

  JsonKind kind() const {
    switch (t_->kind(i_)) {
      case json_tape::Kind::kNull:
        return JsonKind::kNull;
      case json_tape::Kind::kTrue:
      case json_tape::Kind::kFalse:
        return JsonKind::kBool;
      case json_tape::Kind::kString:
        return JsonKind::kString;
      case json_tape::Kind::kUint:
        return t_->uint_value(i_) <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? JsonKind::kInt64
                                                                                                : JsonKind::kUint64;
      case json_tape::Kind::kNegInt:
        return JsonKind::kInt64;
      case json_tape::Kind::kDouble:
        return JsonKind::kDouble;
      case json_tape::Kind::kArray:
        return JsonKind::kArray;
      case json_tape::Kind::kObject:
        return JsonKind::kObject;
    }
    return JsonKind::kNull;
  }
  // The writer asks is(constant): those kinds are one tape kind each, one compare.
  bool is(JsonKind k) const {
    switch (k) {
      case JsonKind::kNull:
        return t_->kind(i_) == json_tape::Kind::kNull;
      case JsonKind::kString:
        return t_->kind(i_) == json_tape::Kind::kString;
      case JsonKind::kArray:
        return t_->kind(i_) == json_tape::Kind::kArray;
      case JsonKind::kObject:
        return t_->kind(i_) == json_tape::Kind::kObject;
      default:
        return kind() == k;
    }
  }
  bool as_bool() const { return t_->kind(i_) == json_tape::Kind::kTrue; }
  int64_t as_int64() const {
    return t_->kind(i_) == json_tape::Kind::kNegInt ? t_->negative_value(i_)
                                                    : static_cast<int64_t>(t_->uint_value(i_));
  }
  uint64_t as_uint64() const { return t_->uint_value(i_); }
  double as_double() const { return t_->double_value(i_); }
  std::string_view as_string() const { return t_->string(i_); }
  // A string as the body spells it and whether it holds an escape (canonical_writer.h copies it).
  std::string_view raw_string() const { return t_->raw_string(i_); }
  bool raw_escaped() const { return t_->escaped(i_); }

  std::optional<TapeView> find(std::string_view key) const {
    std::optional<TapeView> found;
    for (Index k = Tape::first_member(i_); k != t_->end(i_); k = t_->next_member(k)) {
      if (same(t_->string(k), key)) found = TapeView(t_, k + 1);
    }
    return found;
  }
  // An object's members (a key's index; its value follows it) or an array's elements.
  class Cursor {
   public:
    Cursor(const Tape* t, Index at, bool members) : t_(t), at_(at), members_(members) {}
    Index operator*() const { return at_; }
    Cursor& operator++() {
      at_ = members_ ? t_->next_member(at_) : t_->next(at_);
      return *this;
    }
    bool operator==(const Cursor& o) const { return at_ == o.at_; }

   private:
    const Tape* t_;
    Index at_;
    bool members_;
  };
  auto members() const {
    auto fn = [t = t_](Index k) { return std::pair<std::string_view, TapeView>(t->string(k), TapeView(t, k + 1)); };
    return detail::MappedRange<Cursor, decltype(fn)>(Cursor(t_, Tape::first_member(i_), true),
                                                     Cursor(t_, t_->end(i_), true), fn);
  }
  auto elements() const {
    auto fn = [t = t_](Index e) { return TapeView(t, e); };
    return detail::MappedRange<Cursor, decltype(fn)>(Cursor(t_, Tape::first_element(i_), false),
                                                     Cursor(t_, t_->end(i_), false), fn);
  }
  bool array_empty() const { return t_->container_empty(i_); }

 private:
  const Tape* t_ = nullptr;
  Index i_ = 0;
};

thread_local uint64_t fast_answered = 0;  // detail::fast_path_count()

// The per-thread tape keeps its storage for bodies up to about this size.
constexpr std::size_t kRetainedTape = 64 * 1024;

// The tape, one per thread: a tape never outlives the prepare() call that read into it.
json_tape::Tape& thread_tape() {
  thread_local json_tape::Tape tape;
  return tape;
}

// A JSON number at or above the strip threshold (integers compared exactly, doubles as double).
template <class V>
bool number_at_least(const V& v, uint64_t threshold) {
  switch (v.kind()) {
    case JsonKind::kUint64:
      return v.as_uint64() >= threshold;
    case JsonKind::kInt64:
      return v.as_int64() >= 0 && static_cast<uint64_t>(v.as_int64()) >= threshold;
    case JsonKind::kDouble:
      return v.as_double() >= static_cast<double>(threshold);
    default:
      return false;
  }
}

// Non-negative JSON integers only (doubles such as 100.0 are "invalid", as in the reference).
template <class V>
std::optional<uint64_t> non_negative_integer(const V& v) {
  if (v.is(JsonKind::kUint64)) return v.as_uint64();
  if (v.is(JsonKind::kInt64) && v.as_int64() >= 0) return static_cast<uint64_t>(v.as_int64());
  return std::nullopt;
}

bool strip_if_oversized(json::object& obj, std::string_view key, uint64_t threshold) {
  auto it = obj.find(key);
  if (it == obj.end() || !number_at_least(BoostView(it->value()), threshold)) return false;
  obj.stable_erase(it);
  return true;
}

// A content array whose parts are all {"type":"text","text":<string>} (extra keys allowed);
// an empty array is not all-text. Any other part (image_url, video_url, input_audio, a bare
// string, an unknown type) leaves the whole content untouched.
template <class V>
bool all_text_parts(const V& parts) {
  if (parts.array_empty()) return false;
  for (const V part : parts.elements()) {
    if (!part.is(JsonKind::kObject)) return false;
    const std::optional<V> type = part.find("type");
    if (!type || !type->is(JsonKind::kString) || type->as_string() != "text") return false;
    const std::optional<V> text = part.find("text");
    if (!text || !text->is(JsonKind::kString)) return false;
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
    if (content == nullptr || !content->is_array() || !all_text_parts(BoostView(*content))) {
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

template <class V>
bool valid_reasoning_effort(const V& v) {
  if (v.is(JsonKind::kNull)) return true;  // null means "unset" to vLLM: leave it alone
  if (!v.is(JsonKind::kString)) return false;
  for (std::string_view allowed : kReasoningEfforts) {
    if (v.as_string() == allowed) return true;
  }
  return false;
}

void apply_shims(json::object& obj, uint64_t threshold, ShimReport& report) {
  report.max_tokens_stripped = strip_if_oversized(obj, "max_tokens", threshold);
  report.max_completion_tokens_stripped =
      strip_if_oversized(obj, "max_completion_tokens", threshold);
  report.contents_flattened = flatten_contents(obj);
  auto effort = obj.find("reasoning_effort");
  if (effort != obj.end() && !valid_reasoning_effort(BoostView(effort->value()))) {
    obj.stable_erase(effort);
    report.reasoning_effort_dropped = true;
  }
}

// The top-level members prepare() reads, found in one pass over the object. A later duplicate
// key overwrites an earlier one, which is the member Boost.JSON keeps.
template <class V>
struct TopLevel {
  std::optional<V> stream;
  std::optional<V> messages;
  std::optional<V> max_tokens;
  std::optional<V> reasoning_effort;
  std::optional<V> max_output_tokens;
  std::optional<V> max_completion_tokens;
  std::optional<V> model;
  std::optional<V> cache_salt;  // vLLM: the request's own prefix-cache namespace
  std::optional<V> user;      // OpenAI: the end user (RJ_SESSION_AFFINITY_USER_FIELD)
  std::optional<V> metadata;  // Anthropic: metadata.user_id
};

// The body's user field as a session: `user`, else `metadata.user_id`; a string of 1..256 bytes.
template <class V>
void user_session(const TopLevel<V>& top, SessionId& out) {
  auto take = [&](const std::optional<V>& v) {
    if (!v || !v->is(JsonKind::kString)) return false;
    const std::string_view s = v->as_string();
    if (s.empty() || s.size() > kMaxSessionBytes) return false;
    out.source = SessionSource::kUser;
    out.value.assign(s);
    return true;
  };
  if (take(top.user)) return;
  if (top.metadata && top.metadata->is(JsonKind::kObject)) take(top.metadata->find("user_id"));
}

// The top-level "model": a string of 1..kMaxModelBytes bytes, or bad (any other value).
template <class V>
void model_of(const TopLevel<V>& top, PreparedRequest& out) {
  if (!top.model) return;
  if (!top.model->is(JsonKind::kString) || top.model->as_string().empty() ||
      top.model->as_string().size() > kMaxModelBytes) {
    out.model_field = ModelField::kBad;
    return;
  }
  out.model_field = ModelField::kName;
  out.model.assign(top.model->as_string());
}

// The top-level "cache_salt" when it is a non-empty string (vLLM refuses any other value with a
// 400, so no namespace is needed for it; its size is bounded by the body's).
template <class V>
void cache_salt_of(const TopLevel<V>& top, PreparedRequest& out) {
  if (!top.cache_salt || !top.cache_salt->is(JsonKind::kString)) return;
  const std::string_view salt = top.cache_salt->as_string();
  if (!salt.empty()) out.cache_salt.assign(salt);
}

template <class V>
TopLevel<V> top_level(const V& obj) {
  TopLevel<V> t;
  for (const auto& [key, v] : obj.members()) {
    switch (key.size()) {
      case 4:
        if (same(key, "user")) t.user = v;
        break;
      case 5:
        if (same(key, "model")) t.model = v;
        break;
      case 6:
        if (same(key, "stream")) t.stream = v;
        break;
      case 8:
        if (same(key, "messages")) t.messages = v;
        else if (same(key, "metadata")) t.metadata = v;
        break;
      case 10:
        if (same(key, "max_tokens")) t.max_tokens = v;
        else if (same(key, "cache_salt")) t.cache_salt = v;
        break;
      case 16:
        if (same(key, "reasoning_effort")) t.reasoning_effort = v;
        break;
      case 17:
        if (same(key, "max_output_tokens")) t.max_output_tokens = v;
        break;
      case 21:
        if (same(key, "max_completion_tokens")) t.max_completion_tokens = v;
        break;
      default:
        break;
    }
  }
  return t;
}

// Whether apply_shims() would change anything, read-only (the same conditions, in one pass).
template <class V>
bool shims_apply(const TopLevel<V>& top, uint64_t threshold) {
  if (top.max_tokens && number_at_least(*top.max_tokens, threshold)) return true;
  if (top.max_completion_tokens && number_at_least(*top.max_completion_tokens, threshold)) return true;
  if (top.reasoning_effort && !valid_reasoning_effort(*top.reasoning_effort)) return true;
  if (top.messages && top.messages->is(JsonKind::kArray)) {
    for (const V message : top.messages->elements()) {
      if (!message.is(JsonKind::kObject)) continue;
      const std::optional<V> content = message.find("content");
      if (content && content->is(JsonKind::kArray) && all_text_parts(*content)) return true;
    }
  }
  return false;
}

// Reference 2.7: the first present, non-null field decides; a malformed one is "invalid"
// (nullopt) with no fallback to the next field.
template <class V>
std::optional<uint64_t> output_limit(std::initializer_list<const std::optional<V>*> fields) {
  for (const std::optional<V>* v : fields) {
    if (!*v || (*v)->is(JsonKind::kNull)) continue;
    return non_negative_integer(**v);
  }
  return std::nullopt;
}

template <class V>
std::optional<uint64_t> requested_output_limit(Endpoint endpoint, const TopLevel<V>& top) {
  switch (endpoint) {
    case Endpoint::kChat:
      return output_limit<V>({&top.max_completion_tokens, &top.max_tokens});
    case Endpoint::kCompletions:
    case Endpoint::kMessages:
      return output_limit<V>({&top.max_tokens});
    case Endpoint::kResponses:
      return output_limit<V>({&top.max_output_tokens});
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

bool is_context_key(std::string_view key) {
  return key == "max_model_len" || key == "context_length" || key == "max_context_length";
}

// Walks objects and arrays below one data[] entry; returns whether anything changed.
bool shrink_context(json::value& v, uint64_t margin) {
  bool changed = false;
  if (json::object* obj = v.if_object()) {
    for (auto& [key, child] : *obj) {
      if (is_context_key(key)) {
        // Integers only (int64 for values up to 2^63-1, uint64 above); margin < value, so
        // the int64 subtraction cannot overflow.
        if (child.is_uint64() && child.get_uint64() > margin) {
          child.get_uint64() -= margin;
          changed = true;
          continue;
        }
        if (child.is_int64() && child.get_int64() > 0 &&
            static_cast<uint64_t>(child.get_int64()) > margin) {
          child.get_int64() -= static_cast<int64_t>(margin);
          changed = true;
          continue;
        }
      }
      changed = shrink_context(child, margin) || changed;
    }
  } else if (json::array* arr = v.if_array()) {
    for (json::value& child : *arr) changed = shrink_context(child, margin) || changed;
  }
  return changed;
}

// The Boost.JSON path: parse, shims (mutating the DOM), facts, re-serialisation, fingerprints.
PreparedRequest prepare_boost(Endpoint endpoint, std::string body, const PrepareConfig& config) {
  PreparedRequest out;
  out.endpoint = endpoint;

  json::monotonic_resource mr = thread_monotonic();
  json::value root = json::value(json::storage_ptr(&mr));
  if (!parse_into(body, mr, config.limits.max_json_depth, root) || !root.is_object()) {
    out.malformed_json = is_inference(endpoint);
    out.body = std::move(body);
    if (config.fingerprint && is_inference(endpoint)) {
      out.fingerprints = fingerprint_request(endpoint, json::value(), out.body, config.fingerprints);
    }
    return out;
  }
  out.json_object = true;

  TopLevel<BoostView> top = top_level(BoostView(root));
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
    top = top_level(BoostView(root));  // the facts come from the post-shim object
  }
  const json::object& obj = root.get_object();
  if (top.stream && top.stream->is(JsonKind::kBool)) out.stream = top.stream->as_bool();
  out.max_output_tokens = requested_output_limit(endpoint, top);
  model_of(top, out);
  cache_salt_of(top, out);
  if (config.session_user_field) user_session(top, out.session);

  if (out.shims.any()) {
    out.body = json::serialize(obj);
    out.rewritten = true;
  } else {
    out.body = std::move(body);
  }
  // The same parse feeds the fingerprints: the post-shim DOM and the bytes that are forwarded.
  if (config.fingerprint && is_inference(endpoint)) {
    out.fingerprints = fingerprint_request(endpoint, root, out.body, config.fingerprints);
  }
  return out;
}

// The fast path, for bodies that no shim changes: the same facts and fingerprints, read through
// a view of the tape. False (and `body` untouched) when the Boost path must decide: a parse error
// of any kind (Boost.JSON reads some bodies the tape refuses, e.g. 1e400 or a 20-digit integer,
// and then decides what is malformed), a body that is not an object, a shim to apply, or a value
// the view cannot vouch for (see TapeView). Fills `out` (a fresh PreparedRequest: written in
// place, not moved through an optional) and returns true; false leaves `out` partly written, for
// the Boost path to replace. A tape the tally would not let grow answers too: the body refused.
bool prepare_fast(Endpoint endpoint, std::string& body, const PrepareConfig& config, ParseTally& tally,
                  PreparedRequest& out) {
  if (config.limits.max_json_depth == 0) return false;
  json_tape::Tape& tape = thread_tape();
  struct Trim {  // however this returns: no view of the body outlives it
    json_tape::Tape& t;
    ~Trim() { t.trim(kRetainedTape); }
  } trim{tape};
  const bool parsed = tape.parse(body, config.limits.max_json_depth, &tally);
  if (tape.refused() || (parsed && !tally.fits(uint64_t{tape.entries()} * json_tape::Tape::kEntryBytes))) {
    out.endpoint = endpoint;
    out.parse_refused = tally.refusal();
    out.body = std::move(body);
    return true;
  }
  if (!parsed || tape.kind(json_tape::Tape::root()) != json_tape::Kind::kObject) return false;
  const TapeView view(&tape, json_tape::Tape::root());
  const TopLevel<TapeView> top = top_level(view);
  // Boost.JSON's value of a double may differ from the tape's (correctly rounded) in the last bits.
  for (const std::optional<TapeView>* limit :
       {&top.max_tokens, &top.max_completion_tokens, &top.max_output_tokens}) {
    if (*limit && (*limit)->is(JsonKind::kDouble)) return false;
  }
  if ((endpoint == Endpoint::kChat || endpoint == Endpoint::kCompletions) &&
      shims_apply(top, config.max_tokens_strip)) {
    return false;
  }
  out.endpoint = endpoint;
  out.json_object = true;
  if (top.stream && top.stream->is(JsonKind::kBool)) out.stream = top.stream->as_bool();
  out.max_output_tokens = requested_output_limit(endpoint, top);
  model_of(top, out);
  cache_salt_of(top, out);
  if (config.session_user_field) user_session(top, out.session);
  if (config.fingerprint && is_inference(endpoint)) {
    if (!detail::fingerprint_view(std::optional<TapeView>(view), body, config.fingerprints,
                                  out.fingerprints)) {
      return false;
    }
  }
  out.body = std::move(body);
  ++fast_answered;
  return true;
}

// The /v1/models rewrite (rewrite_models_context), on the same thread parser.
std::optional<std::string> rewrite_models(std::string_view body, uint64_t margin) {
  json::monotonic_resource mr = thread_monotonic();
  json::value root = json::value(json::storage_ptr(&mr));
  if (!parse_into(body, mr, kModelsMaxDepth, root) || !root.is_object()) return std::nullopt;
  json::value* data = root.get_object().if_contains("data");
  if (data == nullptr || !data->is_array()) return std::nullopt;
  bool changed = false;
  for (json::value& entry : data->get_array()) changed = shrink_context(entry, margin) || changed;
  if (!changed || !all_numbers_finite(root)) return std::nullopt;
  return json::serialize(root);
}

}  // namespace

uint64_t detail::fast_path_count() { return fast_answered; }

PreparedRequest prepare(Endpoint endpoint, std::string body, const PrepareConfig& config, ParseMemory* memory,
                        std::vector<uint64_t> chain_storage) {
  PreparedRequest out;
  chain_storage.clear();
  out.fingerprints.chain = std::move(chain_storage);
  ParseTally tally(body.size(), memory);
  auto refuse = [&] {  // the tally refused (or memory is exhausted): the body is not read
    out = PreparedRequest{};
    out.endpoint = endpoint;
    out.parse_refused = tally.refusal() != ParseRefusal::kNone ? tally.refusal() : ParseRefusal::kMemory;
  };
  try {
    tally.per_byte(kParseBytesPerBodyByte);
    if (prepare_fast(endpoint, body, config, tally, out)) return out;
  } catch (const std::bad_alloc&) {
    refuse();
    return out;
  }
  ThreadParser& t = thread_parser_state();
  struct Done {  // however this returns: the heap asks no tally, a large parser stack is let go
    ThreadParser& t;
    ~Done() {
      t.heap.tally = nullptr;
      release_large_parser(t);
    }
  } done{t};
  try {
    // Boost.JSON's document and parser stack take up to ~2.7x the tape's bytes a value.
    tally.per_byte(3 * kParseBytesPerBodyByte);
    t.heap.tally = &tally;
    out = prepare_boost(endpoint, std::move(body), config);
  } catch (const std::bad_alloc&) {
    t.parser.reset();  // its state after a throw inside it is not to be trusted
    refuse();
  }
  return out;
}

std::optional<std::string> rewrite_models_context(std::string_view body, uint64_t margin) {
  if (margin == 0) return std::nullopt;
  std::optional<std::string> out = rewrite_models(body, margin);
  release_large_parser(thread_parser_state());
  return out;
}

}  // namespace ramjet::request
