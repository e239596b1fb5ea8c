#include "metrics/prom_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace ramjet::metrics {
namespace {

struct Got {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value;
};

PromTextResult parse(std::string_view text, std::vector<Got>& out, PromTextLimits limits = {}) {
  return parse_prom_text(text, limits, [&](const PromSample& s) {
    Got g{std::string(s.name), {}, s.value};
    for (const PromLabel& l : s.labels) g.labels.emplace_back(std::string(l.name), std::string(l.value));
    out.push_back(std::move(g));
  });
}

PromTextError error_of(std::string_view text, PromTextLimits limits = {}) {
  std::vector<Got> out;
  return parse(text, out, limits).error;
}

TEST(PromText, ReadsSamplesWithAndWithoutLabelsAndSkipsCommentsAndBlankLines) {
  std::vector<Got> got;
  auto r = parse(
      "# HELP vllm:num_requests_running Number of requests.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3\n"
      "\n"
      "   \n"
      "up 1\n"
      "# a free comment\n"
      "# EOF\n",
      got);
  ASSERT_TRUE(r.ok()) << prom_text_error_label(r.error) << " at " << r.line;
  EXPECT_EQ(r.samples, 2u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].name, "vllm:num_requests_running");
  ASSERT_EQ(got[0].labels.size(), 2u);
  EXPECT_EQ(got[0].labels[0], (std::pair<std::string, std::string>{"model_name", "m"}));
  EXPECT_EQ(got[0].labels[1], (std::pair<std::string, std::string>{"engine", "0"}));
  EXPECT_EQ(got[0].value, 3);
  EXPECT_EQ(got[1].name, "up");
  EXPECT_TRUE(got[1].labels.empty());
}

TEST(PromText, UnescapesBackslashQuoteAndNewlineInLabelValues) {
  std::vector<Got> got;
  ASSERT_TRUE(parse(R"(m{a="x\\y",b="say \"hi\"",c="l1\nl2",d=""} 1)", got).ok());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].labels[0].second, "x\\y");
  EXPECT_EQ(got[0].labels[1].second, "say \"hi\"");
  EXPECT_EQ(got[0].labels[2].second, "l1\nl2");
  EXPECT_EQ(got[0].labels[3].second, "");
}

TEST(PromText, LabelViewsStayValidWhenSeveralValuesNeedUnescaping) {
  std::vector<Got> got;
  std::string line = "m{";
  for (int i = 0; i < 20; ++i) line += "l" + std::to_string(i) + "=\"v\\\\" + std::string(i * 10, 'x') + "\",";
  line += "} 1";
  ASSERT_TRUE(parse(line, got).ok());
  ASSERT_EQ(got[0].labels.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(got[0].labels[i].second, "v\\" + std::string(i * 10, 'x')) << i;
}

TEST(PromText, AcceptsTrailingCommaBlanksAroundLabelsCrlfAndATimestamp) {
  std::vector<Got> got;
  auto r = parse("m { a = \"1\" , b=\"2\", } 4.5 1700000000000\r\nn{} 2\r\n", got);
  ASSERT_TRUE(r.ok()) << prom_text_error_label(r.error);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].labels.size(), 2u);
  EXPECT_EQ(got[0].value, 4.5);
  EXPECT_EQ(got[1].value, 2);
}

TEST(PromText, ReadsGoFloatSpellings) {
  std::vector<Got> got;
  ASSERT_TRUE(parse("a 1e3\nb -2.5E-1\nc +Inf\nd -Inf\ne NaN\nf 0\ng 1.7976931348623157e+308\nh 1e999\ni +7\n", got).ok());
  ASSERT_EQ(got.size(), 9u);
  EXPECT_EQ(got[0].value, 1000);
  EXPECT_EQ(got[1].value, -0.25);
  EXPECT_TRUE(std::isinf(got[2].value) && got[2].value > 0);
  EXPECT_TRUE(std::isinf(got[3].value) && got[3].value < 0);
  EXPECT_TRUE(std::isnan(got[4].value));
  EXPECT_EQ(got[5].value, 0);
  EXPECT_TRUE(std::isinf(got[7].value));
  EXPECT_EQ(got[8].value, 7);
}

