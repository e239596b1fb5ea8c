// Round-robin policy: load-blind and prefix-blind rotation over serving-eligible engines.
// The baseline the other policies are measured against.
#include <algorithm>
#include <atomic>

#include "request/route/policy.h"

namespace ramjet::route {
namespace {

class RoundRobinPolicy final : public Policy {
 public:
  explicit RoundRobinPolicy(const RouteConfig& c) : config_(c) {}
  std::string_view name() const override { return "round_robin"; }

  Decision decide(const request::PreparedRequest& req, const FleetSnapshot& fleet) override {
    Decision d;
    const size_t n = fleet.candidates.size();
    const size_t r = n ? counter_.fetch_add(1, std::memory_order_relaxed) % n : 0;
    const uint32_t units = request_load_units(req.body.size(), config_);
    for (const auto& c : fleet.candidates) d.ranked.push_back(CandidateTerms{c.ordinal, c.eligible, c.load_units, units});
    std::sort(d.ranked.begin(), d.ranked.end(), [&](const CandidateTerms& a, const CandidateTerms& b) {
      if (a.eligible != b.eligible) return a.eligible;
      return (a.ordinal + n - r) % n < (b.ordinal + n - r) % n;
    });
    d.fail_open = n > 0 && !d.ranked.front().eligible;
    d.outcome = n <= 1 ? Outcome::kSingle : Outcome::kRoundRobin;
    return d;
  }

 private:
  RouteConfig config_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

std::unique_ptr<Policy> make_round_robin_policy(const RouteConfig& config) {
  return std::make_unique<RoundRobinPolicy>(config);
}

}  // namespace ramjet::route
