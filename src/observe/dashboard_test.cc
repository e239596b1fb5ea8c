#include "observe/dashboard.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include <atomic>

namespace ramjet::observe {
namespace {

const std::vector<double> kDecode = {1, 2, 5, 10, 15, 20, 30, 40, 50, 60, 80, 100, 120, 160, 200, 240};
const std::vector<double> kTtft = {0.1, 0.2, 0.4, 0.8, 1.6};

BucketCounts counts(std::vector<uint64_t> c, uint64_t overflow = 0) {
  BucketCounts b;
  b.counts = std::move(c);
  for (uint64_t v : b.counts) b.total += v;
  b.total += overflow;
  return b;
}

TEST(BucketQuantile, InterpolatesInsideTheBucketHoldingTheRank) {
  // 10 observations in (0.1, 0.2], 10 in (0.2, 0.4].
  BucketCounts b = counts({0, 10, 10, 0, 0});
  EXPECT_DOUBLE_EQ(*bucket_quantile(kTtft, b, 0.5), 0.2);
  EXPECT_DOUBLE_EQ(*bucket_quantile(kTtft, b, 0.25), 0.15);
  EXPECT_DOUBLE_EQ(*bucket_quantile(kTtft, b, 0.75), 0.3);
  EXPECT_DOUBLE_EQ(*bucket_quantile(kTtft, b, 0.95), 0.2 + 0.2 * 0.9);
  // q = 0: the lower bound of the first non-empty bucket; the first bucket starts at 0.
  EXPECT_DOUBLE_EQ(*bucket_quantile(kTtft, b, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(*bucket_quantile(kTtft, counts({4, 0, 0, 0, 0}), 0.5), 0.05);
}

TEST(BucketQuantile, EmptyAndOverflow) {
  EXPECT_FALSE(bucket_quantile(kTtft, counts({0, 0, 0, 0, 0}), 0.5).has_value());
  EXPECT_FALSE(bucket_quantile({}, counts({1}), 0.5).has_value());
  // 1 finite observation, 9 above the last bound: p50 answers the highest finite bound.
  EXPECT_DOUBLE_EQ(*bucket_quantile(kTtft, counts({1, 0, 0, 0, 0}, 9), 0.5), 1.6);
  // A total read before the buckets (lagging) never makes the finite ones look like overflow.
  BucketCounts lag = counts({0, 10, 0, 0, 0});
  lag.total = 7;
  EXPECT_DOUBLE_EQ(*bucket_quantile(kTtft, lag, 1.0), 0.2);
}

TEST(BucketQuantile, DecodeRateP50AndP05FromDeltas) {
  // Cumulative per-bucket counts 30 s ago and now: in between, 19 streams decoded at 40..50 tok/s
  // and 1 at 5..10 tok/s. Older observations (before the window) must not count.
  BucketCounts then = counts({0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  BucketCounts now = counts({0, 0, 0, 101, 0, 0, 0, 0, 19, 0, 0, 0, 0, 0, 0, 0});
  BucketCounts d = bucket_delta(now, then);
  EXPECT_EQ(d.total, 20u);
  EXPECT_EQ(d.counts[3], 1u);
  EXPECT_EQ(d.counts[8], 19u);
  // p50: rank 10 of 20 → 9 of the 19 in (40, 50].
  EXPECT_NEAR(*bucket_quantile(kDecode, d, 0.5), 40 + 10 * 9.0 / 19, 1e-9);
  // p05: rank 1 → the single slow stream, at the top of (5, 10].
  EXPECT_DOUBLE_EQ(*bucket_quantile(kDecode, d, 0.05), 10);
}

TEST(BucketDelta, ACounterThatWentBackCountsZero) {
  BucketCounts d = bucket_delta(counts({5, 1}), counts({2, 3}));
  EXPECT_EQ(d.counts, (std::vector<uint64_t>{3, 0}));
  EXPECT_EQ(d.total, 1u);
  EXPECT_EQ(bucket_delta(counts({1, 1}), counts({4, 4})).total, 0u);  // a restart: nothing, not a wrap
}

TEST(CounterRate, PerSecond) {
  EXPECT_DOUBLE_EQ(*counter_rate(1300, 1000, 1000), 300);
  EXPECT_DOUBLE_EQ(*counter_rate(1300, 1000, 30000), 10);
  EXPECT_DOUBLE_EQ(*counter_rate(10, 20, 1000), 0);  // reset
  EXPECT_FALSE(counter_rate(10, 0, 0).has_value());
  EXPECT_FALSE(counter_rate(10, 0, -5).has_value());
}

TEST(Ring, BoundedOldestFirst) {
  Ring<int> r(3);
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.ago(0), nullptr);
  for (int i = 1; i <= 5; ++i) r.push(i);
  EXPECT_EQ(r.size(), 3u);
  EXPECT_EQ(r.at(0), 3);
  EXPECT_EQ(r.back(), 5);
  EXPECT_EQ(*r.ago(0), 5);
  EXPECT_EQ(*r.ago(2), 3);
  EXPECT_EQ(r.ago(3), nullptr);
}

TEST(HourStrip, BucketsByUnixHour) {
  const int64_t h = 3600000;
  const int64_t base = 1'800'000'000'000 - 1'800'000'000'000 % h;  // an hour boundary
  HourStrip s(24);
  s.add(base + 10, 5);
  s.add(base + h - 1, 7);
  s.add(base + h, 11);
  s.add(base + 3 * h + 5, 13);
  auto b = s.buckets(base + 3 * h + 100);
  ASSERT_EQ(b.size(), 24u);
  EXPECT_EQ(b[23].hour_start_ms, base + 3 * h);
  EXPECT_EQ(b[23].tokens, 13u);
  EXPECT_EQ(b[22].tokens, 0u);
  EXPECT_EQ(b[21].tokens, 11u);
  EXPECT_EQ(b[20].tokens, 12u);
  EXPECT_EQ(b[0].hour_start_ms, base - 20 * h);
  // 30 hours later the strip keeps only the last 24 (the old ones fall out of the window).
  for (int i = 0; i < 40; ++i) s.add(base + (4 + i) * h, 1);
  auto later = s.buckets(base + 43 * h);
  uint64_t sum = 0;
  for (auto& x : later) sum += x.tokens;
  EXPECT_EQ(sum, 24u);
}

// A synthetic workload driven through Dashboard::tick with an injected clock.
struct Sim {
  int64_t t = 1'800'000'000'000;
  Reading r;
  Sim(size_t engines) {
    r.decode_rate.counts.assign(kDecode.size(), 0);
    r.ttft.counts.assign(kTtft.size(), 0);
    r.engines.resize(engines);
    for (size_t e = 0; e < engines; ++e) {
      r.engines[e].profile = e % 2 ? "standard" : "mtp";
      r.engines[e].state = "healthy";
      upstream::EngineSample s;
      s.ok = true;
      s.running = 2;
      s.waiting = 0;
      s.kv_usage = 0.25 * static_cast<double>(e + 1);
      s.prefix_queries = 0;
      s.prefix_hits = 0;
      s.generation_tokens = 0;
      r.engines[e].scrape = s;
    }
  }
  Reading& next() {
    t += 1000;
    r.unix_ms = t;
    for (auto& e : r.engines) {
      if (e.scrape) e.scrape->unix_ms = t - 300;  // scraped a little before the tick
    }
    return r;
  }
};

upstream::GpuSample gpu(size_t engine, std::string device, std::optional<double> util, std::optional<double> power = {}) {
  upstream::GpuSample g;
  g.engine = engine;
  g.device = std::move(device);
  g.util_pct = util;
  g.power_w = power;
  return g;
}

DashboardConfig config() {
  DashboardConfig c;
  c.series_seconds = 60;
  c.window_s = 30;
  c.decode_bounds = kDecode;
  c.ttft_bounds = kTtft;
  return c;
}

TEST(Dashboard, TilesFromASteadyWorkload) {
  Dashboard d(config());
  Sim sim(2);
  for (int i = 0; i < 45; ++i) {
    Reading& r = sim.next();
    r.completion_tokens += 300;  // 300 tok/s
    r.prompt_tokens += 1000;
    r.cached_prompt_tokens += 750;  // 75 % cached (ramjet view)
    r.requests += 2;
    r.decode_rate.counts[8] += 2;  // every stream decodes at 40..50 tok/s
    r.decode_rate.total += 2;
    r.ttft.counts[1] += 2;         // TTFT 0.1..0.2 s
    r.ttft.total += 2;
    r.inflight = 7;
    for (auto& e : r.engines) {
      *e.scrape->prefix_queries += 500;
      *e.scrape->prefix_hits += 250;  // 50 % (engine view)
      *e.scrape->generation_tokens += 150;
      e.routed += 1;
    }
    d.tick(r);
  }
  Dashboard::Point p = d.latest();
  EXPECT_FLOAT_EQ(p.gen_tps, 300);
  EXPECT_FLOAT_EQ(p.gen_tps_30s, 300);
  EXPECT_FLOAT_EQ(p.req_rate, 2);
  EXPECT_FLOAT_EQ(p.inflight, 7);
  EXPECT_FLOAT_EQ(p.cache_hit_lb, 75);
  EXPECT_FLOAT_EQ(p.cache_hit_engine, 50);
  EXPECT_FLOAT_EQ(p.kv_usage, 0.375f);  // mean of 0.25 and 0.5
  EXPECT_FLOAT_EQ(p.stream_p50, 45);
  EXPECT_FLOAT_EQ(p.stream_p05, 40.5f);
  EXPECT_FLOAT_EQ(p.ttft_p95, 0.195f);
  EXPECT_TRUE(std::isnan(p.tpot_p95));  // not measured

  auto state = boost::json::parse(*d.state_json());
  EXPECT_EQ(state.at("tiles").at("gen_tps_30s").to_number<double>(), 300);
  EXPECT_EQ(state.at("total").as_int64(), 2);
  EXPECT_EQ(state.at("healthy").as_int64(), 2);
  const auto& e1 = state.at("engines").as_array().at(1);
  EXPECT_EQ(e1.at("profile").as_string(), "standard");
  EXPECT_EQ(e1.at("state").as_string(), "healthy");
  EXPECT_DOUBLE_EQ(e1.at("req_rate").to_number<double>(), 1);
  EXPECT_DOUBLE_EQ(e1.at("cache_hit").to_number<double>(), 50);
  EXPECT_DOUBLE_EQ(e1.at("gen_tps").to_number<double>(), 150);
  EXPECT_DOUBLE_EQ(e1.at("kv_usage").to_number<double>(), 0.5);
  // Tokens per hour: 45 ticks × 300, less the first (no previous reading to take a delta from).
  uint64_t sum = 0;
  for (const auto& h : state.at("hours").as_array()) sum += h.at("tokens").to_number<uint64_t>();
  EXPECT_EQ(sum, 44u * 300);
}

TEST(Dashboard, EngineDeltasStartAtTheFirstGoodScrapeInTheWindow) {
  Dashboard d(config());
  Sim sim(1);
  // The first 10 s the engine scrape fails (the engine was still starting); then 100 queries and
  // 80 hits a second. The 30 s window is not full of good scrapes yet, but the hit rate is known.
  for (int i = 0; i < 20; ++i) {
    Reading& r = sim.next();
    upstream::EngineSample& s = *r.engines[0].scrape;
    s.ok = i >= 10;
    if (s.ok) {
      *s.prefix_queries += 100;
      *s.prefix_hits += 80;
      *s.generation_tokens += 50;
    }
    d.tick(r);
  }
  auto state = boost::json::parse(*d.state_json());
  const auto& e0 = state.at("engines").as_array()[0];
  EXPECT_DOUBLE_EQ(e0.at("cache_hit").to_number<double>(), 80);
  EXPECT_DOUBLE_EQ(e0.at("gen_tps").to_number<double>(), 50);
  EXPECT_DOUBLE_EQ(state.at("tiles").at("cache_hit_engine").to_number<double>(), 80);
  // A scrape that did not advance (the same sample seen by two ticks) is not a zero rate.
  Reading& r = sim.next();
  r.engines[0].scrape->unix_ms -= 1000;
  d.tick(r);
  EXPECT_DOUBLE_EQ(boost::json::parse(*d.state_json()).at("engines").as_array()[0].at("gen_tps").to_number<double>(), 50);
}

TEST(Dashboard, QuantilesForgetObservationsOlderThanTheWindow) {
  Dashboard d(config());
  Sim sim(1);
  // 20 s of slow streams (5..10 tok/s), then 40 s of fast ones (100..120 tok/s).
  for (int i = 0; i < 60; ++i) {
    Reading& r = sim.next();
    r.decode_rate.counts[i < 20 ? 3 : 12] += 1;
    r.decode_rate.total += 1;
    d.tick(r);
  }
  EXPECT_FLOAT_EQ(d.latest().stream_p05, 101);  // the slow streams left the 30 s window
}

TEST(Dashboard, SeriesRingsAreBounded) {
  Dashboard d(config());  // 60 s of series
  Sim sim(3);
  for (int i = 0; i < 500; ++i) {
    Reading& r = sim.next();
    r.completion_tokens += 10;
    r.gpus = {gpu(0, "0", 50.0), gpu(2, "1", 75.0, 300.0)};
    d.tick(r);
  }
  auto s = boost::json::parse(d.series_json(900));
  EXPECT_EQ(s.at("t").as_array().size(), 60u);  // capped at the ring, not the ask
  EXPECT_EQ(s.at("gen_tps").as_array().size(), 60u);
  ASSERT_EQ(s.at("engines").as_array().size(), 3u);
  EXPECT_EQ(s.at("engines").as_array()[2].at("kv_usage").as_array().size(), 60u);
  ASSERT_EQ(s.at("gpus").as_array().size(), 2u);
  EXPECT_EQ(s.at("gpus").as_array()[1].at("engine").as_int64(), 2);
  EXPECT_EQ(s.at("gpus").as_array()[1].at("device").as_string(), "1");
  EXPECT_DOUBLE_EQ(s.at("gpus").as_array()[1].at("power").as_array().back().to_number<double>(), 300);
  auto w = boost::json::parse(d.series_json(10));
  EXPECT_EQ(w.at("t").as_array().size(), 10u);
  EXPECT_EQ(w.at("t").as_array().back().as_int64(), sim.t);
  EXPECT_EQ(w.at("hours").as_array().size(), 24u);
}

TEST(Dashboard, AGpuThatAppearsLaterIsAlignedOnTheNewestSample) {
  Dashboard d(config());
  Sim sim(1);
  for (int i = 0; i < 10; ++i) {
    Reading& r = sim.next();
    if (i >= 7) r.gpus = {gpu(0, "0", 10.0 * i)};
    d.tick(r);
  }
  auto s = boost::json::parse(d.series_json(10));
  const auto& util = s.at("gpus").as_array()[0].at("util").as_array();
  ASSERT_EQ(util.size(), 10u);
  EXPECT_TRUE(util[6].is_null());
  EXPECT_DOUBLE_EQ(util[7].to_number<double>(), 70);
  EXPECT_DOUBLE_EQ(util[9].to_number<double>(), 90);
}

TEST(Dashboard, FencedEngineAndFailOpen) {
  Dashboard d(config());
  Sim sim(2);
  d.tick(sim.next());
  Reading& r = sim.next();
  r.engines[0].state = "unhealthy";
  r.engines[1].state = "unhealthy";
  r.fail_open = true;
  r.engines[0].fail_open_dispatches = 3;
  r.engines[0].scrape->ok = false;  // a dead engine's scrape fails: no stale numbers
  d.tick(r);
  auto state = boost::json::parse(*d.state_json());
  EXPECT_TRUE(state.at("fail_open").as_bool());
  EXPECT_EQ(state.at("healthy").as_int64(), 0);
  const auto& e0 = state.at("engines").as_array()[0];
  EXPECT_EQ(e0.at("state").as_string(), "unhealthy");
  EXPECT_TRUE(e0.at("fail_open").as_bool());
  EXPECT_FALSE(e0.at("scrape_ok").as_bool());
  EXPECT_TRUE(e0.at("kv_usage").is_null());
  EXPECT_FALSE(state.at("engines").as_array()[1].at("fail_open").as_bool());
}

TEST(Dashboard, EachEnginesKvIndexStateIsReadAndShown) {
  DashboardSources src;
  src.fleet = [](Reading& r) {
    r.engines.resize(3);
    for (auto& e : r.engines) e.state = "healthy";
  };
  Reading without = read_sources(src, 1);  // no engine publishes KV events: nothing to show
  for (const auto& e : without.engines) EXPECT_TRUE(e.kv_index.empty());
  src.kv_index = [](size_t i) -> std::string_view { return i == 0 ? "trusted" : i == 1 ? "fenced" : "none"; };
  src.kv_source = [](size_t i) -> std::string_view { return i == 0 ? "companion" : i == 1 ? "events" : "none"; };
  Reading r = read_sources(src, 1'800'000'000'000);
  ASSERT_EQ(r.engines.size(), 3u);
  EXPECT_EQ(r.engines[1].kv_index, "fenced");
  EXPECT_EQ(r.engines[0].kv_source, "companion");

  Dashboard d(config());
  d.tick(without);
  auto before = boost::json::parse(*d.state_json());
  for (const auto& e : before.at("engines").as_array()) {
    EXPECT_TRUE(e.at("kv_index").is_null());
    EXPECT_TRUE(e.at("kv_source").is_null());
  }
  d.tick(r);
  auto state = boost::json::parse(*d.state_json());
  const auto& engines = state.at("engines").as_array();
  EXPECT_EQ(engines[0].at("kv_index").as_string(), "trusted");
  EXPECT_EQ(engines[1].at("kv_index").as_string(), "fenced");
  EXPECT_EQ(engines[1].at("state").as_string(), "healthy") << "a fenced index is not a fenced engine";
  EXPECT_EQ(engines[2].at("kv_index").as_string(), "none");
  EXPECT_EQ(engines[0].at("kv_source").as_string(), "companion");
  EXPECT_EQ(engines[1].at("kv_source").as_string(), "events");
  EXPECT_EQ(engines[2].at("kv_source").as_string(), "none");
  for (const auto& e : engines) EXPECT_FALSE(e.at("exact_withdrawn").as_bool());

  // Engine 0's predictions kept missing: its index stays trusted, its exact trust is withdrawn.
  src.exact_withdrawn = [](size_t i) { return i == 0; };
  d.tick(read_sources(src, 1'800'000'001'000));
  auto later = boost::json::parse(*d.state_json());
  const auto& e0 = later.at("engines").as_array()[0];
  EXPECT_EQ(e0.at("kv_index").as_string(), "trusted");
  EXPECT_TRUE(e0.at("exact_withdrawn").as_bool());
  EXPECT_FALSE(later.at("engines").as_array()[1].at("exact_withdrawn").as_bool());

  // The models each engine serves (several models behind one ramjet), "" while not known.
  EXPECT_EQ(later.at("engines").as_array()[0].at("models").as_string(), "");
  src.models = [](size_t i) -> std::string { return i == 2 ? "qwen3" : "llama, qwen3"; };
  d.tick(read_sources(src, 1'800'000'002'000));
  auto with_models = boost::json::parse(*d.state_json());
  EXPECT_EQ(with_models.at("engines").as_array()[0].at("models").as_string(), "llama, qwen3");
  EXPECT_EQ(with_models.at("engines").as_array()[2].at("models").as_string(), "qwen3");

  // The idle drain off: no state, nothing parked; on: each engine's, and how many are parked.
  EXPECT_TRUE(with_models.at("engines").as_array()[0].at("idle_drain").is_null());
  EXPECT_EQ(with_models.at("parked").as_int64(), 0);
  src.idle_drain = [](size_t i) -> std::string_view { return i == 1 ? "drained" : i == 2 ? "waking" : "warm"; };
  d.tick(read_sources(src, 1'800'000'003'000));
  auto parked = boost::json::parse(*d.state_json());
  EXPECT_EQ(parked.at("engines").as_array()[0].at("idle_drain").as_string(), "warm");
  EXPECT_EQ(parked.at("engines").as_array()[1].at("idle_drain").as_string(), "drained");
  EXPECT_EQ(parked.at("parked").as_int64(), 2);
}

TEST(Dashboard, ClientsAreBoundedAndWokenOnTickAndStop) {
  DashboardConfig c = config();
  c.max_sse_clients = 2;
  Dashboard d(c);
  std::atomic<int> woken{0};
  auto a = d.add_client([&] { ++woken; });
  auto b = d.add_client([&] { ++woken; });
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(d.add_client([] {}).has_value());
  Sim sim(1);
  d.tick(sim.next());
  EXPECT_EQ(woken.load(), 2);
  d.remove_client(*a);
  EXPECT_EQ(d.clients(), 1u);
  d.stop();
  EXPECT_EQ(woken.load(), 3);
  EXPECT_TRUE(d.stopped());
  EXPECT_FALSE(d.add_client([] {}).has_value());  // stopped: no new client
}

TEST(Dashboard, StateBeforeTheFirstTickIsAnEmptyObject) {
  Dashboard d(config());
  EXPECT_EQ(*d.state_json(), "{}");
  auto s = boost::json::parse(d.series_json(900));
  EXPECT_EQ(s.at("t").as_array().size(), 0u);
}

}  // namespace
}  // namespace ramjet::observe

namespace ramjet::observe {
namespace {

TEST(Dashboard, TheWaitingRoomsDepthIsShownOnlyWhenThereIsOne) {
  Dashboard d(config());
  Sim sim(2);
  d.tick(sim.next());
  EXPECT_TRUE(boost::json::parse(*d.state_json()).at("waiting").is_null());
  Reading& r = sim.next();
  r.waiting = 7;
  d.tick(r);
  EXPECT_EQ(boost::json::parse(*d.state_json()).at("waiting").as_int64(), 7);
}

}  // namespace
}  // namespace ramjet::observe
