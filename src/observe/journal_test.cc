#include "observe/journal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "request/prepare/prepare.h"

namespace ramjet::observe {
namespace {

namespace json = boost::json;

std::filesystem::path temp_file(std::string_view tag) {
  static int counter = 0;
  auto p = std::filesystem::temp_directory_path() /
           ("ramjet-journal-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(++counter) + ".jsonl");
  std::filesystem::remove(p);
  return p;
}

std::vector<std::string> read_lines(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

route::FleetSnapshot three_engines() {
  route::FleetSnapshot s;
  s.candidates = {
      route::CandidateState{0, true, 2, 1, 5, 0, route::Profile::kMtp},
      route::CandidateState{1, true, 0, 0, 0, 3, route::Profile::kStandard},
      route::CandidateState{2, false, 0, 0, 9, 0, route::Profile::kNone},
  };
  return s;
}

struct Fixture {
  route::RouteConfig config;
  std::unique_ptr<route::Policy> policy = route::make_policy("prefix", config);
  request::PreparedRequest req;
  route::Decision decision;

  explicit Fixture(std::string body = std::string(5000, 'x'),
                   std::optional<uint64_t> max_tokens = 100) {
    req.endpoint = request::Endpoint::kChat;
    req.body = std::move(body);
    req.max_output_tokens = max_tokens;
    req.fingerprints.chain = {11, 22, 33};  // three blocks (their values are never journalled)
    decision = policy->decide(route::RouteRequest::of(req, config), three_engines(), 7);
  }
  JournalStart start(uint64_t seq = 1) const {
    return JournalStart{.seq = seq,
                        .unix_ms = 1700000000123,
                        .cold = false,
                        .max_output_tokens = req.max_output_tokens,
                        .decision = decision,
                        .config = config,
                        .request = route::RouteRequest::of(req, config),
                        .policy = policy->name(),
                        .phase_aware_load = true,
                        .single_flight = true};
  }
};

JournalFinish finish(uint64_t seq = 1) {
  JournalFinish f;
  f.seq = seq;
  f.unix_ms = 1700000000999;
  f.result = "complete";
  f.upstream = 1;
  f.request_load_units = 1;
  f.status = 200;
  f.duration_ms = 812.25;
  f.first_byte_ms = 40.5;
  f.response_bytes = 4096;
  f.prompt_tokens = 1200;
  f.cached_tokens = 1024;
  return f;
}

json::object parse_line(const std::string& line) {
  EXPECT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one record per line";
  return json::parse(line).as_object();
}

// ---- record contents ----

TEST(JournalRecord, StartCarriesEveryKeyAndTheDecisionTerms) {
  Fixture fx;
  const json::object o = parse_line(format_start(fx.start(42)));
  for (const char* k : {"v",
                        "event",
                        "seq",
                        "unix_ms",
                        "endpoint",
                        "policy",
                        "request_bytes",
                        "total_blocks",
                        "chosen",
                        "outcome",
                        "rotation",
                        "routers",
                        "spread_place",
                        "spread_tie",
                        "alpha",
                        "max_affinity_blocks",
                        "credit_basis",
                        "chunk_bytes",
                        "load_unit_bytes",
                        "max_load_units",
                        "short_max_tokens",
                        "adapter_load_units",
                        "phase_aware_load",
                        "single_flight",
                        "cold",
                        "fail_open",
                        "wanted_profile",
                        "output_limit",
                        "score_tie_break",
                        "exact_outcome",
                        "predicted_cached_tokens",
                        "candidates"}) {
    EXPECT_TRUE(o.contains(k)) << k;
  }
  EXPECT_EQ(o.size(), 32u) << "no key beyond the documented schema";
  EXPECT_EQ(o.at("credit_basis").as_string(), "absolute");
  EXPECT_EQ(o.at("v").as_int64(), 18);
  EXPECT_EQ(o.at("event").as_string(), "start");
  EXPECT_EQ(o.at("seq").as_int64(), 42);
  EXPECT_EQ(o.at("unix_ms").as_int64(), 1700000000123);
  EXPECT_EQ(o.at("endpoint").as_string(), "chat");
  EXPECT_EQ(o.at("policy").as_string(), "prefix");
  EXPECT_EQ(o.at("request_bytes").as_int64(), 5000);
  EXPECT_EQ(o.at("total_blocks").as_int64(), 3);
  EXPECT_EQ(o.at("chosen").as_int64(), static_cast<int64_t>(fx.decision.ranked[0].ordinal));
  EXPECT_EQ(o.at("outcome").as_string(), route::outcome_label(fx.decision.outcome));
  EXPECT_EQ(o.at("rotation").as_int64(), 7);
  EXPECT_EQ(o.at("alpha").to_number<double>(), 4.0);
  EXPECT_EQ(o.at("max_affinity_blocks").as_int64(), 32);
  EXPECT_EQ(o.at("chunk_bytes").as_int64(), 2048);
  EXPECT_EQ(o.at("load_unit_bytes").as_int64(), 32768);
  EXPECT_EQ(o.at("max_load_units").as_int64(), 8);
  EXPECT_EQ(o.at("short_max_tokens").as_int64(), 256);
  EXPECT_EQ(o.at("adapter_load_units").as_int64(), 2);
  EXPECT_TRUE(o.at("phase_aware_load").as_bool());
  EXPECT_TRUE(o.at("single_flight").as_bool());
  EXPECT_FALSE(o.at("cold").as_bool());
  EXPECT_FALSE(o.at("fail_open").as_bool());
  EXPECT_EQ(o.at("wanted_profile").as_string(), "mtp");
  EXPECT_EQ(o.at("output_limit").as_string(), "65_256");
  EXPECT_EQ(o.at("score_tie_break").as_string(), "overlap");
  EXPECT_TRUE(o.at("exact_outcome").is_null()) << "no exact source: nothing to say";
  EXPECT_TRUE(o.at("predicted_cached_tokens").is_null());

  const json::array& cands = o.at("candidates").as_array();
  ASSERT_EQ(cands.size(), 3u);
  for (size_t rank = 0; rank < cands.size(); ++rank) {
    const json::object& c = cands[rank].as_object();
    const route::CandidateTerms& t = fx.decision.ranked[rank];
    EXPECT_EQ(c.size(), 15u);
    EXPECT_EQ(c.at("adapter").as_string(), route::adapter_slot_label(t.adapter));
    EXPECT_EQ(c.at("decode_charge_blocks").to_number<double>(), t.decode_charge);
    EXPECT_EQ(c.at("session_bonus_blocks").as_int64(), t.session_bonus);
    EXPECT_EQ(c.at("upstream").as_int64(), static_cast<int64_t>(t.ordinal));
    EXPECT_EQ(c.at("rank").as_int64(), static_cast<int64_t>(rank));
    EXPECT_EQ(c.at("overlap_blocks").as_int64(), t.overlap);
    EXPECT_EQ(c.at("single_flight_blocks").as_int64(), t.single_flight);
    EXPECT_EQ(c.at("affinity_blocks").as_int64(), t.affinity);
    EXPECT_EQ(c.at("load_units").as_int64(), t.load_units);
    EXPECT_EQ(c.at("request_load_units").as_int64(), t.request_load_units);
    EXPECT_EQ(c.at("foreign_load_units").as_int64(), t.foreign_load_units);
    EXPECT_EQ(c.at("healthy").as_bool(), t.eligible);
    EXPECT_EQ(c.at("failing").as_bool(), t.failing);
    EXPECT_EQ(c.at("profile").as_string(), route::profile_label(t.profile));
    EXPECT_EQ(c.at("score").to_number<double>(), t.score);
  }
  // Engine 1 holds nothing but a leader prefills 3 blocks there: 3 - 0 beats 5 - 4*2.
  EXPECT_EQ(cands[0].as_object().at("upstream").as_int64(), 1);
  EXPECT_EQ(cands[0].as_object().at("single_flight_blocks").as_int64(), 3);
  EXPECT_EQ(cands[2].as_object().at("healthy").as_bool(), false);
}

TEST(JournalRecord, ExactRoutingIsJournalledAsItsOutcomeAndTheWinnersPredictedTokens) {
  Fixture fx;
  const size_t winner = fx.decision.ranked.front().ordinal;
  std::vector<uint32_t> tokens = {0, 0, 0};
  tokens[winner] = 4096;
  tokens[(winner + 1) % 3] = 12288;  // another engine's count is not journalled
  JournalStart s = fx.start();
  s.exact = route::ExactOutcome::kShadowWouldMove;
  s.exact_tokens = tokens;
  const std::string line = format_start(s);
  const json::object o = parse_line(line);
  EXPECT_EQ(o.at("exact_outcome").as_string(), "shadow_would_move");
  EXPECT_EQ(o.at("predicted_cached_tokens").as_int64(), 4096);
  EXPECT_EQ(line.find("12288"), std::string::npos) << line;

  // An outcome without a lookup (the index was not trusted): the label, and no prediction.
  s.exact = route::ExactOutcome::kUntrusted;
  s.exact_tokens = {};
  const json::object u = parse_line(format_start(s));
  EXPECT_EQ(u.at("exact_outcome").as_string(), "untrusted");
  EXPECT_TRUE(u.at("predicted_cached_tokens").is_null());
}

TEST(JournalRecord, TheWinnersTieredPredictionIsJournalledOnlyWhenSomeIsOffloaded) {
  Fixture fx;
  const size_t winner = fx.decision.ranked.front().ordinal;
  std::vector<uint32_t> tokens = {0, 0, 0};
  std::vector<cache::TierBlocks> tiers(3);
  tokens[winner] = 4096;
  tiers[winner] = cache::TierBlocks{{1024, 2560, 512}};
  tiers[(winner + 1) % 3] = cache::TierBlocks{{0, 12288, 0}};  // another engine's split is not journalled
  JournalStart s = fx.start();
  s.exact = route::ExactOutcome::kExact;
  s.exact_tokens = tokens;
  s.exact_tiers = tiers;
  const std::string line = format_start(s);
  const json::object o = parse_line(line);
  EXPECT_EQ(o.at("predicted_cached_tokens").as_int64(), 4096);
  const json::object& t = o.at("predicted_tier_tokens").as_object();
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.at("gpu").as_int64(), 1024);
  EXPECT_EQ(t.at("cpu").as_int64(), 2560);
  EXPECT_EQ(t.at("disk").as_int64(), 512);
  EXPECT_EQ(line.find("12288"), std::string::npos) << line;
  // All on the GPU: the record is as before.
  tiers[winner] = cache::TierBlocks{{4096, 0, 0}};
  EXPECT_FALSE(parse_line(format_start(s)).contains("predicted_tier_tokens"));
}

TEST(JournalRecord, FinishCarriesEveryKeyWithNullForWhatIsUnknown) {
  const json::object o = parse_line(format_finish(finish(42)));
  for (const char* k : {"v", "event", "seq", "unix_ms", "result", "upstream", "request_load_units",
                        "status", "duration_ms", "first_byte_ms", "ttft_ms", "queue_ms", "queue_reason", "class",
                        "response_bytes", "prompt_tokens", "cached_tokens", "completion_tokens"}) {
    EXPECT_TRUE(o.contains(k)) << k;
  }
  EXPECT_EQ(o.size(), 18u);
  EXPECT_TRUE(o.at("queue_ms").is_null());
  EXPECT_TRUE(o.at("queue_reason").is_null());
  EXPECT_EQ(o.at("class").as_string(), "interactive");
  EXPECT_EQ(o.at("event").as_string(), "finish");
  EXPECT_EQ(o.at("seq").as_int64(), 42);
  EXPECT_EQ(o.at("result").as_string(), "complete");
  EXPECT_EQ(o.at("upstream").as_int64(), 1);
  EXPECT_EQ(o.at("status").as_int64(), 200);
  EXPECT_EQ(o.at("duration_ms").as_double(), 812.25);
  EXPECT_EQ(o.at("first_byte_ms").as_double(), 40.5);
  EXPECT_TRUE(o.at("ttft_ms").is_null());
  EXPECT_EQ(o.at("response_bytes").as_int64(), 4096);
  EXPECT_EQ(o.at("prompt_tokens").as_int64(), 1200);
  EXPECT_EQ(o.at("cached_tokens").as_int64(), 1024);
  EXPECT_TRUE(o.at("completion_tokens").is_null());
}

TEST(JournalRecord, FinishSaysWhatARequestWaitedForAndItsClass) {
  JournalFinish f = finish();
  f.queue_ms = 1500.0;
  f.queue_reason = "wake";
  f.priority_class = "batch";
  const json::object o = parse_line(format_finish(f));
  EXPECT_EQ(o.at("queue_ms").as_double(), 1500.0);
  EXPECT_EQ(o.at("queue_reason").as_string(), "wake");
  EXPECT_EQ(o.at("class").as_string(), "batch");
}

TEST(JournalRecord, FinishWithoutAnUpstreamWritesNull) {
  JournalFinish f = finish();
  f.result = "no_upstream";
  f.upstream.reset();
  f.status = 503;
  f.first_byte_ms.reset();
  f.prompt_tokens.reset();
  f.cached_tokens.reset();
  const json::object o = parse_line(format_finish(f));
  EXPECT_TRUE(o.at("upstream").is_null());
  EXPECT_TRUE(o.at("first_byte_ms").is_null());
  EXPECT_TRUE(o.at("prompt_tokens").is_null());
}

TEST(JournalRecord, MillisecondsHaveThreeDecimalsAndNonFiniteValuesAreNull) {
  JournalFinish f = finish();
  f.duration_ms = 1.0 / 3.0;
  f.ttft_ms = std::numeric_limits<double>::infinity();
  const std::string line = format_finish(f);
  EXPECT_NE(line.find("\"duration_ms\":0.333,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"ttft_ms\":null"), std::string::npos) << line;
}

TEST(JournalRecord, AlphaAndScoresReadBackAsTheSameDouble) {
  Fixture fx;
  fx.config.alpha = 0.1 + 0.2;  // 0.30000000000000004: needs all 17 digits
  fx.policy = route::make_policy("prefix", fx.config);
  fx.decision = fx.policy->decide(route::RouteRequest::of(fx.req, fx.config), three_engines(), 0);
  const std::string line = format_start(fx.start());
  EXPECT_NE(line.find("\"alpha\":0.30000000000000004,"), std::string::npos) << line;
}

TEST(JournalRecord, OutputLimitIsJournalledAsABucketOnly) {
  EXPECT_EQ(output_limit_bucket(std::nullopt), "unset");
  EXPECT_EQ(output_limit_bucket(0), "invalid");
  EXPECT_EQ(output_limit_bucket(1), "1_64");
  EXPECT_EQ(output_limit_bucket(64), "1_64");
  EXPECT_EQ(output_limit_bucket(65), "65_256");
  EXPECT_EQ(output_limit_bucket(256), "65_256");
  EXPECT_EQ(output_limit_bucket(257), "257_1024");
  EXPECT_EQ(output_limit_bucket(1024), "257_1024");
  EXPECT_EQ(output_limit_bucket(1025), "1025_4096");
  EXPECT_EQ(output_limit_bucket(4096), "1025_4096");
  EXPECT_EQ(output_limit_bucket(4097), "4097_plus");
  Fixture fx(std::string(100, 'x'), 12345);
  const std::string line = format_start(fx.start());
  EXPECT_EQ(line.find("12345"), std::string::npos) << "the raw limit is never written";
  EXPECT_NE(line.find("\"output_limit\":\"4097_plus\""), std::string::npos);
}

TEST(JournalRecord, NoRecordCarriesTheRequestBodyOrAHostname) {
  const std::string marker = "SECRET-MARKER-7f3a";
  const std::string body =
      R"({"model":"m","messages":[{"role":"user","content":")" + marker +
      R"( see http://vllm-a.internal:8000/v1 and vllm-b.example.com"}],"user":"req-123"})";
  Fixture fx(body, 64);
  const auto path = temp_file("privacy");
  {
    std::string error;
    auto j = Journal::open(JournalConfig{true, path.string()}, &error);
    ASSERT_NE(j, nullptr) << error;
    j->start(fx.start(j->next_seq()));
    JournalFinish f = finish(1);
    j->finish(f);
  }
  std::ifstream in(path);
  std::stringstream all;
  all << in.rdbuf();
  const std::string out = all.str();
  ASSERT_FALSE(out.empty());
  for (const char* needle : {"SECRET-MARKER", "vllm-a", "vllm-b", "internal", "example.com", "http",
                             "req-123", "messages", "content", "user"}) {
    EXPECT_EQ(out.find(needle), std::string::npos) << needle << " leaked into: " << out;
  }
  std::filesystem::remove(path);
}

