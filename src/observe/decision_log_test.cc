#include "observe/decision_log.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <set>
#include <thread>

namespace ramjet::observe {
namespace {

route::Routed make(size_t engines, size_t winner, bool fail_open = false) {
  route::Routed r;
  r.cold = winner % 2 == 0;
  r.decision.outcome = route::Outcome::kOverlap;
  r.decision.fail_open = fail_open;
  for (size_t i = 0; i < engines; ++i) {
    route::CandidateTerms c;
    c.ordinal = (winner + i) % engines;
    c.eligible = !fail_open && c.ordinal != 3;
    c.overlap = static_cast<uint32_t>(10 - i);
    c.affinity = c.overlap;
    c.load_units = static_cast<int64_t>(i);
    c.request_load_units = 2;
    c.score = c.affinity - 4.0 * c.load_units;
    c.profile = i % 2 ? route::Profile::kMtp : route::Profile::kStandard;
    r.decision.ranked.push_back(c);
  }
  return r;
}

route::Routed with(route::Routed r, const route::RouteRequest& q) {
  r.request = q;
  return r;
}

route::RouteRequest req(uint64_t bytes) {
  return route::RouteRequest{.endpoint = request::Endpoint::kChat, .body_bytes = bytes};
}

TEST(DecisionLog, KeepsTheNewestNewestFirst) {
  DecisionLog log(4, 2);
  for (int i = 0; i < 10; ++i) log.push(with(make(2, i % 2), req(100 + i)), "prefix", 1000 + i);
  EXPECT_EQ(log.total(), 10u);
  auto recs = log.last(50);
  ASSERT_EQ(recs.size(), 4u);  // bounded by the capacity
  EXPECT_EQ(recs[0].seq, 10u);
  EXPECT_EQ(recs[3].seq, 7u);
  EXPECT_EQ(recs[0].request_bytes, 109u);
  EXPECT_EQ(recs[0].unix_ms, 1009);
  EXPECT_EQ(recs[0].chosen, 1u);
  EXPECT_EQ(recs[0].policy, "prefix");
  ASSERT_EQ(recs[0].candidates.size(), 2u);
  EXPECT_EQ(recs[0].candidates[0].ordinal, 1u);
  EXPECT_EQ(log.last(2).size(), 2u);
  EXPECT_EQ(log.routed_to(0), 5u);
  EXPECT_EQ(log.routed_to(1), 5u);
  EXPECT_EQ(log.routed_to(7), 0u);  // out of range: not counted, no crash
}

TEST(DecisionLog, ChosenIsTheFirstEligibleOrTheFailOpenHead) {
  DecisionLog log(8, 4);
  log.push(with(make(4, 3), req(1)), "prefix", 1);  // ranked 3 (ineligible), 0, 1, 2
  EXPECT_EQ(log.last(1)[0].chosen, 0u);
  log.push(with(make(4, 3, /*fail_open=*/true), req(1)), "prefix", 2);
  EXPECT_EQ(log.last(1)[0].chosen, 3u);
  EXPECT_TRUE(log.last(1)[0].fail_open);
  route::Routed none;
  log.push(with(none, req(1)), "load", 3);
  EXPECT_FALSE(log.last(1)[0].chosen.has_value());
}

TEST(DecisionLog, JsonHasEveryTermAndNothingElse) {
  DecisionLog log(8, 4);
  log.push(with(make(4, 1), req(4096)), "prefix", 1234);
  auto v = boost::json::parse(log.json(10));
  auto& d = v.at("decisions").as_array().at(0).as_object();
  EXPECT_EQ(d.at("seq").as_int64(), 1);
  EXPECT_EQ(d.at("unix_ms").as_int64(), 1234);
  EXPECT_EQ(d.at("endpoint").as_string(), "chat");
  EXPECT_EQ(d.at("policy").as_string(), "prefix");
  EXPECT_EQ(d.at("outcome").as_string(), "overlap");
  EXPECT_EQ(d.at("chosen").as_int64(), 1);
  EXPECT_EQ(d.at("request_bytes").as_int64(), 4096);
  EXPECT_EQ(d.at("cold").as_bool(), false);
  EXPECT_TRUE(d.at("exact").is_null()) << "no exact source";
  EXPECT_TRUE(d.at("exact_block_size").is_null());
  const auto& cands = d.at("candidates").as_array();
  ASSERT_EQ(cands.size(), 4u);
  const auto& c = cands.at(1).as_object();
  EXPECT_EQ(c.at("ordinal").as_int64(), 2);
  EXPECT_EQ(c.at("overlap").as_int64(), 9);
  EXPECT_EQ(c.at("load_units").as_int64(), 1);
  EXPECT_FALSE(c.at("failing").as_bool());
  EXPECT_EQ(c.at("request_load_units").as_int64(), 2);
  EXPECT_DOUBLE_EQ(c.at("score").to_number<double>(), 5.0);
  EXPECT_EQ(c.at("profile").as_string(), "mtp");
  std::set<std::string> keys;
  for (const auto& kv : c) keys.emplace(kv.key());
  EXPECT_EQ(keys, (std::set<std::string>{"ordinal", "eligible", "failing", "overlap", "single_flight",
                                         "session_bonus", "affinity", "load_units", "request_load_units",
                                         "foreign_load_units", "score", "profile", "adapter", "decode_charge"}));
  EXPECT_EQ(c.at("adapter").as_string(), "none");
  EXPECT_EQ(v.at("total").as_int64(), 1);
  EXPECT_EQ(v.at("capacity").as_int64(), 8);
  // The dashboard's numeric columns: every candidate term with a short label, each a key above.
  std::vector<std::string> columns;
  for (const auto& col : v.at("columns").as_array()) {
    const std::string key(col.at("key").as_string());
    EXPECT_TRUE(c.contains(key)) << key;
    EXPECT_FALSE(col.at("label").as_string().empty());
    columns.push_back(key);
  }
  EXPECT_EQ(columns, (std::vector<std::string>{"overlap", "single_flight", "session_bonus", "affinity", "load_units",
                                               "request_load_units", "foreign_load_units", "decode_charge", "score"}));
}

TEST(DecisionLog, ExactRoutingShowsItsOutcomeAndEachCandidatesPredictedTokens) {
  DecisionLog log(8, 3);
  route::Routed placed = with(make(3, 1), req(65536));
  placed.exact = route::ExactOutcome::kExact;
  placed.exact_tokens = {0, 8192, 1024};  // by ordinal
  placed.exact_block_size = 16;
  log.push(placed, "prefix", 1);
  route::Routed declined = with(make(3, 0), req(65536));
  declined.exact = route::ExactOutcome::kUntrusted;  // a fenced index: no lookup, no tokens
  log.push(declined, "prefix", 2);

  const auto recs = log.last(2);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[1].exact, route::ExactOutcome::kExact);
  EXPECT_EQ(recs[1].exact_tokens, (std::vector<uint32_t>{0, 8192, 1024}));
  EXPECT_EQ(recs[0].exact, route::ExactOutcome::kUntrusted);
  EXPECT_TRUE(recs[0].exact_tokens.empty());
  DecisionLog one(1, 3);  // one slot, reused: the later record keeps none of the earlier's tokens
  one.push(placed, "prefix", 1);
  one.push(declined, "prefix", 2);
  EXPECT_TRUE(one.last(1).at(0).exact_tokens.empty());

