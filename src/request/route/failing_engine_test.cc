// Statistical simulation: one engine of three fails every request at once (its /health stays
// 200), under a steady open-loop load. The policies see it through the real upstream::Fleet
// (outlier ejection, the failing flag, the readiness gate on probes) and real LoadReservations,
// on a manual clock. A fast failure releases its load at once, so that engine always looks
// idle: without the failing flag and ejection the load-weighing policies send it nearly all
// traffic (the finding this guards against); with them it gets almost none.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "common/clock.h"
#include "request/route/policy.h"
#include "request/route/reservation.h"
#include "upstream/fleet.h"

namespace ramjet::route {
namespace {

struct Outcome {
  size_t requests = 0;
  size_t to_engine0 = 0;  // dispatched to engine 0 (the failing one, when it fails)
  double share() const { return requests ? static_cast<double>(to_engine0) / static_cast<double>(requests) : 0; }
};

// 20 requests/s for `seconds` simulated seconds; a healthy engine holds each request's load for
// 2 s (about 20 requests in flight each), the failing engine (ordinal 0) fails it at once.
// Probes pass every 5 s on every engine.
Outcome simulate(const std::string& policy, upstream::OutlierConfig outlier, int seconds, bool fail = true) {
  Outcome out;
  ManualClock clock;
  std::vector<config::UpstreamUrl> urls(3);
  for (size_t i = 0; i < urls.size(); ++i) urls[i].host = "h" + std::to_string(i);
  upstream::Fleet fleet(urls, clock, 30000, upstream::Readiness{3, 30000}, outlier);
  RouteConfig rc;
  auto p = make_policy(policy, rc);
  request::PreparedRequest req;
  req.endpoint = request::Endpoint::kChat;
  req.body.assign(20000, 'x');  // one load unit
  struct Done {
    int64_t at;
    size_t id;
    bool operator>(const Done& o) const { return at > o.at; }
  };
  std::priority_queue<Done, std::vector<Done>, std::greater<>> done;
  std::map<size_t, std::pair<size_t, LoadReservation>> held;  // id -> (engine, its reservation)
  const int64_t start = clock.now_ms();
  size_t id = 0;
  for (int64_t t = 0; t < int64_t{seconds} * 1000; t += 50) {
    clock.set_ms(start + t);
    while (!done.empty() && done.top().at <= clock.now_ms()) {
      const size_t finished = done.top().id;
      done.pop();
      fleet.on_response(held.at(finished).first, 200);
      fleet.on_success(held.at(finished).first);
      held.erase(finished);
    }
    if (t % 5000 == 0) {
      for (size_t i = 0; i < fleet.size(); ++i) fleet.on_probe_success(i);
    }
    const Decision d = p->decide(req, FleetSnapshot::of(fleet));
    const CandidateTerms* c = d.first_dispatch();
    if (c == nullptr) {
      ADD_FAILURE() << "no candidate";
      return out;
    }
    ++out.requests;
    if (c->ordinal == 0) ++out.to_engine0;
    if (fail && c->ordinal == 0) {
      LoadReservation r(fleet.at(0), c->request_load_units);  // released at once
      fleet.on_response(0, 500);
      continue;
    }
    held.emplace(id, std::make_pair(c->ordinal, LoadReservation(fleet.at(c->ordinal), c->request_load_units)));
    done.push(Done{clock.now_ms() + 2000, id++});
  }
  std::printf("%s: %zu of %zu requests to engine 0 (%.2f %%)\n", policy.c_str(), out.to_engine0, out.requests,
              100.0 * out.share());
  return out;
}

constexpr upstream::OutlierConfig kNothing{0, 30000, 300000, 50, 0};     // no ejection, no flag
constexpr upstream::OutlierConfig kFlagOnly{0, 30000, 300000, 50, 10000};
constexpr upstream::OutlierConfig kDefaults{};

TEST(FailingEngineSimulation, WithoutProtectionTheLoadPoliciesSendAFastFailingEngineAlmostEverything) {
  // The finding: it always has zero load. Round-robin loses only its third.
  EXPECT_GT(simulate("prefix", kNothing, 300).share(), 0.9);
  EXPECT_GT(simulate("load", kNothing, 300).share(), 0.9);
  EXPECT_NEAR(simulate("round_robin", kNothing, 300).share(), 1.0 / 3, 0.01);
}

TEST(FailingEngineSimulation, TheFailingFlagAloneKeepsTheLoadPoliciesOffIt) {
  // Two failures, then ranked last until the penalty time passes: two requests per 10 s.
  for (const char* policy : {"prefix", "load"}) {
    const Outcome o = simulate(policy, kFlagOnly, 300);
    EXPECT_LT(o.share(), 0.02) << policy << ": " << o.to_engine0 << " of " << o.requests;
  }
}

TEST(FailingEngineSimulation, WithTheDefaultsEveryPolicyLosesAtMostOnePercent) {
  for (const char* policy : {"prefix", "load", "round_robin"}) {
    const Outcome o = simulate(policy, kDefaults, 600);
    EXPECT_LT(o.share(), 0.01) << policy << ": " << o.to_engine0 << " of " << o.requests;
  }
}

TEST(FailingEngineSimulation, HealthyEnginesStillShareEvenlyWithTheDefaults) {
  // The same load with no failing engine: the protection costs nothing.
  for (const char* policy : {"prefix", "load", "round_robin"}) {
    const Outcome o = simulate(policy, kDefaults, 300, /*fail=*/false);
    EXPECT_NEAR(o.share(), 1.0 / 3, 0.02) << policy;
  }
}

}  // namespace
}  // namespace ramjet::route
