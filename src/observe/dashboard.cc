#include "observe/dashboard.h"

#include <algorithm>
#include <numeric>

#include "observe/decision_log.h"

namespace ramjet::observe {

namespace {

constexpr size_t kMaxGpus = 1024;   // devices with a series ring (bounded memory)
constexpr int64_t kEngineRateWindowS = 5;

std::optional<double> opt(float v) {
  if (std::isnan(v)) return std::nullopt;
  return v;
}
float f(std::optional<double> v) { return v ? static_cast<float>(*v) : kNoValue; }

void num(std::string& out, std::optional<double> v) {
  if (v) {
    append_json_number(out, *v);
  } else {
    out += "null";
  }
}
void numf(std::string& out, float v) { num(out, opt(v)); }
void key(std::string& out, std::string_view k) {
  out += '"';
  out += k;
  out += "\":";
}

// Difference of two optional cumulative values (nullopt when either is missing or it went back).
std::optional<double> odelta(std::optional<double> now, std::optional<double> then) {
  if (!now || !then || *now < *then) return std::nullopt;
  return *now - *then;
}

std::optional<double> pct(std::optional<double> part, std::optional<double> whole) {
  if (!part || !whole || *whole <= 0) return std::nullopt;
  return std::clamp(100.0 * *part / *whole, 0.0, 100.0);
}

const upstream::EngineSample* scraped(const Reading& r, size_t e) {
  if (e >= r.engines.size() || !r.engines[e].scrape || !r.engines[e].scrape->ok) return nullptr;
  return &*r.engines[e].scrape;
}

}  // namespace

// ---------------------------------------------------------------------------- pure math

BucketCounts bucket_delta(const BucketCounts& now, const BucketCounts& then) {
  BucketCounts d;
  d.counts.resize(now.counts.size());
  for (size_t i = 0; i < now.counts.size(); ++i) {
    uint64_t t = i < then.counts.size() ? then.counts[i] : 0;
    d.counts[i] = now.counts[i] >= t ? now.counts[i] - t : 0;
  }
  d.total = now.total >= then.total ? now.total - then.total : 0;
  return d;
}

std::optional<double> bucket_quantile(const std::vector<double>& bounds, const BucketCounts& b, double q) {
  if (bounds.empty()) return std::nullopt;
  const size_t n = std::min(bounds.size(), b.counts.size());
  uint64_t finite = 0;
  for (size_t i = 0; i < n; ++i) finite += b.counts[i];
  // The overflow (+Inf) bucket: `total` counts every observation, the buckets only finite ones
  // (the two are read one after the other, so `total` may lag a little: never below finite).
  const uint64_t total = std::max(b.total, finite);
  if (total == 0) return std::nullopt;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(total);
  uint64_t cum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (b.counts[i] == 0) continue;
    const uint64_t before = cum;
    cum += b.counts[i];
    if (static_cast<double>(cum) >= rank) {
      const double lower = i == 0 ? 0.0 : bounds[i - 1];
      const double upper = bounds[i];
      const double in_bucket = (rank - static_cast<double>(before)) / static_cast<double>(b.counts[i]);
      return lower + (upper - lower) * std::clamp(in_bucket, 0.0, 1.0);
    }
  }
  return bounds[n ? n - 1 : 0];  // the rank falls in the overflow bucket
}

std::optional<double> counter_rate(uint64_t now, uint64_t then, int64_t dt_ms) {
  if (dt_ms <= 0) return std::nullopt;
  if (now < then) return 0.0;
  return static_cast<double>(now - then) * 1000.0 / static_cast<double>(dt_ms);
}

void HourStrip::add(int64_t unix_ms, uint64_t tokens) {
  const int64_t hour = unix_ms - ((unix_ms % 3600000) + 3600000) % 3600000;
  if (!kept_.empty() && kept_.back().hour_start_ms == hour) {
    kept_.back().tokens += tokens;
    return;
  }
  if (!kept_.empty() && kept_.back().hour_start_ms > hour) return;  // the clock went back: drop
  kept_.push_back(Bucket{hour, tokens});
  if (kept_.size() > hours_) kept_.erase(kept_.begin(), kept_.end() - static_cast<ptrdiff_t>(hours_));
}

