#include "render/template/chat_template.h"

#include "render/template/vllm_chat.h"

#include <boost/json.hpp>
#include <cctype>

namespace ramjet::render {

namespace json = boost::json;
using jinja::Dict;
using jinja::List;
using jinja::RenderResult;
using jinja::Value;

namespace {

RenderError bad(std::string msg) { return RenderError{RenderErrc::kBadRequest, std::move(msg), 0}; }

bool convert(const json::value& j, Value& out, int depth, int max_depth) {
  if (depth > max_depth) return false;
  switch (j.kind()) {
    case json::kind::null: out = Value::none(); return true;
    case json::kind::bool_: out = Value(j.get_bool()); return true;
    case json::kind::int64: out = Value(static_cast<int64_t>(j.get_int64())); return true;
    case json::kind::uint64:
      if (j.get_uint64() > static_cast<uint64_t>(INT64_MAX)) out = Value(static_cast<double>(j.get_uint64()));
      else out = Value(static_cast<int64_t>(j.get_uint64()));
      return true;
    case json::kind::double_: out = Value(j.get_double()); return true;
    case json::kind::string: out = Value(std::string(j.get_string())); return true;
    case json::kind::array: {
      List l;
      l.reserve(j.get_array().size());
      for (const auto& e : j.get_array()) {
        Value v;
        if (!convert(e, v, depth + 1, max_depth)) return false;
        l.push_back(std::move(v));
      }
      out = Value::list(std::move(l));
      return true;
    }
    case json::kind::object: {
      Dict d;
      d.items.reserve(j.get_object().size());
      for (const auto& kv : j.get_object()) {
        Value v;
        if (!convert(kv.value(), v, depth + 1, max_depth)) return false;
        // A Boost.JSON object's keys are unique (the parser keeps the last of duplicates, as
        // Python's json does): append, no per-key scan (a 50k-key object must stay linear).
        d.items.emplace_back(std::string(kv.key()), std::move(v));
      }
      out = Value::dict(std::move(d));
      return true;
    }
  }
  return false;
}

// Parses into `out`'s own storage (assigning a value from another storage would deep-copy it).
bool parse_json(std::string_view text, json::value& out, int max_depth) {
  json::parse_options opt;
  opt.max_depth = static_cast<std::size_t>(max_depth);
  boost::system::error_code ec;
  out = json::parse(text, ec, out.storage(), opt);
  return !ec;
}

// The DOM of one request lives only while it is converted: one arena, freed at once.
json::monotonic_resource arena_for(std::string_view text) {
  return json::monotonic_resource(text.size() + 4096);
}

}  // namespace

RenderResult<Value> value_from_json(std::string_view text, int max_depth) {
  json::monotonic_resource arena = arena_for(text);
  json::value j(&arena);
  if (!parse_json(text, j, max_depth)) return bad("invalid JSON");
  Value v;
  if (!convert(j, v, 0, max_depth)) return bad("JSON nested too deeply");
  return v;
}

RenderResult<SpecialTokens> special_tokens_from_config(std::string_view text) {
  json::value j;
  if (!parse_json(text, j, 64) || !j.is_object()) return bad("tokenizer_config.json is not a JSON object");
  SpecialTokens st;
  const auto& o = j.get_object();
  auto token_text = [](const json::value& v, std::string& out) {
    if (v.is_string()) { out = std::string(v.get_string()); return true; }
    if (v.is_object()) {
      const auto* c = v.get_object().if_contains("content");
      if (c && c->is_string()) { out = std::string(c->get_string()); return true; }
    }
    return false;
  };
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                           "cls_token", "mask_token"}) {
    const auto* v = o.if_contains(name);
    std::string s;
    if (v && token_text(*v, s)) st.tokens.emplace_back(name, s);
  }
  if (const auto* a = o.if_contains("additional_special_tokens"); a && a->is_array()) {
    for (const auto& e : a->get_array()) {
      std::string s;
      if (token_text(e, s)) st.additional.push_back(s);
    }
  }
  return st;
}

bool template_uses_openai_content(std::string_view src) {
  // vLLM's content-format detection looks for a loop over a message's content:
  // `for <name> in message.content | message['content'] | content`.
  size_t pos = 0;
  while ((pos = src.find("for ", pos)) != std::string_view::npos) {
    size_t p = pos + 4;
    while (p < src.size() && src[p] == ' ') ++p;
    size_t id = p;
    while (p < src.size() && (std::isalnum(static_cast<unsigned char>(src[p])) || src[p] == '_')) ++p;
    pos += 4;
    if (p == id) continue;
    while (p < src.size() && src[p] == ' ') ++p;
    if (src.substr(p, 3) != "in ") continue;
    p += 3;
    while (p < src.size() && src[p] == ' ') ++p;
    for (std::string_view target : {"message.content", "message['content']", "message[\"content\"]", "content"}) {
      if (src.substr(p, target.size()) != target) continue;
      size_t e = p + target.size();
      if (e >= src.size() || !(std::isalnum(static_cast<unsigned char>(src[e])) || src[e] == '_' || src[e] == '.' || src[e] == '['))
        return true;
    }
  }
  return false;
}

