// observe/engine_stats: what ramjet reads from the engines themselves, for the dashboard and
// the ramjet_engine_* metrics. Every RJ_ENGINE_SCRAPE_INTERVAL_MS the scraper GETs each
// engine's own /metrics (vLLM series, plus DCGM-exporter series when the engine's text carries
// them, as ramjet-sim --gpus N does), optional separate DCGM-exporter URLs (RJ_GPU_METRICS_URLS,
// one per engine in order), or, when neither names a GPU and nvidia-smi exists locally, the
// host's GPUs from `nvidia-smi --query-gpu=... --format=csv`.
//
// Snapshots are copied out under a mutex that only the scraper (one write per engine per
// interval) and readers (the dashboard, a /metrics scrape) take; the request path never does.
// Routing reads none of it here: on_sample hands each scrape's result to whoever listens (the
// engine-load board, upstream/engine_load.h, RJ_ROUTE_ENGINE_LOAD).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/config.h"
#include "net/roster.h"
#include "metrics/metrics.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace ramjet::upstream {

struct EngineSample {            // one engine's own /metrics, read every RJ_ENGINE_SCRAPE_INTERVAL_MS
  int64_t unix_ms = 0; bool ok = false;            // ok: the last scrape succeeded and parsed
  std::optional<double> running, waiting;          // vllm:num_requests_running / vllm:num_requests_waiting
  std::optional<double> kv_usage;                  // vllm:kv_cache_usage_perc (0..1)
  std::optional<double> prefix_queries, prefix_hits;  // vllm:prefix_cache_queries_total / _hits_total (tokens, counters)
  std::optional<double> prompt_tokens, generation_tokens;  // vllm:prompt_tokens_total / vllm:generation_tokens_total
  // The KV pool in tokens: vllm:cache_config_info's num_gpu_blocks x block_size labels.
  std::optional<double> kv_capacity_tokens;
  // Data-parallel ranks the engine reports: 1 + the largest engine="k" label (k < 1024) of its
  // vllm:num_requests_running series (vLLM labels each rank's series with its rank; RJ_UPSTREAM_DP_SIZE=auto).
  std::optional<uint32_t> dp_ranks;
  // LoRA adapters (vllm:lora_requests_info, an engine started with --enable-lora): its
  // max_lora label and the adapters named by running_lora_adapters and waiting_lora_adapters, of
  // the series with the latest value (vLLM sets a label set's value to the time it last saw it
  // and keeps every set it ever saw). At most 256 names of at most 256 bytes.
  struct Lora {
    uint32_t max_loras = 0;
    std::vector<std::string> active;
  };
  std::optional<Lora> lora;
};

struct GpuSample {               // one device, from DCGM-exporter text or nvidia-smi
  size_t engine = 0; std::string device;           // engine ordinal ("host" GPUs from nvidia-smi use engine SIZE_MAX); device = the `gpu` label ("0","1",..)
  std::optional<double> util_pct, fb_used_mib, fb_free_mib, power_w, temp_c, sm_clock_mhz, mem_clock_mhz;
};

// Why a scrape of one engine failed (ramjet_engine_scrape_errors_total{upstream,reason}).
enum class ScrapeError { kConnect, kTimeout, kHttp, kTooLarge, kProtocol, kParse, kCount };
std::string_view scrape_error_label(ScrapeError e);

struct EngineScrapeConfig {
  std::chrono::milliseconds interval{2000};  // RJ_ENGINE_SCRAPE_INTERVAL_MS; 0 = off
  std::chrono::milliseconds timeout{2000};   // per GET (at most the interval)
  std::string bearer;                        // RJ_UPSTREAM_TOKEN
  size_t max_body = 4 * 1024 * 1024;         // a larger /metrics answer is a scrape error
  std::vector<config::UpstreamUrl> engines;  // RJ_UPSTREAM, in order (a fixed fleet)
  const net::Roster* roster = nullptr;       // or the engines by slot, changing at runtime
  std::vector<config::UpstreamUrl> gpu_urls;  // RJ_GPU_METRICS_URLS: DCGM exporter per engine
  bool nvidia_smi = true;  // try nvidia-smi when no GPU URLs are set and an engine shows no GPU
  // Told of each scrape of engine `engine` as it is recorded (on the scrape's thread; it must not
  // block): its sample, or nullptr when the scrape failed.
  std::function<void(size_t engine, const EngineSample* sample)> on_sample;
  // Told just before each scrape asks engine `engine`'s /metrics (and of each data-parallel
  // sibling that scrape reads for), on the scrape's thread; it must not block.
  std::function<void(size_t engine)> on_fetch;
};

// The ramjet_engine_* families EngineScraper::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> engine_families();

// Scrapes every engine's /metrics on an interval and keeps the latest values. Construct, then
// start() on an io context; call stop() before that context is destroyed.
class EngineScraper {
 public:
  explicit EngineScraper(EngineScrapeConfig config);
  ~EngineScraper();
  EngineScraper(const EngineScraper&) = delete;
  EngineScraper& operator=(const EngineScraper&) = delete;

  // Starts the scrape loop on `ctx` (no-op when the interval is 0). stop() is thread-safe and
  // does not block; call it before `ctx` is destroyed (the destructor joins the nvidia-smi thread).
  void start(boost::asio::io_context& ctx);
  void stop();
  bool enabled() const { return config_.interval.count() > 0; }
  // Whether slot i scrapes: a data-parallel rank's slot does unless an earlier active slot holds
  // another rank of its engine (that one scrape is read per rank for all of them).
  bool scrapes_for_siblings(size_t i) const;
  const EngineScrapeConfig& config() const { return config_; }

  // Thread-safe snapshots for the dashboard and metrics.
  std::vector<EngineSample> engines() const;  // one per engine ordinal (slot)
  size_t slots() const { return config_.roster ? config_.roster->capacity() : config_.engines.size(); }
  // Slot `engine` was vacated: what its last engine reported is dropped.
  void forget(size_t engine);
  std::vector<GpuSample> gpus() const;        // engines' devices in ordinal order, then host GPUs

  // ramjet_engine_* families (see observe/metric_families).
  void write_metrics(metrics::Exposition& x) const;

  // Results of one scrape, applied by the loop (public so tests can drive the store directly).
  void record(size_t engine, EngineSample sample, std::vector<GpuSample> gpus);
  void record_error(size_t engine, ScrapeError why);
  void record_gpu_url(size_t engine, std::vector<GpuSample> gpus);
  void record_host_gpus(std::vector<GpuSample> gpus);

  struct Loop;  // the running loop's state (engine_scrape.cc)
  struct Smi;   // the nvidia-smi thread

 private:
  EngineScrapeConfig config_;
  mutable std::mutex mu_;
  std::vector<EngineSample> samples_;
  std::vector<std::vector<GpuSample>> engine_gpus_;  // from the engine's own /metrics
  std::vector<std::vector<GpuSample>> url_gpus_;     // from RJ_GPU_METRICS_URLS
  std::vector<GpuSample> host_gpus_;                 // from nvidia-smi
  std::unique_ptr<metrics::Counter[]> errors_;                // [engine][ScrapeError]
  std::shared_ptr<Loop> loop_;
  std::unique_ptr<Smi> smi_;
};

}  // namespace ramjet::upstream