// ---- the sink ----

TEST(Journal, SequenceNumbersCountFromOneAcrossThreads) {
  std::string error;
  auto j = Journal::open(JournalConfig{true, temp_file("seq").string()}, &error);
  ASSERT_NE(j, nullptr);
  std::vector<std::thread> threads;
  std::vector<std::vector<uint64_t>> seen(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) seen[t].push_back(j->next_seq());
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i + 1);
}

TEST(Journal, FileSinkAppendsToAnExistingFile) {
  const auto path = temp_file("append");
  { std::ofstream(path) << "an existing line\n"; }
  Fixture fx;
  for (int round = 0; round < 2; ++round) {
    std::string error;
    auto j = Journal::open(JournalConfig{true, path.string()}, &error);
    ASSERT_NE(j, nullptr) << error;
    j->start(fx.start(j->next_seq()));
    j->finish(finish(1));
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "an existing line");
  for (size_t i = 1; i < lines.size(); ++i) {
    const json::object o = json::parse(lines[i]).as_object();
    EXPECT_EQ(o.at("event").as_string(), i % 2 ? "start" : "finish");
    EXPECT_EQ(o.at("seq").as_int64(), 1) << "each process counts from 1";
  }
  std::filesystem::remove(path);
}

TEST(Journal, OpenReportsAnErrorForAFileItCannotCreate) {
  std::string error;
  auto j = Journal::open(JournalConfig{true, "/nonexistent-dir/ramjet/journal.jsonl"}, &error);
  EXPECT_EQ(j, nullptr);
  EXPECT_NE(error.find("cannot open route journal file"), std::string::npos) << error;
}