std::vector<HourStrip::Bucket> HourStrip::buckets(int64_t now_unix_ms) const {
  const int64_t last = now_unix_ms - ((now_unix_ms % 3600000) + 3600000) % 3600000;
  std::vector<Bucket> out(hours_);
  for (size_t i = 0; i < hours_; ++i) {
    out[i].hour_start_ms = last - static_cast<int64_t>(hours_ - 1 - i) * 3600000;
  }
  for (const Bucket& b : kept_) {
    const int64_t idx = static_cast<int64_t>(hours_) - 1 - (last - b.hour_start_ms) / 3600000;
    if (idx >= 0 && idx < static_cast<int64_t>(hours_)) out[static_cast<size_t>(idx)].tokens = b.tokens;
  }
  return out;
}

// ---------------------------------------------------------------------------- the dashboard

Dashboard::Dashboard(DashboardConfig config)
    : config_(std::move(config)),
      readings_(static_cast<size_t>(std::max<int64_t>(config_.window_s, kEngineRateWindowS)) + 1),
      points_(config_.series_seconds),
      hours_(config_.hours),
      state_(std::make_shared<const std::string>("{}")) {}

Dashboard::Point Dashboard::latest() const {
  std::lock_guard lock(mu_);
  return points_.empty() ? Point{} : points_.back();
}

uint64_t Dashboard::ticks() const {
  std::lock_guard lock(mu_);
  return ticks_;
}

