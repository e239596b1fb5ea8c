#include "render/chat_template.h"

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

bool parse_json(std::string_view text, json::value& out, int max_depth) {
  json::parse_options opt;
  opt.max_depth = static_cast<std::size_t>(max_depth);
  boost::system::error_code ec;
  json::storage_ptr sp;
  out = json::parse(text, ec, sp, opt);
  return !ec;
}

}  // namespace

RenderResult<Value> value_from_json(std::string_view text, int max_depth) {
  json::value j;
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
    if (type && type->is_string() && (type->str() == "text" || type->str() == "input_text")) {
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

RenderResult<Value> build_context(std::string_view request_json, const SpecialTokens& special,
                                  const Value& extra_kwargs, bool openai) {
  auto req = value_from_json(request_json);
  if (!req.ok()) return req.error();
  if (!req->is_dict()) return bad("request is not a JSON object");
  const Dict& r = req->dict_ref();
  const Value* messages = r.find("messages");
  if (!messages || !messages->is_list()) return bad("messages must be a list");
  List msgs;
  std::string err;
  for (const auto& m : messages->items()) {
    if (!m.is_dict()) return bad("message is not an object");
    const Dict& md = m.dict_ref();
    const Value* role = md.find("role");
    if (!role || !role->is_string()) return bad("message without a role");
    Dict out;
    out.set("role", *role);
    Value content;
    const Value* c = md.find("content");
    if (!preprocess_content(c ? *c : Value::none(), openai, content, err)) return bad(err);
    out.set("content", content);
    for (const char* k : {"name", "tool_call_id"})
      if (const Value* v = md.find(k); v && !v->is_none()) out.set(k, *v);
    if (const Value* tc = md.find("tool_calls"); tc && tc->is_list() && !tc->items().empty()) {
      List calls;
      for (const auto& call : tc->items()) {
        if (!call.is_dict()) return bad("tool call is not an object");
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
      out.set("tool_calls", Value::list(std::move(calls)));
    }
    const Value* reasoning = md.find("reasoning");
    const Value* reasoning_content = md.find("reasoning_content");
    const Value* rv = reasoning && !reasoning->is_none() ? reasoning
                      : reasoning_content && !reasoning_content->is_none() ? reasoning_content
                                                                            : nullptr;
    if (rv) {
      out.set("reasoning", *rv);
      out.set("reasoning_content", *rv);
    }
    msgs.push_back(Value::dict(std::move(out)));
  }
  Dict ctx;
  ctx.set("messages", Value::list(std::move(msgs)));
  Value tools = Value::none();
  if (const Value* t = r.find("tools"); t && !t->is_none()) {
    if (!t->is_list()) return bad("tools must be a list");
    List tl;
    for (const auto& tool : t->items()) {
      if (!tool.is_dict()) return bad("tool is not an object");
      const Value* fn = tool.dict_ref().find("function");
      if (!fn || !fn->is_dict()) return bad("tool without a function");
      Dict fd;
      for (const char* k : {"name", "description", "parameters"}) {
        const Value* v = fn->dict_ref().find(k);
        fd.set(k, v ? *v : Value::none());
      }
      Dict td;
      const Value* type = tool.dict_ref().find("type");
      td.set("type", type && type->is_string() ? *type : Value("function"));
      td.set("function", Value::dict(std::move(fd)));
      tl.push_back(Value::dict(std::move(td)));
    }
    tools = Value::list(std::move(tl));
  }
  ctx.set("tools", tools);
  ctx.set("documents", Value::none());
  const Value* agp = r.find("add_generation_prompt");
  ctx.set("add_generation_prompt", agp && !agp->is_none() ? *agp : Value(true));
  for (const auto& [k, v] : special.tokens) ctx.set(k, Value(v));
  if (!special.additional.empty()) {
    List l;
    for (const auto& s : special.additional) l.emplace_back(s);
    ctx.set("additional_special_tokens", Value::list(std::move(l)));
  }
  if (const Value* kw = r.find("chat_template_kwargs"); kw && !kw->is_none()) {
    if (!kw->is_dict()) return bad("chat_template_kwargs must be an object");
    for (const auto& [k, v] : kw->dict_ref().items) ctx.set(k, v);
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

RenderResult<std::string> render(std::string_view template_source, std::string_view request_json,
                                 const SpecialTokens& special, const Value& extra_kwargs,
                                 const jinja::RenderOptions& options) {
  auto t = ChatTemplate::parse(template_source, options.limits);
  if (!t.ok()) return t.error();
  return render(t.value(), request_json, special, extra_kwargs, options);
}

}  // namespace ramjet::render
