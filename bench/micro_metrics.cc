// Microbenchmarks for observe/metrics: what metrics cost.
//
//  * BM_RenderMetrics/64: one GET /metrics with 64 upstreams — every writer ramjet registers
//    (data plane, fleet, router, engine scrape with every engine reporting) rendered into one
//    text, as the metrics listener does per scrape. Target < 5 ms.
//  * BM_RequestMetricUpdates*: every metric update forward.cc and finish_usage make for one
//    request, in the same order and with the same arguments (ProxyMetrics counters, gauges and
//    histograms; no I/O, no routing, no parsing): a non-streaming JSON request, and an SSE
//    request relayed in 10 batches (8 events, the usage chunk, [DONE]). "_New" is only the updates added with the observability
//    work (count_route, count_upstream_response, observe_usage). Compare with ramjet's CPU time
//    per proxied request (docs/benchmarks.md, "Metrics") for the cost share.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>
#include <vector>

#include "cache/index/approx_index.h"
#include "common/clock.h"
#include "upstream/engine_stats.h"
#include "metrics/metrics.h"
#include "request/route/router.h"
#include "request/stream/metrics.h"
#include "upstream/fleet.h"

namespace {

using namespace ramjet;

std::vector<config::UpstreamUrl> urls(size_t n) {
  std::vector<config::UpstreamUrl> out;
  for (size_t i = 0; i < n; ++i) out.push_back({"engine-" + std::to_string(i), 8000, ""});
  return out;
}

void BM_RenderMetrics(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const auto u = urls(n);
  const Clock& clock = SteadyClock::instance();
  upstream::Fleet fleet(u, clock, 30000);
  cache::ApproxIndex index(n);
  route::SingleFlight single_flight(n, route::SingleFlightConfig{}, clock);
  std::vector<route::Profile> profiles(n, route::Profile::kStandard);
  for (size_t i = 0; i < n; i += 2) profiles[i] = route::Profile::kMtp;
  route::ApproxOverlap approx(index);
  route::Router router(route::make_policy("prefix", route::RouteConfig{}), fleet, {&approx}, single_flight, profiles);
  request::ProxyMetrics proxy(n);
  proxy.set_profiles([&router](size_t i) { return router.profile(i); });
  upstream::EngineScrapeConfig sc;
  sc.engines = u;
  upstream::EngineScraper scraper(sc);
  // A process that has served traffic: several status codes seen, every histogram non-empty,
  // every engine reporting its gauges.
  for (unsigned code : {200u, 400u, 404u, 499u, 502u}) {
    for (int s = 0; s < 3; ++s) proxy.count_request(request::Endpoint::kChat, static_cast<request::StreamKind>(s), code);
  }
  for (size_t i = 0; i < n; ++i) {
    proxy.count_upstream_response(i, 200);
    upstream::EngineSample sample;
    sample.ok = true;
    sample.running = 3;
    sample.waiting = 1;
    sample.kv_usage = 0.4;
    sample.prefix_queries = 1000;
    sample.prefix_hits = 600;
    scraper.record(i, sample, {});
  }
  metrics::Registry registry;
  registry.add([&](metrics::Exposition& x) { proxy.write(x); });
  registry.add([&](metrics::Exposition& x) { fleet.write_metrics(x); });
  registry.add([&](metrics::Exposition& x) { router.write_metrics(x); });
  registry.add([&](metrics::Exposition& x) { scraper.write_metrics(x); });
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = registry.render();
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(BM_RenderMetrics)->Arg(1)->Arg(8)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);

// The winner's terms as a two-engine prefix decision produces them.
route::Routed routed_two_engines() {
  route::Routed r;
  r.decision.outcome = route::Outcome::kOverlap;
  for (size_t i = 0; i < 2; ++i) {
    route::CandidateTerms c;
    c.ordinal = i;
    c.eligible = true;
    c.overlap = i == 0 ? 12 : 0;
    c.affinity = i == 0 ? 12 : 0;
    c.profile = i == 0 ? route::Profile::kMtp : route::Profile::kStandard;
    r.decision.ranked.push_back(c);
  }
  return r;
}

request::Usage usage() {
  request::Usage u;
  u.prompt_tokens = 1200;
  u.cached_tokens = 1024;
  u.completion_tokens = 200;
  u.finish_reason = "stop";
  return u;
}

// Everything forward() + finish_usage() update for one request (see forward.cc), `batches`
// relay writes, `sse` with a first-token observation.
void one_request(request::ProxyMetrics& m, const route::Routed& routed, const request::Usage& u, int batches, bool sse,
                 int64_t t) {
  using request::Endpoint;
  const size_t ep = request::ep_index(Endpoint::kChat);
  m.inflight.add(1);
  m.request_body_bytes.inc(2048);                                       // prepare_exchange
  m.route_decisions[static_cast<size_t>(routed.decision.outcome)].inc();  // forward
  const int64_t was_open = m.route_fail_open.get();
  m.route_fail_open.set(0);
  benchmark::DoNotOptimize(was_open);
  m.count_route(routed, &routed.decision.ranked.front(), true);
  m.count_upstream_response(0, 200);
  for (int b = 0; b < batches; ++b) m.response_body_bytes.inc(180);
  if (sse) m.ttft.observe(0.120);                                       // account_pieces
  m.usage_parse_failures.inc(0);                                       // finish_usage
  m.prompt_tokens.inc(*u.prompt_tokens);
  m.cached_prompt_tokens.inc(*u.cached_tokens);
  m.completion_tokens.inc(*u.completion_tokens);
  m.finish_reasons[ep][0].inc();
  m.cache_requests[ep][1].inc();
  if (sse) m.decode_rate.observe(66.0);
  m.observe_usage(Endpoint::kChat, u, t, sse ? t + 120'000'000 : 0, t + 3'000'000'000);
  m.request_duration.observe(3.0);
  m.count_request(Endpoint::kChat, sse ? request::StreamKind::kTrue : request::StreamKind::kFalse, 200);
  m.inflight.sub(1);
}

request::ProxyMetrics& shared_metrics() {
  static request::ProxyMetrics m(2);  // shared by the benchmark threads, as by the io threads
  return m;
}

void BM_RequestMetricUpdatesJson(benchmark::State& state) {
  request::ProxyMetrics& m = shared_metrics();
  const route::Routed routed = routed_two_engines();
  const request::Usage u = usage();
  int64_t t = 1;
  for (auto _ : state) one_request(m, routed, u, 1, false, t++);
}
BENCHMARK(BM_RequestMetricUpdatesJson)->Threads(1)->Threads(2);

void BM_RequestMetricUpdatesSse(benchmark::State& state) {
  request::ProxyMetrics& m = shared_metrics();
  const route::Routed routed = routed_two_engines();
  const request::Usage u = usage();
  int64_t t = 1;
  for (auto _ : state) one_request(m, routed, u, 10, true, t++);
}
BENCHMARK(BM_RequestMetricUpdatesSse)->Threads(1)->Threads(2);

void BM_RequestMetricUpdatesSse_New(benchmark::State& state) {
  request::ProxyMetrics& m = shared_metrics();
  const route::Routed routed = routed_two_engines();
  const request::Usage u = usage();
  int64_t t = 1;
  for (auto _ : state) {
    m.count_route(routed, &routed.decision.ranked.front(), true);
    m.count_upstream_response(0, 200);
    m.observe_usage(request::Endpoint::kChat, u, t, t + 120'000'000, t + 3'000'000'000);
    ++t;
  }
}
BENCHMARK(BM_RequestMetricUpdatesSse_New)->Threads(1)->Threads(2);

}  // namespace