void Dashboard::tick(const Reading& r) {
  {
    std::lock_guard lock(mu_);
    readings_.push(r);
    // The reading `window_s` ticks ago (or the oldest kept), and the one `k` ticks ago.
    auto back = [&](int64_t k) -> const Reading* {
      size_t a = static_cast<size_t>(std::max<int64_t>(k, 1));
      if (readings_.size() < 2) return nullptr;
      return readings_.ago(std::min(a, readings_.size() - 1));
    };
    const Reading* win = back(config_.window_s);
    const Reading* fast = back(kEngineRateWindowS);
    const Reading* prev = readings_.size() >= 2 ? readings_.ago(1) : nullptr;
    // Engine counters come from the engine scrape, which has its own interval and may have
    // failed: a delta over a window starts at the oldest scrape in the window that succeeded
    // and was taken before the newest one.
    auto first_scrape = [&](size_t e, int64_t window) -> const upstream::EngineSample* {
      const upstream::EngineSample* now = scraped(r, e);
      if (!now) return nullptr;
      for (size_t a = std::min<size_t>(static_cast<size_t>(window), readings_.size() - 1); a >= 1; --a) {
        const upstream::EngineSample* then = scraped(*readings_.ago(a), e);
        if (then && then->unix_ms < now->unix_ms) return then;
      }
      return nullptr;
    };

    Point p;
    p.t = r.unix_ms;
    p.inflight = static_cast<float>(r.inflight);
    if (prev) {
      p.gen_tps = f(counter_rate(r.completion_tokens, prev->completion_tokens, r.unix_ms - prev->unix_ms));
      hours_.add(r.unix_ms, r.completion_tokens >= prev->completion_tokens
                                ? r.completion_tokens - prev->completion_tokens
                                : 0);
    }
    if (win) {
      const int64_t dt = r.unix_ms - win->unix_ms;
      p.gen_tps_30s = f(counter_rate(r.completion_tokens, win->completion_tokens, dt));
      p.prompt_tps = f(counter_rate(r.prompt_tokens, win->prompt_tokens, dt));
      p.req_rate = f(counter_rate(r.requests, win->requests, dt));
      const BucketCounts dd = bucket_delta(r.decode_rate, win->decode_rate);
      p.stream_p50 = f(bucket_quantile(config_.decode_bounds, dd, 0.50));
      p.stream_p05 = f(bucket_quantile(config_.decode_bounds, dd, 0.05));
      const BucketCounts td = bucket_delta(r.ttft, win->ttft);
      p.ttft_p50 = f(bucket_quantile(config_.ttft_bounds, td, 0.50));
      p.ttft_p95 = f(bucket_quantile(config_.ttft_bounds, td, 0.95));
      if (!config_.tpot_bounds.empty()) {
        p.tpot_p95 = f(bucket_quantile(config_.tpot_bounds, bucket_delta(r.tpot, win->tpot), 0.95));
      }
      const double prompt = r.prompt_tokens >= win->prompt_tokens ? double(r.prompt_tokens - win->prompt_tokens) : 0;
      const double cached =
          r.cached_prompt_tokens >= win->cached_prompt_tokens ? double(r.cached_prompt_tokens - win->cached_prompt_tokens) : 0;
      p.cache_hit_lb = f(pct(cached, prompt));
      double hits = 0, queries = 0;
      bool any = false;
      for (size_t e = 0; e < r.engines.size(); ++e) {
        const upstream::EngineSample* now = scraped(r, e);
        const upstream::EngineSample* then = first_scrape(e, config_.window_s);
        if (!now || !then) continue;
        auto h = odelta(now->prefix_hits, then->prefix_hits);
        auto q = odelta(now->prefix_queries, then->prefix_queries);
        if (!h || !q) continue;
        hits += *h;
        queries += *q;
        any = true;
      }
      if (any) p.cache_hit_engine = f(pct(hits, queries));
    }
    double kv_sum = 0;
    size_t kv_n = 0;
    for (size_t e = 0; e < r.engines.size(); ++e) {
      if (const upstream::EngineSample* s = scraped(r, e); s && s->kv_usage) {
        kv_sum += *s->kv_usage;
        ++kv_n;
      }
    }
    if (kv_n) p.kv_usage = static_cast<float>(kv_sum / static_cast<double>(kv_n));
    points_.push(p);

    // Per engine (the fleet's size is fixed, but stay correct if it changes).
    if (engine_points_.size() != r.engines.size()) {
      engine_points_.resize(r.engines.size(), Ring<EnginePoint>(config_.series_seconds));
    }
    for (size_t e = 0; e < r.engines.size(); ++e) {
      const EngineReading& er = r.engines[e];
      EnginePoint ep;
      ep.inflight = static_cast<float>(er.inflight);
      ep.load_units = static_cast<float>(er.load_units);
      if (const upstream::EngineSample* s = scraped(r, e)) {
        ep.running = f(s->running);
        ep.waiting = f(s->waiting);
        ep.kv_usage = f(s->kv_usage);
      }
      if (fast && e < fast->engines.size()) {
        const int64_t dt = r.unix_ms - fast->unix_ms;
        ep.req_rate = f(counter_rate(er.routed, fast->engines[e].routed, dt));
        const upstream::EngineSample* now = scraped(r, e);
        const upstream::EngineSample* then = first_scrape(e, kEngineRateWindowS);
        if (now && then) {
          if (auto g = odelta(now->generation_tokens, then->generation_tokens)) {
            ep.gen_tps = static_cast<float>(*g * 1000.0 / static_cast<double>(now->unix_ms - then->unix_ms));
          }
        }
      }
      if (win && e < win->engines.size()) {
        const upstream::EngineSample* now = scraped(r, e);
        const upstream::EngineSample* then = first_scrape(e, config_.window_s);
        if (now && then) {
          ep.cache_hit = f(pct(odelta(now->prefix_hits, then->prefix_hits),
                               odelta(now->prefix_queries, then->prefix_queries)));
        }
      }
      engine_points_[e].push(ep);
    }

    // Per GPU device: a ring per (engine, device) seen, up to kMaxGpus.
    std::vector<bool> seen(gpu_keys_.size(), false);
    for (const upstream::GpuSample& g : r.gpus) {
      const std::string k = std::to_string(g.engine) + "/" + g.device;
      auto it = std::find(gpu_keys_.begin(), gpu_keys_.end(), k);
      size_t i = static_cast<size_t>(it - gpu_keys_.begin());
      if (it == gpu_keys_.end()) {
        if (gpu_keys_.size() >= kMaxGpus) continue;
        gpu_keys_.push_back(k);
        // Align the new ring with the others: pad it with empty points.
        gpu_points_.emplace_back(config_.series_seconds);
        for (size_t n = 1; n < points_.size(); ++n) gpu_points_.back().push(GpuPoint{});
        seen.push_back(false);
      }
      seen[i] = true;
      gpu_points_[i].push(GpuPoint{f(g.util_pct), f(g.power_w)});
    }
    for (size_t i = 0; i < seen.size(); ++i) {
      if (!seen[i]) gpu_points_[i].push(GpuPoint{});
    }
    ++ticks_;
    render_state_locked(r);
  }
  wake_all();
}

