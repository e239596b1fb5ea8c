// observe/engine_text: the engine scrape's text readers, without I/O: an engine's /metrics text
// (vLLM and DCGM-exporter series) and nvidia-smi CSV. Untrusted bytes: bounded by PromTextLimits
// and by `max_gpus`; fuzzed by test/fuzz/fuzz_prom_text.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "upstream/engine_stats.h"
#include "metrics/prom_text.h"

namespace ramjet::upstream {

// Reads one /metrics text. vLLM series are summed over their label sets (per-model or per-DP
// rank labels), except vllm:kv_cache_usage_perc, which is averaged; the names vLLM used before
// (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*) are read when the current ones are absent.
// DCGM series (DCGM_FI_DEV_*) become one GpuSample per `gpu` label (at most `max_gpus`; samples
// without a `gpu` label are ignored). Nothing is written unless the whole text parses.
// `rank` (a slot that is one data-parallel rank): only the vLLM series of that rank count —
// vLLM labels each series with engine="<rank>"; a series of another rank is skipped, one
// without the label counts.
metrics::PromTextResult read_engine_metrics(std::string_view text, const metrics::PromTextLimits& limits,
                                   EngineSample& sample, std::vector<GpuSample>& gpus,
                                   size_t max_gpus = 64, std::optional<uint32_t> rank = std::nullopt);

// `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.free,power.draw,
// temperature.gpu,clocks.sm,clocks.mem --format=csv,noheader,nounits` output: one GpuSample per
// line with engine SIZE_MAX; "[N/A]"-style fields are left empty; malformed lines are skipped.
std::vector<GpuSample> parse_nvidia_smi_csv(std::string_view csv, size_t max_gpus = 64);
inline constexpr const char* kNvidiaSmiQuery =
    "--query-gpu=index,utilization.gpu,memory.used,memory.free,power.draw,temperature.gpu,"
    "clocks.sm,clocks.mem";

}  // namespace ramjet::upstream
