// Least-load policy: serving-eligible first, then not failing (CandidateState::failing), then
// fewest load units (own reservations plus other routers' load, CandidateState::foreign_load_units, plus a LoRA
// adapter request's adapter_charge), then a rotating tie-break so equal engines share traffic evenly.
// Several routers (FleetSnapshot::routers > 1): spread_among_routers (route/rank.h).
// Knows nothing about prefixes.
#include <algorithm>
#include <tuple>

#include "request/route/policy.h"
#include "request/route/rank.h"

namespace ramjet::route {
namespace {

class LeastLoadPolicy final : public Policy {
 public:
  explicit LeastLoadPolicy(const RouteConfig& c) : Policy(c) {}
  std::string_view name() const override { return "load"; }

  Decision decide(const RouteRequest& req, const FleetSnapshot& fleet, uint64_t rotation) const override {
    Decision d;
    d.rotation = rotation;
    const size_t n = fleet.candidates.size();
    const uint32_t units = request_load_units(req.body_bytes, config_);
    d.ranked.reserve(n);
    for (const auto& c : fleet.candidates) {
      CandidateTerms t{c.ordinal, c.eligible, c.load_units, units};
      t.failing = c.failing;
      t.foreign_load_units = c.foreign_load_units;
      t.adapter = c.adapter;
      d.ranked.push_back(t);
    }
    const uint32_t adapter_units = config_.adapter_load_units;
    // The load a candidate is ranked by: its own, plus a LoRA adapter request's charge.
    auto charged = [adapter_units](const CandidateTerms& t) {
      return t.total_load() + static_cast<int64_t>(adapter_charge(t.adapter, adapter_units));
    };
    d.rotated = rank_with_rotation(d.ranked, rotation, [&](const CandidateTerms& t) {
      return std::make_tuple(t.eligible, !t.failing, -charged(t));
    });
    d.fail_open = n > 0 && !d.ranked.front().eligible;
    if (n <= 1) {
      d.outcome = Outcome::kSingle;
    } else {
      const CandidateTerms& w = d.ranked.front();
      bool differs = std::any_of(d.ranked.begin(), d.ranked.end(), [&](const CandidateTerms& c) {
        return c.eligible == w.eligible && (c.failing != w.failing || charged(c) != charged(w));
      });
      const bool adapter_decided = std::any_of(d.ranked.begin() + 1, d.ranked.end(), [&](const CandidateTerms& c) {
        return c.eligible == w.eligible && c.failing == w.failing &&
               (c.total_load() < w.total_load() || (c.total_load() == w.total_load() && charged(c) > charged(w)));
      });
      d.outcome = adapter_decided ? Outcome::kAdapter : differs ? Outcome::kLoad : Outcome::kRoundRobin;
    }
    d.routers = fleet.routers;
    d.spread_place = fleet.spread_place;
    d.spread_tie = fleet.spread_tie;
    if (spread_among_routers(
            d.ranked, fleet.routers, fleet.spread_place, fleet.spread_tie,
            [&](const CandidateTerms& t) { return -static_cast<double>(charged(t)); },
            [](const CandidateTerms& t) { return static_cast<double>(t.request_load_units); },
            [](const CandidateTerms&) { return 0; })) {
      d.outcome = Outcome::kSpread;
    }
    return d;
  }
};

}  // namespace

std::unique_ptr<Policy> make_least_load_policy(const RouteConfig& config) {
  return std::make_unique<LeastLoadPolicy>(config);
}

}  // namespace ramjet::route
