// model: everything model-specific about local request rendering (docs/models.md). Nothing
// outside src/model/ matches on a
// model identity: callers pick a ModelProfile by label from PROFILES and ask it.
//
// A profile says how a model's prompts are built (its formatter source), what content it takes
// (modality), which chat_template_kwargs its renderer understands, and how a request's reasoning
// settings become template arguments. Two rules:
//   * an effort the model does not have is never remapped to one it has:
//     apply_reasoning returns LocalFailure::Unsupported and the request is rendered by the engine;
//   * template_kwarg_keys lists every kwarg the renderer reads (a request with any other key is
//     not rendered locally).
// Requests with a non-text content part are never tokenized locally, whatever the modality: the
// engine's image/video preprocessing decides their token counts.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include <boost/json.hpp>

#include "common/result.h"

namespace ramjet::model {

enum class FormatterSource {
  kNative,          // a C++ port of the engine's own prompt encoder (no Jinja)
  kHfChatTemplate,  // the model's HF chat template (digest-pinned) through render::jinja
};

enum class Modality {
  kText,           // text only
  kImageAndVideo,  // the engine also takes image_url / video_url parts (never rendered locally)
};

// Why a request is not rendered locally; in every case it falls back to the engine.
enum class LocalFailure {
  Unsupported,   // a reasoning setting this model does not have (never remapped)
  Multimodal,    // a non-text content part
  UnknownKwarg,  // a chat_template_kwargs key the profile does not list
  BadRequest,    // the request is not a chat request (no messages array, wrong field types)
};

std::string_view to_string(LocalFailure failure);
std::string_view to_string(FormatterSource source);
std::string_view to_string(Modality modality);

// The template arguments of a request: its chat_template_kwargs plus what vLLM adds from
// request-level fields (reasoning_effort).
using TemplateArgs = boost::json::object;

// Ok carries nothing: apply_reasoning edits the arguments in place.
using ReasoningResult = ramjet::Result<std::monostate, LocalFailure>;

class ModelProfile {
 public:
  virtual ~ModelProfile() = default;

  virtual std::string_view label() const = 0;   // RJ_TOKENIZER_PROFILE value, unique
  virtual std::string_view family() const = 0;  // the model family (one src/model/ file each)
  virtual FormatterSource formatter_source() const = 0;
  virtual Modality modality() const = 0;
  // Every chat_template_kwargs key the renderer understands.
  virtual std::span<const std::string_view> template_kwarg_keys() const = 0;
  // Turns the request's reasoning settings into the arguments the engine's renderer sees
  // (e.g. enable_thinking from reasoning_effort, as vLLM does). An effort or thinking switch the
  // model does not support is LocalFailure::Unsupported, with `args` left as they were.
  virtual ReasoningResult apply_reasoning(TemplateArgs& args) const = 0;
  // The reasoning class an effort belongs to (a metric label), or nullopt for an effort the model
  // does not support.
  virtual std::optional<std::string_view> reasoning_class(std::string_view effort) const = 0;
  virtual bool thinking_can_be_disabled() const = 0;
  // kNative profiles: the name of the engine encoder they use (render::native_formatter_known
  // says whether this build has a port of it); "" for HF chat templates.
  virtual std::string_view native_formatter() const { return {}; }
  // kHfChatTemplate profiles: a native formatter for the model's template family ("qwen3"; see
  // render::template_formatter_known). The render layer uses it in place of the pinned template
  // only when the template's SHA-256 is one the formatter reproduces, and only for the requests it
  // covers (the template renders the rest). "" for none.
  virtual std::string_view template_formatter() const { return {}; }
  // The `model_type` values of an HF config.json this profile renders (RJ_MODEL_DIR picks the
  // profile by it when RJ_TOKENIZER_PROFILE is not set); empty when only a label selects it.
  virtual std::span<const std::string_view> model_types() const { return {}; }
};

// The registry: one entry per profile; adding a model is a new file in src/model/ plus one line
// in profiles.cc. Initialised dynamically: read it from main() onwards, not from another
// translation unit's static initialiser.
extern const std::array<const ModelProfile*, 6> PROFILES;

// The profile with this label, or nullptr (unknown labels are rejected at startup, never
// defaulted).
const ModelProfile* find_profile(std::string_view label);

// The one profile that lists `model_type` (an HF config.json's), or nullptr when none or several do.
const ModelProfile* profile_for_model_type(std::string_view model_type);

// What local_template_args says of one message: BadRequest when it is not an object, Multimodal
// when its content has a non-text part, nothing otherwise (exact routing's follow-up fast path
// checks the messages a turn appends with it).
std::optional<LocalFailure> message_local_failure(const boost::json::value& message);

// Whether `profile` may render a chat request (a JSON object) locally, and with which template
// arguments: no non-text content part (LocalFailure::Multimodal), only listed
// chat_template_kwargs keys (LocalFailure::UnknownKwarg), then apply_reasoning on the kwargs plus
// the request-level reasoning_effort (chat_template_kwargs wins when both set it, as in vLLM).
ramjet::Result<TemplateArgs, LocalFailure> local_template_args(const ModelProfile& profile,
                                                               const boost::json::object& request);

}  // namespace ramjet::model
