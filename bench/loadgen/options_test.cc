#include "options.h"

#include <gtest/gtest.h>

namespace ramjet::bench {
namespace {

Result<Options> parse(std::vector<std::string_view> a) { return parse_options(a); }

TEST(Options, DefaultsToAClosedLoopSharedPrefixRunOfTenSeconds) {
  auto o = parse({"--target", "http://127.0.0.1:8000"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->workload, "shared-prefix");
  EXPECT_EQ(o->shape(), "closed");
  EXPECT_EQ(o->concurrency, (std::vector<uint32_t>{8}));
  EXPECT_EQ(o->duration_s, 10);
  EXPECT_TRUE(o->stream);
  EXPECT_EQ(o->label, "127.0.0.1:8000");
  EXPECT_FALSE(o->ignore_eos);
}

TEST(Options, ParsesListsAndEqualsSyntax) {
  auto o = parse({"--target=http://h:1", "--concurrency", "1,8,32", "--max-tokens=128,1024",
                  "--requests", "100", "--no-stream", "--threads", "2", "--label", "x"});
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->concurrency, (std::vector<uint32_t>{1, 8, 32}));
  EXPECT_EQ(o->max_tokens, (std::vector<uint32_t>{128, 1024}));
  EXPECT_EQ(o->requests_per_step, 100u);
  EXPECT_EQ(o->duration_s, 0);  // --requests alone bounds the step
  EXPECT_FALSE(o->stream);
  EXPECT_EQ(o->threads, 2u);
}

TEST(Options, RateMakesAnOpenLoopAndTraceDefaultsToTimestampReplayWithIgnoreEos) {
  auto o = parse({"--target", "http://h:1", "--rate", "0.5,2", "--workload", "unique"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->shape(), "open");
  EXPECT_EQ(o->rate, (std::vector<double>{0.5, 2}));
  auto t = parse({"--target", "http://h:1", "--workload", "trace", "--trace", "t.jsonl"});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->shape(), "trace");
  EXPECT_TRUE(t->ignore_eos);
  EXPECT_EQ(t->duration_s, 0);
  auto n = parse({"--target", "http://h:1", "--workload", "trace", "--trace", "t", "--no-ignore-eos"});
  EXPECT_FALSE(n->ignore_eos);
}

TEST(Options, SessionsBecomeTheDefaultConcurrency) {
  auto o = parse({"--target", "http://h:1", "--sessions", "32"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->concurrency, (std::vector<uint32_t>{32}));
}

TEST(Options, OracleNeedsEnginesAndIsLabelledOracle) {
  EXPECT_FALSE(parse({"--target", "oracle"}));
  auto o = parse({"--target", "oracle", "--engines", "http://a:1,http://b:2"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->engines.size(), 2u);
  EXPECT_EQ(o->label, "oracle");
}

TEST(Options, ReportsEveryProblemAtOnce) {
  auto o = parse({"--concurrency", "0", "--rate", "x", "--bogus", "--threads", "999", "stray",
                  "--workload", "trace", "--append"});
  ASSERT_FALSE(o);
  const std::string& m = o.error().message;
  for (const char* needle : {"--concurrency", "--rate", "unknown option --bogus", "--threads",
                             "unexpected argument 'stray'", "--target is required",
                             "--workload trace needs --trace", "--append needs --out-json"})
    EXPECT_NE(m.find(needle), std::string::npos) << needle << "\n" << m;
}

TEST(Options, MissingValueAndExclusiveShapesAreErrors) {
  EXPECT_FALSE(parse({"--target"}));
  EXPECT_FALSE(parse({"--target", "http://h:1", "--concurrency", "1", "--rate", "1"}));
  EXPECT_FALSE(parse({"--target", "http://h:1", "--quiet=1"}));
  EXPECT_FALSE(parse({"--target", "http://h:1", "--duration", "5", "--warmup", "5"}));
}

TEST(Options, HelpIsGeneratedFromTheTable) {
  auto o = parse({"--help"});
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->help);
  std::string h = help_text();
  for (const char* name : {"--target", "--engines", "--workload", "--apps", "--prefix-kib", "--sessions",
                           "--turns", "--prompt-kib", "--trace", "--time-scale", "--max-tokens",
                           "--concurrency", "--rate", "--duration", "--requests", "--threads",
                           "--no-stream", "--label", "--out-json", "--append", "--out-md", "--out-svg"})
    EXPECT_NE(h.find(name), std::string::npos) << name;
  EXPECT_NE(h.find("compare"), std::string::npos);
}

TEST(Options, VersionNeedsNoTarget) {
  auto o = parse({"--version"});
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->version);
  EXPECT_NE(help_text().find("--version"), std::string::npos);
}

TEST(CompareOptions, TakesFilesAndOutputs) {
  auto c = parse_compare({"a.json", "b.json", "--out-md", "x.md", "--out-svg", "x.svg"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->inputs.size(), 2u);
  EXPECT_EQ(c->out_md, "x.md");
  EXPECT_EQ(c->out_svg, "x.svg");
  EXPECT_FALSE(parse_compare({}));
  EXPECT_FALSE(parse_compare({"a.json", "--out-md"}));
}

}  // namespace
}  // namespace ramjet::bench
