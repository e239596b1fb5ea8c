// PROFILES: every model ramjet can render locally. Adding a model is a new file in src/model/
// plus one line here; the registry tests then exercise it.
#include "model/model_profile.h"

namespace ramjet::model {

const ModelProfile& deepseek_v4_r34();
const ModelProfile& qwen38_27b();
const ModelProfile& qwen38_flash_next();
const ModelProfile& qwen38_2_4t_a95b();
const ModelProfile& qwen3();
const ModelProfile& deepseek_v32();

const std::array<const ModelProfile*, 6> PROFILES = {
    &deepseek_v4_r34(),
    &qwen38_27b(),
    &qwen38_flash_next(),
    &qwen38_2_4t_a95b(),
    &qwen3(),
    &deepseek_v32(),
};

}  // namespace ramjet::model
