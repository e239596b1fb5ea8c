// Least-load policy: serving-eligible first, then fewest reserved load units, then a rotating
// tie-break so equal engines share traffic evenly. Knows nothing about prefixes.
#include <algorithm>

#include "request/route/policy.h"

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
      d.ranked.push_back(CandidateTerms{c.ordinal, c.eligible, c.load_units, units});
    }
    const size_t r = n ? rotation % n : 0;
    std::sort(d.ranked.begin(), d.ranked.end(), [&](const CandidateTerms& a, const CandidateTerms& b) {
      if (a.eligible != b.eligible) return a.eligible;
      if (a.load_units != b.load_units) return a.load_units < b.load_units;
      return (a.ordinal + n - r) % n < (b.ordinal + n - r) % n;
    });
    d.fail_open = n > 0 && !d.ranked.front().eligible;
    d.rotated = n > 1 && d.ranked[0].eligible == d.ranked[1].eligible &&
                d.ranked[0].load_units == d.ranked[1].load_units;
    if (n <= 1) {
      d.outcome = Outcome::kSingle;
    } else {
      bool differs = std::any_of(d.ranked.begin(), d.ranked.end(), [&](const CandidateTerms& c) {
        return c.eligible == d.ranked.front().eligible && c.load_units != d.ranked.front().load_units;
      });
      d.outcome = differs ? Outcome::kLoad : Outcome::kRoundRobin;
    }
    return d;
  }
};

}  // namespace

std::unique_ptr<Policy> make_least_load_policy(const RouteConfig& config) {
  return std::make_unique<LeastLoadPolicy>(config);
}

}  // namespace ramjet::route
