#include "model/model_profile.h"

#include <algorithm>

namespace ramjet::model {

std::string_view to_string(LocalFailure failure) {
  switch (failure) {
    case LocalFailure::Unsupported: return "unsupported";
    case LocalFailure::Multimodal: return "multimodal";
    case LocalFailure::UnknownKwarg: return "unknown_kwarg";
    case LocalFailure::BadRequest: return "bad_request";
  }
  return "unknown";
}

std::string_view to_string(FormatterSource source) {
  switch (source) {
    case FormatterSource::kNative: return "native";
    case FormatterSource::kHfChatTemplate: return "hf_chat_template";
  }
  return "unknown";
}

std::string_view to_string(Modality modality) {
  switch (modality) {
    case Modality::kText: return "text";
    case Modality::kImageAndVideo: return "image+video";
  }
  return "unknown";
}

const ModelProfile* find_profile(std::string_view label) {
  for (const ModelProfile* p : PROFILES)
    if (p->label() == label) return p;
  return nullptr;
}

const ModelProfile* profile_for_model_type(std::string_view model_type) {
  const ModelProfile* found = nullptr;
  for (const ModelProfile* p : PROFILES) {
    for (std::string_view t : p->model_types()) {
      if (t != model_type) continue;
      if (found != nullptr && found != p) return nullptr;  // two profiles claim it: a label decides
      found = p;
    }
  }
  return found;
}

namespace {

// A content part array with anything but text parts (image_url, video_url, input_audio, parts
// added later, or parts without a type). vLLM reads input_text and output_text parts (the
// Responses API's) as text too.
bool has_non_text_part(const boost::json::value& content) {
  if (!content.is_array()) return false;
  for (const boost::json::value& part : content.get_array()) {
    const boost::json::object* o = part.if_object();
    if (!o) return true;
    const boost::json::value* type = o->if_contains("type");
    if (!type || !type->is_string()) return true;
    const std::string_view t = type->get_string();
    if (t != "text" && t != "input_text" && t != "output_text") return true;
  }
  return false;
}

}  // namespace

std::optional<LocalFailure> message_local_failure(const boost::json::value& message) {
  const boost::json::object* msg = message.if_object();
  if (!msg) return LocalFailure::BadRequest;
  if (const boost::json::value* c = msg->if_contains("content"); c && has_non_text_part(*c))
    return LocalFailure::Multimodal;
  return std::nullopt;
}

ramjet::Result<TemplateArgs, LocalFailure> local_template_args(const ModelProfile& profile,
                                                               const boost::json::object& request) {
  const boost::json::value* messages = request.if_contains("messages");
  if (!messages || !messages->is_array()) return LocalFailure::BadRequest;
  for (const boost::json::value& m : messages->get_array())
    if (auto failure = message_local_failure(m)) return *failure;
  TemplateArgs args;
  if (const boost::json::value* kw = request.if_contains("chat_template_kwargs"); kw && !kw->is_null()) {
    if (!kw->is_object()) return LocalFailure::BadRequest;
    const auto keys = profile.template_kwarg_keys();
    for (const auto& [key, value] : kw->get_object()) {
      if (std::find(keys.begin(), keys.end(), std::string_view(key)) == keys.end())
        return LocalFailure::UnknownKwarg;
      args[key] = value;
    }
  }
  // vLLM (0.32: merge_kwargs(chat_template_kwargs, extra_kwargs)) lets the request's own
  // reasoning_effort override the one in chat_template_kwargs; null and "auto" are unset. It
  // derives enable_thinking from the request's effort only: an effort given as a kwarg alone
  // reaches the template as it is.
  bool from_request = false;
  if (const boost::json::value* effort = request.if_contains("reasoning_effort");
      effort && !effort->is_null() && !(effort->is_string() && effort->as_string() == "auto")) {
    args["reasoning_effort"] = *effort;
    from_request = true;
  }
  const bool had_switch = args.contains("enable_thinking");
  auto applied = profile.apply_reasoning(args);
  if (!applied.ok()) return applied.error();
  if (!from_request && !had_switch) args.erase("enable_thinking");
  return args;
}

}  // namespace ramjet::model
