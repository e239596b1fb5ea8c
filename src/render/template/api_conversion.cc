// render::api_conversion: Responses and Anthropic Messages requests → the chat request vLLM
// renders (see the header for the rules and the vLLM revision followed).
#include "render/template/api_conversion.h"

#include <initializer_list>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "render/template/vllm_chat.h"

namespace ramjet::render {

namespace json = boost::json;

std::string_view to_string(PromptApi api) {
  switch (api) {
    case PromptApi::kChat: return "chat";
    case PromptApi::kCompletions: return "completions";
    case PromptApi::kResponses: return "responses";
    case PromptApi::kMessages: return "messages";
  }
  return "chat";
}

namespace {

using Converted = Result<json::object, ConversionError>;

ConversionError bad(std::string message) { return {ConversionError::kBadRequest, std::move(message)}; }
ConversionError unsupported(std::string message) { return {ConversionError::kUnsupported, std::move(message)}; }

const json::value* field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && !v->is_null() ? v : nullptr;
}

// A string field, absent/null allowed (nullptr); `ok` false when it is present but not a string.
const json::string* string_field(const json::object& o, std::string_view key, bool& ok) {
  const json::value* v = field(o, key);
  if (v == nullptr) return nullptr;
  if (!v->is_string()) {
    ok = false;
    return nullptr;
  }
  return &v->get_string();
}

bool truthy(const json::string* s) { return s != nullptr && !s->empty(); }

void copy_if_present(const json::object& from, json::object& to, std::string_view key) {
  if (const json::value* v = field(from, key)) to[key] = *v;
}

// ---- Anthropic Messages ------------------------------------------------------------------

constexpr std::string_view kBillingHeader = "x-anthropic-billing-header";

bool known_block_type(std::string_view t) {
  for (std::string_view k : {"text", "image", "tool_use", "tool_result", "tool_reference", "thinking",
                             "redacted_thinking"}) {
    if (t == k) return true;
  }
  return false;
}

// A content block's `type`, checked against AnthropicContentBlock's literals. vLLM 0.32's tool
// changes (tool_addition / tool_removal blocks in system messages, applied to the declared tools
// by _resolve_tools) are valid but not reproduced: unsupported, so the request is placed on the
// fingerprints instead of counting as malformed.
Result<std::string_view, ConversionError> block_type(const json::value& block) {
  if (!block.is_object()) return bad("content block is not an object");
  const json::value* t = block.get_object().if_contains("type");
  if (t == nullptr || !t->is_string()) return bad("unknown content block type");
  if (t->get_string() == "tool_addition" || t->get_string() == "tool_removal") return unsupported("tool changes");
  if (!known_block_type(t->get_string())) return bad("unknown content block type");
  return std::string_view(t->get_string());
}

// System text from a system value or a system message's content: a string as is
// (`keep_empty_string` false skips an empty one, as `if request.system:` does), else the non-empty
// text blocks that are not Claude Code's per-request billing header. `parts` counts what was
// taken: vLLM adds the system message when there is any part, even an empty one.
Result<bool, ConversionError> system_text(const json::value& content, bool keep_empty_string, std::string& out,
                                          size_t& parts) {
  if (content.is_string()) {
    if (keep_empty_string || !content.get_string().empty()) {
      out.append(content.get_string());
      ++parts;
    }
    return true;
  }
  if (!content.is_array()) return bad("system must be a string or a list of blocks");
  for (const json::value& block : content.get_array()) {
    auto type = block_type(block);
    if (!type) return type.error();
    if (*type != "text") continue;
    bool ok = true;
    const json::string* text = string_field(block.get_object(), "text", ok);
    if (!ok) return bad("text block text is not a string");
    if (!truthy(text) || std::string_view(*text).starts_with(kBillingHeader)) continue;
    out.append(*text);
    ++parts;
  }
  return true;
}

std::string image_url(const json::object& source) {
  const json::value* type = source.if_contains("type");
  if (type != nullptr && type->is_string() && type->get_string() == "url") {
    const json::value* url = source.if_contains("url");
    return url != nullptr && url->is_string() ? std::string(url->get_string()) : std::string();
  }
  std::string media = "image/jpeg";
  if (const json::value* m = source.if_contains("media_type"); m != nullptr && m->is_string()) media = m->get_string();
  std::string data;
  if (const json::value* d = source.if_contains("data"); d != nullptr && d->is_string()) data = d->get_string();
  return "data:" + media + ";base64," + data;
}

json::object image_part(std::string url) {
  json::object part;
  part["type"] = "image_url";
  part["image_url"] = json::object{{"url", std::move(url)}};
  return part;
}

// A user message's tool_result block → a tool message (+ a user message of its images, + a tool
// message of its tool references), appended to `out` ahead of the user message itself.
Result<bool, ConversionError> user_tool_result(json::object& block, json::array& out) {
  json::string text;
  json::array images;
  json::array references;
  if (json::value* content = block.if_contains("content"); content != nullptr && !content->is_null()) {
    if (content->is_string()) {
      text = std::move(content->get_string());
    } else if (content->is_array()) {
      bool first = true;
      for (const json::value& item : content->get_array()) {
        if (!item.is_object()) continue;
        const json::object& o = item.get_object();
        const json::value* type = o.if_contains("type");
        const std::string_view t = type != nullptr && type->is_string() ? std::string_view(type->get_string()) : "";
        if (t == "text") {
          const json::value* tv = o.if_contains("text");
          if (tv != nullptr && !tv->is_string()) return bad("tool_result text is not a string");
          if (!first) text.push_back('\n');
          if (tv != nullptr) text.append(tv->get_string());
          first = false;
        } else if (t == "image") {
          const json::value* source = o.if_contains("source");
          std::string url = image_url(source != nullptr && source->is_object() ? source->get_object() : json::object());
          if (!url.empty()) images.push_back(image_part(std::move(url)));
        } else if (t == "tool_reference") {
          const json::value* name = o.if_contains("tool_name");
          if (name == nullptr || !name->is_string() || name->get_string().empty()) name = o.if_contains("name");
          if (name != nullptr && name->is_string() && !name->get_string().empty())
            references.push_back(json::object{{"type", "tool_reference"}, {"name", name->get_string()}});
        }
      }
    } else {
      return bad("tool_result content must be a string or a list");
    }
  }
  bool ok = true;
  const json::string* id = string_field(block, "tool_use_id", ok);
  if (!ok) return bad("tool_use_id is not a string");
  const std::string call_id = id != nullptr ? std::string(*id) : std::string();
  out.push_back(json::object{{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(text)}});
  if (!images.empty()) out.push_back(json::object{{"role", "user"}, {"content", std::move(images)}});
  if (!references.empty())
    out.push_back(json::object{{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(references)}});
  return true;
}

Result<bool, ConversionError> convert_message(json::object& msg, std::string_view role, json::array& out) {
  json::object om;
  om["role"] = role;
  json::value& content = msg.at("content");
  if (content.is_string()) {
    om["content"] = std::move(content);
    out.push_back(std::move(om));
    return true;
  }
  json::array parts;
  json::array tool_calls;
  std::string reasoning;
  bool has_reasoning = false;
  for (json::value& value : content.get_array()) {
    auto type = block_type(value);
    if (!type) return type.error();
    json::object& block = value.get_object();
    bool ok = true;
    if (*type == "text") {
      const json::string* text = string_field(block, "text", ok);
      if (!ok) return bad("text block text is not a string");
      if (truthy(text)) parts.push_back(json::object{{"type", "text"}, {"text", std::move(block.at("text"))}});
    } else if (*type == "image") {
      const json::value* source = field(block, "source");
      if (source != nullptr && !source->is_object()) return bad("image source is not an object");
      if (source != nullptr && !source->get_object().empty()) parts.push_back(image_part(image_url(source->get_object())));
    } else if (*type == "thinking") {
      const json::string* thinking = string_field(block, "thinking", ok);
      if (!ok) return bad("thinking is not a string");
      if (thinking != nullptr) {
        reasoning.append(*thinking);
        has_reasoning = true;
      }
    } else if (*type == "tool_use") {
      const json::string* id = string_field(block, "id", ok);
      const json::string* name = string_field(block, "name", ok);
      if (!ok) return bad("tool_use id or name is not a string");
      const json::value* input = field(block, "input");
      if (input != nullptr && !input->is_object()) return bad("tool_use input is not an object");
      json::object function;
      function["name"] = name != nullptr ? *name : json::string();
      // vLLM writes json.dumps(input); its chat path decodes it again before the template.
      function["arguments"] = json::serialize(input != nullptr ? *input : json::value(json::object()));
      json::object call;
      call["id"] = truthy(id) ? *id : json::string("call_0");  // vLLM: call_<unix time>
      call["type"] = "function";
      call["function"] = std::move(function);
      tool_calls.push_back(std::move(call));
    } else if (*type == "tool_result") {
      if (role == "user") {
        auto r = user_tool_result(block, out);
        if (!r) return r.error();
      } else {
        const json::value* c = field(block, "content");
        std::string text;
        if (c != nullptr && c->is_string()) {
          text = c->get_string();
        } else if (c != nullptr && c->is_array() && !c->get_array().empty()) {
          return unsupported("assistant tool_result with block content");  // vLLM renders str(list)
        } else if (c != nullptr && !c->is_array()) {
          return bad("tool_result content must be a string or a list");
        }
        parts.push_back(json::object{{"type", "text"}, {"text", "Tool result: " + text}});
      }
    }
    // redacted_thinking and tool_reference blocks are dropped.
  }
  if (has_reasoning) om["reasoning"] = reasoning;
  if (!tool_calls.empty()) om["tool_calls"] = std::move(tool_calls);
  if (!parts.empty()) {
    const json::object& first = parts.front().get_object();
    if (parts.size() == 1 && first.at("type").get_string() == "text") om["content"] = first.at("text");
    else om["content"] = std::move(parts);
  }
  // A user message left with nothing but tool results is dropped (its tool messages stay).
  if (!(role == "user" && !om.contains("content"))) out.push_back(std::move(om));
  return true;
}

}  // namespace

