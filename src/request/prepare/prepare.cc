// request/prepare: one Boost.JSON parse of the request body, the chat/completions shims, and
// the request facts (stream, output limit). The DOM lives in a per-call monotonic arena over a
// per-thread buffer and never leaves this file; an unchanged body is returned as the caller's
// original bytes.
#include "request/prepare/prepare.h"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <boost/json.hpp>

namespace ramjet::request {
namespace {

namespace json = boost::json;

// Depth bound for the /v1/models walk (the parse enforces it, so the recursion is bounded).
constexpr std::size_t kModelsMaxDepth = 64;

// The reasoning_effort values vLLM's ChatCompletionRequest accepts (vllm-contracts.md §5).
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

}  // namespace

PreparedRequest prepare(Endpoint endpoint, std::string body, const PrepareConfig& config) {
  PreparedRequest out;
  out.endpoint = endpoint;

  json::monotonic_resource mr(thread_arena(), kArenaBytes);
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
    out.fingerprints = fingerprint_request(endpoint, root, out.body, config.fingerprints);
  }
  return out;
}

std::optional<std::string> rewrite_models_context(std::string_view body, uint64_t margin) {
  if (margin == 0) return std::nullopt;
  json::monotonic_resource mr(thread_arena(), kArenaBytes);
  json::value root = json::value(json::storage_ptr(&mr));
  if (!parse_into(body, mr, kModelsMaxDepth, root) || !root.is_object()) return std::nullopt;
  json::value* data = root.get_object().if_contains("data");
  if (data == nullptr || !data->is_array()) return std::nullopt;
  bool changed = false;
  for (json::value& entry : data->get_array()) changed = shrink_context(entry, margin) || changed;
  if (!changed || !all_numbers_finite(root)) return std::nullopt;
  return json::serialize(root);
}

}  // namespace ramjet::request
