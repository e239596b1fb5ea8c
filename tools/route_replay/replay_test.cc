#include "replay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "observe/journal.h"

namespace ramjet::replay {
namespace {

namespace json = boost::json;
using route::Profile;

std::filesystem::path temp_file(std::string_view tag) {
  auto p = std::filesystem::temp_directory_path() /
           ("ramjet-replay-" + std::string(tag) + "-" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(p);
  return p;
}

struct Engine {
  uint32_t overlap = 0;
  int64_t load = 0;
  bool eligible = true;
  uint32_t single_flight = 0;
  Profile profile = Profile::kNone;
};

route::FleetSnapshot fleet(const std::vector<Engine>& engines) {
  route::FleetSnapshot s;
  for (size_t i = 0; i < engines.size(); ++i) {
    route::CandidateState c;
    c.ordinal = i;
    c.eligible = engines[i].eligible;
    c.load_units = engines[i].load;
    c.overlap = engines[i].overlap;
    c.single_flight = engines[i].single_flight;
    c.profile = engines[i].profile;
    s.candidates.push_back(c);
  }
  return s;
}

// The journal line the data plane would write for this decision.
std::string journal_line(uint64_t seq, const route::Policy& policy, const route::RouteRequest& req,
                         const route::FleetSnapshot& snapshot, uint64_t rotation) {
  const route::Decision d = policy.decide(req, snapshot, rotation);
  return observe::format_start(
      observe::JournalStart{.seq = seq,
                            .unix_ms = 1700000000000 + static_cast<int64_t>(seq),
                            .max_output_tokens = std::nullopt,
                            .decision = d,
                            .config = policy.config(),
                            .request = req,
                            .policy = policy.name()});
}

JournalData read(const std::string& text, size_t max_line_bytes = kMaxLineBytes) {
  std::istringstream in(text);
  JournalData data;
  read_journal(in, data, max_line_bytes);
  return data;
}

// A random fleet and request, as the router would snapshot them.
struct RandomCase {
  route::FleetSnapshot snapshot;
  route::RouteRequest req;
  uint64_t rotation = 0;
};

RandomCase random_case(std::mt19937_64& rng) {
  auto uniform = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  RandomCase c;
  const size_t n = uniform(1, 6);
  std::vector<Engine> engines(n);
  const bool cold = uniform(0, 3) == 0;
  for (Engine& e : engines) {
    // Small ranges so exact ties (and the rotation among them) are common.
    e.overlap =
        cold ? 0 : static_cast<uint32_t>(uniform(0, 3) == 0 ? uniform(0, 60) : uniform(0, 4));
    e.single_flight = cold && uniform(0, 2) == 0 ? static_cast<uint32_t>(uniform(1, 8)) : 0;
    e.load = static_cast<int64_t>(uniform(0, 6));
    e.eligible = uniform(0, 9) != 0;
    e.profile = static_cast<Profile>(uniform(0, 2));
  }
  c.snapshot = fleet(engines);
  // A LoRA adapter request now and then: each engine's adapter slot (route/policy.h AdapterSlot).
  if (uniform(0, 2) == 0) {
    for (route::CandidateState& s : c.snapshot.candidates) s.adapter = static_cast<route::AdapterSlot>(uniform(0, 4));
  }
  // Decode charges (RJ_ROUTE_DECODE_COST) now and then, in sixteenths of a block as charged.
  if (uniform(0, 2) == 0) {
    for (route::CandidateState& s : c.snapshot.candidates) {
      s.decode_charge = uniform(0, 1) == 0 ? 0 : static_cast<double>(uniform(1, 2000)) / 16;
    }
  }
  const request::Endpoint endpoints[] = {request::Endpoint::kChat, request::Endpoint::kCompletions,
                                         request::Endpoint::kResponses,
                                         request::Endpoint::kMessages, request::Endpoint::kOther};
  c.req.endpoint = endpoints[uniform(0, 4)];
  c.req.body_bytes = uniform(0, 400000);
  c.req.total_blocks = uniform(0, 3) == 0 ? 0 : uniform(1, 200);
  c.req.wanted = c.req.endpoint == request::Endpoint::kOther ? Profile::kNone
                                                             : static_cast<Profile>(uniform(1, 2));
  c.rotation = uniform(0, 3) == 0 ? uniform(0, UINT64_MAX) : uniform(0, 1000);
  // Several routers (RJ_PEERS) now and then: the place that spread the decision replays too.
  if (uniform(0, 2) == 0) {
    c.snapshot.routers = static_cast<uint32_t>(uniform(2, 5));
    c.snapshot.spread_place = static_cast<uint32_t>(uniform(0, 12));
    c.snapshot.spread_tie = static_cast<uint32_t>(uniform(0, UINT32_MAX));
  }
  return c;
}

// ---- round trip through the real journal ----

TEST(RouteReplay, ReplayingAJournalOfTheRealPoliciesAgreesWithEveryRecordedChoice) {
  route::RouteConfig odd;
  odd.alpha = 3.9252393092058475;  // Boost.JSON 1.81 alone reads this one ulp off
  odd.max_overlap_blocks = 16;
  odd.load_unit_bytes = 8192;
  odd.max_load_units = 5;
  odd.adapter_load_units = 3;
  std::vector<std::unique_ptr<route::Policy>> policies;
  policies.push_back(route::make_policy("prefix", route::RouteConfig{}));
  policies.push_back(route::make_policy("prefix", odd));
  policies.push_back(route::make_policy("load", route::RouteConfig{}));
  policies.push_back(route::make_policy("load", odd));
  policies.push_back(route::make_policy("round_robin", route::RouteConfig{}));

  const auto path = temp_file("roundtrip");
  std::mt19937_64 rng(20240611);
  constexpr size_t kDecisions = 400;
  {
    std::string error;
    auto journal = observe::Journal::open(observe::JournalConfig{true, path.string()}, &error);
    ASSERT_NE(journal, nullptr) << error;
    for (size_t i = 0; i < kDecisions; ++i) {
      // Mostly the prefix policy, which has the most terms to get right.
      route::Policy& policy = *policies[i % 8 < 5 ? i % 2 : 2 + i % 3];
      const RandomCase c = random_case(rng);
      const route::Decision d = policy.decide(c.req, c.snapshot, c.rotation);
      const uint64_t seq = journal->next_seq();
      journal->start(observe::JournalStart{.seq = seq,
                                           .unix_ms = 1700000000000,
                                           .cold = false,
                                           .max_output_tokens = 100,
                                           .decision = d,
                                           .config = policy.config(),
                                           .request = c.req,
                                           .policy = policy.name(),
                                           .phase_aware_load = false,
                                           .single_flight = true});
      observe::JournalFinish f;
      f.seq = seq;
      f.result = "complete";
      f.upstream = d.ranked.front().ordinal;
      f.duration_ms = 100;
      f.ttft_ms = 10;
      journal->finish(f);
    }
    EXPECT_EQ(journal->stats().dropped, 0u);
  }
  std::ifstream in(path);
  JournalData data;
  read_journal(in, data);
  std::filesystem::remove(path);

  EXPECT_EQ(data.stats.starts, kDecisions);
  EXPECT_EQ(data.stats.finishes, kDecisions);
  EXPECT_EQ(data.stats.errors(), 0u);
  const Report r = build_report(data, Overrides{}, {});
  EXPECT_EQ(r.replayed, kDecisions);
  EXPECT_EQ(r.agree, kDecisions);
  EXPECT_TRUE(r.disagree_seqs.empty());
  EXPECT_EQ(r.outcome_mismatch, 0u);
  EXPECT_TRUE(r.all_agree());
  EXPECT_EQ(r.joined_finishes, kDecisions);

  // The exact alpha survived the trip.
  bool saw_odd = false;
  for (const StartRecord& s : data.starts) saw_odd |= s.config.alpha == odd.alpha;
  EXPECT_TRUE(saw_odd);

  // Under alpha 0 the prefix policy follows affinity alone (where no decode charge applies):
  // every eligible winner holds the most (capped) affinity among the eligible engines.
  const Report zero = build_report(data, Overrides{.alpha = 0.0}, {});
  ASSERT_TRUE(zero.what_if);
  EXPECT_GT(zero.what_if->changed, 0u);
  for (const StartRecord& s : data.starts) {
    if (s.policy != "prefix") continue;
    if (std::any_of(s.candidates.begin(), s.candidates.end(),
                    [](const CandidateRecord& c) { return c.terms.decode_charge != 0; })) {
      continue;
    }
    const auto d = recompute(s, Overrides{.alpha = 0.0});
    ASSERT_TRUE(d);
    uint32_t best = 0;
    for (const auto& t : d->ranked) {
      if (t.eligible) best = std::max(best, t.affinity);
    }
    if (d->ranked.front().eligible) {
      EXPECT_EQ(d->ranked.front().affinity, best) << "seq " << s.seq;
    }
  }
}

TEST(RouteReplay, AlphaZeroTurnsALoadDecisionIntoAnOverlapDecision) {
  auto policy = route::make_policy("prefix", route::RouteConfig{});
  const route::RouteRequest req{request::Endpoint::kChat, 20000, Profile::kStandard};
  // Engine 0 holds 10 blocks but carries 5 units: 10 - 4*5 < 0 - 4*0, so load wins at alpha 4.
  const std::string line = journal_line(
      1, *policy, req, fleet({{.overlap = 10, .load = 5}, {.overlap = 0, .load = 0}}), 0);
  const JournalData data = read(line);
  ASSERT_EQ(data.starts.size(), 1u);
  EXPECT_EQ(data.starts[0].chosen, 1u);
  EXPECT_EQ(data.starts[0].outcome, "load");

  const Report r = build_report(data, Overrides{.alpha = 0.0}, {});
  EXPECT_EQ(r.agree, 1u);
  ASSERT_TRUE(r.what_if);
  EXPECT_EQ(r.what_if->changed, 1u);
  EXPECT_EQ(r.before.share.at(1), 1u);
  EXPECT_EQ(r.what_if->after.share.at(0), 1u);
  EXPECT_EQ(r.what_if->after.outcomes.at("overlap"), 1u);

  // A larger cap or smaller load units do not help engine 0 here; fewer max units do not either.
  const Report same = build_report(data, Overrides{.max_overlap_blocks = 64}, {});
  EXPECT_EQ(same.what_if->changed, 0u);
}

TEST(RouteReplay, ASweepGivesOneRowPerAlpha) {
  auto policy = route::make_policy("prefix", route::RouteConfig{});
  const route::RouteRequest req{request::Endpoint::kChat, 20000, Profile::kStandard};
  const std::string text =
      journal_line(1, *policy, req, fleet({{.overlap = 10, .load = 5}, {.overlap = 0, .load = 0}}),
                   0) +
      journal_line(2, *policy, req, fleet({{.overlap = 10, .load = 1}, {.overlap = 0, .load = 0}}),
                   1);
  const Report r = build_report(read(text), Overrides{}, {0, 1, 2, 4, 8});
  ASSERT_EQ(r.sweep.size(), 5u);
  // As recorded (alpha 4) seq 1 goes to engine 1 (10 - 4*5 < 0) and seq 2 to engine 0 (10 - 4 > 0).
  // Seq 1 moves to engine 0 while 10 - alpha*5 >= 0 (at 0 exactly, raw overlap breaks the tie);
  // seq 2 stays on engine 0 while 10 - alpha > 0.
  EXPECT_EQ(r.sweep[0].changed, 1u);  // alpha 0
  EXPECT_EQ(r.sweep[1].changed, 1u);  // alpha 1: 10-5 > 0
  EXPECT_EQ(r.sweep[2].changed, 1u);  // alpha 2: 10-10 == 0, the overlap tie-break picks engine 0
  EXPECT_EQ(r.sweep[3].changed, 0u);  // alpha 4: as recorded
  EXPECT_EQ(r.sweep[4].changed, 0u);  // alpha 8: seq 2 still 10-8 > 0
  EXPECT_EQ(r.sweep[2].after.outcomes.at("overlap"), 2u);
  EXPECT_FALSE(r.what_if);
  const std::string out = format_text(r);
  EXPECT_NE(out.find("sweep"), std::string::npos) << out;
}

TEST(RouteReplay, JsonOutputCarriesEverySection) {
  auto policy = route::make_policy("prefix", route::RouteConfig{});
  const route::RouteRequest req{request::Endpoint::kChat, 20000, Profile::kStandard};
  std::string text = journal_line(1, *policy, req, fleet({{.overlap = 10, .load = 5}, {}}), 0);
  text +=
      R"({"v":9,"event":"finish","seq":1,"unix_ms":1,"result":"complete","upstream":1,"request_load_units":1,"status":200,"duration_ms":120.500,"first_byte_ms":20.000,"ttft_ms":30.000,"response_bytes":10,"prompt_tokens":null,"cached_tokens":null,"completion_tokens":null})"
      "\n";
  const Report r = build_report(read(text), Overrides{.alpha = 0.0}, {0, 4});
  const json::object o = json::parse(format_json(r)).as_object();
  for (const char* k : {"read", "baseline", "what_if", "sweep", "finish", "note"})
    EXPECT_TRUE(o.contains(k)) << k;
  EXPECT_EQ(o.at("baseline").at("agree").as_int64(), 1);
  EXPECT_EQ(o.at("baseline").at("agree_pct").as_double(), 100.0);
  EXPECT_EQ(o.at("what_if").at("changed").as_int64(), 1);
  EXPECT_EQ(o.at("what_if").at("overrides").at("alpha").to_number<double>(), 0.0);
  EXPECT_EQ(o.at("sweep").as_array().size(), 2u);
  const json::object& t = o.at("finish").at("per_upstream").as_array().at(0).as_object();
  EXPECT_EQ(t.at("upstream").as_int64(), 1);
  EXPECT_EQ(t.at("mean_duration_ms").as_double(), 120.5);
  EXPECT_EQ(t.at("mean_ttft_ms").as_double(), 30.0);
}

// ---- reading ----

TEST(RouteReplay, LinesThatAreNotJournalRecordsAreSkippedAndBadRecordsCounted) {
  auto policy = route::make_policy("prefix", route::RouteConfig{});
  const route::RouteRequest req{request::Endpoint::kChat, 1000, Profile::kStandard};
  const std::string good = journal_line(7, *policy, req, fleet({{.overlap = 1}, {}}), 0);
  std::string text;
  text += R"({"ts":"2024-01-01T00:00:00.000000Z","lvl":"info","msg":"listening"})"
          "\n";  // a log line
  text += "\n";
  text += "plain text\n";
  text += good;
  text += "[route_journal] " + good;  // the reference's prefix
  text += R"({"v":7,"event":"start","seq":1,"candidates":[]})"
          "\n";  // unsupported version
  text += R"({"v":9,"event":"start","seq":"one","rotation":0,"candidates":[]})"
          "\n";  // wrong type
  text += R"({"v":9,"event":"start","seq":2,"rotation":0,"candidates":[{"upstream":0}]})"
          "\n";  // missing terms
  text += R"({"v":9,"event":"start","seq":3,"rotat)"
          "\n";  // truncated
  text += R"({"v":9,"event":"other","seq":3})"
          "\n";                             // not a record
  text += std::string(3000, 'x') + "\n";    // too long
  text += good.substr(0, good.size() - 1);  // no final newline
  const JournalData data = read(text, 2048);
  EXPECT_EQ(data.stats.lines, 12u);
  EXPECT_EQ(data.stats.starts, 3u);
  EXPECT_EQ(data.stats.skipped, 4u);
  EXPECT_EQ(data.stats.unsupported, 1u);
  EXPECT_EQ(data.stats.malformed, 3u);
  EXPECT_EQ(data.stats.too_long, 1u);
  const Report r = build_report(data, Overrides{}, {});
  EXPECT_EQ(r.agree, 3u);
  const std::string out = format_text(r);
  EXPECT_NE(out.find("3 malformed records, 1 lines too long, 1 records of an unsupported version"),
            std::string::npos)
      << out;
}

TEST(RouteReplay, AlphaIsReadExactlyWhereBoostJsonAloneWouldBeOneUlpOff) {
  const double alpha = 3.9252393092058475;
  ASSERT_NE(json::parse("3.9252393092058475").to_number<double>(), alpha)
      << "Boost.JSON now reads it exactly; the workaround in replay.cc can go";
  route::RouteConfig c;
  c.alpha = alpha;
  auto policy = route::make_policy("prefix", c);
  const route::RouteRequest req{request::Endpoint::kChat, 1000, Profile::kStandard};
  const JournalData data =
      read(journal_line(1, *policy, req, fleet({{.overlap = 4, .load = 1}, {}}), 0));
  ASSERT_EQ(data.starts.size(), 1u);
  EXPECT_EQ(data.starts[0].config.alpha, alpha);
}

TEST(RouteReplay, TheCreditBasisIsReplayedAsRecordedAndCanBeAskedWhatIf) {
  // A shared prompt longer than the cap on every engine; the conversation's engine is a unit busier.
  const std::vector<Engine> engines{{.overlap = 40}, {.overlap = 40}, {.overlap = 46, .load = 1}};
  const route::RouteRequest req{request::Endpoint::kChat, 1000, Profile::kNone};
  route::RouteConfig relative{.max_overlap_blocks = 32, .relative_credit = true};
  auto policy = route::make_policy("prefix", relative);
  const JournalData data = read(journal_line(1, *policy, req, fleet(engines), 0));
  ASSERT_EQ(data.starts.size(), 1u);
  EXPECT_TRUE(data.starts[0].config.relative_credit);
  EXPECT_EQ(data.starts[0].chosen, 2u);
  EXPECT_EQ(build_report(data, Overrides{}, {}).agree, 1u);
  Overrides absolute;
  absolute.relative_credit = false;
  const Report r = build_report(data, absolute, {});
  EXPECT_EQ(r.agree, 1u) << "the recorded decision still replays";
  ASSERT_TRUE(r.what_if.has_value());
  EXPECT_EQ(r.what_if->changed, 1u) << "absolute credit lets load move it";
  EXPECT_NE(format_text(r).find("credit_basis=absolute"), std::string::npos);
}

TEST(RouteReplay, AVersion8RecordWithoutTheNewerFieldsReplaysAsThePrefixPolicy) {
  const std::string v8 =
      R"([route_journal] {"v":8,"event":"start","seq":5,"unix_ms":1,"endpoint":"chat","request_bytes":40000,)"
      R"("total_blocks":19,"chosen":2,"served_chosen":2,"outcome":"overlap","rotation":11,"alpha":4.0,)"
      R"("max_affinity_blocks":32,"chunk_bytes":2048,"load_unit_bytes":32768,"max_load_units":8,)"
      R"("phase_aware_load":false,"score_tie_break":"overlap","output_limit":{"policy_version":1,"requested":"unset"},)"
      R"("candidates":[{"upstream":2,"rank":0,"overlap_blocks":19,"affinity_blocks":19,"load_units":2,"request_load_units":1,"healthy":true},)"
      R"({"upstream":0,"rank":1,"overlap_blocks":0,"affinity_blocks":0,"load_units":0,"request_load_units":2,"healthy":true},)"
      R"({"upstream":1,"rank":2,"overlap_blocks":0,"affinity_blocks":0,"load_units":1,"request_load_units":2,"healthy":false}]})"
      "\n";
  const JournalData data = read(v8);
  ASSERT_EQ(data.starts.size(), 1u);
  const StartRecord& s = data.starts[0];
  EXPECT_EQ(s.version, 8);
  EXPECT_EQ(s.policy, "prefix");
  EXPECT_EQ(s.wanted, Profile::kNone);
  EXPECT_EQ(s.candidates.size(), 3u);
  const Report r = build_report(data, Overrides{}, {});
  EXPECT_EQ(r.agree, 1u);
  EXPECT_EQ(r.outcome_mismatch, 0u);
}

TEST(RouteReplay, ADecisionTheReplayDoesNotReproduceIsReportedBySeq) {
  auto policy = route::make_policy("prefix", route::RouteConfig{});
  const route::RouteRequest req{request::Endpoint::kChat, 1000, Profile::kStandard};
  std::string line = journal_line(42, *policy, req, fleet({{.overlap = 5}, {}}), 0);
  const size_t at = line.find("\"chosen\":0");
  ASSERT_NE(at, std::string::npos);
  line.replace(at, 10, "\"chosen\":1");
  const Report r = build_report(read(line), Overrides{}, {});
  EXPECT_EQ(r.agree, 0u);
  ASSERT_EQ(r.disagree_seqs.size(), 1u);
  EXPECT_EQ(r.disagree_seqs[0], 42u);
  EXPECT_FALSE(r.all_agree());
  EXPECT_NE(format_text(r).find("WARNING: 1 decisions disagree with the journal (seq 42)"),
            std::string::npos);
}

TEST(RouteReplay, AnUnknownPolicyIsCountedAsNotReplayable) {
  auto policy = route::make_policy("prefix", route::RouteConfig{});
  const route::RouteRequest req{request::Endpoint::kChat, 1000, Profile::kStandard};
  std::string line = journal_line(1, *policy, req, fleet({{}, {}}), 0);
  line.replace(line.find("\"policy\":\"prefix\""), 17, "\"policy\":\"exact\"");
  const Report r = build_report(read(line), Overrides{}, {});
  EXPECT_EQ(r.replayed, 0u);
  EXPECT_EQ(r.not_replayable, 1u);
  EXPECT_TRUE(r.all_agree());
}

TEST(RouteReplay, FinishRecordsJoinTheLatestStartWithTheirSeqAndSummarisePerUpstream) {
  auto policy = route::make_policy("prefix", route::RouteConfig{});
  const route::RouteRequest req{request::Endpoint::kChat, 1000, Profile::kStandard};
  auto finish = [](uint64_t seq, size_t upstream, std::string_view result, double duration,
                   std::optional<double> ttft) {
    observe::JournalFinish f;
    f.seq = seq;
    f.result = result;
    f.upstream = upstream;
    f.duration_ms = duration;
    f.ttft_ms = ttft;
    return observe::format_finish(f);
  };
  std::string text;
  text += journal_line(1, *policy, req, fleet({{.overlap = 5}, {}}), 0);
  text += finish(1, 0, "complete", 100, 10);
  // The process restarted: seq counts from 1 again.
  text += journal_line(1, *policy, req, fleet({{}, {.overlap = 5}}), 0);
  text += finish(1, 1, "complete", 300, std::nullopt);
  text += finish(9, 0, "upstream_error", 5, std::nullopt);  // no start: not joined
  text += finish(1, 0, "complete", 200, 30);
  const JournalData data = read(text);
  ASSERT_EQ(data.finishes.size(), 4u);
  EXPECT_EQ(data.finishes[0].start, 0u);
  EXPECT_EQ(data.finishes[1].start, 1u);
  EXPECT_FALSE(data.finishes[2].start);
  const Report r = build_report(data, Overrides{}, {});
  EXPECT_EQ(r.joined_finishes, 3u);
  ASSERT_EQ(r.timings.size(), 2u);
  EXPECT_EQ(r.timings[0].upstream, 0u);
  EXPECT_EQ(r.timings[0].finishes, 3u);
  EXPECT_EQ(r.timings[0].complete, 2u);
  EXPECT_EQ(r.timings[0].mean_duration_ms, 150.0);
  EXPECT_EQ(r.timings[0].mean_ttft_ms, 20.0);
  EXPECT_EQ(r.timings[1].mean_duration_ms, 300.0);
  EXPECT_FALSE(r.timings[1].mean_ttft_ms);
}

}  // namespace
}  // namespace ramjet::replay
