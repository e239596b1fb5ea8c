// upstream/engine_catalog: what each engine says about itself, polled off the request path.
//   GET /v1/models          which model names are base models and which are LoRA adapters, so
//                           exact routing looks an adapter request up in the adapter's namespace
//                           on every engine (vLLM hashes the adapter into every block), even one
//                           that never served it;
//   GET /kv_event_sources   (engines whose RJ_KV_EVENT_LIVE_ENDPOINTS item is `discover`) where
//                           the engine publishes its KV events; the endpoints go to the caller
//                           (cache/events' KvFleet, wired in app), again whenever they change
//                           (an engine restarted on other ports).
// Each engine is asked on its own coroutine: every RJ_PROBE_INTERVAL_MS until it answered (or
// while the caller calls it urgent: a discovered subscription that is not trusted), else every
// 30 s. Decoding: upstream/catalog_decode.h (bounded, fuzzed). Hosts never
// reach logs or labels; endpoints are never logged.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "config/config.h"
#include "net/roster.h"
#include "metrics/metrics.h"
#include "upstream/catalog_decode.h"
#include "upstream/model_pools.h"

namespace ramjet::upstream {

struct EngineCatalogConfig {
  std::vector<config::UpstreamUrl> upstreams;  // a fixed fleet (when `roster` is not set)
  const net::Roster* roster = nullptr;         // the engines by slot, changing at runtime
  std::vector<bool> discover;                  // per slot: ask GET /kv_event_sources
  std::vector<std::vector<std::string>> declared;  // per slot: RJ_UPSTREAM_MODELS (then set_declared)
  std::string bearer;                          // RJ_UPSTREAM_TOKEN
  std::chrono::milliseconds timeout{2000};     // one call
  std::chrono::milliseconds retry{1000};       // until an engine answered (RJ_PROBE_INTERVAL_MS)
  // After: an engine restarted with another model is routed as such within this.
  std::chrono::milliseconds refresh{5000};
  // Engines to ask again at the retry pace although they answered (e.g. a discovered engine whose
  // subscription is not trusted: it may have restarted on other ports). Optional; any thread.
  std::function<bool(size_t)> urgent;
  CatalogLimits limits;
};

// How one discovery call ended (label of ramjet_kv_discovery_total{outcome}).
enum class Discovery : uint8_t {
  kFound,        // one source, endpoints resolved (new or unchanged)
  kNotOffered,   // 404: the engine's vLLM has no /kv_event_sources (configure the endpoints)
  kNone,         // an empty list: the engine publishes no KV events
  kUnsupported,  // several data-parallel sources behind one URL (not routable per rank)
  kBadAnswer,    // not the documented shape, over the limits, or an endpoint ramjet cannot reach
  kFetchError,   // connect, timeout or another status
  kCount,
};
std::string_view label(Discovery d);

class EngineCatalog {
 public:
  // The endpoints of a discovered engine (nullopt: it publishes none, or not any more).
  struct Endpoints {
    std::string live, replay, topic;
    bool operator==(const Endpoints&) const = default;
  };
  using OnSources = std::function<void(size_t engine, const std::optional<Endpoints>&)>;

  EngineCatalog(EngineCatalogConfig cfg, OnSources on_sources);
  ~EngineCatalog();

  void start(boost::asio::io_context& ctx);
  void begin_stop();  // never blocks

  // Whether `model` names a LoRA adapter (true) or a base model (false) on any engine that
  // answered; nullopt when no engine listed it (or none answered yet).
  std::optional<bool> is_adapter(std::string_view model) const;

  void write_metrics(metrics::Exposition& x) const;
  // Whether the engine now in slot `engine` has its KV-event endpoints discovered (membership:
  // an engine that joins takes its source's setting; any thread).
  void set_discover(size_t engine, bool discover) {
    if (engine < roster_->capacity()) discover_[engine].store(discover, std::memory_order_relaxed);
  }

  // Test hook: what one /v1/models answer of `engine` teaches (the poller calls it too).
  void learn_models(size_t engine, const std::vector<ModelCard>& cards);

  // Models (upstream/model_pools.h). The models the operator declared for the engine now in slot
  // `engine` (RJ_UPSTREAM_MODELS; empty: what its /v1/models lists), set when it joins and when
  // a reload changes them; any thread.
  void set_declared(size_t engine, std::vector<std::string> models);
  // The current pools (never null); any thread, lock-free for the reader's purposes.
  std::shared_ptr<const ModelPools> pools() const { return pools_.load(std::memory_order_acquire); }
  // A request routed to a model's pool, by its base model's label slot (ramjet_model_requests_total).
  void count_request(uint32_t label) {
    if (label <= kMaxModelLabels) model_requests_[label].fetch_add(1, std::memory_order_relaxed);
  }
  // ramjet_model_engines, ramjet_model_requests_total: `healthy(i)` says whether engine i serves.
  void write_model_metrics(metrics::Exposition& x, const std::function<bool(size_t)>& healthy) const;

 private:
  struct Loop {
    explicit Loop(boost::asio::io_context& ctx) : ctx(ctx) {}
    boost::asio::io_context& ctx;
    std::atomic<bool> stopped{false};
    std::vector<std::unique_ptr<boost::asio::steady_timer>> timers;  // one per engine (ctx only)
  };
  boost::asio::awaitable<void> poll(std::shared_ptr<Loop> loop, size_t engine);
  boost::asio::awaitable<bool> ask_models(size_t engine, const config::UpstreamUrl& url);
  boost::asio::awaitable<bool> ask_sources(size_t engine, const net::Member& member);
  void count(size_t engine, Discovery d);

  EngineCatalogConfig cfg_;
  net::RosterRef roster_;
  std::unique_ptr<std::atomic<bool>[]> discover_;  // per slot (cfg_.discover, then set_discover)
  OnSources on_sources_;
  std::shared_ptr<Loop> loop_;
  // Rebuilds pools_ from declared_ and models_ (mu_ held).
  void rebuild_pools();

  mutable std::mutex mu_;
  std::vector<std::optional<std::vector<ModelCard>>> models_;  // per engine, its last answer
  std::vector<std::vector<std::string>> declared_;              // per engine, RJ_UPSTREAM_MODELS
  std::vector<std::string> labels_;                             // base models' label slots (grow only)
  std::atomic<std::shared_ptr<const ModelPools>> pools_;
  std::array<std::atomic<uint64_t>, kMaxModelLabels + 1> model_requests_{};
  std::vector<std::optional<Endpoints>> endpoints_;      // per engine, the last discovered (poller only)
  std::vector<std::array<std::atomic<uint64_t>, static_cast<size_t>(Discovery::kCount)>> discovery_;
};

// The families EngineCatalog::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> catalog_families();
// The families EngineCatalog::write_model_metrics writes.
std::span<const metrics::Family> model_families();

}  // namespace ramjet::upstream
