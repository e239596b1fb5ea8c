// Qwen3.8 family, rendered with the model's HF chat template (digest-pinned).
//   qwen3.8-27b         image + video; efforts low/medium/xhigh; thinking can be turned off.
//   qwen3.8-flash-next  shares the 27B renderer: at the qualified revision its tokenizer.json and
//                       tokenizer_config.json (chat template, reasoning controls) are
//                       byte-identical to the 27B's. Its own digests and goldens still apply.
//   qwen3.8-2.4t-a95b   text only; thinking is mandatory (enable_thinking false and effort
//                       "none" are not rendered locally).
// The template reads enable_thinking, reasoning_effort and preserve_thinking (default on: agent
// traffic carries it, so leaving it out would send nearly every request to the engine).
#include <array>
#include <string_view>

#include "model/model_profile.h"
#include "model/reasoning.h"

namespace ramjet::model {
namespace {

constexpr std::array<std::string_view, 3> kKwargs = {"enable_thinking", "reasoning_effort",
                                                     "preserve_thinking"};
constexpr std::array<std::string_view, 3> kEfforts = {"low", "medium", "xhigh"};
constexpr std::array<std::string_view, 1> kThinkingSwitches = {"enable_thinking"};

class Qwen38 final : public ModelProfile {
 public:
  constexpr Qwen38(std::string_view label, Modality modality, bool thinking_optional)
      : label_(label), modality_(modality), thinking_optional_(thinking_optional) {}
  std::string_view label() const override { return label_; }
  std::string_view family() const override { return "qwen3.8"; }
  FormatterSource formatter_source() const override { return FormatterSource::kHfChatTemplate; }
  Modality modality() const override { return modality_; }
  std::span<const std::string_view> template_kwarg_keys() const override { return kKwargs; }
  ReasoningResult apply_reasoning(TemplateArgs& args) const override {
    return detail::apply_effort_rules(args, kEfforts, thinking_optional_, kThinkingSwitches);
  }
  std::optional<std::string_view> reasoning_class(std::string_view effort) const override {
    return detail::effort_class(effort, kEfforts, thinking_optional_);
  }
  bool thinking_can_be_disabled() const override { return thinking_optional_; }

 private:
  std::string_view label_;
  Modality modality_;
  bool thinking_optional_;
};

}  // namespace

extern const ModelProfile& qwen38_27b();
extern const ModelProfile& qwen38_flash_next();
extern const ModelProfile& qwen38_2_4t_a95b();

const ModelProfile& qwen38_27b() {
  static const Qwen38 profile("qwen3.8-27b", Modality::kImageAndVideo, true);
  return profile;
}
// The 27B renderer under its own label.
const ModelProfile& qwen38_flash_next() {
  static const Qwen38 profile("qwen3.8-flash-next", Modality::kImageAndVideo, true);
  return profile;
}
const ModelProfile& qwen38_2_4t_a95b() {
  static const Qwen38 profile("qwen3.8-2.4t-a95b", Modality::kText, false);
  return profile;
}

}  // namespace ramjet::model
