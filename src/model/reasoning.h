// Shared by the profiles of src/model/: the reasoning_effort / enable_thinking rules of vLLM
// (when the caller did not set enable_thinking, vLLM sets it to reasoning_effort != "none"),
// with the model's own list of efforts and no remapping of any other effort.
#pragma once

#include <algorithm>
#include <optional>
#include <span>
#include <string_view>

#include "model/model_profile.h"

namespace ramjet::model::detail {

inline bool json_truthy(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::null: return false;
    case boost::json::kind::bool_: return v.get_bool();
    case boost::json::kind::int64: return v.get_int64() != 0;
    case boost::json::kind::uint64: return v.get_uint64() != 0;
    case boost::json::kind::double_: return v.get_double() != 0;
    case boost::json::kind::string: return !v.get_string().empty();
    case boost::json::kind::array: return !v.get_array().empty();
    case boost::json::kind::object: return !v.get_object().empty();
  }
  return false;
}

// `efforts`: the efforts that keep thinking on. "none" is accepted only when thinking can be
// disabled. Checks everything before editing `args`, so a failure leaves them untouched.
inline ReasoningResult apply_effort_rules(TemplateArgs& args, std::span<const std::string_view> efforts,
                                          bool thinking_can_be_disabled,
                                          std::span<const std::string_view> thinking_switches) {
  std::optional<bool> effort_thinks;
  if (const boost::json::value* e = args.if_contains("reasoning_effort"); e && !e->is_null()) {
    if (!e->is_string()) return LocalFailure::Unsupported;
    const std::string_view effort = e->get_string();
    if (effort == "none") {
      if (!thinking_can_be_disabled) return LocalFailure::Unsupported;
      effort_thinks = false;
    } else if (std::find(efforts.begin(), efforts.end(), effort) != efforts.end()) {
      effort_thinks = true;
    } else {
      return LocalFailure::Unsupported;  // never promoted/demoted to a neighbouring effort
    }
  }
  if (!thinking_can_be_disabled) {
    for (const std::string_view key : thinking_switches)
      if (const boost::json::value* v = args.if_contains(key); v && !json_truthy(*v))
        return LocalFailure::Unsupported;
  }
  if (effort_thinks && !args.contains("enable_thinking")) args["enable_thinking"] = *effort_thinks;
  return std::monostate{};
}

inline std::optional<std::string_view> effort_class(std::string_view effort,
                                                    std::span<const std::string_view> efforts,
                                                    bool thinking_can_be_disabled) {
  if (effort == "none") return thinking_can_be_disabled ? std::optional<std::string_view>("none") : std::nullopt;
  for (const std::string_view e : efforts)
    if (e == effort) return e;
  return std::nullopt;
}

}  // namespace ramjet::model::detail