namespace {

json::object tool_of(json::object function) {
  json::object tool;
  tool["type"] = "function";
  tool["function"] = std::move(function);
  return tool;
}

// ---- Responses --------------------------------------------------------------------------

json::object* previous_assistant(json::array& messages) {
  if (messages.empty() || !messages.back().is_object()) return nullptr;
  json::object& prev = messages.back().get_object();
  const json::value* role = prev.if_contains("role");
  return role != nullptr && role->is_string() && role->get_string() == "assistant" ? &prev : nullptr;
}

bool absent_or_null(const json::object& o, std::string_view key) { return field(o, key) == nullptr; }

// A non-empty part list's first part's text, moved out: `part.get("text", "")` for an object,
// the part itself otherwise (vLLM's dict-form item handling).
json::value take_first_text(json::array& parts) {
  json::value& first = parts.front();
  if (!first.is_object()) return std::move(first);
  json::value* t = first.get_object().if_contains("text");
  return t != nullptr ? std::move(*t) : json::value("");
}

// The text of a reasoning item's first content part, else its first summary part.
Result<json::value, ConversionError> reasoning_text(json::object& item) {
  for (std::string_view key : {"content", "summary"}) {
    json::value* list = item.if_contains(key);
    if (list == nullptr || list->is_null()) continue;
    if (!list->is_array()) return bad("reasoning content/summary is not a list");
    if (list->get_array().empty()) continue;
    json::value text = take_first_text(list->get_array());
    if (!text.is_string()) return bad("reasoning text is not a string");
    return text;
  }
  return json::value("");
}

// An assistant message item's text: a string content, else its first part's text.
Result<json::value, ConversionError> assistant_text(json::object& item) {
  json::value* content = item.if_contains("content");
  if (content == nullptr || content->is_null()) return json::value("");
  if (content->is_string()) return std::move(*content);
  if (!content->is_array()) return bad("assistant content must be a string or a list");
  if (content->get_array().empty()) return json::value("");
  json::value text = take_first_text(content->get_array());
  if (!text.is_string()) return bad("assistant text is not a string");
  return text;
}

Result<bool, ConversionError> convert_item(json::value& value, json::array& messages) {
  if (!value.is_object()) return bad("input item is not an object");
  json::object& item = value.get_object();
  bool ok = true;
  const json::string* type = string_field(item, "type", ok);
  if (!ok) return bad("input item type is not a string");
  const std::string_view t = type != nullptr ? std::string_view(*type) : std::string_view();
  json::object* prev = previous_assistant(messages);
  if (t == "function_call") {
    const json::string* call_id = string_field(item, "call_id", ok);
    const json::string* name = string_field(item, "name", ok);
    const json::string* arguments = string_field(item, "arguments", ok);
    const json::string* ns = string_field(item, "namespace", ok);
    if (!ok || call_id == nullptr || name == nullptr || arguments == nullptr) return bad("malformed function_call item");
    std::string full = truthy(ns) ? std::string(*ns) + "__" + std::string(*name) : std::string(*name);
    json::object call;
    call["id"] = *call_id;
    call["function"] = json::object{{"name", full}, {"arguments", *arguments}};
    call["type"] = "function";
    if (prev != nullptr) {
      json::value* calls = prev->if_contains("tool_calls");
      if (calls != nullptr && calls->is_array()) {
        calls->get_array().push_back(std::move(call));
        return true;
      }
      if (calls == nullptr || calls->is_null()) {
        (*prev)["tool_calls"] = json::array{std::move(call)};
        return true;
      }
    }
    messages.push_back(json::object{{"role", "assistant"}, {"tool_calls", json::array{std::move(call)}}});
    return true;
  }
  if (t == "reasoning") {
    auto text = reasoning_text(item);
    if (!text) return text.error();
    if (prev != nullptr && absent_or_null(*prev, "reasoning")) {
      (*prev)["reasoning"] = std::move(text.value());
      return true;
    }
    messages.push_back(json::object{{"role", "assistant"}, {"reasoning", std::move(text.value())}});
    return true;
  }
  if (t == "function_call_output") {
    json::value* output = item.if_contains("output");
    const json::value* call_id = item.if_contains("call_id");
    messages.push_back(json::object{{"role", "tool"},
                                    {"content", output != nullptr ? std::move(*output) : json::value(nullptr)},
                                    {"tool_call_id", call_id != nullptr ? *call_id : json::value(nullptr)}});
    return true;
  }
  const json::string* role = string_field(item, "role", ok);
  if (!ok) return bad("input item role is not a string");
  if (role != nullptr && *role == "assistant") {
    auto text = assistant_text(item);
    if (!text) return text.error();
    if (prev != nullptr && absent_or_null(*prev, "content")) {
      (*prev)["content"] = std::move(text.value());
      return true;
    }
    messages.push_back(json::object{{"role", "assistant"}, {"content", std::move(text.value())}});
    return true;
  }
  // Anything else goes to the chat path as it is; only a message (a role) renders there.
  if (role == nullptr) return unsupported("input item type not rendered");
  json::object m;
  m["role"] = *role;
  if (json::value* content = item.if_contains("content"); content != nullptr && !content->is_null())
    m["content"] = std::move(*content);
  if (const json::value* name = item.if_contains("name"); name != nullptr && name->is_string()) m["name"] = *name;
  messages.push_back(std::move(m));
  return true;
}

// Whether vLLM continues the last input item instead of starting a new assistant turn.
bool continues_final_message(const json::value& input) {
  if (!input.is_array() || input.get_array().empty()) return false;
  const json::value& last = input.get_array().back();
  if (!last.is_object()) return false;
  const json::object& o = last.get_object();
  const json::value* type = o.if_contains("type");
  std::string_view t = "message";
  if (type != nullptr && type->is_string()) t = type->get_string();
  if (t != "message" && t != "reasoning") return false;
  const json::value* status = o.if_contains("status");
  return status != nullptr && status->is_string() &&
         (status->get_string() == "in_progress" || status->get_string() == "incomplete");
}

// A Responses function tool (or namespace member) as vLLM 0.32's FunctionDefinition dump
// (construct_tool_dicts): name, description, parameters, then the flags that are set.
Result<json::object, ConversionError> responses_function(const json::object& tool, const json::value& name) {
  auto function = function_definition(name, field(tool, "description"),
                                      field(tool, "parameters") ? *field(tool, "parameters") : json::value(nullptr), tool);
  if (!function) return bad("tool strict or defer_loading is not a boolean");
  return std::move(*function);
}

Result<json::array, ConversionError> responses_tools(const json::array& tools) {
  json::array out;
  for (const json::value& value : tools) {
    if (!value.is_object()) return bad("tool is not an object");
    const json::object& tool = value.get_object();
    const json::value* type = tool.if_contains("type");
    if (type == nullptr || !type->is_string()) return bad("tool without a type");
    if (type->get_string() == "function") {
      const json::value* name = tool.if_contains("name");
      if (name == nullptr || !name->is_string()) return bad("function tool without a name");
      auto f = responses_function(tool, *name);
      if (!f) return f.error();
      out.push_back(tool_of(std::move(f.value())));
    } else if (type->get_string() == "namespace") {
      const json::value* ns = tool.if_contains("name");
      const json::value* members = tool.if_contains("tools");
      if (ns == nullptr || !ns->is_string() || members == nullptr || !members->is_array())
        return bad("malformed namespace tool");
      for (const json::value& mv : members->get_array()) {
        if (!mv.is_object()) return bad("namespace member is not an object");
        const json::object& member = mv.get_object();
        const json::value* mt = member.if_contains("type");
        if (mt == nullptr || !mt->is_string() || mt->get_string() != "function") continue;
        const json::value* name = member.if_contains("name");
        if (name == nullptr || !name->is_string()) return bad("namespace function without a name");
        json::value flat = json::string(std::string(ns->get_string()) + "__" + std::string(name->get_string()));
        auto f = responses_function(member, flat);
        if (!f) return f.error();
        out.push_back(tool_of(std::move(f.value())));
      }
    }
    // Built-in tools (web search, MCP, ...) do not reach the chat template.
  }
  return out;
}

}  // namespace

