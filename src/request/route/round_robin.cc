// Round-robin policy: load-blind and prefix-blind rotation over serving-eligible engines.
// The baseline the other policies are measured against.
#include <algorithm>

#include "request/route/policy.h"
#include "request/route/rank.h"

namespace ramjet::route {
namespace {

class RoundRobinPolicy final : public Policy {
 public:
  explicit RoundRobinPolicy(const RouteConfig& c) : Policy(c) {}
  std::string_view name() const override { return "round_robin"; }

  Decision decide(const RouteRequest& req, const FleetSnapshot& fleet, uint64_t rotation) const override {
    Decision d;
    d.rotation = rotation;
    d.routers = fleet.routers;  // recorded only: a load-blind rotation needs no spreading
    d.spread_place = fleet.spread_place;
    d.spread_tie = fleet.spread_tie;
    const size_t n = fleet.candidates.size();
    const uint32_t units = request_load_units(req.body_bytes, config_);
    d.ranked.reserve(n);
    for (const auto& c : fleet.candidates) d.ranked.push_back(CandidateTerms{c.ordinal, c.eligible, c.load_units, units, c.foreign_load_units});
    d.rotated = rank_with_rotation(d.ranked, rotation, [](const CandidateTerms& t) { return t.eligible; });
    d.fail_open = n > 0 && !d.ranked.front().eligible;
    d.outcome = n <= 1 ? Outcome::kSingle : Outcome::kRoundRobin;
    return d;
  }
};

}  // namespace

std::unique_ptr<Policy> make_round_robin_policy(const RouteConfig& config) {
  return std::make_unique<RoundRobinPolicy>(config);
}

}  // namespace ramjet::route
