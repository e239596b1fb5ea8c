#include "observe/metric_docs.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "observe/journal.h"
#include "metrics/prom_text.h"
#include "request/stream/metrics.h"

namespace ramjet::observe {
namespace {

struct Header {
  std::string name, type, help;
};

// The `# HELP` / `# TYPE` pairs of a rendering, in order, and the label keys (le excluded) of
// the samples under each.
struct Rendered {
  std::vector<Header> headers;
  std::map<std::string, std::set<std::string>> label_keys;
  std::map<std::string, size_t> samples;
  std::vector<std::string> problems;
};

Rendered read(const std::string& text) {
  Rendered r;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# HELP ")) {
      std::string rest = line.substr(7);
      r.headers.push_back({rest.substr(0, rest.find(' ')), "", rest.substr(rest.find(' ') + 1)});
      continue;
    }
    if (line.starts_with("# TYPE ")) {
      std::string rest = line.substr(7);
      if (r.headers.empty() || r.headers.back().name != rest.substr(0, rest.find(' '))) {
        r.problems.push_back("TYPE without its HELP: " + line);
      } else {
        r.headers.back().type = rest.substr(rest.find(' ') + 1);
      }
      continue;
    }
    const auto result = metrics::parse_prom_text(line, metrics::PromTextLimits{}, [&](const metrics::PromSample& s) {
      if (r.headers.empty()) {
        r.problems.push_back("sample before any family: " + std::string(s.name));
        return;
      }
      const Header& h = r.headers.back();
      std::string base(s.name);
      if (h.type == "histogram") {
        for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
          if (base.ends_with(suffix)) base = base.substr(0, base.size() - suffix.size());
        }
      }
      if (base != h.name) r.problems.push_back("sample " + std::string(s.name) + " under family " + h.name);
      auto& keys = r.label_keys[h.name];
      for (const metrics::PromLabel& l : s.labels) {
        if (l.name != "le") keys.insert(std::string(l.name));
      }
      ++r.samples[h.name];
    });
    if (!result.ok()) r.problems.push_back("does not parse: " + line);
  }
  return r;
}

std::set<std::string> keys_of(std::string_view labels) {
  std::set<std::string> out;
  while (!labels.empty()) {
    const size_t comma = labels.find(',');
    out.insert(std::string(labels.substr(0, comma)));
    labels.remove_prefix(comma == std::string_view::npos ? labels.size() : comma + 1);
  }
  return out;
}

std::string journal_rendering() {
  const std::string path = std::filesystem::temp_directory_path() / ("rj-docs-journal-" + std::to_string(::getpid()));
  std::string error;
  auto j = Journal::open(JournalConfig{.enabled = true, .path = path}, &error);
  EXPECT_TRUE(j) << error;
  metrics::Exposition x;
  if (j) j->write_metrics(x);
  j.reset();
  std::filesystem::remove(path);
  return x.take();
}

void check_section(const MetricSection& s, const std::string& text) {
  SCOPED_TRACE(std::string(s.title));
  const Rendered r = read(text);
  for (const std::string& p : r.problems) ADD_FAILURE() << p;
  ASSERT_EQ(r.headers.size(), s.families.size()) << "the writer's families and its list differ";
  for (size_t i = 0; i < s.families.size(); ++i) {
    const metrics::Family& f = s.families[i];
    SCOPED_TRACE(std::string(f.name));
    EXPECT_EQ(r.headers[i].name, f.name);
    EXPECT_EQ(r.headers[i].type, metrics::metric_kind_name(f.kind));
    EXPECT_EQ(r.headers[i].help, f.help);
    auto keys = r.label_keys.find(std::string(f.name));
    if (keys != r.label_keys.end()) {
      EXPECT_EQ(keys->second, keys_of(f.labels)) << "label keys differ from the list's";
    }
  }
}

TEST(MetricDocs, EveryWriterWritesExactlyTheFamiliesItsListDeclaresInOrder) {
  const auto sections = metric_sections();
  auto rendered = render_sections_for_docs();
  ASSERT_EQ(rendered.size(), sections.size());
  rendered.back() = journal_rendering();
  for (size_t i = 0; i < sections.size(); ++i) check_section(sections[i], rendered[i]);
}

TEST(MetricDocs, ClosedLabelSetsAreExportedFromTheStart) {
  // Families whose samples depend on what happened (an open label, or an engine's own value).
  const std::set<std::string_view> open = {"ramjet_requests_total", "ramjet_engine_requests_running",
                                           "ramjet_engine_requests_waiting", "ramjet_engine_kv_cache_usage",
                                           "ramjet_engine_prefix_cache_hit_ratio",
                                           "ramjet_upstream_dp_rank",  // (only ordinals that are ranks)
                                           "ramjet_route_index_horizon",  // (only engines with a horizon)
                                           "ramjet_route_decode_seconds_per_token",  // (only engines with a fit)
                                           "ramjet_route_decode_seconds_per_token_per_request"};
  const auto sections = metric_sections();
  auto rendered = render_sections_for_docs();
  rendered.back() = journal_rendering();
  for (size_t i = 0; i < sections.size(); ++i) {
    const Rendered r = read(rendered[i]);
    for (const metrics::Family& f : sections[i].families) {
      if (open.contains(f.name)) continue;
      EXPECT_GT(r.samples.count(std::string(f.name)) ? r.samples.at(std::string(f.name)) : 0u, 0u)
          << f.name << " has no sample before anything happened";
    }
  }
}

