#include "render/template/vllm_chat.h"

#include <cctype>
#include <string>
#include <string_view>

#include <boost/json.hpp>

namespace ramjet::render {

namespace json = boost::json;

namespace {

// A field that is present and not null (pydantic reads null as unset), else nullptr.
const json::value* set_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && !v->is_null() ? v : nullptr;
}

// A boolean as pydantic's lax mode reads one (vLLM's models are not strict): true/false, 0/1,
// and the strings "true"/"false", "yes"/"no", "on"/"off", "1"/"0", "t"/"f", "y"/"n" in any case.
std::optional<bool> lax_bool(const json::value& v) {
  if (v.is_bool()) return v.get_bool();
  if (v.is_int64() && (v.get_int64() == 0 || v.get_int64() == 1)) return v.get_int64() == 1;
  if (v.is_uint64() && v.get_uint64() <= 1) return v.get_uint64() == 1;
  if (!v.is_string() || v.get_string().size() > 5) return std::nullopt;
  std::string s(v.get_string());
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view t : {"true", "yes", "on", "1", "t", "y"}) {
    if (s == t) return true;
  }
  for (std::string_view f : {"false", "no", "off", "0", "f", "n"}) {
    if (s == f) return false;
  }
  return std::nullopt;
}

}  // namespace

std::optional<json::object> function_definition(const json::value& name, const json::value* description,
                                                json::value parameters, const json::object& flags) {
  json::object function;
  function["name"] = name;
  function["description"] = description != nullptr ? *description : json::value(nullptr);
  function["parameters"] = std::move(parameters);
  for (std::string_view key : {"strict", "defer_loading"}) {
    const json::value* v = set_field(flags, key);
    if (v == nullptr) continue;
    const std::optional<bool> b = lax_bool(*v);
    if (!b) return std::nullopt;
    function[key] = *b;
  }
  return function;
}

std::optional<json::object> vllm_tool_dump(const json::object& tool) {
  const json::value* type = set_field(tool, "type");
  if (type != nullptr && !(type->is_string() && type->get_string() == "function")) return std::nullopt;
  const json::value* fn = tool.if_contains("function");
  if (fn == nullptr || !fn->is_object()) return std::nullopt;
  const json::object& f = fn->get_object();
  const json::value* name = f.if_contains("name");
  const json::value* description = set_field(f, "description");
  const json::value* parameters = set_field(f, "parameters");
  if (name == nullptr || !name->is_string()) return std::nullopt;
  if (description != nullptr && !description->is_string()) return std::nullopt;
  if (parameters != nullptr && !parameters->is_object()) return std::nullopt;
  std::optional<json::object> function =
      function_definition(*name, description, parameters ? *parameters : json::value(nullptr), f);
  if (!function) return std::nullopt;
  std::optional<bool> outer;
  if (const json::value* d = set_field(tool, "defer_loading")) {
    outer = lax_bool(*d);
    if (!outer) return std::nullopt;
    if (!function->contains("defer_loading")) (*function)["defer_loading"] = *outer;  // _propagate_defer_loading
  }
  json::object out;
  out["type"] = "function";
  out["function"] = std::move(*function);
  if (outer) out["defer_loading"] = *outer;
  return out;
}

json::object vllm_template_kwargs(const json::object& request) {
  json::object kwargs;
  if (const json::value* kw = request.if_contains("chat_template_kwargs"); kw && kw->is_object()) kwargs = kw->as_object();
  auto set = [](const json::value* v) {
    return v != nullptr && !v->is_null() && !(v->is_string() && v->get_string() == "auto");
  };
  if (const json::value* d = request.if_contains("documents"); set(d)) kwargs["documents"] = *d;
  if (const json::value* effort = request.if_contains("reasoning_effort"); set(effort)) {
    if (!kwargs.contains("enable_thinking") && effort->is_string())
      kwargs["enable_thinking"] = effort->get_string() != "none";
    kwargs["reasoning_effort"] = *effort;
  }
  return kwargs;
}

void as_chat_text_parts(json::value& messages) {
  json::array* list = messages.if_array();
  if (list == nullptr) return;
  for (json::value& m : *list) {
    json::object* o = m.if_object();
    json::value* content = o ? o->if_contains("content") : nullptr;
    if (content == nullptr || !content->is_array()) continue;
    for (json::value& part : content->as_array()) {
      json::object* p = part.if_object();
      json::value* type = p ? p->if_contains("type") : nullptr;
      if (type && type->is_string() && (type->as_string() == "input_text" || type->as_string() == "output_text")) {
        *type = "text";
      }
    }
  }
}

}  // namespace ramjet::render
