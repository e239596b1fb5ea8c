// See usage_reference.h. Frozen: a copy of request/usage's simdjson reader as of 6907809.
#include "oracle/usage_reference.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>

#include <simdjson.h>

namespace ramjet::oracle {
namespace {

using request::Endpoint;
using request::Usage;
using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

constexpr size_t kMaxFinishReasonBytes = 64;

std::optional<element> field(const object& o, std::string_view key) {
  element e;
  if (o.at_key(key).get(e) != simdjson::SUCCESS) return std::nullopt;
  return e;
}

std::optional<object> object_field(const object& o, std::string_view key) {
  object r;
  auto e = field(o, key);
  if (!e || e->get_object().get(r) != simdjson::SUCCESS) return std::nullopt;
  return r;
}

bool non_empty(const object& o) {
  return o.begin() != o.end();
}

// A token count: a non-negative integer (an integral double such as 12.0 is accepted too).
std::optional<uint64_t> count_field(const object& o, std::string_view key) {
  auto e = field(o, key);
  if (!e) return std::nullopt;
  switch (e->type()) {
    case element_type::UINT64:
      return e->get_uint64().value_unsafe();
    case element_type::INT64: {
      int64_t v = e->get_int64().value_unsafe();
      if (v < 0) return std::nullopt;
      return static_cast<uint64_t>(v);
    }
    case element_type::DOUBLE: {
      double v = e->get_double().value_unsafe();
      // 2^64 as a double; the comparison also rejects NaN (simdjson never produces one).
      if (!(v >= 0.0 && v < 18446744073709551616.0) ||
          static_cast<double>(static_cast<uint64_t>(v)) != v) {
        return std::nullopt;
      }
      return static_cast<uint64_t>(v);
    }
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> first_count(const object& o, std::initializer_list<std::string_view> keys) {
  for (std::string_view key : keys) {
    if (auto v = count_field(o, key)) return v;
  }
  return std::nullopt;
}

// Python-like truthiness, as the reference applies to tool_calls.
bool truthy(const element& e) {
  switch (e.type()) {
    case element_type::NULL_VALUE:
      return false;
    case element_type::BOOL:
      return e.get_bool().value_unsafe();
    case element_type::STRING:
      return !e.get_string().value_unsafe().empty();
    case element_type::ARRAY: {
      array a = e.get_array().value_unsafe();
      return a.begin() != a.end();
    }
    case element_type::OBJECT:
      return non_empty(e.get_object().value_unsafe());
    default:
      return true;  // numbers
  }
}

// Capped at 64 bytes on a UTF-8 boundary (simdjson has validated the string), so metric
// labels and journal records stay valid UTF-8 and bounded.
void set_finish_reason(std::string& out, std::string_view v) {
  if (v.size() > kMaxFinishReasonBytes) {
    size_t n = kMaxFinishReasonBytes;
    while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80) --n;
    v = v.substr(0, n);
  }
  out.assign(v);
}

void apply_usage(const object& usage, Endpoint endpoint, Usage& u) {
  if (auto v = first_count(usage, {"prompt_tokens", "input_tokens"})) u.prompt_tokens = v;
  if (endpoint == Endpoint::kMessages && u.prompt_tokens && !field(usage, "prompt_tokens")) {
    // Anthropic's meaning, which vLLM (>= 0.32, with --enable-prompt-tokens-details) follows:
    // input_tokens is the part of the prompt neither read from nor written to the cache, and
    // the prompt is input + cache_read_input_tokens + cache_creation_input_tokens. Without the
    // cache fields (message_start, an older vLLM) input_tokens is the whole prompt.
    for (std::string_view key : {"cache_read_input_tokens", "cache_creation_input_tokens"}) {
      if (auto v = count_field(usage, key)) {
        *u.prompt_tokens = *v > std::numeric_limits<uint64_t>::max() - *u.prompt_tokens
                               ? std::numeric_limits<uint64_t>::max()
                               : *u.prompt_tokens + *v;
      }
    }
  }
  if (auto v = first_count(usage, {"completion_tokens", "output_tokens"})) u.completion_tokens = v;
  std::optional<uint64_t> cached;
  if (auto details = object_field(usage, "prompt_tokens_details")) {
    cached = count_field(*details, "cached_tokens");
  }
  if (!cached) cached = first_count(usage, {"cached_tokens", "cache_read_input_tokens"});
  if (!cached) {
    if (auto details = object_field(usage, "input_tokens_details")) {
      cached = count_field(*details, "cached_tokens");
    }
  }
  if (cached) u.cached_tokens = cached;
}

// One pass over an object's members keeping, for each wanted key, the value at_key() would
// return (its first occurrence): an event is read with a few passes instead of one linear scan
// per lookup.
template <size_t N>
std::array<std::optional<element>, N> pick(const object& o, const std::array<std::string_view, N>& keys) {
  std::array<std::optional<element>, N> out;
  size_t found = 0;
  for (const auto& member : o) {
    const std::string_view key = member.key;
    if (key.empty()) continue;
    for (size_t i = 0; i < N; ++i) {
      // Length and first byte first: most members match no wanted key.
      if (!out[i] && key.size() == keys[i].size() && key[0] == keys[i][0] && key == keys[i]) {
        out[i] = member.value;
        if (++found == N) return out;
        break;
      }
    }
  }
  return out;
}

// pick() for the event root's members (choices, stop_reason, delta, response, status, message,
// usage), dispatched on the name's length: it runs for every SSE event.
std::array<std::optional<element>, 7> pick_root(const object& o) {
  std::array<std::optional<element>, 7> out;
  auto keep = [&out](size_t i, const element& v) {
    if (!out[i]) out[i] = v;
  };
  for (const auto& member : o) {
    const std::string_view key = member.key;
    switch (key.size()) {
      case 5:
        if (key == "delta") {
          keep(2, member.value);
        } else if (key == "usage") {
          keep(6, member.value);
        }
        break;
      case 6:
        if (key == "status") keep(4, member.value);
        break;
      case 7:
        if (key == "choices") {
          keep(0, member.value);
        } else if (key == "message") {
          keep(5, member.value);
        }
        break;
      case 8:
        if (key == "response") keep(3, member.value);
        break;
      case 11:
        if (key == "stop_reason") keep(1, member.value);
        break;
      default:
        break;
    }
  }
  return out;
}

std::optional<object> as_object(const std::optional<element>& e) {
  object r;
  if (!e || e->get_object().get(r) != simdjson::SUCCESS) return std::nullopt;
  return r;
}

std::optional<std::string_view> as_string(const std::optional<element>& e) {
  std::string_view s;
  if (!e || e->get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return s;
}

bool non_empty_string(const std::optional<element>& e) {
  auto s = as_string(e);
  return s && !s->empty();
}

void set_status(std::string& out, const std::optional<std::string_view>& status) {
  if (status && (*status == "completed" || *status == "incomplete" || *status == "cancelled")) {
    set_finish_reason(out, *status);
  }
}

// OpenAI chat/completions chunk or body (`choices` is the event's choices member). Returns
// whether a choice carried generated output.
bool extract_choices(const std::optional<element>& choices_el, Endpoint endpoint, Usage& u, bool detect) {
  array choices;
  if (!choices_el || choices_el->get_array().get(choices) != simdjson::SUCCESS) return false;
  static constexpr std::array<std::string_view, 4> kChoiceKeys = {"finish_reason", "delta", "message", "text"};
  static constexpr std::array<std::string_view, 1> kFinishKey = {"finish_reason"};
  static constexpr std::array<std::string_view, 4> kNodeKeys = {"content", "reasoning_content", "reasoning",
                                                                "tool_calls"};
  bool generated = false;
  bool first = true;
  for (element choice_el : choices) {
    object choice;
    const bool is_first = first;
    first = false;
    if (!detect && !is_first) break;  // only the first choice's finish_reason can still matter
    if (choice_el.get_object().get(choice) != simdjson::SUCCESS) continue;
    if (!detect) {
      if (auto reason = as_string(pick(choice, kFinishKey)[0])) set_finish_reason(u.finish_reason, *reason);
      break;
    }
    const auto f = pick(choice, kChoiceKeys);
    if (is_first) {
      if (auto reason = as_string(f[0])) set_finish_reason(u.finish_reason, *reason);
    }
    // The non-empty delta (streaming) or else the message (non-streaming).
    std::optional<object> node = as_object(f[1]);
    if (!node || !non_empty(*node)) node = as_object(f[2]);
    if (node) {
      const auto n = pick(*node, kNodeKeys);
      if (non_empty_string(n[0]) || non_empty_string(n[1]) || non_empty_string(n[2])) generated = true;
      if (n[3] && truthy(*n[3])) generated = true;
    }
    // /v1/completions carries its text on the choice itself (not in reference 6.1, which
    // would otherwise never see a first token on this endpoint).
    if (endpoint == Endpoint::kCompletions && non_empty_string(f[3])) generated = true;
  }
  return generated;
}

// One event (or body): every shape is tried, as the reference does; they do not overlap.
// Generated output is only looked for until it has been seen (`u.generated`): after that an
// event can only change the finish reason and the usage.
bool extract_event(const object& root, Endpoint endpoint, Usage& u) {
  const bool detect = !u.generated;
  const auto r = pick_root(root);
  bool generated = extract_choices(r[0], endpoint, u, detect);

  // Anthropic: stop_reason at the top (body) or in message_delta's delta; text-ish deltas.
  // Responses: the delta is a string.
  if (auto reason = as_string(r[1])) set_finish_reason(u.finish_reason, *reason);
  if (const auto& delta = r[2]) {
    object d;
    std::string_view s;
    if (delta->get_object().get(d) == simdjson::SUCCESS) {
      static constexpr std::array<std::string_view, 5> kDeltaKeys = {"stop_reason", "text", "thinking",
                                                                     "reasoning", "partial_json"};
      const auto df = pick(d, kDeltaKeys);
      if (auto reason = as_string(df[0])) set_finish_reason(u.finish_reason, *reason);
      for (size_t i = 1; detect && i < df.size(); ++i) {
        if (non_empty_string(df[i])) generated = true;
      }
    } else if (detect && delta->get_string().get(s) == simdjson::SUCCESS && !s.empty()) {
      generated = true;
    }
  }

  // Responses: status at the top (body) or in the event's response object.
  const std::optional<object> response = as_object(r[3]);
  std::optional<object> response_usage;
  set_status(u.finish_reason, as_string(r[4]));
  if (response) {
    static constexpr std::array<std::string_view, 2> kResponseKeys = {"status", "usage"};
    const auto rf = pick(*response, kResponseKeys);
    set_status(u.finish_reason, as_string(rf[0]));
    response_usage = as_object(rf[1]);
  }

  // Usage: message.usage (Anthropic message_start) if non-empty, else response.usage
  // (Responses events) if non-empty, else the top-level usage.
  std::optional<object> usage;
  if (auto message = as_object(r[5])) {
    if (auto mu = object_field(*message, "usage"); mu && non_empty(*mu)) usage = mu;
  }
  if (!usage && response_usage && non_empty(*response_usage)) usage = response_usage;
  if (!usage) usage = as_object(r[6]);
  if (usage) apply_usage(*usage, endpoint, u);

  if (generated) u.generated = true;
  return generated;
}

}  // namespace

bool usage_reference_event(std::string_view json, Endpoint endpoint, size_t max_depth, Usage& u, bool& failed) {
  simdjson::dom::parser parser;
  failed = false;
  element root;
  if (parser.allocate(std::max<size_t>(json.size(), 1), std::max<size_t>(1, max_depth)) != simdjson::SUCCESS ||
      parser.parse(json.data(), json.size()).get(root) != simdjson::SUCCESS) {
    failed = true;
    return false;
  }
  object obj;
  if (root.get_object().get(obj) != simdjson::SUCCESS) return false;
  return extract_event(obj, endpoint, u);
}

}  // namespace ramjet::oracle