namespace {

bool preprocess_content(const Value& content, bool openai, Value& out, std::string& err) {
  if (content.is_none() || content.is_undefined()) { out = Value(""); return true; }
  if (content.is_string()) { out = content; return true; }
  if (!content.is_list()) { err = "message content must be a string, null or a list of parts"; return false; }
  List parts;
  std::string joined;
  bool first = true;
  for (const auto& p : content.items()) {
    if (p.is_string()) {
      Dict d;
      d.set("type", Value("text"));
      d.set("text", p);
      parts.push_back(Value::dict(std::move(d)));
      if (!first) joined += "\n";
      joined += p.str();
      first = false;
      continue;
    }
    if (!p.is_dict()) { err = "content part must be an object"; return false; }
    const Value* type = p.dict_ref().find("type");
    if (type && type->is_string() && (type->str() == "text" || type->str() == "input_text" || type->str() == "output_text")) {
      const Value* text = p.dict_ref().find("text");
      if (!text || !text->is_string()) { err = "text part without text"; return false; }
      Dict d;
      d.set("type", Value("text"));
      d.set("text", *text);
      parts.push_back(Value::dict(std::move(d)));
      if (!first) joined += "\n";
      joined += text->str();
      first = false;
    } else {
      parts.push_back(p);  // non-text parts: kept for openai-format templates
      if (!openai) { err = "non-text content part"; return false; }
    }
  }
  out = openai ? Value::list(std::move(parts)) : Value(std::move(joined));
  return true;
}

}  // namespace

// Builds the context straight from the parsed request (no intermediate Value of the whole
// body): only the fields the context keeps are converted. Values are converted at the depth
// value_from_json would have given them.
namespace {
constexpr int kMaxDepth = 256;
}  // namespace

RenderResult<Value> build_context(std::string_view request_json, const SpecialTokens& special,
                                  const Value& extra_kwargs, bool openai) {
  json::monotonic_resource arena = arena_for(request_json);
  json::value j(&arena);
  if (!parse_json(request_json, j, kMaxDepth)) return bad("invalid JSON");
  return build_context_parsed(j, special, extra_kwargs, openai);
}