TEST(PromText, MalformedSamplesAreTypedErrorsWithTheirLine) {
  struct Case {
    std::string_view text;
    PromTextError want;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"9m 1", PromTextError::kBadName},
           {"m-x 1", PromTextError::kBadName},
           {"m{9a=\"x\"} 1", PromTextError::kBadName},
           {"m{a:b=\"x\"} 1", PromTextError::kBadLabels},
           {"m{a=x} 1", PromTextError::kBadLabels},
           {"m{a=\"x} 1", PromTextError::kBadLabels},
           {"m{a=\"x\" b=\"y\"} 1", PromTextError::kBadLabels},
           {"m{a=\"\\t\"} 1", PromTextError::kBadLabels},
           {"m{a} 1", PromTextError::kBadLabels},
           {"m{a=\"x\"", PromTextError::kBadLabels},
           {"m", PromTextError::kBadValue},
           {"m{} ", PromTextError::kBadValue},
           {"m one", PromTextError::kBadValue},
           {"m 0x10", PromTextError::kBadValue},
           {"m --1", PromTextError::kBadValue},
           {"m 1 12.5", PromTextError::kBadTimestamp},
           {"m 1 2 3", PromTextError::kTrailingText},
       }) {
    std::vector<Got> got;
    auto r = parse(std::string("ok 1\n") + std::string(c.text) + "\nafter 2\n", got);
    EXPECT_EQ(r.error, c.want) << c.text << ": got " << prom_text_error_label(r.error);
    EXPECT_EQ(r.line, 2u) << c.text;
    EXPECT_EQ(r.samples, 1u) << c.text << ": samples before the bad line are delivered, none after";
  }
}

TEST(PromText, ATextOverTheByteLimitIsRefusedBeforeParsing) {
  PromTextLimits l;
  l.max_bytes = 10;
  std::vector<Got> got;
  auto r = parse("a 1\nb 2\nc 3\n", got, l);
  EXPECT_EQ(r.error, PromTextError::kTooLarge);
  EXPECT_TRUE(got.empty());
  l.max_bytes = 12;
  EXPECT_EQ(error_of("a 1\nb 2\nc 3\n", l), PromTextError::kNone);
}

TEST(PromText, ALineOverTheLineLimitIsRefusedEvenInAComment) {
  PromTextLimits l;
  l.max_line = 8;
  EXPECT_EQ(error_of("a 1\n# " + std::string(20, 'x') + "\n", l), PromTextError::kLineTooLong);
  EXPECT_EQ(error_of("a{b=\"cdefgh\"} 1\n", l), PromTextError::kLineTooLong);
  EXPECT_EQ(error_of("abcd 123\n", l), PromTextError::kNone);  // exactly the limit
}

TEST(PromText, MoreSamplesThanAllowedIsAnErrorAtTheFirstExtraSample) {
  PromTextLimits l;
  l.max_samples = 2;
  std::vector<Got> got;
  auto r = parse("a 1\n# c\nb 2\nc 3\n", got, l);
  EXPECT_EQ(r.error, PromTextError::kTooManySamples);
  EXPECT_EQ(r.line, 4u);
  EXPECT_EQ(got.size(), 2u);
}

TEST(PromText, MoreLabelsThanAllowedIsAnError) {
  PromTextLimits l;
  l.max_labels = 2;
  EXPECT_EQ(error_of("m{a=\"1\",b=\"2\"} 1", l), PromTextError::kNone);
  EXPECT_EQ(error_of("m{a=\"1\",b=\"2\",c=\"3\"} 1", l), PromTextError::kTooManyLabels);
}

TEST(PromText, AnEmptyTextHasNoSamples) {
  std::vector<Got> got;
  auto r = parse("", got);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.samples, 0u);
}

TEST(PromText, ErrorLabelsAreDistinctSnakeCase) {
  std::vector<std::string_view> seen;
  for (int e = 0; e <= static_cast<int>(PromTextError::kTrailingText); ++e) {
    std::string_view l = prom_text_error_label(static_cast<PromTextError>(e));
    EXPECT_EQ(std::find(seen.begin(), seen.end(), l), seen.end()) << l;
    EXPECT_EQ(l.find_first_not_of("abcdefghijklmnopqrstuvwxyz_"), std::string_view::npos) << l;
    seen.push_back(l);
  }
}

}  // namespace
}  // namespace ramjet::metrics
