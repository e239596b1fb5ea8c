// render::qwen3 (see qwen3_native.h). The template, for reference (test/data/testdata/models/
// qwen3/chat_template.jinja): a system/tools header, then per message
//   user / later system   <|im_start|>{role}\n{content}<|im_end|>\n
//   assistant             <|im_start|>assistant\n[<think>\n{reasoning}\n</think>\n\n]{content}
//                         [\n]<tool_call>\n{"name": "{name}", "arguments": {args}}\n</tool_call>...
//                         <|im_end|>\n
//   tool                  [<|im_start|>user]\n<tool_response>\n{content}\n</tool_response>[<|im_end|>\n]
// and <|im_start|>assistant\n[<think>\n\n</think>\n\n] when add_generation_prompt.
#include "render/template/qwen3_native.h"

#include "render/template/vllm_chat.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include <boost/json.hpp>
#include <xxhash.h>

#include "render/template/jinja/value.h"

namespace ramjet::render::qwen3 {

namespace json = boost::json;

namespace {

constexpr std::string_view kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";
// The formatter's identity in every prefix key (a change of the rendering rules changes it).
constexpr std::string_view kIdentity = "ramjet.qwen3.v1/87a2728cb8dc9fe4";

enum class Role : uint8_t { kSystem, kUser, kAssistant, kTool };

struct Msg {
  Role role = Role::kUser;
  std::string_view content{};  // after vLLM's preprocessing (null -> "", text parts joined)
  std::string_view reasoning{};
  bool has_reasoning = false;
  bool query = false;  // a user message that is not a wrapped <tool_response>
  const json::array* tool_calls = nullptr;
};

using Fail = std::optional<Fallback>;

bool is_container(const json::value& v) { return v.is_array() || v.is_object(); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
std::string_view lstrip_nl(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_nl(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

void json_string(std::string& out, std::string_view s) {
  out += '"';
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s, run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      }
    }
  }
  out.append(s, run, s.size() - run);
  out += '"';
}

void append_double(std::string& out, double d) {
  if (std::isnan(d)) out += "NaN";
  else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
  else jinja::append_float_repr(out, d);
}

// vLLM's content preprocessing for a "string"-format template.
Fail read_content(const json::value* c, std::string_view& out, std::deque<std::string>& store) {
  if (!c || c->is_null()) {
    out = {};
    return std::nullopt;
  }
  if (c->is_string()) {
    out = c->get_string();
    return std::nullopt;
  }
  if (!c->is_array()) return Fallback::kContent;
  std::string joined;
  bool first = true;
  for (const json::value& p : c->get_array()) {
    std::string_view t;
    if (p.is_string()) {
      t = p.get_string();
    } else if (p.is_object()) {
      const json::object& o = p.get_object();
      if (o.size() != 2) return Fallback::kContent;
      const json::value* type = o.if_contains("type");
      const json::value* text = o.if_contains("text");
      if (!type || !type->is_string() || !text || !text->is_string()) return Fallback::kContent;
      if (type->get_string() != "text" && type->get_string() != "input_text") return Fallback::kContent;
      t = text->get_string();
    } else {
      return Fallback::kContent;
    }
    if (!first) joined += '\n';
    joined += t;
    first = false;
  }
  store.push_back(std::move(joined));
  out = store.back();
  return std::nullopt;
}

Fail read_message(const json::value& m, Msg& out, std::deque<std::string>& store) {
  if (!m.is_object()) return Fallback::kRequest;
  const json::object& o = m.get_object();
  const json::value* role = o.if_contains("role");
  if (!role || !role->is_string()) return Fallback::kRole;
  const std::string_view r = role->get_string();
  if (r == "user") out.role = Role::kUser;
  else if (r == "assistant") out.role = Role::kAssistant;
  else if (r == "tool") out.role = Role::kTool;
  else if (r == "system") out.role = Role::kSystem;
  else return Fallback::kRole;
  if (auto f = read_content(o.if_contains("content"), out.content, store)) return f;
  for (const char* k : {"name", "tool_call_id"})
    if (const json::value* v = o.if_contains(k); v && is_container(*v)) return Fallback::kRequest;
  if (const json::value* tc = o.if_contains("tool_calls"); tc && tc->is_array() && !tc->get_array().empty()) {
    if (out.role != Role::kAssistant) return Fallback::kToolCall;
    out.tool_calls = &tc->get_array();
  }
  const json::value* reasoning = o.if_contains("reasoning");
  const json::value* reasoning_content = o.if_contains("reasoning_content");
  const json::value* rv = reasoning && !reasoning->is_null()                   ? reasoning
                          : reasoning_content && !reasoning_content->is_null() ? reasoning_content
                                                                               : nullptr;
  if (rv) {
    if (!rv->is_string()) return Fallback::kReasoning;
    out.reasoning = rv->get_string();
    out.has_reasoning = true;
  }
  out.query = out.role == Role::kUser &&
              !(starts_with(out.content, "<tool_response>") && ends_with(out.content, "</tool_response>"));
  return std::nullopt;
}

// Structural hash of a JSON value (kind tags, sizes, bytes).
void hash_bytes(XXH3_state_t* st, char tag, std::string_view s) {
  const uint64_t n = s.size();
  XXH3_128bits_update(st, &tag, 1);
  XXH3_128bits_update(st, &n, sizeof n);
  XXH3_128bits_update(st, s.data(), s.size());
}

void hash_value(XXH3_state_t* st, const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: XXH3_128bits_update(st, "n", 1); return;
    case json::kind::bool_: XXH3_128bits_update(st, v.get_bool() ? "T" : "F", 1); return;
    case json::kind::int64: {
      const int64_t x = v.get_int64();
      XXH3_128bits_update(st, "i", 1);
      XXH3_128bits_update(st, &x, sizeof x);
      return;
    }
    case json::kind::uint64: {
      const uint64_t x = v.get_uint64();
      XXH3_128bits_update(st, "u", 1);
      XXH3_128bits_update(st, &x, sizeof x);
      return;
    }
    case json::kind::double_: {
      const double x = v.get_double();
      XXH3_128bits_update(st, "d", 1);
      XXH3_128bits_update(st, &x, sizeof x);
      return;
    }
    case json::kind::string: hash_bytes(st, 's', v.get_string()); return;
    case json::kind::array: {
      const uint64_t n = v.get_array().size();
      XXH3_128bits_update(st, "a", 1);
      XXH3_128bits_update(st, &n, sizeof n);
      for (const auto& e : v.get_array()) hash_value(st, e);
      return;
    }
    case json::kind::object: {
      const uint64_t n = v.get_object().size();
      XXH3_128bits_update(st, "o", 1);
      XXH3_128bits_update(st, &n, sizeof n);
      for (const auto& kv : v.get_object()) {
        hash_bytes(st, 'k', kv.key());
        hash_value(st, kv.value());
      }
      return;
    }
  }
}

void hash_message(XXH3_state_t* st, const Msg& m) {
  const char role = static_cast<char>('0' + static_cast<int>(m.role));
  XXH3_128bits_update(st, &role, 1);
  hash_bytes(st, 'c', m.content);
  if (m.has_reasoning) hash_bytes(st, 'r', m.reasoning);
  if (m.tool_calls) {
    XXH3_128bits_update(st, "t", 1);
    for (const auto& c : *m.tool_calls) hash_value(st, c);
  }
  XXH3_128bits_update(st, "|", 1);
}

// A prefix's key: the hash of its messages, the kind of entry and (conditional entries) whether
// the message after the prefix is a tool message.
PrefixKey entry_key(const XXH128_hash_t& h, char kind, bool next_is_tool) {
  const char tag[2] = {kind, next_is_tool ? '1' : '0'};
  const XXH128_hash_t k = XXH3_128bits_withSeed(tag, sizeof tag, h.low64 ^ (h.high64 * 0x9E3779B97F4A7C15ull));
  return PrefixKey{k.low64, k.high64 ^ h.high64};
}

Fail emit_arguments(const json::value& args, std::string& out) {
  if (!args.is_string()) return dump_json(args, out, 2) ? std::nullopt : Fail(Fallback::kLimit);
  const std::string_view s = args.get_string();
  if (s.empty()) {
    out += "{}";
    return std::nullopt;
  }
  json::monotonic_resource arena(s.size() + 1024);
  json::parse_options opt;
  opt.max_depth = 256;
  boost::system::error_code ec;
  const json::value parsed = json::parse(s, ec, &arena, opt);
  if (ec) return Fallback::kToolCall;  // Jinja reports the bad request
  if (parsed.is_string()) {
    out += parsed.get_string();
    return std::nullopt;
  }
  return dump_json(parsed, out, 2) ? std::nullopt : Fail(Fallback::kLimit);
}

Fail emit_tool_call(const json::value& call, bool newline, std::string& out) {
  if (!call.is_object()) return Fallback::kToolCall;
  const json::object& co = call.get_object();
  for (const auto& kv : co)
    if (kv.key() != "function" && is_container(kv.value())) return Fallback::kToolCall;
  const json::value* fn = co.if_contains("function");
  if (!fn || !fn->is_object() || fn->get_object().empty()) return Fallback::kToolCall;
  const json::object& fo = fn->get_object();
  for (const auto& kv : fo)
    if (kv.key() != "arguments" && is_container(kv.value())) return Fallback::kToolCall;
  const json::value* name = fo.if_contains("name");
  const json::value* args = fo.if_contains("arguments");
  if (!name || !name->is_string() || !args) return Fallback::kToolCall;
  if (newline) out += '\n';
  out += "<tool_call>\n{\"name\": \"";
  out += name->get_string();
  out += "\", \"arguments\": ";
  if (auto f = emit_arguments(*args, out)) return f;
  out += "}\n</tool_call>";
  return std::nullopt;
}

Fail emit_tool(const json::value& tool, std::string& out) {
  if (!tool.is_object()) return Fallback::kTools;
  // What vLLM 0.32 hands the template (api_conversion.h): its tool models' dump, declared fields
  // only; a tool it refuses is left to the Jinja path, which reports the bad request.
  std::optional<json::object> dump = vllm_tool_dump(tool.get_object());
  if (!dump) return Fallback::kTools;
  return dump_json(json::value(std::move(*dump)), out, 0) ? std::nullopt : Fail(Fallback::kLimit);
}

struct Conversation {
  std::vector<Msg> msgs;
  size_t last_query = 0;  // ns.last_query_index
};

constexpr uint8_t kQueryBit = 4;
uint8_t kind_of(const Msg& m) { return static_cast<uint8_t>(static_cast<uint8_t>(m.role) | (m.query ? kQueryBit : 0)); }

Fail emit_message(const Conversation& c, size_t i, std::string& out) {
  const Msg& m = c.msgs[i];
  const size_t n = c.msgs.size();
  switch (m.role) {
    case Role::kSystem:
      if (i == 0) return std::nullopt;  // in the header
      out += "<|im_start|>system\n";
      out += m.content;
      out += "<|im_end|>\n";
      return std::nullopt;
    case Role::kUser:
      out += "<|im_start|>user\n";
      out += m.content;
      out += "<|im_end|>\n";
      return std::nullopt;
    case Role::kTool:
      if (i == 0 || c.msgs[i - 1].role != Role::kTool) out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out += m.content;
      out += "\n</tool_response>";
      if (i + 1 == n || c.msgs[i + 1].role != Role::kTool) out += "<|im_end|>\n";
      return std::nullopt;
    case Role::kAssistant: break;
  }
  std::string_view content = m.content;
  std::string_view reasoning;
  if (m.has_reasoning) {
    reasoning = m.reasoning;
  } else if (const size_t first = content.find("</think>"); first != std::string_view::npos) {
    const size_t last = content.rfind("</think>");
    std::string_view before = rstrip_nl(content.substr(0, first));
    if (const size_t open = before.rfind("<think>"); open != std::string_view::npos)
      before.remove_prefix(open + 7);
    reasoning = lstrip_nl(before);
    content = lstrip_nl(content.substr(last + 8));
  }
  out += "<|im_start|>assistant\n";
  if (i > c.last_query && (i + 1 == n || !reasoning.empty())) {
    out += "<think>\n";
    out += lstrip_nl(rstrip_nl(reasoning));
    out += "\n</think>\n\n";
    out += lstrip_nl(content);
  } else {
    out += content;
  }
  if (m.tool_calls) {
    bool first = true;
    for (const json::value& call : *m.tool_calls) {
      if (auto f = emit_tool_call(call, !first || !content.empty(), out)) return f;
      first = false;
    }
  }
  out += "<|im_end|>\n";
  return std::nullopt;
}

}  // namespace

