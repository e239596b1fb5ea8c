#include "report.h"

#include <gtest/gtest.h>

namespace ramjet::bench {
namespace {

RunReport run(std::string label, std::string shape, std::vector<std::pair<double, double>> xs_tps) {
  RunReport r;
  r.label = std::move(label);
  r.target = "http://127.0.0.1:8000";
  r.workload = "shared-prefix apps=4";
  r.shape = std::move(shape);
  r.started_at = "2026-01-01T00:00:00Z";
  for (auto [x, tps] : xs_tps) {
    StepReport s;
    s.x = x;
    s.ok = 10;
    s.errors = 1;
    s.error_reasons["timeout"] = 1;
    s.elapsed_s = 2;
    s.output_tokens = 500;
    s.output_tok_s = tps;
    s.req_s = 5;
    s.ttft_p50_ms = 12.345;
    s.ttft_p95_ms = 250;
    s.ttft_p99_ms = 300;
    s.tpot_p50_ms = 8;
    s.tpot_p95_ms = 9.5;
    s.cached_pct = 87.5;
    s.engines = {{"0", 6}, {"1", 4}};
    r.steps.push_back(s);
  }
  return r;
}

TEST(FormatNumber, UsesFewerDecimalsForLargerValuesAndDashForNaN) {
  EXPECT_EQ(format_number(1234.56), "1235");
  EXPECT_EQ(format_number(12.345), "12.3");
  EXPECT_EQ(format_number(1.2345), "1.23");
  EXPECT_EQ(format_number(8), "8");
  EXPECT_EQ(format_number(kNaN), "-");
}

TEST(ReportJson, RoundTripsRunsIncludingMissingValues) {
  RunReport a = run("ramjet", "closed", {{1, 100}, {8, 700}});
  a.steps[0].tpot_p95_ms = kNaN;
  std::string text = runs_to_json_text({a});
  EXPECT_NE(text.find("\"format\":\"ramjet-bench/1\""), std::string::npos);
  EXPECT_NE(text.find("\"tpot_p95_ms\":null"), std::string::npos);
  auto back = runs_from_json_text(text);
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->size(), 1u);
  const RunReport& b = (*back)[0];
  EXPECT_EQ(b.label, "ramjet");
  EXPECT_EQ(b.shape, "closed");
  ASSERT_EQ(b.steps.size(), 2u);
  EXPECT_EQ(b.steps[1].x, 8);
  EXPECT_EQ(b.steps[1].output_tok_s, 700);
  EXPECT_EQ(b.steps[1].engines.at("0"), 6u);
  EXPECT_EQ(b.steps[1].error_reasons.at("timeout"), 1u);
  EXPECT_TRUE(std::isnan(b.steps[0].tpot_p95_ms));
  EXPECT_EQ(b.steps[0].cached_pct, 87.5);
}

TEST(ReportJson, ATimelineRoundTripsAndIsPrintedUnderItsStep) {
  RunReport a = run("ramjet", "closed", {{8, 700}});
  a.steps[0].timeline = {Window{0, 10, 0, 80, 20, 40}, Window{2, 4, 3, kNaN, 30, 90}};
  auto back = runs_from_json_text(runs_to_json_text({a}));
  ASSERT_TRUE(back) << back.error().message;
  const auto& t = (*back)[0].steps[0].timeline;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].t_s, 2);
  EXPECT_EQ(t[1].errors, 3u);
  EXPECT_TRUE(std::isnan(t[1].cached_pct));
  EXPECT_EQ(t[0].cached_pct, 80);
  const std::string md = render_markdown(*back);
  EXPECT_NE(md.find("| from s | ok | errors | cached % | TTFT p50 ms | TTFT p95 ms |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2 | 4 | 3 | - | 30 | 90 |"), std::string::npos) << md;
}

TEST(ReportJson, RejectsFilesWithoutRunsOrWithBadShapes) {
  EXPECT_FALSE(runs_from_json_text("{}"));
  EXPECT_FALSE(runs_from_json_text("not json"));
  EXPECT_FALSE(runs_from_json_text("{\"runs\":[{\"shape\":\"weird\",\"steps\":[]}]}"));
  EXPECT_FALSE(runs_from_json_text("{\"runs\":[{\"shape\":\"open\",\"steps\":[{\"ok\":1}]}]}"));
}

TEST(Markdown, OneRowPerStepWithEveryColumn) {
  std::string md = render_markdown({run("ramjet", "closed", {{8, 659}, {32, 2069}})});
  EXPECT_NE(md.find("### ramjet"), std::string::npos);
  EXPECT_NE(md.find("| concurrency | ok | errors | out tok/s |"), std::string::npos);
  EXPECT_NE(md.find("| 32 | 10 | 1 (timeout 1) | 2069 | 5 | 12.3 | 250 | 300 | 8 | 9.50 | 87.5 | 0:6 1:4 |"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("Comparison"), std::string::npos);
}

TEST(Markdown, TwoRunsGetAComparisonWithRatiosAgainstTheFirst) {
  std::string md = render_markdown({run("load-blind", "closed", {{8, 636}, {32, 1805}}),
                                    run("ramjet", "closed", {{8, 659}, {32, 2069}, {64, 2726}})});
  EXPECT_NE(md.find("### Comparison (concurrency)"), std::string::npos);
  EXPECT_NE(md.find("| 32 | 1805 | 2069 (1.15×) | 250 | 250 | 87.5 | 87.5 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 64 | - | 2726 | - | 250 | - | 87.5 |"), std::string::npos) << md;
}

TEST(Markdown, LabelsCannotBreakTheTable) {
  std::string md = render_markdown({run("a|b", "open", {{2, 10}})});
  EXPECT_NE(md.find("### a\\|b"), std::string::npos);
  EXPECT_NE(md.find("| rate (req/s) |"), std::string::npos);
}

TEST(Svg, DrawsTwoPanelsPerShapeWithOneLinePerRunAndEscapesText) {
  std::string svg = render_svg({run("ramjet", "closed", {{1, 10}, {8, 70}, {32, 200}}),
                                run("blind<&>", "closed", {{1, 9}, {8, 50}, {32, 120}}),
                                run("poisson", "open", {{2, 30}})});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  auto count = [&](std::string_view needle) {
    size_t n = 0;
    for (size_t p = svg.find(needle); p != std::string::npos; p = svg.find(needle, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("output tok/s</text>"), 2u);  // closed row + open row
  EXPECT_EQ(count("TTFT p95 (ms)</text>"), 2u);
  EXPECT_EQ(count("<path "), 6u);               // 2 closed runs x 2 panels + 1 open run x 2
  EXPECT_NE(svg.find("blind&lt;&amp;&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("blind<&>"), std::string::npos);
  EXPECT_NE(svg.find(">rate (req/s)</text>"), std::string::npos);
  EXPECT_EQ(count(" L"), 8u);  // each closed line joins 3 points (2 segments), in 2 panels x 2 runs
}

TEST(Svg, AMissingPointBreaksTheLine) {
  RunReport r = run("gap", "closed", {{1, 10}, {2, 20}, {4, 30}});
  r.steps[1].output_tok_s = kNaN;
  std::string svg = render_svg({r});
  size_t p = svg.find("<path d=\"");
  ASSERT_NE(p, std::string::npos);
  std::string d = svg.substr(p + 9, svg.find('"', p + 9) - p - 9);
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 2);
  EXPECT_EQ(std::count(d.begin(), d.end(), 'L'), 0);
}

TEST(Svg, EmptyInputIsStillAValidDocument) {
  std::string svg = render_svg({});
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace ramjet::bench
