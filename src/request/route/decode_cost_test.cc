// The decode term (RJ_ROUTE_DECODE_COST): route/decode_cost's fitted speeds, expected outputs and
// charges, and what the prefix policy does with them.
#include "request/route/decode_cost.h"

#include <gtest/gtest.h>

#include <vector>

#include "request/route/policy.h"

namespace ramjet::route {
namespace {

constexpr double kMs = 1e6;  // ns

TEST(DecodeFitter, AFlatEngineIsItsMeanAndALineIsFound) {
  DecodeFitter flat;
  for (int i = 0; i < 20; ++i) flat.add(1 + i % 4, 10 * kMs, DecodeCost::kForget);
  DecodeFit f = flat.fit(8);
  ASSERT_TRUE(f.valid);
  EXPECT_NEAR(f.base_ns, 10 * kMs, 1);
  EXPECT_NEAR(f.slope_ns, 0, 1);

  DecodeFitter line;  // 4 ms + 1.5 ms per request in flight
  for (int i = 0; i < 40; ++i) {
    const double n = 1 + i % 8;
    line.add(n, 4 * kMs + 1.5 * kMs * n, DecodeCost::kForget);
  }
  f = line.fit(8);
  ASSERT_TRUE(f.valid);
  EXPECT_NEAR(f.base_ns, 4 * kMs, 1e3);
  EXPECT_NEAR(f.slope_ns, 1.5 * kMs, 1e3);
  EXPECT_NEAR(f.at(9), 17.5 * kMs, 1e4);
}

TEST(DecodeFitter, TooFewSamplesOneConcurrencyOrAFallingLineSayNoSlope) {
  DecodeFitter few;
  for (int i = 0; i < 7; ++i) few.add(2, 5 * kMs, DecodeCost::kForget);
  EXPECT_FALSE(few.fit(8).valid);
  few.add(2, 7 * kMs, DecodeCost::kForget);
  DecodeFit f = few.fit(8);
  ASSERT_TRUE(f.valid);
  EXPECT_EQ(f.slope_ns, 0) << "one concurrency seen: flat";
  EXPECT_GT(f.base_ns, 5 * kMs);
  EXPECT_LT(f.base_ns, 7 * kMs);

  DecodeFitter falling;  // faster with more in flight: noise, never a negative slope
  for (int i = 0; i < 20; ++i) falling.add(1 + i % 4, (10 - (i % 4)) * kMs, DecodeCost::kForget);
  f = falling.fit(8);
  ASSERT_TRUE(f.valid);
  EXPECT_EQ(f.slope_ns, 0);
  EXPECT_NEAR(f.base_ns, 8.5 * kMs, 0.2 * kMs);
}

TEST(DecodeFitter, ASteepLineNeverCrossesZeroAndOldSpeedsAreForgotten) {
  DecodeFitter steep;  // only at 10 and 11 in flight, steep: its base would be negative
  for (int i = 0; i < 20; ++i) steep.add(10 + i % 2, (i % 2 ? 30 : 10) * kMs, DecodeCost::kForget);
  DecodeFit f = steep.fit(8);
  ASSERT_TRUE(f.valid);
  EXPECT_GT(f.base_ns, 1.5 * kMs) << "a tenth of the mean at least";

  DecodeFitter drift;  // the engine became twice as fast: within ~200 responses the fit follows
  for (int i = 0; i < 100; ++i) drift.add(2, 20 * kMs, DecodeCost::kForget);
  for (int i = 0; i < 200; ++i) drift.add(2, 10 * kMs, DecodeCost::kForget);
  EXPECT_NEAR(drift.fit(8).base_ns, 10 * kMs, 0.3 * kMs);
}

struct ChargeRow {
  double d, ref, block;
  double want;
};

TEST(DecodeCharge, TheTimeBeyondTheFastestInBlocksOutsideTheBand) {
  const std::vector<ChargeRow> rows = {
      {5, 5, 1, 0},            // the fastest itself
      {5.5, 5, 1, 0},          // within 10 %
      {5.6, 5, 0.1, 1},        // 0.1 beyond the band, a block of 0.1
      {10, 5, 0.05, 90},       // 10 - 5.5 = 4.5 s of 0.05 s blocks
      {10, 5, 0.3, 15},        // 4.5 / 0.3
      {10, 5, 0.7, 6.4375},    // 6.428... in sixteenths
      {10, 0, 1, 0},           // no reference
      {10, 5, 0, 0},           // no block time
      {0, 5, 1, 0},            // nothing known of this one
      {1e12, 1, 1e-3, 1048576},  // at most 2^20
  };
  for (const ChargeRow& r : rows) {
    EXPECT_DOUBLE_EQ(decode_charge(r.d, r.ref, r.block, 0.10), r.want) << r.d << " vs " << r.ref << " / " << r.block;
  }
}

// Two engines: 0 decodes at 5 ms per token, 1 at 10 ms (flat); prefill 100 us per token, 0.25
// tokens per byte: a 2,048-byte block takes 51.2 ms.
void two_speeds(DecodeCost& c) {
  for (int i = 0; i < 10; ++i) {
    c.learn(0, 101, static_cast<int64_t>(100 * 5 * kMs), 1);
    c.learn(1, 101, static_cast<int64_t>(100 * 10 * kMs), 1);
  }
  c.learn_prefill(1e5, 0.25);
  c.learn_output(1000, 1000);
}

std::vector<CandidateState> candidates(size_t n) {
  std::vector<CandidateState> v(n);
  for (size_t i = 0; i < n; ++i) v[i].ordinal = i;
  return v;
}

TEST(DecodeCost, ChargesTheSlowerEngineItsExtraDecodeInBlocks) {
  DecodeCost c(3);
  two_speeds(c);
  EXPECT_NEAR(c.fit(0).at(1), 5 * kMs, 1);
  EXPECT_DOUBLE_EQ(c.block_ns(2048), 51.2 * kMs);
  EXPECT_DOUBLE_EQ(c.expected_output(1000), 1000);
  std::vector<CandidateState> v = candidates(2);
  c.charges(v, 1000, 2048, 32);
  EXPECT_EQ(v[0].decode_charge, 0);
  // 10 s - 1.1 x 5 s = 4.5 s = 87.89 blocks, in sixteenths
  EXPECT_DOUBLE_EQ(v[1].decode_charge, 87.875);
  c.charges(v, 64, 2048, 32);  // a short output: a short difference
  EXPECT_DOUBLE_EQ(v[1].decode_charge, 5.625);
}

TEST(DecodeCost, TheMarginalTimeCountsWhatTheRequestSlowsTheOthersBy) {
  DecodeFit f{.base_ns = 2 * kMs, .slope_ns = 1 * kMs, .valid = true};
  EXPECT_DOUBLE_EQ(DecodeCost::marginal_ns(f, 0), 3 * kMs);  // alone
  // With 4 others: its own 2 + 5 = 7 ms per token, and each of the 4 slower by 1 ms.
  EXPECT_DOUBLE_EQ(DecodeCost::marginal_ns(f, 4), 11 * kMs);
  EXPECT_DOUBLE_EQ(DecodeCost::marginal_ns(DecodeFit{.base_ns = 5 * kMs, .valid = true}, 9), 5 * kMs);  // flat
}

TEST(DecodeCost, TheFastEngineLosesItsLeadAsItsLoadGrows) {
  DecodeCost c(2);
  for (int i = 0; i < 24; ++i) {  // 0: 2 ms + 2 ms per request in flight; 1: 8 ms flat
    const double n = 1 + i % 6;
    c.learn(0, 101, static_cast<int64_t>(100 * (2 + 2 * n) * kMs), n);
    c.learn(1, 101, static_cast<int64_t>(100 * 8 * kMs), n);
  }
  c.learn_prefill(1e5, 0.25);
  c.learn_output(1000, 1000);
  std::vector<CandidateState> v = candidates(2);
  c.charges(v, 1000, 2048, 32);  // idle: 4 ms vs 8 ms
  EXPECT_EQ(v[0].decode_charge, 0);
  EXPECT_GT(v[1].decode_charge, 0);
  v[0].inflight = 3;  // 0 with 3 in flight: 10 ms of its own, 6 more for the others, vs 8 ms
  c.charges(v, 1000, 2048, 32);
  EXPECT_GT(v[0].decode_charge, 0);
  EXPECT_EQ(v[1].decode_charge, 0);
}

TEST(DecodeCost, AnEngineNotMeasuredYetIsChargedNothingAndNeverTheReference) {
  DecodeCost c(3);
  two_speeds(c);
  std::vector<CandidateState> v = candidates(3);  // engine 2 has no fit: it is tried
  c.charges(v, 1000, 2048, 32);
  EXPECT_EQ(v[0].decode_charge, 0);
  EXPECT_DOUBLE_EQ(v[1].decode_charge, 87.875) << "measured against the fastest measured one";
  EXPECT_EQ(v[2].decode_charge, 0);
  // A failing or unhealthy engine is not the reference, however fast it looked.
  v = candidates(2);
  v[0].failing = true;
  c.charges(v, 1000, 2048, 32);
  EXPECT_EQ(v[1].decode_charge, 0);
  EXPECT_EQ(v[0].decode_charge, 0) << "faster than the reference: nothing to charge";
  v[0].failing = false;
  v[0].eligible = false;
  c.charges(v, 1000, 2048, 32);
  EXPECT_EQ(v[1].decode_charge, 0);
  c.forget(1);  // engine 1 starts over: nothing to compare with
  v = candidates(2);
  c.charges(v, 1000, 2048, 32);
  EXPECT_EQ(v[0].decode_charge, 0);
  EXPECT_EQ(v[1].decode_charge, 0);
  // Nothing anywhere before the prefill speed is known.
  DecodeCost early(2);
  for (int i = 0; i < 10; ++i) {
    early.learn(0, 101, static_cast<int64_t>(100 * 5 * kMs), 1);
    early.learn(1, 101, static_cast<int64_t>(100 * 10 * kMs), 1);
  }
  early.learn_output(1000, 1000);
  early.charges(v, 1000, 2048, 32);
  EXPECT_EQ(v[1].decode_charge, 0);
}

TEST(DecodeCost, LeavingTheCacheForABusyFasterDecoderPaysForItsBatchsWait) {
  DecodeCost c(2);
  two_speeds(c);  // 0 decodes at 5 ms per token, 1 at 10 ms
  std::vector<CandidateState> v = candidates(2);
  v[1].overlap = 30;  // the slow engine holds 30 blocks of the prompt
  c.charges(v, 1000, 2048, 32);
  EXPECT_EQ(v[0].decode_charge, 0) << "idle: only this request waits for the recompute";
  EXPECT_DOUBLE_EQ(v[1].decode_charge, 87.875);
  v[0].inflight = 4;  // 4 requests on the fast engine would wait for 30 blocks of prefill
  c.charges(v, 1000, 2048, 32);
  // 0: no decode charge but 4 x 30 = 120 blocks of waits; 1: 87.875 of decode. Lowered by the
  // least: the cache wins now.
  EXPECT_DOUBLE_EQ(v[0].decode_charge, 120 - 87.875);
  EXPECT_EQ(v[1].decode_charge, 0);
  // The waits alone: in-flight x the blocks fewer than the warmest counted candidate holds.
  std::vector<CandidateState> w = candidates(3);
  w[0].inflight = 4;
  w[1].overlap = 30;
  w[2].inflight = 2;
  w[2].single_flight = 40;  // (capped: held as 32)
  DecodeCost::add_prefill_wait(w, 32);
  EXPECT_DOUBLE_EQ(w[0].decode_charge, 4 * 32);
  EXPECT_DOUBLE_EQ(w[1].decode_charge, 0);
  EXPECT_DOUBLE_EQ(w[2].decode_charge, 0);
}

TEST(DecodeCost, ExpectedOutputIsTheLimitTimesTheShareUsedOrTheUnlimitedMean) {
  DecodeCost c(1);
  EXPECT_EQ(c.expected_output(512), 0) << "nothing learned: no charge";
  EXPECT_EQ(c.expected_output(std::nullopt), 0);
  c.learn_output(1000, 250);
  EXPECT_DOUBLE_EQ(c.expected_output(512), 128);
  c.learn_output(100, 5000);  // more than the limit (a shim stripped it): counts as all of it
  EXPECT_NEAR(c.expected_output(512), 512 * (0.25 + 0.05 * 0.75), 1e-9);
  c.learn_output(std::nullopt, 300);
  EXPECT_DOUBLE_EQ(c.expected_output(std::nullopt), 300);
  c.learn_output(0, 300);  // a zero limit teaches nothing
  EXPECT_DOUBLE_EQ(c.expected_output(std::nullopt), 300);
}

TEST(DecodeCost, ShortOrUnmeasurableResponsesTeachNothing) {
  DecodeCost c(2);
  for (int i = 0; i < 20; ++i) {
    c.learn(0, DecodeCost::kMinTokens - 1, 1000000, 1);  // too short
    c.learn(0, 100, 0, 1);                               // no time
    c.learn(0, 100, 1000000, 0.5);                       // not in flight
    c.learn(5, 100, 1000000, 1);                         // no such slot
  }
  EXPECT_FALSE(c.fit(0).valid);
  EXPECT_FALSE(c.fit(5).valid);
}

// The prefix policy subtracts the charge from the score; `decode` names a win it decided.
TEST(DecodeCost, ThePrefixPolicyWeighsItAgainstTheCacheInOneUnit) {
  RouteConfig rc;
  auto policy = make_policy("prefix", rc);
  FleetSnapshot s;
  s.candidates = candidates(2);
  s.candidates[1].overlap = 20;  // the slow engine holds 20 blocks of the prompt
  s.candidates[1].decode_charge = 12;
  Decision d = policy->decide(RouteRequest{}, s, 0);
  EXPECT_EQ(d.ranked[0].ordinal, 1u);
  EXPECT_EQ(d.outcome, Outcome::kOverlap) << "the cache outweighs 12 blocks of slower decode";
  EXPECT_DOUBLE_EQ(d.ranked[0].score, 8);
  EXPECT_DOUBLE_EQ(d.ranked[0].decode_charge, 12);
  s.candidates[1].decode_charge = 24;
  d = policy->decide(RouteRequest{}, s, 0);
  EXPECT_EQ(d.ranked[0].ordinal, 0u);
  EXPECT_EQ(d.outcome, Outcome::kDecode);
  EXPECT_EQ(outcome_label(d.outcome), "decode");
}

}  // namespace
}  // namespace ramjet::route