TEST(MetricDocs, NamesAreUniqueRamjetPrefixedAndCountersEndInTotal) {
  std::set<std::string_view> names;
  for (const MetricSection& s : metric_sections()) {
    for (const metrics::Family& f : s.families) {
      EXPECT_TRUE(names.insert(f.name).second) << f.name << " is declared twice";
      EXPECT_TRUE(f.name.starts_with("ramjet_")) << f.name;
      EXPECT_EQ(f.kind == metrics::MetricKind::kCounter, f.name.ends_with("_total")) << f.name;
      EXPECT_FALSE(f.help.empty()) << f.name;
      EXPECT_EQ(f.help.find('\n'), std::string_view::npos) << f.name;
      EXPECT_EQ(f.labels.find(' '), std::string_view::npos) << f.name << ": labels are comma-separated names";
      EXPECT_FALSE(keys_of(f.labels).contains("le")) << f.name;
    }
  }
}

TEST(MetricDocs, DocsMetricsMdIsUpToDate) {
  const std::string path = std::string(RAMJET_SOURCE_DIR) + "/docs/metrics.md";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << path << " is missing; generate it with "
                         << "`build/dev/src/app/ramjet --help-metrics > docs/metrics.md`";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string on_disk = ss.str();
  const std::string expected = metrics_markdown();
  if (on_disk == expected) return;
  std::istringstream a(on_disk), b(expected);
  std::string la, lb;
  int line = 0;
  while (true) {
    ++line;
    bool more_a = static_cast<bool>(std::getline(a, la));
    bool more_b = static_cast<bool>(std::getline(b, lb));
    if (!more_a && !more_b) break;
    if (la != lb || more_a != more_b) break;
  }
  FAIL() << "docs/metrics.md is out of date with the metric family lists (first difference at line " << line
         << ").\n  on disk:   " << la << "\n  generated: " << lb
         << "\nRegenerate with `build/dev/src/app/ramjet --help-metrics > docs/metrics.md`.";
}

// ---------------------------------------------------------------------------- ProxyMetrics

std::string render(const request::ProxyMetrics& m) {
  metrics::Exposition x;
  m.write(x);
  return x.take();
}

bool has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(ProxyMetrics, UpstreamResponsesAreCountedByStatusClassPerOrdinal) {
  request::ProxyMetrics m(2);
  m.count_upstream_response(1, 200);
  m.count_upstream_response(1, 204);
  m.count_upstream_response(0, 503);
  m.count_upstream_response(0, 404);
  m.count_upstream_response(0, 101);
  m.count_upstream_response(0, 999);  // nonsense: counted as 5xx
  m.count_upstream_response(7, 200);  // no such upstream: ignored
  const std::string t = render(m);
  EXPECT_TRUE(has(t, R"(ramjet_upstream_requests_total{upstream="1",class="2xx"} 2)")) << t;
  EXPECT_TRUE(has(t, R"(ramjet_upstream_requests_total{upstream="0",class="5xx"} 2)"));
  EXPECT_TRUE(has(t, R"(ramjet_upstream_requests_total{upstream="0",class="4xx"} 1)"));
  EXPECT_TRUE(has(t, R"(ramjet_upstream_requests_total{upstream="0",class="1xx"} 1)"));
  EXPECT_TRUE(has(t, R"(ramjet_upstream_requests_total{upstream="1",class="3xx"} 0)"));
}

TEST(ProxyMetrics, TheInfoGaugeMapsEachOrdinalToItsDeclaredProfile) {
  request::ProxyMetrics m(3);
  EXPECT_TRUE(has(render(m), R"(ramjet_upstream_info{upstream="2",profile="none"} 1)"));
  m.set_profiles([](size_t i) { return i == 1 ? route::Profile::kStandard : route::Profile::kMtp; });
  const std::string t = render(m);
  EXPECT_TRUE(has(t, R"(ramjet_upstream_info{upstream="0",profile="mtp"} 1)")) << t;
  EXPECT_TRUE(has(t, R"(ramjet_upstream_info{upstream="1",profile="standard"} 1)"));
  EXPECT_TRUE(has(t, R"(ramjet_upstream_info{upstream="2",profile="mtp"} 1)"));
}

