// The EngineScraper's snapshot store: written by the scrape loop (engine_scrape.cc), read by
// the dashboard and the metrics writer. A mutex guards it; no request touches it.
#include "upstream/engine_stats.h"

#include <cstdint>

namespace ramjet::upstream {

std::string_view scrape_error_label(ScrapeError e) {
  switch (e) {
    case ScrapeError::kConnect: return "connect";
    case ScrapeError::kTimeout: return "timeout";
    case ScrapeError::kHttp: return "http";
    case ScrapeError::kTooLarge: return "too_large";
    case ScrapeError::kProtocol: return "protocol";
    case ScrapeError::kParse: return "parse";
    case ScrapeError::kCount: break;
  }
  return "protocol";
}

std::vector<EngineSample> EngineScraper::engines() const {
  std::lock_guard lock(mu_);
  return samples_;
}

std::vector<GpuSample> EngineScraper::gpus() const {
  std::lock_guard lock(mu_);
  std::vector<GpuSample> out;
  for (size_t i = 0; i < samples_.size(); ++i) {
    // A separate DCGM exporter, when configured for this engine, is the source of truth.
    const auto& from = !url_gpus_[i].empty() ? url_gpus_[i] : engine_gpus_[i];
    out.insert(out.end(), from.begin(), from.end());
  }
  out.insert(out.end(), host_gpus_.begin(), host_gpus_.end());
  return out;
}

void EngineScraper::record(size_t engine, EngineSample sample, std::vector<GpuSample> gpus) {
  if (engine >= samples_.size()) return;
  for (GpuSample& g : gpus) g.engine = engine;
  if (config_.on_sample) config_.on_sample(engine, &sample);
  std::lock_guard lock(mu_);
  samples_[engine] = std::move(sample);
  engine_gpus_[engine] = std::move(gpus);
}

void EngineScraper::forget(size_t engine) {
  if (engine >= samples_.size()) return;
  std::lock_guard lock(mu_);
  samples_[engine] = EngineSample{};
  engine_gpus_[engine].clear();
}

void EngineScraper::record_error(size_t engine, ScrapeError why) {
  if (engine >= samples_.size() || why == ScrapeError::kCount) return;
  errors_[engine * static_cast<size_t>(ScrapeError::kCount) + static_cast<size_t>(why)].inc();
  if (config_.on_sample) config_.on_sample(engine, nullptr);
  std::lock_guard lock(mu_);
  samples_[engine].ok = false;  // the last values stay (stale); ok says they are not current
}

void EngineScraper::record_gpu_url(size_t engine, std::vector<GpuSample> gpus) {
  if (engine >= samples_.size()) return;
  for (GpuSample& g : gpus) g.engine = engine;
  std::lock_guard lock(mu_);
  url_gpus_[engine] = std::move(gpus);
}

void EngineScraper::record_host_gpus(std::vector<GpuSample> gpus) {
  for (GpuSample& g : gpus) g.engine = SIZE_MAX;
  std::lock_guard lock(mu_);
  host_gpus_ = std::move(gpus);
}

}  // namespace ramjet::upstream
