// observe/engine_scrape: the pieces of the engine scrape (observe/engine_stats.h) that read
// bytes: engine /metrics text (vLLM and DCGM-exporter series), nvidia-smi CSV, a bounded child
// process runner, and the one-shot /metrics fetch behind GET /metrics/upstream/{i}.
#pragma once

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "observe/engine_stats.h"
#include "observe/prom_text.h"

namespace ramjet::observe {

// Reads one /metrics text. vLLM series are summed over their label sets (per-model or per-DP
// rank labels), except vllm:kv_cache_usage_perc, which is averaged; the names vLLM used before
// (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*) are read when the current ones are absent.
// DCGM series (DCGM_FI_DEV_*) become one GpuSample per `gpu` label (at most `max_gpus`; samples
// without a `gpu` label are ignored). Nothing is written unless the whole text parses.
PromTextResult read_engine_metrics(std::string_view text, const PromTextLimits& limits,
                                   EngineSample& sample, std::vector<GpuSample>& gpus,
                                   size_t max_gpus = 64);

// `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.free,power.draw,
// temperature.gpu,clocks.sm,clocks.mem --format=csv,noheader,nounits` output: one GpuSample per
// line with engine SIZE_MAX; "[N/A]"-style fields are left empty; malformed lines are skipped.
std::vector<GpuSample> parse_nvidia_smi_csv(std::string_view csv, size_t max_gpus = 64);
inline constexpr const char* kNvidiaSmiQuery =
    "--query-gpu=index,utilization.gpu,memory.used,memory.free,power.draw,temperature.gpu,"
    "clocks.sm,clocks.mem";

// The first executable `name` in the colon-separated `path` list ("" when none).
std::string find_executable(std::string_view name, std::string_view path);

// Runs argv[0] (a path) with argv, stdin from /dev/null and stderr discarded, reading at most
// `max_bytes` of its stdout. Returns the output when it exited 0 within `timeout`; kills it
// (SIGKILL) and returns nullopt otherwise. Blocking: never call it on an io thread.
std::optional<std::string> run_bounded(const std::vector<std::string>& argv,
                                       std::chrono::milliseconds timeout, size_t max_bytes);

// GET /metrics of engine `i` once (the scraper's timeout, size cap and bearer token).
struct EngineMetricsFetch {
  bool ok = false;  // 200 with a body within the cap
  unsigned status = 0;
  std::optional<ScrapeError> error;
  std::string body;
};
boost::asio::awaitable<EngineMetricsFetch> fetch_engine_metrics(const EngineScrapeConfig& config,
                                                                size_t engine);

}  // namespace ramjet::observe