RenderResult<Value> build_context_parsed(const json::value& j, const SpecialTokens& special,
                                         const Value& extra_kwargs, bool openai) {
  if (!j.is_object()) return bad("request is not a JSON object");
  const json::object& r = j.get_object();
  auto conv = [&](const json::value& v, int depth, Value& out) {
    return convert(v, out, depth, kMaxDepth);
  };
  const json::value* messages = r.if_contains("messages");
  if (!messages || !messages->is_array()) return bad("messages must be a list");
  List msgs;
  msgs.reserve(messages->get_array().size());
  std::string err;
  for (const auto& m : messages->get_array()) {
    if (!m.is_object()) return bad("message is not an object");
    const json::object& md = m.get_object();
    const json::value* role = md.if_contains("role");
    if (!role || !role->is_string()) return bad("message without a role");
    // The keys below are distinct: append instead of Dict::set.
    Dict out;
    out.items.reserve(4);
    out.items.emplace_back("role", Value(std::string(role->get_string())));
    Value content;
    if (const json::value* c = md.if_contains("content"); c && c->is_string()) {
      content = Value(std::string(c->get_string()));
    } else {
      Value raw = Value::none();
      if (c && !conv(*c, 3, raw)) return bad("JSON nested too deeply");
      if (!preprocess_content(raw, openai, content, err)) return bad(err);
    }
    out.items.emplace_back("content", std::move(content));
    for (const char* k : {"name", "tool_call_id"}) {
      if (const json::value* v = md.if_contains(k); v && !v->is_null()) {
        Value x;
        if (!conv(*v, 3, x)) return bad("JSON nested too deeply");
        out.items.emplace_back(k, std::move(x));
      }
    }
    if (const json::value* tc = md.if_contains("tool_calls");
        tc && tc->is_array() && !tc->get_array().empty()) {
      List calls;
      for (const auto& call_j : tc->get_array()) {
        if (!call_j.is_object()) return bad("tool call is not an object");
        Value call;
        if (!conv(call_j, 4, call)) return bad("JSON nested too deeply");
        Dict cd = call.dict_ref();
        if (Value* fn = cd.find("function"); fn && fn->is_dict()) {
          Dict fd = fn->dict_ref();
          if (Value* args = fd.find("arguments"); args && args->is_string()) {
            if (args->str().empty()) {
              *args = Value::dict();
            } else {
              auto parsed = value_from_json(args->str());
              if (!parsed.ok()) return bad("tool call arguments are not valid JSON");
              *args = std::move(parsed.value());
            }
          }
          *fn = Value::dict(std::move(fd));
        }
        calls.push_back(Value::dict(std::move(cd)));
      }
      out.items.emplace_back("tool_calls", Value::list(std::move(calls)));
    }
    const json::value* reasoning = md.if_contains("reasoning");
    const json::value* reasoning_content = md.if_contains("reasoning_content");
    const json::value* rv = reasoning && !reasoning->is_null() ? reasoning
                            : reasoning_content && !reasoning_content->is_null() ? reasoning_content
                                                                                  : nullptr;
    if (rv) {
      Value x;
      if (!conv(*rv, 3, x)) return bad("JSON nested too deeply");
      out.items.emplace_back("reasoning", x);
      out.items.emplace_back("reasoning_content", std::move(x));
    }
    msgs.push_back(Value::dict(std::move(out)));
  }
  Dict ctx;
  ctx.set("messages", Value::list(std::move(msgs)));
  Value tools = Value::none();
  if (const json::value* t = r.if_contains("tools"); t && !t->is_null()) {
    if (!t->is_array()) return bad("tools must be a list");
    List tl;
    for (const auto& tool : t->get_array()) {
      if (!tool.is_object()) return bad("tool is not an object");
      // What vLLM 0.32 hands the template: its tool models' dump (declared fields only).
      std::optional<json::object> dump = vllm_tool_dump(tool.get_object());
      if (!dump) return bad("a tool vLLM refuses");
      Value x;
      if (!conv(json::value(std::move(*dump)), 2, x)) return bad("JSON nested too deeply");
      tl.push_back(std::move(x));
    }
    tools = Value::list(std::move(tl));
  }
  ctx.set("tools", tools);
  ctx.set("documents", Value::none());
  Value agp_v(true);
  if (const json::value* agp = r.if_contains("add_generation_prompt"); agp && !agp->is_null())
    if (!conv(*agp, 1, agp_v)) return bad("JSON nested too deeply");
  ctx.set("add_generation_prompt", std::move(agp_v));
  for (const auto& [k, v] : special.tokens) ctx.set(k, Value(v));
  if (!special.additional.empty()) {
    List l;
    for (const auto& s : special.additional) l.emplace_back(s);
    ctx.set("additional_special_tokens", Value::list(std::move(l)));
  }
  if (const json::value* kw = r.if_contains("chat_template_kwargs"); kw && !kw->is_null()) {
    if (!kw->is_object()) return bad("chat_template_kwargs must be an object");
    for (const auto& kv : kw->get_object()) {
      Value x;
      if (!conv(kv.value(), 2, x)) return bad("JSON nested too deeply");
      ctx.set(std::string(kv.key()), std::move(x));
    }
  }
  if (extra_kwargs.is_dict())
    for (const auto& [k, v] : extra_kwargs.dict_ref().items) ctx.set(k, v);
  return Value::dict(std::move(ctx));
}

RenderResult<ChatTemplate> ChatTemplate::parse(std::string_view source, const jinja::Limits& limits) {
  auto t = jinja::Template::parse(source, limits);
  if (!t.ok()) return t.error();
  return ChatTemplate{std::move(t.value()), template_uses_openai_content(source)};
}

RenderResult<std::string> render(const ChatTemplate& tpl, std::string_view request_json,
                                 const SpecialTokens& special, const Value& extra_kwargs,
                                 const jinja::RenderOptions& options) {
  auto ctx = build_context(request_json, special, extra_kwargs, tpl.openai_content_format);
  if (!ctx.ok()) return ctx.error();
  return tpl.tpl->render(ctx.value(), options);
}

RenderResult<std::string> render_parsed(const ChatTemplate& tpl, const json::value& request,
                                        const SpecialTokens& special, const Value& extra_kwargs,
                                        const jinja::RenderOptions& options) {
  auto ctx = build_context_parsed(request, special, extra_kwargs, tpl.openai_content_format);
  if (!ctx.ok()) return ctx.error();
  return tpl.tpl->render(ctx.value(), options);
}

RenderResult<std::string> render(std::string_view template_source, std::string_view request_json,
                                 const SpecialTokens& special, const Value& extra_kwargs,
                                 const jinja::RenderOptions& options) {
  auto t = ChatTemplate::parse(template_source, options.limits);
  if (!t.ok()) return t.error();
  return render(t.value(), request_json, special, extra_kwargs, options);
}

}  // namespace ramjet::render