bool reproduces(std::string_view sha256) {
  for (std::string_view d : kTemplateSha256)
    if (d == sha256) return true;
  return false;
}

std::string_view to_string(Fallback f) {
  switch (f) {
    case Fallback::kRequest: return "request";
    case Fallback::kMessages: return "messages";
    case Fallback::kRole: return "role";
    case Fallback::kContent: return "content";
    case Fallback::kReasoning: return "reasoning";
    case Fallback::kToolCall: return "tool_call";
    case Fallback::kTools: return "tools";
    case Fallback::kKwargs: return "kwargs";
    case Fallback::kGeneration: return "generation_prompt";
    case Fallback::kLimit: return "limit";
  }
  return "unknown";
}

bool dump_json(const json::value& v, std::string& out, int depth) {
  if (depth > kMaxDepth) return false;
  switch (v.kind()) {
    case json::kind::null: out += "null"; return true;
    case json::kind::bool_: out += v.get_bool() ? "true" : "false"; return true;
    case json::kind::int64: out += std::to_string(v.get_int64()); return true;
    case json::kind::uint64:
      // As render::chat_template converts it: past INT64_MAX a float.
      if (v.get_uint64() > static_cast<uint64_t>(INT64_MAX)) append_double(out, static_cast<double>(v.get_uint64()));
      else out += std::to_string(v.get_uint64());
      return true;
    case json::kind::double_: append_double(out, v.get_double()); return true;
    case json::kind::string: json_string(out, v.get_string()); return true;
    case json::kind::array: {
      const json::array& a = v.get_array();
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += ", ";
        if (!dump_json(a[i], out, depth + 1)) return false;
      }
      out += ']';
      return true;
    }
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& kv : v.get_object()) {
        if (!first) out += ", ";
        first = false;
        json_string(out, kv.key());
        out += ": ";
        if (!dump_json(kv.value(), out, depth + 1)) return false;
      }
      out += '}';
      return true;
    }
  }
  return false;
}