route::CandidateTerms candidate(size_t ordinal, uint32_t overlap, uint32_t affinity, uint32_t single_flight,
                                route::Profile p) {
  route::CandidateTerms c;
  c.ordinal = ordinal;
  c.eligible = true;
  c.overlap = overlap;
  c.affinity = affinity;
  c.single_flight = single_flight;
  c.profile = p;
  return c;
}

TEST(ProxyMetrics, TheWinnersProfileOverlapAndAffinityAreObservedAndFollowersCounted) {
  request::ProxyMetrics m(2);
  route::Routed warm;
  warm.decision.ranked = {candidate(1, 40, 32, 0, route::Profile::kMtp), candidate(0, 0, 0, 0, route::Profile::kStandard)};
  m.count_route(warm, &warm.decision.ranked[0], true);
  route::Routed follower;
  follower.decision.ranked = {candidate(0, 0, 5, 5, route::Profile::kStandard), candidate(1, 0, 0, 0, route::Profile::kMtp)};
  m.count_route(follower, &follower.decision.ranked[0], true);
  route::Routed not_prefix;
  not_prefix.decision.ranked = {candidate(0, 0, 0, 0, route::Profile::kNone)};
  m.count_route(not_prefix, &not_prefix.decision.ranked[0], false);
  m.count_route(not_prefix, nullptr, true);  // nothing can serve: nothing counted
  const std::string t = render(m);
  EXPECT_TRUE(has(t, R"(ramjet_route_profile_choices_total{profile="mtp"} 1)")) << t;
  EXPECT_TRUE(has(t, R"(ramjet_route_profile_choices_total{profile="standard"} 1)"));
  EXPECT_TRUE(has(t, R"(ramjet_route_profile_choices_total{profile="none"} 1)"));
  EXPECT_TRUE(has(t, "ramjet_route_single_flight_followers_total 1"));
  EXPECT_TRUE(has(t, "ramjet_route_overlap_blocks_count 2")) << "only prefix-routed decisions";
  EXPECT_TRUE(has(t, R"(ramjet_route_overlap_blocks_bucket{le="0"} 1)"));
  EXPECT_TRUE(has(t, R"(ramjet_route_overlap_blocks_bucket{le="32"} 1)"));
  EXPECT_TRUE(has(t, R"(ramjet_route_overlap_blocks_bucket{le="64"} 2)"));
  EXPECT_TRUE(has(t, "ramjet_route_overlap_blocks_sum 40"));
  EXPECT_TRUE(has(t, R"(ramjet_route_affinity_blocks_bucket{le="4"} 0)"));
  EXPECT_TRUE(has(t, R"(ramjet_route_affinity_blocks_bucket{le="8"} 1)"));
  EXPECT_TRUE(has(t, R"(ramjet_route_affinity_blocks_bucket{le="32"} 2)"));
}

TEST(ProxyMetrics, UsageGivesTpotTokensAndTtftByCacheOutcomeForStreamedResponses) {
  request::ProxyMetrics m(1);
  request::Usage u;
  u.prompt_tokens = 1000;
  u.cached_tokens = 512;
  u.completion_tokens = 11;
  const int64_t s = 1'000'000'000;
  // Streamed: first token after 0.2 s, 10 more tokens in 0.5 s -> 0.05 s per output token.
  m.observe_usage(request::Endpoint::kChat, u, s, s + 200'000'000, s + 700'000'000);
  // Not streamed: token counts only.
  m.observe_usage(request::Endpoint::kCompletions, u, s, 0, s + 700'000'000);
  const std::string t = render(m);
  EXPECT_TRUE(has(t, "ramjet_time_per_output_token_seconds_count 1")) << t;
  EXPECT_TRUE(has(t, R"(ramjet_time_per_output_token_seconds_bucket{le="0.04"} 0)"));
  EXPECT_TRUE(has(t, R"(ramjet_time_per_output_token_seconds_bucket{le="0.05"} 1)"));
  EXPECT_TRUE(has(t, "ramjet_context_tokens_count 2"));
  EXPECT_TRUE(has(t, R"(ramjet_context_tokens_bucket{le="1024"} 2)"));
  EXPECT_TRUE(has(t, "ramjet_output_tokens_count 2"));
  EXPECT_TRUE(has(t, R"(ramjet_cache_ttft_seconds_count{endpoint="chat",outcome="partial"} 1)")) << t;
  EXPECT_TRUE(has(t, R"(ramjet_cache_ttft_seconds_count{endpoint="chat",outcome="cold"} 0)"));
  EXPECT_TRUE(has(t, R"(ramjet_cache_ttft_seconds_count{endpoint="completions",outcome="partial"} 0)"));
  // One completion token: no TPOT.
  u.completion_tokens = 1;
  m.observe_usage(request::Endpoint::kChat, u, s, s + 200'000'000, s + 700'000'000);
  EXPECT_TRUE(has(render(m), "ramjet_time_per_output_token_seconds_count 1"));
}

}  // namespace
}  // namespace ramjet::observe