void Dashboard::render_state_locked(const Reading& r) {
  const Point& p = points_.back();
  std::string out;
  out.reserve(1024 + r.engines.size() * 320 + r.gpus.size() * 240);
  out += "{\"t\":";
  out += std::to_string(r.unix_ms);
  out += ",\"interval_ms\":1000,\"window_s\":";
  out += std::to_string(config_.window_s);
  out += ",\"fail_open\":";
  out += r.fail_open ? "true" : "false";
  out += ",\"waiting\":";
  out += r.waiting >= 0 ? std::to_string(r.waiting) : "null";
  size_t healthy = 0, total = 0, parked = 0;
  for (const auto& e : r.engines) {
    healthy += e.state == "healthy";
    total += e.state != "vacant" && e.state != "leaving";
    parked += !e.idle_drain.empty() && e.idle_drain != "warm" && e.state != "vacant";
  }
  out += ",\"healthy\":" + std::to_string(healthy) + ",\"total\":" + std::to_string(total);
  out += ",\"parked\":" + std::to_string(parked);
  out += ",\"tiles\":{";
  key(out, "gen_tps_30s"), numf(out, p.gen_tps_30s);
  out += ',', key(out, "gen_tps"), numf(out, p.gen_tps);
  out += ',', key(out, "stream_p50"), numf(out, p.stream_p50);
  out += ',', key(out, "stream_p05"), numf(out, p.stream_p05);
  out += ',', key(out, "ttft_p50"), numf(out, p.ttft_p50);
  out += ',', key(out, "ttft_p95"), numf(out, p.ttft_p95);
  out += ',', key(out, "tpot_p95"), numf(out, p.tpot_p95);
  out += ',', key(out, "inflight"), numf(out, p.inflight);
  out += ',', key(out, "req_rate"), numf(out, p.req_rate);
  out += ',', key(out, "prompt_tps"), numf(out, p.prompt_tps);
  out += ',', key(out, "kv_usage"), numf(out, p.kv_usage);
  out += ',', key(out, "cache_hit_lb"), numf(out, p.cache_hit_lb);
  out += ',', key(out, "cache_hit_engine"), numf(out, p.cache_hit_engine);
  out += ',', key(out, "completion_tokens"), out += std::to_string(r.completion_tokens);
  out += "},\"engines\":[";
  for (size_t e = 0; e < r.engines.size(); ++e) {
    const EngineReading& er = r.engines[e];
    const EnginePoint& ep = engine_points_[e].back();
    // Fail-open traffic reached this engine within the window.
    const Reading* win = readings_.size() >= 2 ? readings_.ago(std::min<size_t>(config_.window_s, readings_.size() - 1)) : nullptr;
    const bool fo = r.fail_open && win && e < win->engines.size() &&
                    er.fail_open_dispatches > win->engines[e].fail_open_dispatches;
    if (er.state == "vacant") continue;  // an ordinal no engine holds now
    if (out.back() != '[') out += ',';
    out += "{\"ordinal\":" + std::to_string(e);
    out += ",\"profile\":";
    append_json_string(out, er.profile);
    out += ",\"state\":";
    append_json_string(out, er.state);
    out += fo ? ",\"fail_open\":true" : ",\"fail_open\":false";
    out += ",\"inflight\":" + std::to_string(er.inflight);
    out += ",\"load_units\":" + std::to_string(er.load_units);
    out += ",\"routed\":" + std::to_string(er.routed);
    out += ",\"kv_index\":";
    if (er.kv_index.empty())
      out += "null";
    else
      append_json_string(out, er.kv_index);
    out += ",\"kv_source\":";
    if (er.kv_source.empty())
      out += "null";
    else
      append_json_string(out, er.kv_source);
    out += er.exact_withdrawn ? ",\"exact_withdrawn\":true" : ",\"exact_withdrawn\":false";
    out += ",\"models\":";
    append_json_string(out, er.models);
    out += ",\"idle_drain\":";
    if (er.idle_drain.empty())
      out += "null";
    else
      append_json_string(out, er.idle_drain);
    out += ',', key(out, "req_rate"), numf(out, ep.req_rate);
    out += ',', key(out, "running"), numf(out, ep.running);
    out += ',', key(out, "waiting"), numf(out, ep.waiting);
    out += ',', key(out, "kv_usage"), numf(out, ep.kv_usage);
    out += ',', key(out, "cache_hit"), numf(out, ep.cache_hit);
    out += ',', key(out, "gen_tps"), numf(out, ep.gen_tps);
    const bool ok = er.scrape && er.scrape->ok;
    out += ok ? ",\"scrape_ok\":true" : ",\"scrape_ok\":false";
    out += ',', key(out, "scrape_age_ms");
    if (er.scrape && er.scrape->unix_ms > 0) {
      out += std::to_string(std::max<int64_t>(0, r.unix_ms - er.scrape->unix_ms));
    } else {
      out += "null";
    }
    out += '}';
  }
  out += "],\"gpus\":[";
  bool first = true;
  for (const upstream::GpuSample& g : r.gpus) {
    if (!first) out += ',';
    first = false;
    out += "{\"engine\":";
    out += g.engine == SIZE_MAX ? std::string("null") : std::to_string(g.engine);
    out += ",\"device\":";
    append_json_string(out, g.device);
    out += ',', key(out, "util"), num(out, g.util_pct);
    out += ',', key(out, "fb_used_mib"), num(out, g.fb_used_mib);
    out += ',', key(out, "fb_free_mib"), num(out, g.fb_free_mib);
    out += ',', key(out, "power_w"), num(out, g.power_w);
    out += ',', key(out, "temp_c"), num(out, g.temp_c);
    out += ',', key(out, "sm_clock_mhz"), num(out, g.sm_clock_mhz);
    out += ',', key(out, "mem_clock_mhz"), num(out, g.mem_clock_mhz);
    out += '}';
  }
  out += "],\"hours\":[";
  auto hb = hours_.buckets(r.unix_ms);
  for (size_t i = 0; i < hb.size(); ++i) {
    if (i) out += ',';
    out += "{\"t\":" + std::to_string(hb[i].hour_start_ms) + ",\"tokens\":" + std::to_string(hb[i].tokens) + "}";
  }
  out += "]}";
  state_ = std::make_shared<const std::string>(std::move(out));
}