ramjet::Result<Formatted, Fallback> format(const json::value& request, RenderPrefixCache* prefixes,
                                           const Limits& limits, TurnState* turn) {
  if (!request.is_object()) return Fallback::kRequest;
  const json::object& r = request.get_object();
  const json::value* messages = r.if_contains("messages");
  if (!messages || !messages->is_array()) return Fallback::kRequest;
  const json::array& ma = messages->get_array();
  if (ma.empty() || ma.size() > limits.max_messages) return Fallback::kMessages;
  const json::array* tools = nullptr;
  if (const json::value* t = r.if_contains("tools"); t && !t->is_null()) {
    if (!t->is_array()) return Fallback::kRequest;
    tools = &t->get_array();
  }
  bool generation = true;
  if (const json::value* agp = r.if_contains("add_generation_prompt"); agp && !agp->is_null()) {
    if (!agp->is_bool()) return Fallback::kGeneration;
    generation = agp->get_bool();
  }
  bool thinking_off = false;
  if (const json::value* kw = r.if_contains("chat_template_kwargs"); kw && !kw->is_null()) {
    if (!kw->is_object()) return Fallback::kRequest;
    for (const auto& kv : kw->get_object()) {
      if (kv.key() != "enable_thinking" || is_container(kv.value())) return Fallback::kKwargs;
      thinking_off = kv.value().is_bool() && !kv.value().get_bool();
    }
  }

  Conversation c;
  std::deque<std::string> joined;
  const size_t n = ma.size();
  c.msgs.resize(n);
  for (size_t i = 0; i < n; ++i)
    if (auto f = read_message(ma[i], c.msgs[i], joined)) return *f;
  c.last_query = n - 1;
  for (size_t i = n; i-- > 0;) {
    if (c.msgs[i].query) {
      c.last_query = i;
      break;
    }
  }
  const bool has_query = c.msgs[c.last_query].query;

  // The chained hash after each message (only with a cache).
  std::vector<XXH128_hash_t> chain;
  Formatted f;
  size_t begin = 0;  // first message to format
  if (prefixes) {
    chain.resize(n);
    XXH3_state_t* st = XXH3_createState();
    if (!st) return Fallback::kLimit;
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, kIdentity.data(), kIdentity.size());
    if (tools) {
      XXH3_128bits_update(st, "T", 1);
      for (const auto& t : *tools) hash_value(st, t);
    }
    for (size_t i = 0; i < n; ++i) {
      hash_message(st, c.msgs[i]);
      chain[i] = XXH3_128bits_digest(st);
    }
    XXH3_freeState(st);
    // Longest reusable prefix: a conditional entry ending after the last query and before the
    // last message, else a final entry ending at a query.
    std::optional<RenderPrefixCache::Hit> hit;
    for (size_t p = n >= 2 ? n - 2 : 0; !hit && has_query && p > c.last_query && p + 1 < n; --p) {
      if ((hit = prefixes->find(entry_key(chain[p], 'C', c.msgs[p + 1].role == Role::kTool)))) begin = p + 1;
    }
    for (size_t q = c.last_query + 1; !hit && q-- > 0;) {
      if (!c.msgs[q].query) continue;
      if ((hit = prefixes->find(entry_key(chain[q], 'F', false)))) begin = q + 1;
    }
    prefixes->count(hit.has_value());
    if (hit) {
      f.text.reserve(hit->bytes + (hit->bytes >> 4) + 4096);
      f.text.assign(*hit->text, 0, hit->bytes);
      f.reused_messages = begin;
      f.reused_bytes = hit->bytes;
    }
  }

  std::string& out = f.text;
  if (begin == 0) {
    const Msg& first = c.msgs[0];
    if (tools && !tools->empty()) {
      out += "<|im_start|>system\n";
      if (first.role == Role::kSystem) {
        out += first.content;
        out += "\n\n";
      }
      out += kToolsIntro;
      for (const json::value& t : *tools) {
        out += '\n';
        if (auto e = emit_tool(t, out)) return *e;
      }
      out += kToolsOutro;
    } else if (first.role == Role::kSystem) {
      out += "<|im_start|>system\n";
      out += first.content;
      out += "<|im_end|>\n";
    }
  }
  // Where each stored prefix ends in the text.
  const size_t final_end = has_query ? c.last_query : n;
  const size_t cond_end = has_query && n >= 2 && n - 2 > c.last_query ? n - 2 : n;
  size_t final_bytes = 0, cond_bytes = 0;
  if (turn) {
    turn->kinds.resize(n);
    turn->ends.assign(n, TurnState::kUnknown);
    for (size_t i = 0; i < n; ++i) turn->kinds[i] = kind_of(c.msgs[i]);
    if (begin > 0) turn->ends[begin - 1] = static_cast<uint32_t>(out.size());
    turn->last_query = c.last_query;
    turn->has_query = has_query;
    turn->generation = generation;
    turn->thinking_off = thinking_off;
  }
  for (size_t i = begin; i < n; ++i) {
    if (auto e = emit_message(c, i, out)) return *e;
    if (i == final_end) final_bytes = out.size();
    if (i == cond_end) cond_bytes = out.size();
    if (out.size() > limits.max_output_bytes) return Fallback::kLimit;
    if (turn) turn->ends[i] = static_cast<uint32_t>(out.size());
  }
  if (generation) {
    out += "<|im_start|>assistant\n";
    if (thinking_off) out += "<think>\n\n</think>\n\n";
  }
  if (out.size() > limits.max_output_bytes) return Fallback::kLimit;

  if (prefixes && (final_bytes || cond_bytes)) {
    const size_t keep = std::max(final_bytes, cond_bytes);
    auto text = std::make_shared<const std::string>(out, 0, keep);
    if (final_bytes) prefixes->store(entry_key(chain[final_end], 'F', false), text, final_bytes);
    if (cond_bytes)
      prefixes->store(entry_key(chain[cond_end], 'C', c.msgs[cond_end + 1].role == Role::kTool), text, cond_bytes);
  }
  return f;
}

