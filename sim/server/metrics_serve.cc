// sim/server/metrics_serve: GET /metrics of SimServer — vLLM's engine series once per
// data-parallel rank, the synthetic DCGM GPU series (--gpus) and the simulator's clock health.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "sim/server/server.h"
#include "sim/server/server_io.h"

namespace ramjet::sim {

// Synthetic GPU telemetry in DCGM-exporter format (--gpus N), derived from the engine's load so
// a dashboard shows bursts and per-device differences. Not a vLLM metric: real deployments
// scrape dcgm-exporter. Labels follow dcgm-exporter's (gpu, UUID, device, modelName).
void SimServer::write_dcgm(metrics::Exposition& x, const Rank& rank, size_t index) const {
  const EngineStats st = rank.engine.stats();
  const double busy = std::min(1.0, (st.running + 0.25 * st.waiting) / std::max(1.0, opt_.engine.max_num_seqs / 8.0));
  const double total_mib = 97887;  // a 96 GB card
  struct Field {
    const char* name;
    const char* help;
  };
  const Field fields[] = {
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."},
      {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."},
      {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."},
      {"DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz)."},
  };
  for (const auto& f : fields) {
    if (index == 0) x.family(f.name, "gauge", f.help);
    for (uint32_t g = 0; g < opt_.gpus; ++g) {
      // Devices differ a little (the hot card of the seed's node06 ran ~5 C warmer).
      const double skew = 1.0 + 0.03 * g;
      double v = 0;
      std::string_view n = f.name;
      if (n == "DCGM_FI_DEV_GPU_UTIL") v = std::round(std::min(100.0, 100 * busy * skew));
      if (n == "DCGM_FI_DEV_FB_USED") v = std::round(total_mib * (0.45 + 0.5 * st.kv_cache_usage));
      if (n == "DCGM_FI_DEV_FB_FREE") v = std::round(total_mib * (0.55 - 0.5 * st.kv_cache_usage));
      if (n == "DCGM_FI_DEV_POWER_USAGE") v = 80 + 500 * busy * skew;
      if (n == "DCGM_FI_DEV_GPU_TEMP") v = std::round(34 + 45 * busy + (g == 1 ? 5 : 0));
      if (n == "DCGM_FI_DEV_SM_CLOCK") v = busy > 0.01 ? 2430 : 345;
      if (n == "DCGM_FI_DEV_MEM_CLOCK") v = busy > 0.01 ? 14001 : 405;
      // Each rank has its own --gpus devices, numbered on across the ranks of this process.
      const std::string id = std::to_string(index * opt_.gpus + g);
      x.sample(f.name,
               "gpu=\"" + id + "\",UUID=\"GPU-sim-" + std::to_string(rank.dp_rank) + "-" + std::to_string(g) +
                   "\",device=\"nvidia" + id + "\",modelName=\"ramjet-sim GPU\"",
               v);
    }
  }
}

// vLLM's PrometheusStatLogger: every engine series once per engine core, labelled
// model_name=<the first served name>, engine=<its DP rank>.
std::string SimServer::metrics_text() const {
  metrics::Exposition x;
  std::vector<EngineStats> stats;
  std::vector<std::string> labels;
  for (const auto& r : ranks_) {
    stats.push_back(r->engine.stats());
    labels.push_back("model_name=\"" + opt_.served_model_name() + "\",engine=\"" + std::to_string(r->dp_rank) + "\"");
  }
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  auto per_rank = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    x.family(name, type, help);
    for (size_t i = 0; i < ranks_.size(); ++i) x.sample(name, labels[i], value(*ranks_[i], stats[i]));
  };
  using St = const EngineStats&;
  using Rk = const Rank&;
  per_rank("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           [](Rk, St st) { return static_cast<double>(st.running); });
  per_rank("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           [](Rk, St st) { return static_cast<double>(st.waiting); });
  per_rank("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           [](Rk, St st) { return st.kv_cache_usage; });
  per_rank("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
           [&](Rk, St st) { return d(st.prefix_cache_queries); });
  per_rank("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
           [&](Rk, St st) { return d(st.prefix_cache_hits); });
  per_rank("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           [&](Rk, St st) { return d(st.prompt_tokens); });
  per_rank("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           [&](Rk, St st) { return d(st.generation_tokens); });
  per_rank("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
           [&](Rk, St st) { return d(st.preemptions); });
  x.family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  const char* reasons[] = {"stop", "length", "abort"};
  for (size_t r = 0; r < ranks_.size(); ++r) {
    for (int i = 0; i < 3; ++i) {
      x.sample("vllm:request_success_total", labels[r] + ",finished_reason=\"" + reasons[i] + "\"",
               ranks_[r]->success_by_reason[i]);
    }
  }
  if (opt_.engine.timing.speculative_tokens > 0) {
    per_rank("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
             [&](Rk, St st) { return d(st.spec_drafts); });
    per_rank("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
             [&](Rk, St st) { return d(st.spec_draft_tokens); });
    per_rank("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
             [&](Rk, St st) { return d(st.spec_accepted_tokens); });
    x.family("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter", "Accepted tokens per draft position.");
    for (size_t r = 0; r < ranks_.size(); ++r) {
      for (size_t i = 0; i < stats[r].spec_accepted_per_pos.size(); ++i) {
        x.sample("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                 labels[r] + ",position=\"" + std::to_string(i) + "\"", stats[r].spec_accepted_per_pos[i]);
      }
    }
  }
  x.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    x.sample("vllm:cache_config_info",
             labels[r] + ",block_size=\"" + std::to_string(stats[r].block_size) + "\",enable_prefix_caching=\"" +
                 (opt_.engine.enable_prefix_caching ? "True" : "False") + "\",num_gpu_blocks=\"" +
                 std::to_string(stats[r].num_gpu_blocks) + "\",prefix_caching_hash_algo=\"sha256_cbor\"",
             1.0);
  }
  if (opt_.engine.max_loras > 0) {
    // vLLM 0.32's gauge (no engine label; prometheus_client's multiprocess mode writes the labels
    // sorted): every adapter with a request named in both lists, the value the time; every label
    // set it ever had stays, with the time it was last current.
    std::vector<std::string> names;
    for (const auto& st : stats) {
      for (const auto& n : st.loras) {
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      }
    }
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : ",") + n;
    const std::string set = "max_lora=\"" + std::to_string(opt_.engine.max_loras) + "\",running_lora_adapters=\"" +
                            joined + "\",waiting_lora_adapters=\"" + joined + "\"";
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::lock_guard lock(lora_mu_);
    lora_series_[set] = now;
    if (lora_series_.size() > 1024) {
      lora_series_.erase(std::min_element(lora_series_.begin(), lora_series_.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; }));
    }
    x.family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    for (const auto& [l, t] : lora_series_) x.sample("vllm:lora_requests_info", l, t);
  }
  write_sleep_state(x, labels);
  write_kv_metrics(x, labels);
  if (opt_.gpus > 0) {
    for (size_t r = 0; r < ranks_.size(); ++r) write_dcgm(x, *ranks_[r], r);
  }
  // The simulator's own health of its clock (not a vLLM metric), per rank as its step loops.
  per_rank("ramjet_sim_max_lag_seconds", "gauge", "Largest delay of an engine step behind the virtual clock.",
           [](Rk r, St) { return r.max_lag_s; });
  per_rank("ramjet_sim_late_steps_total", "counter", "Engine steps that finished behind the virtual clock.",
           [&](Rk r, St) { return d(r.late_steps); });
  return x.take();
}


}  // namespace ramjet::sim
