#include "request/route/policy.h"

#include <algorithm>

#include "upstream/fleet.h"

namespace ramjet::route {

std::unique_ptr<Policy> make_least_load_policy(const RouteConfig& config);
std::unique_ptr<Policy> make_round_robin_policy(const RouteConfig& config);
std::unique_ptr<Policy> make_prefix_load_policy(const RouteConfig& config);

FleetSnapshot FleetSnapshot::of(const upstream::Fleet& fleet) {
  FleetSnapshot s;
  fill(fleet, s);
  return s;
}

void FleetSnapshot::fill(const upstream::Fleet& fleet, FleetSnapshot& s) {
  // Members only: a vacant or leaving slot is not a candidate, not even to fail open to; nor is
  // a parked one (the idle drain's: a sleeping engine would hold the request unanswered).
  std::vector<CandidateState> kept = std::move(s.candidates);
  kept.clear();
  s = FleetSnapshot{};
  s.candidates = std::move(kept);
  s.candidates.reserve(fleet.size());
  const int64_t now = fleet.coarse_now_ms();  // (failing(): a penalty of seconds)
  for (size_t i = 0; i < fleet.size(); ++i) {
    const auto& e = fleet.at(i);
    if (!e.member() || e.parked()) continue;
    s.candidates.push_back(CandidateState{i, e.healthy(), e.load_units(), e.inflight()});
    s.candidates.back().failing = fleet.failing(i, now);
  }
}

std::string_view outcome_label(Outcome o) {
  switch (o) {
    case Outcome::kSingle: return "single";
    case Outcome::kLoad: return "load";
    case Outcome::kRoundRobin: return "rr";
    case Outcome::kOverlap: return "overlap";
    case Outcome::kProfile: return "profile";
    case Outcome::kSingleFlight: return "single_flight";
    case Outcome::kSpread: return "spread";
    case Outcome::kAdapter: return "adapter";
    case Outcome::kDecode: return "decode";
    case Outcome::kCount: break;
  }
  return "rr";
}

std::string_view adapter_slot_label(AdapterSlot a) {
  switch (a) {
    case AdapterSlot::kNone: return "none";
    case AdapterSlot::kActive: return "active";
    case AdapterSlot::kFree: return "free";
    case AdapterSlot::kFull: return "full";
    case AdapterSlot::kUnknown: return "unknown";
  }
  return "none";
}

std::string_view profile_label(Profile p) {
  switch (p) {
    case Profile::kNone: return "none";
    case Profile::kMtp: return "mtp";
    case Profile::kStandard: return "standard";
  }
  return "none";
}

const CandidateTerms* Decision::first_dispatch() const {
  if (fail_open) return ranked.empty() ? nullptr : &ranked.front();
  for (const auto& c : ranked)
    if (c.eligible) return &c;
  return nullptr;
}

std::vector<CandidateTerms> Decision::dispatch_order() const {
  std::vector<CandidateTerms> out;
  if (!fail_open) {
    for (const auto& c : ranked)
      if (c.eligible) out.push_back(c);
    return out;
  }
  for (size_t i = 0; i < ranked.size() && i < 2; ++i) out.push_back(ranked[i]);
  return out;
}

uint32_t request_load_units(uint64_t uncached_bytes, const RouteConfig& c) {
  uint64_t unit = c.load_unit_bytes ? c.load_unit_bytes : 1;
  uint64_t units = (uncached_bytes + unit - 1) / unit;
  if (units < 1) units = 1;
  if (units > c.max_load_units) units = c.max_load_units;
  return static_cast<uint32_t>(units);
}

uint32_t request_load_units_with_overlap(uint64_t body_bytes, uint32_t overlap, const RouteConfig& c) {
  const uint64_t cached =
      c.chunk_bytes != 0 && overlap > UINT64_MAX / c.chunk_bytes ? UINT64_MAX : overlap * c.chunk_bytes;
  return request_load_units(body_bytes > cached ? body_bytes - cached : 0, c);
}

uint32_t single_flight_affinity(uint32_t pending, uint64_t total_blocks, uint32_t cap) {
  if (pending == 0 || cap == 0) return 0;
  const uint64_t span = std::min<uint64_t>(std::max<uint64_t>(total_blocks, pending), cap);
  const uint64_t earned = (uint64_t{cap} * std::min<uint64_t>(pending, span) + span - 1) / span;
  return static_cast<uint32_t>(std::min<uint64_t>(earned, cap));
}

Profile preferred_profile(const request::PreparedRequest& req, const RouteConfig& c) {
  if (req.endpoint == request::Endpoint::kOther) return Profile::kNone;
  const bool short_output =
      req.max_output_tokens && *req.max_output_tokens >= 1 && *req.max_output_tokens <= c.short_max_tokens;
  return short_output ? Profile::kMtp : Profile::kStandard;
}

RouteRequest RouteRequest::of(const request::PreparedRequest& req, const RouteConfig& c) {
  return RouteRequest{req.endpoint, req.body.size(), preferred_profile(req, c), req.fingerprints.chain.size()};
}

std::unique_ptr<Policy> make_policy(std::string_view name, const RouteConfig& config) {
  if (name == "prefix") return make_prefix_load_policy(config);
  if (name == "load") return make_least_load_policy(config);
  if (name == "round_robin") return make_round_robin_policy(config);
  return nullptr;
}

}  // namespace ramjet::route