size_t rerender_from(const TurnState& turn, bool query_appended) {
  if (!turn.has_query || turn.kinds.empty()) return 0;
  if (query_appended) return turn.last_query + 1;
  const size_t last = turn.kinds.size() - 1;
  const auto role = static_cast<Role>(turn.kinds[last] & 3);
  return role == Role::kAssistant || role == Role::kTool ? last : last + 1;
}

ramjet::Result<bool, Fallback> any_query(std::span<const json::value* const> messages) {
  std::deque<std::string> joined;
  bool any = false;
  for (const json::value* m : messages) {
    Msg msg;
    if (auto f = read_message(*m, msg, joined)) return *f;
    any = any || msg.query;
  }
  return any;
}

ramjet::Result<size_t, Fallback> extend(TurnState& turn, std::string& text, size_t first,
                                        std::span<const json::value* const> messages, const Limits& limits) {
  const size_t before = turn.kinds.size();
  const size_t n = first + messages.size();
  if (first == 0 || first > before || n < before || n > limits.max_messages) return Fallback::kMessages;
  if (turn.ends.size() != before || turn.ends[first - 1] == TurnState::kUnknown || turn.ends[first - 1] > text.size())
    return Fallback::kMessages;
  Conversation c;
  std::deque<std::string> joined;
  c.msgs.resize(n);
  for (size_t i = 0; i < first; ++i) {  // rendered already: what the messages after them read
    c.msgs[i].role = static_cast<Role>(turn.kinds[i] & 3);
    c.msgs[i].query = (turn.kinds[i] & kQueryBit) != 0;
  }
  bool appended_query = false;
  for (size_t i = first; i < n; ++i) {
    if (auto f = read_message(*messages[i - first], c.msgs[i], joined)) return *f;
    if (i < before && kind_of(c.msgs[i]) != turn.kinds[i]) return Fallback::kMessages;  // not the turn's
    if (i >= before) appended_query = appended_query || c.msgs[i].query;
  }
  if (first > rerender_from(turn, appended_query)) return Fallback::kMessages;
  c.last_query = n - 1;
  for (size_t i = n; i-- > 0;) {
    if (c.msgs[i].query) {
      c.last_query = i;
      break;
    }
  }
  const size_t kept = turn.ends[first - 1];
  text.resize(kept);
  turn.kinds.resize(n);
  turn.ends.resize(n);
  for (size_t i = first; i < n; ++i) {
    if (auto e = emit_message(c, i, text)) return *e;
    if (text.size() > limits.max_output_bytes) return Fallback::kLimit;
    turn.kinds[i] = kind_of(c.msgs[i]);
    turn.ends[i] = static_cast<uint32_t>(text.size());
  }
  if (turn.generation) {
    text += "<|im_start|>assistant\n";
    if (turn.thinking_off) text += "<think>\n\n</think>\n\n";
  }
  if (text.size() > limits.max_output_bytes) return Fallback::kLimit;
  turn.last_query = c.last_query;
  turn.has_query = c.msgs[c.last_query].query;
  return kept;
}

}  // namespace ramjet::render::qwen3
