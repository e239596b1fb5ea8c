#include "stats.h"

#include <algorithm>

namespace ramjet::bench {

double percentile_sorted(const std::vector<double>& v, double p) {
  if (v.empty()) return kNaN;
  if (p <= 0) return v.front();
  if (p >= 100) return v.back();
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const double frac = rank - static_cast<double>(lo);
  if (lo + 1 >= v.size()) return v.back();
  return v[lo] + (v[lo + 1] - v[lo]) * frac;
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return percentile_sorted(values, p);
}

StepReport aggregate(const std::vector<Sample>& samples, double x, double window_start_s, double ttft_target_ms) {
  StepReport r;
  r.x = x;
  r.ttft_target_ms = ttft_target_ms;
  std::vector<double> ttft, tpot, lat;
  ttft.reserve(samples.size());
  lat.reserve(samples.size());
  double last_end = window_start_s;
  uint64_t usage_requests = 0;
  for (const Sample& s : samples) {
    if (s.start_s < window_start_s) continue;
    last_end = std::max(last_end, s.end_s);
    if (!s.error.empty()) {
      ++r.errors;
      ++r.error_reasons[s.error];
      continue;
    }
    ++r.ok;
    r.output_tokens += s.output_tokens;
    lat.push_back(s.latency_s * 1e3);
    if (s.ttft_s >= 0) ttft.push_back(s.ttft_s * 1e3);
    if (ttft_target_ms > 0 && s.ttft_s >= 0 && s.ttft_s * 1e3 <= ttft_target_ms) ++r.good;
    if (s.tpot_s >= 0) tpot.push_back(s.tpot_s * 1e3);
    if (s.prompt_tokens >= 0) {
      ++usage_requests;
      r.prompt_tokens += static_cast<uint64_t>(s.prompt_tokens);
      if (s.cached_tokens > 0) r.cached_tokens += static_cast<uint64_t>(s.cached_tokens);
    }
    ++r.engines[s.engine.empty() ? std::string("direct") : s.engine];
  }
  r.elapsed_s = last_end - window_start_s;
  if (r.elapsed_s > 0) {
    r.output_tok_s = static_cast<double>(r.output_tokens) / r.elapsed_s;
    r.req_s = static_cast<double>(r.ok) / r.elapsed_s;
    if (ttft_target_ms > 0) r.goodput_req_s = static_cast<double>(r.good) / r.elapsed_s;
  }
  if (ttft_target_ms > 0 && r.ok + r.errors > 0)
    r.attainment_pct = 100.0 * static_cast<double>(r.good) / static_cast<double>(r.ok + r.errors);
  std::sort(ttft.begin(), ttft.end());
  std::sort(tpot.begin(), tpot.end());
  std::sort(lat.begin(), lat.end());
  r.ttft_p50_ms = percentile_sorted(ttft, 50);
  r.ttft_p95_ms = percentile_sorted(ttft, 95);
  r.ttft_p99_ms = percentile_sorted(ttft, 99);
  r.tpot_p50_ms = percentile_sorted(tpot, 50);
  r.tpot_p95_ms = percentile_sorted(tpot, 95);
  r.latency_p50_ms = percentile_sorted(lat, 50);
  r.latency_p95_ms = percentile_sorted(lat, 95);
  if (usage_requests > 0 && r.prompt_tokens > 0)
    r.cached_pct = 100.0 * static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens);
  else if (usage_requests > 0)
    r.cached_pct = 0;
  return r;
}

std::vector<Window> timeline(const std::vector<Sample>& samples, double width_s) {
  std::vector<Window> out;
  if (!(width_s > 0)) return out;
  double last = 0;
  for (const Sample& s : samples) last = std::max(last, s.end_s);
  const size_t n = static_cast<size_t>(std::floor(last / width_s)) + 1;
  if (samples.empty() || n > 1000000) return out;
  out.resize(n);
  std::vector<std::vector<double>> ttft(n);
  std::vector<uint64_t> prompt(n, 0), cached(n, 0), usage(n, 0);
  for (size_t i = 0; i < n; ++i) out[i].t_s = static_cast<double>(i) * width_s;
  for (const Sample& s : samples) {
    const size_t i = std::min(n - 1, static_cast<size_t>(std::floor(std::max(0.0, s.end_s) / width_s)));
    if (!s.error.empty()) {
      ++out[i].errors;
      continue;
    }
    ++out[i].ok;
    if (s.ttft_s >= 0) ttft[i].push_back(s.ttft_s * 1e3);
    if (s.prompt_tokens >= 0) {
      ++usage[i];
      prompt[i] += static_cast<uint64_t>(s.prompt_tokens);
      if (s.cached_tokens > 0) cached[i] += static_cast<uint64_t>(s.cached_tokens);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    std::sort(ttft[i].begin(), ttft[i].end());
    out[i].ttft_p50_ms = percentile_sorted(ttft[i], 50);
    out[i].ttft_p95_ms = percentile_sorted(ttft[i], 95);
    if (usage[i] > 0 && prompt[i] > 0) out[i].cached_pct = 100.0 * static_cast<double>(cached[i]) / static_cast<double>(prompt[i]);
  }
  return out;
}

}  // namespace ramjet::bench
