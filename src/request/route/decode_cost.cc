#include "request/route/decode_cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "common/moving_average.h"

namespace ramjet::route {

namespace {

constexpr std::array<metrics::Family, 3> kFamilies = {{
    {"ramjet_route_decode_seconds_per_token", metrics::MetricKind::kGauge, "upstream",
     "RJ_ROUTE_DECODE_COST: the engine's learned time per output token with one request in "
     "flight (the fit's base plus one slope), from the responses relayed from it. Only engines "
     "with a fit."},
    {"ramjet_route_decode_seconds_per_token_per_request", metrics::MetricKind::kGauge, "upstream",
     "RJ_ROUTE_DECODE_COST: what each further request in flight on the engine adds to its time "
     "per output token (the fit's slope, at least 0). Only engines with a fit."},
    {"ramjet_route_decode_output_share", metrics::MetricKind::kGauge, "",
     "RJ_ROUTE_DECODE_COST: the learned share of their max_tokens that responses used (moving "
     "average): a request's expected output is its limit times this; 0 until learned."},
}};

}  // namespace

std::span<const metrics::Family> decode_cost_families() { return kFamilies; }

void DecodeFitter::add(double n, double ns, double forget) {
  s0_ = forget * s0_ + 1;
  s1_ = forget * s1_ + n;
  s2_ = forget * s2_ + n * n;
  t0_ = forget * t0_ + ns;
  t1_ = forget * t1_ + n * ns;
  ++samples_;
}

DecodeFit DecodeFitter::fit(uint32_t min_samples) const {
  DecodeFit f;
  if (samples_ < min_samples || s0_ <= 0) return f;
  const double mn = s1_ / s0_, mt = t0_ / s0_;
  const double var = s2_ / s0_ - mn * mn;
  // A spread of concurrencies under about half a request says nothing of the slope.
  const double slope = var > 0.25 ? (t1_ / s0_ - mn * mt) / var : 0;
  if (slope > 0) {
    f.slope_ns = slope;
    f.base_ns = mt - slope * mn;
  } else {
    f.base_ns = mt;
  }
  // A steep line fitted far from n = 0 may cross it: never below a tenth of the mean.
  f.base_ns = std::max(f.base_ns, 0.1 * mt);
  f.valid = std::isfinite(f.base_ns) && std::isfinite(f.slope_ns) && f.base_ns > 0;
  return f;
}

double decode_charge(double d_ns, double ref_ns, double block_ns, double indifference) {
  if (!(block_ns > 0) || !(ref_ns > 0) || !(d_ns > 0)) return 0;
  const double over = d_ns - (1 + indifference) * ref_ns;
  if (!(over > 0)) return 0;
  // In sixteenths of a block, at most 2^20 blocks: a short decimal that every JSON reader reads
  // back exactly (the journal's replay recomputes scores from it).
  return std::round(std::min(over / block_ns, 1048576.0) * 16) / 16;
}

DecodeCost::DecodeCost(size_t engines) : engines_(engines), fits_(std::make_unique<Engine[]>(engines)) {}

void DecodeCost::learn(size_t engine, uint64_t tokens, int64_t decode_ns, double inflight) {
  if (engine >= engines_ || tokens < kMinTokens || decode_ns <= 0 || !(inflight >= 1)) return;
  const double per_token = static_cast<double>(decode_ns) / static_cast<double>(tokens - 1);
  Engine& e = fits_[engine];
  std::lock_guard lock(e.mu);
  e.fitter.add(inflight, per_token, kForget);
  const DecodeFit f = e.fitter.fit(kMinSamples);
  e.slope_ns.store(f.valid ? f.slope_ns : 0, std::memory_order_relaxed);
  e.base_ns.store(f.valid ? f.base_ns : 0, std::memory_order_release);
}

void DecodeCost::learn_output(std::optional<uint64_t> max_tokens, uint64_t tokens) {
  if (tokens == 0) return;
  if (max_tokens && *max_tokens > 0) {
    blend_average(output_share_, std::min(1.0, static_cast<double>(tokens) / static_cast<double>(*max_tokens)),
                  kOutputWeight);
  } else if (!max_tokens) {
    blend_average(unlimited_output_, static_cast<double>(tokens), kOutputWeight);
  }
}

void DecodeCost::learn_prefill(double ns_per_token, double tokens_per_byte) {
  prefill_ns_per_token_.store(ns_per_token, std::memory_order_relaxed);
  tokens_per_byte_.store(tokens_per_byte, std::memory_order_relaxed);
}

void DecodeCost::forget(size_t engine) {
  if (engine >= engines_) return;
  Engine& e = fits_[engine];
  std::lock_guard lock(e.mu);
  e.fitter = DecodeFitter{};
  e.base_ns.store(0, std::memory_order_release);
  e.slope_ns.store(0, std::memory_order_relaxed);
}

DecodeFit DecodeCost::fit(size_t engine) const {
  DecodeFit f;
  if (engine >= engines_) return f;
  const Engine& e = fits_[engine];
  f.base_ns = e.base_ns.load(std::memory_order_acquire);
  f.valid = f.base_ns > 0;  // (0: no fit)
  if (f.valid) f.slope_ns = e.slope_ns.load(std::memory_order_relaxed);
  return f;
}

double DecodeCost::expected_output(std::optional<uint64_t> max_tokens) const {
  if (!max_tokens) return unlimited_output_.load(std::memory_order_relaxed);
  return static_cast<double>(*max_tokens) * output_share_.load(std::memory_order_relaxed);
}

double DecodeCost::block_ns(uint64_t chunk_bytes) const {
  return static_cast<double>(chunk_bytes) * tokens_per_byte_.load(std::memory_order_relaxed) *
         prefill_ns_per_token_.load(std::memory_order_relaxed);
}

double DecodeCost::marginal_ns(const DecodeFit& f, double inflight) {
  // Its own tokens at inflight + 1, and each of the others' tokens slower by the slope while it
  // runs beside them.
  return f.at(inflight + 1) + f.slope_ns * inflight;
}

void DecodeCost::charges(std::span<CandidateState> candidates, std::optional<uint64_t> max_tokens,
                         uint64_t chunk_bytes, uint32_t cap) const {
  for (CandidateState& c : candidates) c.decode_charge = 0;
  const double output = expected_output(max_tokens);
  const double block = block_ns(chunk_bytes);
  if (!(output > 0) || !(block > 0) || candidates.size() < 2) return;
  // Each candidate's expected decode, in its charge field until the reference is known. An
  // engine not measured yet is charged nothing: it is tried, and so measured.
  double ref = 0;
  for (CandidateState& c : candidates) {
    const DecodeFit f = fit(c.ordinal);
    c.decode_charge = f.valid ? output * marginal_ns(f, static_cast<double>(c.inflight)) : 0;
    if (f.valid && c.eligible && !c.failing && (ref == 0 || c.decode_charge < ref)) ref = c.decode_charge;
  }
  bool any = false;
  for (CandidateState& c : candidates) {
    c.decode_charge = decode_charge(c.decode_charge, ref, block, kIndifference);
    any = any || c.decode_charge > 0;
  }
  if (any) add_prefill_wait(candidates, cap);
}

void DecodeCost::add_prefill_wait(std::span<CandidateState> candidates, uint32_t cap) {
  auto held = [cap](const CandidateState& c) { return std::min(std::max(c.overlap, c.single_flight), cap); };
  auto counted = [](const CandidateState& c) { return c.eligible && !c.failing; };
  uint32_t best = 0;
  for (const CandidateState& c : candidates) {
    if (counted(c)) best = std::max(best, held(c));
  }
  double least = -1;
  for (CandidateState& c : candidates) {
    const uint32_t h = held(c);
    c.decode_charge += static_cast<double>(std::max<int64_t>(0, c.inflight)) * static_cast<double>(best > h ? best - h : 0);
    if (counted(c) && (least < 0 || c.decode_charge < least)) least = c.decode_charge;
  }
  for (CandidateState& c : candidates) {
    c.decode_charge = std::min(1048576.0, least > 0 ? std::max(0.0, c.decode_charge - least) : c.decode_charge);
  }
}

void DecodeCost::write_metrics(metrics::Exposition& x) const {
  x.family(kFamilies[0]);
  for (size_t i = 0; i < engines_; ++i) {
    if (const DecodeFit f = fit(i); f.valid)
      x.sample(kFamilies[0].name, "upstream=\"" + std::to_string(i) + "\"", f.at(1) / 1e9);
  }
  x.family(kFamilies[1]);
  for (size_t i = 0; i < engines_; ++i) {
    if (const DecodeFit f = fit(i); f.valid)
      x.sample(kFamilies[1].name, "upstream=\"" + std::to_string(i) + "\"", f.slope_ns / 1e9);
  }
  x.family(kFamilies[2]);
  x.sample(kFamilies[2].name, "", output_share_.load(std::memory_order_relaxed));
}

}  // namespace ramjet::route
