// Qwen3 (the hybrid-thinking Qwen3 dense and MoE models, e.g. Qwen/Qwen3-8B), rendered with the
// model's HF chat template (digest-pinned); text only. The template reads enable_thinking (default
// on) and nothing else: the only request-level effort it can express is "none" (thinking off); any
// other reasoning_effort is left to the engine, never mapped to thinking on. The render layer
// renders the pinned template with its native Qwen3 formatter where that reproduces it
// (render/template/qwen3_native.h: by the template's SHA-256), with the template for everything
// else.
#include <array>
#include <string_view>

#include "model/model_profile.h"
#include "model/reasoning.h"

namespace ramjet::model {

namespace {

constexpr std::array<std::string_view, 1> kKwargs = {"enable_thinking"};
constexpr std::array<std::string_view, 2> kModelTypes = {"qwen3", "qwen3_moe"};  // dense and MoE

class Qwen3 final : public ModelProfile {
 public:
  std::string_view label() const override { return "qwen3"; }
  std::string_view family() const override { return "qwen3"; }
  FormatterSource formatter_source() const override { return FormatterSource::kHfChatTemplate; }
  Modality modality() const override { return Modality::kText; }
  std::span<const std::string_view> template_kwarg_keys() const override { return kKwargs; }
  ReasoningResult apply_reasoning(TemplateArgs& args) const override {
    return detail::apply_effort_rules(args, {}, thinking_can_be_disabled(), {});
  }
  std::optional<std::string_view> reasoning_class(std::string_view effort) const override {
    return detail::effort_class(effort, {}, thinking_can_be_disabled());
  }
  bool thinking_can_be_disabled() const override { return true; }
  std::string_view template_formatter() const override { return "qwen3"; }
  std::span<const std::string_view> model_types() const override { return kModelTypes; }
};

}  // namespace

extern const ModelProfile& qwen3();
const ModelProfile& qwen3() {
  static const Qwen3 profile;
  return profile;
}

}  // namespace ramjet::model
