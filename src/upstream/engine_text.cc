// The engine scrape's text readers (observe/engine_text.h): no I/O, untrusted input.
#include "upstream/engine_text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace ramjet::upstream {


namespace {

enum class Vllm { kRunning, kWaiting, kKvUsage, kKvUsageOld, kQueries, kHits, kQueriesOld, kHitsOld,
                  kPrompt, kGeneration, kCount };
constexpr std::array<std::string_view, static_cast<size_t>(Vllm::kCount)> kVllmNames = {
    "vllm:num_requests_running",   "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",    "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
    "vllm:prompt_tokens_total",    "vllm:generation_tokens_total",
};

enum class Dcgm { kUtil, kFbUsed, kFbFree, kPower, kTemp, kSmClock, kMemClock, kCount };
constexpr std::array<std::string_view, static_cast<size_t>(Dcgm::kCount)> kDcgmNames = {
    "DCGM_FI_DEV_GPU_UTIL",  "DCGM_FI_DEV_FB_USED",  "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
};

std::optional<double>& gpu_field(GpuSample& g, size_t field) {
  switch (static_cast<Dcgm>(field)) {
    case Dcgm::kUtil: return g.util_pct;
    case Dcgm::kFbUsed: return g.fb_used_mib;
    case Dcgm::kFbFree: return g.fb_free_mib;
    case Dcgm::kPower: return g.power_w;
    case Dcgm::kTemp: return g.temp_c;
    case Dcgm::kSmClock: return g.sm_clock_mhz;
    case Dcgm::kMemClock:
    case Dcgm::kCount: break;
  }
  return g.mem_clock_mhz;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::optional<double> csv_number(std::string_view s) {
  s = trim(s);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A label's value as a whole number (digits only), or nullopt (absent, empty, signed, other text).
std::optional<uint64_t> whole_label(const metrics::PromLabel* l) {
  if (l == nullptr) return std::nullopt;
  uint64_t v = 0;
  const char* end = l->value.data() + l->value.size();
  const auto [p, ec] = std::from_chars(l->value.data(), end, v);
  if (ec != std::errc() || p != end) return std::nullopt;
  return v;
}

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

metrics::PromTextResult read_engine_metrics(std::string_view text, const metrics::PromTextLimits& limits,
                                   EngineSample& sample, std::vector<GpuSample>& gpus, size_t max_gpus,
                                   std::optional<uint32_t> rank) {
  const std::string rank_text = rank ? std::to_string(*rank) : std::string();
  std::array<double, kVllmNames.size()> sum{};
  std::array<uint32_t, kVllmNames.size()> seen{};
  std::vector<GpuSample> found;
  std::optional<double> capacity;
  std::optional<uint32_t> ranks;
  std::optional<EngineSample::Lora> lora;
  std::optional<double> lora_at;
  metrics::PromTextResult r = metrics::parse_prom_text(text, limits, [&](const metrics::PromSample& s) {
    if (s.name.starts_with("vllm:")) {
      if (s.name == "vllm:num_requests_running") {  // every rank's series: how many ranks there are
        if (const auto k = whole_label(s.label("engine")); k && *k < 1024) {
          ranks = std::max(ranks.value_or(0), static_cast<uint32_t>(*k) + 1);
        }
      }
      if (rank) {
        const metrics::PromLabel* engine = s.label("engine");
        if (engine != nullptr && engine->value != rank_text) return;  // another rank's
      }
      if (s.name == "vllm:lora_requests_info") {  // the label set with the latest time
        if (!std::isfinite(s.value) || (lora_at && s.value <= *lora_at)) return;
        const auto m = whole_label(s.label("max_lora"));
        if (!m || *m > 4096) return;
        EngineSample::Lora l;
        l.max_loras = static_cast<uint32_t>(*m);
        for (const char* key : {"running_lora_adapters", "waiting_lora_adapters"}) {
          const metrics::PromLabel* names = s.label(key);
          if (names == nullptr) continue;
          std::string_view rest = names->value;
          while (!rest.empty() && l.active.size() < 256) {
            const size_t comma = rest.find(',');
            const std::string_view name = rest.substr(0, comma);
            if (!name.empty() && name.size() <= 256) l.active.emplace_back(name);
            rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
          }
        }
        lora = std::move(l);
        lora_at = s.value;
        return;
      }
      if (s.name == "vllm:cache_config_info") {  // an info gauge: the numbers are labels
        const auto b = whole_label(s.label("num_gpu_blocks"));
        const auto k = whole_label(s.label("block_size"));
        if (b && k && *b > 0 && *k > 0 && *b < (uint64_t{1} << 40) && *k < (uint64_t{1} << 20)) {
          capacity = static_cast<double>(*b) * static_cast<double>(*k);
        }
        return;
      }
      for (size_t i = 0; i < kVllmNames.size(); ++i) {
        if (s.name == kVllmNames[i]) {
          if (std::isfinite(s.value)) sum[i] += s.value;
          ++seen[i];
          return;
        }
      }
      return;
    }
    if (!s.name.starts_with("DCGM_FI_DEV_")) return;
    size_t field = kDcgmNames.size();
    for (size_t i = 0; i < kDcgmNames.size(); ++i) {
      if (s.name == kDcgmNames[i]) field = i;
    }
    const metrics::PromLabel* gpu = s.label("gpu");
    if (field == kDcgmNames.size() || gpu == nullptr || gpu->value.empty() || gpu->value.size() > 16) return;
    auto it = std::find_if(found.begin(), found.end(), [&](const GpuSample& g) { return g.device == gpu->value; });
    if (it == found.end()) {
      if (found.size() >= max_gpus) return;
      found.push_back(GpuSample{});
      found.back().device = std::string(gpu->value);
      it = found.end() - 1;
    }
    if (std::isfinite(s.value)) gpu_field(*it, field) = s.value;
  });
  if (!r.ok()) return r;
  auto get = [&](Vllm v) -> std::optional<double> {
    const size_t i = static_cast<size_t>(v);
    if (seen[i] == 0) return std::nullopt;
    return sum[i];
  };
  EngineSample out;
  out.unix_ms = unix_ms_now();
  out.ok = true;
  out.running = get(Vllm::kRunning);
  out.dp_ranks = ranks;
  out.waiting = get(Vllm::kWaiting);
  const Vllm kv = seen[static_cast<size_t>(Vllm::kKvUsage)] ? Vllm::kKvUsage : Vllm::kKvUsageOld;
  if (auto total = get(kv)) out.kv_usage = *total / seen[static_cast<size_t>(kv)];
  const bool current = seen[static_cast<size_t>(Vllm::kQueries)] > 0;
  out.prefix_queries = get(current ? Vllm::kQueries : Vllm::kQueriesOld);
  out.prefix_hits = get(current ? Vllm::kHits : Vllm::kHitsOld);
  out.prompt_tokens = get(Vllm::kPrompt);
  out.generation_tokens = get(Vllm::kGeneration);
  out.kv_capacity_tokens = capacity;
  out.lora = std::move(lora);
  // Devices in numeric order of their gpu label ("2" before "10").
  std::sort(found.begin(), found.end(), [](const GpuSample& a, const GpuSample& b) {
    return a.device.size() != b.device.size() ? a.device.size() < b.device.size() : a.device < b.device;
  });
  sample = std::move(out);
  gpus = std::move(found);
  return r;
}

std::vector<GpuSample> parse_nvidia_smi_csv(std::string_view csv, size_t max_gpus) {
  std::vector<GpuSample> out;
  while (!csv.empty() && out.size() < max_gpus) {
    const size_t nl = csv.find('\n');
    std::string_view line = csv.substr(0, nl);
    csv.remove_prefix(nl == std::string_view::npos ? csv.size() : nl + 1);
    std::array<std::string_view, 8> f;
    size_t n = 0;
    while (n < f.size()) {
      const size_t comma = line.find(',');
      f[n++] = trim(line.substr(0, comma));
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
    if (n != f.size() || line.find(',') != std::string_view::npos) continue;  // not 8 fields
    auto index = csv_number(f[0]);
    if (!index || *index < 0 || *index > 1e6 || *index != std::floor(*index)) continue;
    GpuSample g;
    g.engine = SIZE_MAX;
    g.device = std::to_string(static_cast<int64_t>(*index));
    g.util_pct = csv_number(f[1]);
    g.fb_used_mib = csv_number(f[2]);
    g.fb_free_mib = csv_number(f[3]);
    g.power_w = csv_number(f[4]);
    g.temp_c = csv_number(f[5]);
    g.sm_clock_mhz = csv_number(f[6]);
    g.mem_clock_mhz = csv_number(f[7]);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace ramjet::upstream