std::shared_ptr<const std::string> Dashboard::state_json() const {
  std::lock_guard lock(mu_);
  return state_;
}

std::string Dashboard::series_json(int64_t window_s) const {
  std::lock_guard lock(mu_);
  window_s = std::clamp<int64_t>(window_s, 1, static_cast<int64_t>(points_.capacity()));
  const size_t n = std::min(points_.size(), static_cast<size_t>(window_s));
  const size_t from = points_.size() - n;
  std::string out;
  out.reserve(64 + n * (14 * 8 + engine_points_.size() * 40 + gpu_points_.size() * 12));
  auto column = [&](std::string_view name, auto get) {
    out += ',';
    key(out, name);
    out += '[';
    for (size_t i = 0; i < n; ++i) {
      if (i) out += ',';
      numf(out, get(points_.at(from + i)));
    }
    out += ']';
  };
  out += "{\"interval_ms\":1000,\"window_s\":" + std::to_string(window_s) + ",\"t\":[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ',';
    out += std::to_string(points_.at(from + i).t);
  }
  out += ']';
  column("gen_tps", [](const Point& p) { return p.gen_tps; });
  column("gen_tps_30s", [](const Point& p) { return p.gen_tps_30s; });
  column("prompt_tps", [](const Point& p) { return p.prompt_tps; });
  column("stream_p50", [](const Point& p) { return p.stream_p50; });
  column("stream_p05", [](const Point& p) { return p.stream_p05; });
  column("ttft_p50", [](const Point& p) { return p.ttft_p50; });
  column("ttft_p95", [](const Point& p) { return p.ttft_p95; });
  column("tpot_p95", [](const Point& p) { return p.tpot_p95; });
  column("inflight", [](const Point& p) { return p.inflight; });
  column("req_rate", [](const Point& p) { return p.req_rate; });
  column("cache_hit_lb", [](const Point& p) { return p.cache_hit_lb; });
  column("cache_hit_engine", [](const Point& p) { return p.cache_hit_engine; });
  column("kv_usage", [](const Point& p) { return p.kv_usage; });

  // Engine and GPU rings were created with the points ring or padded to it, but may be shorter
  // (created later): align them on the newest sample.
  auto ring_column = [&](std::string_view name, const auto& ring, auto get) {
    key(out, name);
    out += '[';
    const size_t have = ring.size();
    for (size_t i = 0; i < n; ++i) {
      if (i) out += ',';
      const size_t ago = n - 1 - i;
      if (ago < have) {
        numf(out, get(ring.at(have - 1 - ago)));
      } else {
        out += "null";
      }
    }
    out += ']';
  };
  out += ",\"engines\":[";
  for (size_t e = 0; e < engine_points_.size(); ++e) {
    const auto& ring = engine_points_[e];
    if (e) out += ',';
    out += "{\"ordinal\":" + std::to_string(e) + ',';
    ring_column("running", ring, [](const EnginePoint& p) { return p.running; });
    out += ',';
    ring_column("waiting", ring, [](const EnginePoint& p) { return p.waiting; });
    out += ',';
    ring_column("kv_usage", ring, [](const EnginePoint& p) { return p.kv_usage; });
    out += ',';
    ring_column("req_rate", ring, [](const EnginePoint& p) { return p.req_rate; });
    out += ',';
    ring_column("inflight", ring, [](const EnginePoint& p) { return p.inflight; });
    out += ',';
    ring_column("load_units", ring, [](const EnginePoint& p) { return p.load_units; });
    out += ',';
    ring_column("cache_hit", ring, [](const EnginePoint& p) { return p.cache_hit; });
    out += ',';
    ring_column("gen_tps", ring, [](const EnginePoint& p) { return p.gen_tps; });
    out += '}';
  }
  out += "],\"gpus\":[";
  for (size_t i = 0; i < gpu_points_.size(); ++i) {
    if (i) out += ',';
    const std::string& k = gpu_keys_[i];
    const size_t slash = k.find('/');
    out += "{\"engine\":";
    const std::string eng = k.substr(0, slash);
    out += eng == std::to_string(SIZE_MAX) ? std::string("null") : eng;
    out += ",\"device\":";
    append_json_string(out, std::string_view(k).substr(slash + 1));
    out += ',';
    ring_column("util", gpu_points_[i], [](const GpuPoint& p) { return p.util; });
    out += ',';
    ring_column("power", gpu_points_[i], [](const GpuPoint& p) { return p.power; });
    out += '}';
  }
  out += "],\"hours\":[";
  const int64_t now = points_.empty() ? 0 : points_.back().t;
  auto hb = hours_.buckets(now);
  for (size_t i = 0; i < hb.size(); ++i) {
    if (i) out += ',';
    out += "{\"t\":" + std::to_string(hb[i].hour_start_ms) + ",\"tokens\":" + std::to_string(hb[i].tokens) + "}";
  }
  out += "]}";
  return out;
}

