// DeepSeek family. deepseek-v4-r34: DeepSeek-V4-Flash as served by vLLM r34, whose prompts come
// from vLLM's own Python encoder (--tokenizer-mode deepseek_v4: vllm/tokenizers/deepseek_v4.py),
// not a Jinja template; text only.
//
// The engine's renderer reads `thinking` and `enable_thinking` (either truthy -> thinking; neither
// given -> thinking), `reasoning_effort` and `drop_thinking`. vLLM maps low/minimal/medium to
// "low" and anything unknown to "high"; ramjet does not remap: only the efforts the encoder has
// ("high", "max") and "none" (chat mode) are rendered locally, any other goes to the engine.
#include <array>
#include <string_view>

#include "model/model_profile.h"
#include "model/reasoning.h"

namespace ramjet::model {
namespace {

constexpr std::array<std::string_view, 4> kKwargs = {"thinking", "enable_thinking", "reasoning_effort",
                                                     "drop_thinking"};
constexpr std::array<std::string_view, 2> kEfforts = {"high", "max"};

class DeepseekV4R34 final : public ModelProfile {
 public:
  std::string_view label() const override { return "deepseek-v4-r34"; }
  std::string_view family() const override { return "deepseek"; }
  FormatterSource formatter_source() const override { return FormatterSource::kNative; }
  Modality modality() const override { return Modality::kText; }
  std::span<const std::string_view> template_kwarg_keys() const override { return kKwargs; }
  ReasoningResult apply_reasoning(TemplateArgs& args) const override {
    // Both thinking switches are optional here: thinking can be disabled.
    return detail::apply_effort_rules(args, kEfforts, thinking_can_be_disabled(), {});
  }
  std::optional<std::string_view> reasoning_class(std::string_view effort) const override {
    return detail::effort_class(effort, kEfforts, thinking_can_be_disabled());
  }
  bool thinking_can_be_disabled() const override { return true; }
  // vLLM's deepseek_v4 encoder: not ported yet, so this profile cannot render locally (startup
  // refuses local tokenizer modes with it; off and remote-shadow work).
  std::string_view native_formatter() const override { return "deepseek-v4"; }
};

// deepseek-v3.2: DeepSeek-V3.2 as served by vLLM (--tokenizer-mode deepseek_v32), prompts from
// vLLM's deepseek_v32 encoder (ported: render/template/deepseek_v32.h); text only. Its renderer
// reads the `thinking` kwarg (enable_thinking is not read). vLLM does not turn reasoning_effort
// into a V3.2 setting that ramjet reproduces, so any request-level effort is left to the engine.
constexpr std::array<std::string_view, 1> kV32Kwargs = {"thinking"};
constexpr std::array<std::string_view, 1> kV32ModelTypes = {"deepseek_v32"};

class DeepseekV32 final : public ModelProfile {
 public:
  std::string_view label() const override { return "deepseek-v3.2"; }
  std::string_view family() const override { return "deepseek"; }
  FormatterSource formatter_source() const override { return FormatterSource::kNative; }
  Modality modality() const override { return Modality::kText; }
  std::span<const std::string_view> template_kwarg_keys() const override { return kV32Kwargs; }
  ReasoningResult apply_reasoning(TemplateArgs& args) const override {
    if (const boost::json::value* e = args.if_contains("reasoning_effort"); e && !e->is_null())
      return LocalFailure::Unsupported;
    return std::monostate{};
  }
  std::optional<std::string_view> reasoning_class(std::string_view) const override { return std::nullopt; }
  bool thinking_can_be_disabled() const override { return true; }  // thinking: false
  std::string_view native_formatter() const override { return "deepseek-v32"; }
  std::span<const std::string_view> model_types() const override { return kV32ModelTypes; }
};

}  // namespace

extern const ModelProfile& deepseek_v4_r34();
extern const ModelProfile& deepseek_v32();
const ModelProfile& deepseek_v32() {
  static const DeepseekV32 profile;
  return profile;
}
const ModelProfile& deepseek_v4_r34() {
  static const DeepseekV4R34 profile;
  return profile;
}

}  // namespace ramjet::model