TEST(Journal, TheWriterThreadFlushesOnItsInterval) {
  const auto path = temp_file("interval");
  std::string error;
  JournalConfig cfg{true, path.string()};
  cfg.flush_interval = std::chrono::milliseconds(10);
  auto j = Journal::open(cfg, &error);
  ASSERT_NE(j, nullptr) << error;
  j->finish(finish(1));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (read_lines(path).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(read_lines(path).size(), 1u) << "written without flush() or destruction";
  j.reset();
  std::filesystem::remove(path);
}

TEST(Journal, ASlowSinkNeverBlocksTheCallerAndTheOverflowIsDroppedAndCounted) {
  // The sink is a pipe nobody reads yet: once its 64 KiB are full the writer thread blocks in
  // write(), the backlog fills up to its bound, and further records are dropped, not waited for.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string line = format_finish(finish(1));
  JournalConfig cfg{true, "/proc/self/fd/" + std::to_string(fds[1])};
  cfg.max_pending_bytes = line.size() * 10 + line.size() / 2;  // room for 10 records
  cfg.flush_interval = std::chrono::milliseconds(1);
  std::string error;
  auto j = Journal::open(cfg, &error);
  ASSERT_NE(j, nullptr) << error;
  constexpr uint64_t kRecords = 4000;  // ~1 MB, far beyond the pipe plus two backlogs
  for (uint64_t i = 0; i < kRecords; ++i) j->finish(finish(i + 1));
  const Journal::Stats s = j->stats();
  EXPECT_EQ(s.records + s.dropped, kRecords);
  EXPECT_GT(s.dropped, 0u);
  EXPECT_LT(s.records * line.size(), 64 * 1024 + 4 * cfg.max_pending_bytes);

  metrics::Exposition e;
  j->write_metrics(e);
  const std::string text = e.take();
  EXPECT_NE(text.find("ramjet_journal_records_total " + std::to_string(s.records) + "\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ramjet_journal_dropped_total " + std::to_string(s.dropped) + "\n"),
            std::string::npos)
      << text;

  // Drain the pipe: every kept record arrives, whole and in order.
  std::string received;
  std::thread reader([&] {
    char buf[8192];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
      received.append(buf, static_cast<size_t>(n));
  });
  j.reset();
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  std::istringstream in(received);
  uint64_t lines = 0, last_seq = 0;
  for (std::string l; std::getline(in, l); ++lines) {
    const uint64_t seq = json::parse(l).as_object().at("seq").to_number<uint64_t>();
    EXPECT_GT(seq, last_seq);
    last_seq = seq;
  }
  EXPECT_EQ(lines, s.records);
  EXPECT_EQ(s.write_errors, 0u);
}

TEST(Journal, ARecordLargerThanTheWholeBufferIsDropped) {
  JournalConfig cfg{true, temp_file("tiny").string()};
  cfg.max_pending_bytes = 16;
  std::string error;
  auto j = Journal::open(cfg, &error);
  ASSERT_NE(j, nullptr);
  j->finish(finish(1));
  EXPECT_EQ(j->stats().records, 0u);
  EXPECT_EQ(j->stats().dropped, 1u);
  j.reset();
  std::filesystem::remove(cfg.path);
}

TEST(Journal, ConcurrentWritersKeepEveryLineWhole) {
  const auto path = temp_file("concurrent");
  JournalConfig cfg{true, path.string()};
  cfg.flush_interval = std::chrono::milliseconds(1);
  std::string error;
  auto j = Journal::open(cfg, &error);
  ASSERT_NE(j, nullptr);
  Fixture fx;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        const uint64_t seq = j->next_seq();
        j->start(fx.start(seq));
        j->finish(finish(seq));
      }
    });
  }
  for (auto& t : threads) t.join();
  j.reset();
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 4000u);
  size_t starts = 0;
  for (const auto& l : lines) {
    const json::object o = json::parse(l).as_object();
    starts += o.at("event").as_string() == "start";
  }
  EXPECT_EQ(starts, 2000u);
  std::filesystem::remove(path);
}

TEST(Journal, StderrModeWritesPlainJsonLines) {
  Fixture fx;
  testing::internal::CaptureStderr();
  {
    std::string error;
    auto j = Journal::open(JournalConfig{true, ""}, &error);
    ASSERT_NE(j, nullptr) << error;
    j->start(fx.start(j->next_seq()));
    j->finish(finish(1));
  }
  const std::string err = testing::internal::GetCapturedStderr();
  std::istringstream in(err);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 2u) << err;
  EXPECT_EQ(json::parse(lines[0]).as_object().at("event").as_string(), "start");
  EXPECT_EQ(json::parse(lines[1]).as_object().at("event").as_string(), "finish");
  EXPECT_EQ(json::parse(lines[1]).as_object().at("v").as_int64(), 18);
}

}  // namespace
}  // namespace ramjet::observe