namespace {

Converted messages_to_chat_consumed(json::object& request) {
  json::value* messages = request.if_contains("messages");
  if (messages == nullptr || !messages->is_array()) return bad("messages must be a list");
  json::array out;
  // The system message first: the top-level system, then every system-role message.
  std::string system;
  size_t system_parts = 0;
  if (const json::value* s = field(request, "system")) {
    auto r = system_text(*s, false, system, system_parts);
    if (!r) return r.error();
  }
  std::vector<std::string_view> roles;
  roles.reserve(messages->get_array().size());
  for (const json::value& m : messages->get_array()) {
    if (!m.is_object()) return bad("message is not an object");
    const json::value* role = m.get_object().if_contains("role");
    const json::value* content = m.get_object().if_contains("content");
    if (role == nullptr || !role->is_string()) return bad("message without a role");
    std::string_view r = role->get_string();
    if (r == "ctx" || r == "msg") r = "user";  // Claude Code's extra roles, as vLLM maps them
    if (r != "user" && r != "assistant" && r != "system") return bad("unknown message role");
    if (content == nullptr || !(content->is_string() || content->is_array()))
      return bad("message content must be a string or a list");
    roles.push_back(r);
    if (r == "system") {
      auto t = system_text(*content, true, system, system_parts);
      if (!t) return t.error();
    }
  }
  if (system_parts > 0) out.push_back(json::object{{"role", "system"}, {"content", system}});
  for (size_t i = 0; i < roles.size(); ++i) {
    if (roles[i] == "system") continue;
    auto r = convert_message(messages->get_array()[i].get_object(), roles[i], out);
    if (!r) return r.error();
  }
  json::object chat;
  copy_if_present(request, chat, "model");
  copy_if_present(request, chat, "cache_salt");  // vLLM 0.32 passes it on to the chat request
  chat["messages"] = std::move(out);
  if (const json::value* tools = field(request, "tools")) {
    if (!tools->is_array()) return bad("tools must be a list");
    json::array list;
    for (const json::value& tv : tools->get_array()) {
      if (!tv.is_object()) return bad("tool is not an object");
      const json::object& tool = tv.get_object();
      const json::value* name = tool.if_contains("name");
      const json::value* schema = tool.if_contains("input_schema");
      const json::value* description = field(tool, "description");
      if (name == nullptr || !name->is_string()) return bad("tool without a name");
      if (schema == nullptr || !schema->is_object()) return bad("tool input_schema must be an object");
      if (description != nullptr && !description->is_string()) return bad("tool description is not a string");
      json::object parameters = schema->get_object();
      if (!parameters.contains("type")) parameters["type"] = "object";
      auto function = function_definition(*name, description, std::move(parameters), tool);
      if (!function) return bad("tool strict or defer_loading is not a boolean");
      list.push_back(tool_of(std::move(*function)));
    }
    chat["tools"] = std::move(list);
  }
  if (const json::value* oc = field(request, "output_config")) {
    if (!oc->is_object()) return bad("output_config is not an object");
    if (const json::value* effort = field(oc->get_object(), "effort")) {
      if (!effort->is_string()) return bad("output_config.effort is not a string");
      chat["reasoning_effort"] = *effort;
    }
  }
  // vLLM 0.32 (_handle_thinking, after the output config): thinking {"type": "disabled"} sets
  // reasoning_effort to "none" (to "low" on a model whose template renders "none" as some effort,
  // which vLLM finds by rendering a probe prompt; not reproduced here: the prediction check sees
  // such a model's misses). "enabled" sets a token budget, which does not change the prompt.
  if (const json::value* thinking = field(request, "thinking")) {
    if (!thinking->is_object()) return bad("thinking is not an object");
    const json::value* type = field(thinking->get_object(), "type");
    if (type == nullptr || !type->is_string()) return bad("thinking without a type");
    if (type->get_string() == "disabled") chat["reasoning_effort"] = "none";
  }
  if (const json::value* kw = field(request, "chat_template_kwargs")) {
    if (!kw->is_object()) return bad("chat_template_kwargs is not an object");
    chat["chat_template_kwargs"] = *kw;
  }
  return chat;
}

Converted responses_to_chat_consumed(json::object& request) {
  if (field(request, "prompt") != nullptr) return bad("prompt templates are not supported");
  for (std::string_view stateful : {"previous_response_id", "previous_response", "previous_input_messages"}) {
    if (field(request, stateful) != nullptr) return unsupported("the engine's stored conversation state");
  }
  json::value* input = request.if_contains("input");
  if (input == nullptr || !(input->is_string() || input->is_array())) return bad("input must be a string or a list");
  bool ok = true;
  const json::string* instructions = string_field(request, "instructions", ok);
  if (!ok) return bad("instructions is not a string");
  json::array messages;
  if (truthy(instructions)) messages.push_back(json::object{{"role", "system"}, {"content", std::move(request.at("instructions"))}});
  const bool continues = continues_final_message(*input);
  if (input->is_string()) {
    messages.push_back(json::object{{"role", "user"}, {"content", std::move(*input)}});
  } else {
    json::array items;
    for (json::value& item : input->get_array()) {
      auto r = convert_item(item, items);
      if (!r) return r.error();
    }
    for (json::value& m : items) messages.push_back(std::move(m));
  }
  json::object chat;
  copy_if_present(request, chat, "model");
  copy_if_present(request, chat, "cache_salt");
  chat["messages"] = std::move(messages);
  if (const json::value* tools = field(request, "tools")) {
    if (!tools->is_array()) return bad("tools must be a list");
    if (!tools->get_array().empty()) {
      auto list = responses_tools(tools->get_array());
      if (!list) return list.error();
      chat["tools"] = std::move(list.value());
    }
  }
  if (continues) {
    chat["add_generation_prompt"] = false;
    chat["continue_final_message"] = true;
  }
  if (const json::value* reasoning = field(request, "reasoning")) {
    if (!reasoning->is_object()) return bad("reasoning is not an object");
    if (const json::value* effort = field(reasoning->get_object(), "effort")) {
      if (!effort->is_string()) return bad("reasoning.effort is not a string");
      chat["reasoning_effort"] = *effort;
    }
  }
  // vLLM 0.32 takes chat_template_kwargs on Responses requests too (the request's effort and the
  // enable_thinking derived from it are merged over them, as on chat).
  if (const json::value* kw = field(request, "chat_template_kwargs")) {
    if (!kw->is_object()) return bad("chat_template_kwargs is not an object");
    chat["chat_template_kwargs"] = *kw;
  }
  return chat;
}

}  // namespace

Converted messages_to_chat(const json::object& request) {
  json::object copy = request;
  return messages_to_chat_consumed(copy);
}

Converted responses_to_chat(const json::object& request) {
  json::object copy = request;
  return responses_to_chat_consumed(copy);
}

Converted to_chat_request(PromptApi api, json::object&& request) {
  switch (api) {
    case PromptApi::kChat: return std::move(request);
    case PromptApi::kResponses: return responses_to_chat_consumed(request);
    case PromptApi::kMessages: return messages_to_chat_consumed(request);
    case PromptApi::kCompletions: break;
  }
  return bad("a completions request has no messages");
}

Converted to_chat_request(PromptApi api, const json::object& request) {
  if (api == PromptApi::kCompletions) return bad("a completions request has no messages");
  return to_chat_request(api, json::object(request));
}

}  // namespace ramjet::render