std::optional<uint64_t> Dashboard::add_client(std::function<void()> wake) {
  std::lock_guard lock(mu_);
  if (stopped_ || clients_.size() >= config_.max_sse_clients) return std::nullopt;
  const uint64_t id = ++next_client_;
  clients_.emplace_back(id, std::move(wake));
  return id;
}

void Dashboard::remove_client(uint64_t id) {
  std::lock_guard lock(mu_);
  std::erase_if(clients_, [id](const auto& c) { return c.first == id; });
}

size_t Dashboard::clients() const {
  std::lock_guard lock(mu_);
  return clients_.size();
}

void Dashboard::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  wake_all();
}

bool Dashboard::stopped() const {
  std::lock_guard lock(mu_);
  return stopped_;
}

void Dashboard::wake_all() {
  std::vector<std::function<void()>> wakes;
  {
    std::lock_guard lock(mu_);
    for (const auto& c : clients_) wakes.push_back(c.second);
  }
  for (auto& w : wakes) w();
}

Reading read_sources(const DashboardSources& s, int64_t unix_ms) {
  Reading r;
  r.unix_ms = unix_ms;
  if (s.ramjet) s.ramjet(r);
  if (s.fleet) s.fleet(r);
  if (s.engine_samples) {
    std::vector<upstream::EngineSample> samples = s.engine_samples();
    for (size_t e = 0; e < samples.size() && e < r.engines.size(); ++e) r.engines[e].scrape = std::move(samples[e]);
  }
  if (s.gpu_samples) r.gpus = s.gpu_samples();
  if (s.kv_index) {
    for (size_t e = 0; e < r.engines.size(); ++e) r.engines[e].kv_index = s.kv_index(e);
  }
  if (s.kv_source) {
    for (size_t e = 0; e < r.engines.size(); ++e) r.engines[e].kv_source = s.kv_source(e);
  }
  if (s.exact_withdrawn) {
    for (size_t e = 0; e < r.engines.size(); ++e) r.engines[e].exact_withdrawn = s.exact_withdrawn(e);
  }
  if (s.models) {
    for (size_t e = 0; e < r.engines.size(); ++e) r.engines[e].models = s.models(e);
  }
  if (s.idle_drain) {
    for (size_t e = 0; e < r.engines.size(); ++e) r.engines[e].idle_drain = s.idle_drain(e);
  }
  return r;
}

}  // namespace ramjet::observe