  auto v = boost::json::parse(log.json(10));
  const auto& ds = v.at("decisions").as_array();
  const auto& untrusted = ds.at(0).as_object();
  EXPECT_EQ(untrusted.at("exact").as_string(), "untrusted");
  EXPECT_TRUE(untrusted.at("exact_block_size").is_null());
  for (const auto& c : untrusted.at("candidates").as_array()) EXPECT_FALSE(c.as_object().contains("exact_tokens"));
  const auto& exact = ds.at(1).as_object();
  EXPECT_EQ(exact.at("exact").as_string(), "exact");
  EXPECT_EQ(exact.at("exact_block_size").as_int64(), 16);
  // Candidates are ranked (1, 2, 0); each carries its own ordinal's prediction.
  const auto& cands = exact.at("candidates").as_array();
  ASSERT_EQ(cands.size(), 3u);
  for (const auto& c : cands) {
    const auto& o = c.as_object();
    const int64_t want[] = {0, 8192, 1024};
    EXPECT_EQ(o.at("exact_tokens").as_int64(), want[o.at("ordinal").as_int64()]) << o.at("ordinal");
  }
  EXPECT_EQ(cands.at(0).as_object().at("ordinal").as_int64(), 1);
}

TEST(DecisionLog, ConcurrentWritersAndReaders) {
  DecisionLog log(16, 4);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      auto recs = log.last(16);
      for (size_t i = 1; i < recs.size(); ++i) ASSERT_GT(recs[i - 1].seq, recs[i].seq);
      for (const auto& r : recs) ASSERT_EQ(r.candidates.size(), 4u);
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 3; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < 2000; ++i) log.push(with(make(4, (w + i) % 4), req(i)), "prefix", i);
    });
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_EQ(log.total(), 6000u);
  EXPECT_EQ(log.last(100).size(), 16u);
  uint64_t routed = 0;
  for (size_t e = 0; e < 4; ++e) routed += log.routed_to(e);
  EXPECT_EQ(routed, 6000u);  // ordinal 3 is never eligible, but the others always are
}

TEST(JsonNumber, ShortestForms) {
  std::string s;
  append_json_number(s, 3);
  s += ',';
  append_json_number(s, 0.125);
  s += ',';
  append_json_number(s, std::nan(""));
  s += ',';
  append_json_number(s, -2.5);
  EXPECT_EQ(s, "3,0.125,null,-2.5");
}

}  // namespace
}  // namespace ramjet::observe
