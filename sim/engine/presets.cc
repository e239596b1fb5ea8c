// Named engine presets. The Qwen and DeepSeek numbers are fitted to the measurements quoted in
// docs/sim.md (calibration table there; rerun `sim_engine_calibrate` after any change here).
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/engine.h"

namespace ramjet::sim {

namespace {

EngineConfig tiny() {
  EngineConfig c;
  c.preset = "tiny";
  c.block_size = 16;
  c.num_gpu_blocks = 2048;
  c.max_num_seqs = 256;
  c.max_num_batched_tokens = 4096;
  c.max_model_len = 16384;
  c.timing.step_base = 2e-3;
  c.timing.per_seq = 20e-6;
  c.timing.per_kv_token = 20e-9;
  c.timing.per_prefill_token = 5e-6;
  return c;
}

EngineConfig tiny_mtp() {
  EngineConfig c = tiny();
  c.preset = "tiny-mtp";
  c.timing.speculative_tokens = 2;
  c.timing.acceptance = {0.769, 0.5956};
  c.timing.spec_overhead_per_draft = 10e-6;
  c.timing.spec_step_overhead_per_draft = 0.3e-3;
  return c;
}

// Qwen3.8-27B FP8, one TP4 engine of node06 (two per box). Hybrid linear attention: the
// full-attention block is 784 tokens. KV pool 4,901,554 tokens per box without MTP.
EngineConfig qwen() {
  EngineConfig c;
  c.preset = "qwen3.8-27b-tp4";
  c.block_size = 784;
  c.num_gpu_blocks = 3126;  // 2,450,777 tokens per engine / 784
  c.max_num_seqs = 256;
  c.max_num_batched_tokens = 8192;
  c.max_model_len = 253952;
  c.timing.step_base = 12.9e-3;
  c.timing.per_seq = 41.8e-6;
  c.timing.per_kv_token = 30e-9;
  c.timing.per_prefill_token = 20e-6;
  return c;
}

// MTP, 2 draft tokens: acceptance 76.9% / 45.8% per position (unconditional), i.e. 0.769 and
// 0.458 / 0.769 conditional. KV pool 4,366,239 tokens per box.
EngineConfig qwen_mtp() {
  EngineConfig c = qwen();
  c.preset = "qwen3.8-27b-tp4-mtp";
  c.num_gpu_blocks = 2784;
  c.timing.speculative_tokens = 2;
  c.timing.acceptance = {0.769, 0.5956};
  c.timing.spec_overhead_per_draft = 122.5e-6;
  c.timing.spec_step_overhead_per_draft = 2.378e-3;
  return c;
}

// MTP3, fitted to the "two speeds" measurements (Qwen3.8-Flash-Next replicas): acceptance and
// draft costs are fitted, not measured. KV pool: standard + MTP3 = 1.069 x two MTP3 replicas.
EngineConfig qwen_mtp3() {
  EngineConfig c = qwen();
  c.preset = "qwen3.8-27b-tp4-mtp3";
  c.num_gpu_blocks = 2747;
  c.timing.speculative_tokens = 3;
  c.timing.acceptance = {0.80, 0.62, 0.55};
  c.timing.spec_overhead_per_draft = 390.7e-6;
  c.timing.spec_step_overhead_per_draft = 1.669e-3;
  return c;
}

// DeepSeek-V4-Flash (sparse MoE), one TP4 engine: ~245 tok/s single stream, ~1,891 tok/s per
// box at c24. Block size 256. Rough: the measured deployment's speculation is folded into the
// plain step time.
EngineConfig deepseek() {
  EngineConfig c;
  c.preset = "deepseek-v4-flash-tp4";
  c.block_size = 256;
  c.num_gpu_blocks = 6144;
  c.max_num_seqs = 256;
  c.max_num_batched_tokens = 8192;
  c.max_model_len = 262144;
  c.timing.step_base = 3.3e-3;
  c.timing.per_seq = 560e-6;
  c.timing.per_kv_token = 30e-9;
  c.timing.per_prefill_token = 50e-6;
  return c;
}

struct Named {
  const char* name;
  EngineConfig (*make)();
};

constexpr Named kPresets[] = {
    {"tiny", tiny},
    {"tiny-mtp", tiny_mtp},
    {"qwen3.8-27b-tp4", qwen},
    {"qwen3.8-27b-tp4-mtp", qwen_mtp},
    {"qwen3.8-27b-tp4-mtp3", qwen_mtp3},
    {"deepseek-v4-flash-tp4", deepseek},
};

}  // namespace

std::optional<EngineConfig> preset(const std::string& name) {
  for (const Named& p : kPresets) {
    if (name == p.name) return p.make();
  }
  return std::nullopt;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const Named& p : kPresets) out.emplace_back(p.name);
  return out;
}

}  // namespace ramjet::sim
