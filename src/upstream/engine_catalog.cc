#include "upstream/engine_catalog.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "net/client.h"

namespace ramjet::upstream {

namespace asio = boost::asio;

namespace {

constexpr std::array<metrics::Family, 2> kFamilies = {{
    {"ramjet_kv_discovery_total", metrics::MetricKind::kCounter, "upstream,outcome",
     "GET /kv_event_sources calls to engines whose RJ_KV_EVENT_LIVE_ENDPOINTS item is `discover`, by "
     "outcome: found (its source: the engine's only one, or for an ordinal that is data-parallel "
     "rank k the answer's source k; endpoints subscribed), not_offered (404: set the endpoints "
     "instead), none (the engine, or that rank, publishes no KV events), unsupported (several "
     "data-parallel sources behind one URL declared as one target: set RJ_UPSTREAM_DP_SIZE), "
     "bad_answer, fetch_error."},
    {"ramjet_catalog_adapters", metrics::MetricKind::kGauge, "upstream",
     "LoRA adapters the engine's GET /v1/models lists (exact routing looks an adapter's requests "
     "up in the adapter's namespace on every engine)."},
}};
constexpr std::array<metrics::Family, 2> kModelFamilies = {{
    {"ramjet_model_engines", metrics::MetricKind::kGauge, "model,state",
     "Engines serving each base model (its LoRA adapters follow it), as RJ_UPSTREAM_MODELS declares "
     "or the engines' GET /v1/models list: listed (active engines), healthy (of those, serving now). "
     "Labels are the base models the engines list or the operator declared (at most 64; more share "
     "_other), never what clients send."},
    {"ramjet_model_requests_total", metrics::MetricKind::kCounter, "model",
     "Inference requests routed to a base model's engines (its own or one of its adapters' name). "
     "Requests for a model no engine serves are ramjet_request_rejections_total{reason=\"unknown_model\"}."},
}};

}  // namespace

std::span<const metrics::Family> catalog_families() { return kFamilies; }
std::span<const metrics::Family> model_families() { return kModelFamilies; }

std::string_view label(Discovery d) {
  switch (d) {
    case Discovery::kFound: return "found";
    case Discovery::kNotOffered: return "not_offered";
    case Discovery::kNone: return "none";
    case Discovery::kUnsupported: return "unsupported";
    case Discovery::kBadAnswer: return "bad_answer";
    case Discovery::kFetchError: return "fetch_error";
    case Discovery::kCount: break;
  }
  return "fetch_error";
}

EngineCatalog::EngineCatalog(EngineCatalogConfig cfg, OnSources on_sources)
    : cfg_(std::move(cfg)),
      roster_(cfg_.roster, cfg_.upstreams),
      discover_(std::make_unique<std::atomic<bool>[]>(roster_->capacity())),
      on_sources_(std::move(on_sources)),
      models_(roster_->capacity()),
      declared_(roster_->capacity()),
      endpoints_(roster_->capacity()),
      discovery_(roster_->capacity()) {
  cfg_.discover.resize(roster_->capacity(), false);
  for (size_t i = 0; i < roster_->capacity(); ++i) discover_[i].store(cfg_.discover[i], std::memory_order_relaxed);
  cfg_.declared.resize(roster_->capacity());
  declared_ = std::move(cfg_.declared);
  std::lock_guard lock(mu_);
  rebuild_pools();
}

EngineCatalog::~EngineCatalog() { begin_stop(); }

void EngineCatalog::start(asio::io_context& ctx) {
  if (loop_) return;
  loop_ = std::make_shared<Loop>(ctx);
  for (size_t i = 0; i < roster_->capacity(); ++i) {
    loop_->timers.push_back(std::make_unique<asio::steady_timer>(ctx));
  }
  for (size_t i = 0; i < roster_->capacity(); ++i) asio::co_spawn(ctx, poll(loop_, i), asio::detached);
}

void EngineCatalog::begin_stop() {
  if (std::shared_ptr<Loop> l = std::move(loop_)) {
    l->stopped = true;
    asio::post(l->ctx, [l] {  // the timers belong to the context's thread
      for (auto& t : l->timers) t->cancel();
    });
  }
}

asio::awaitable<void> EngineCatalog::poll(std::shared_ptr<Loop> l, size_t i) {
  // Every retry interval: ask when the last answer is older than the refresh interval (or there
  // was none), or when the caller calls the engine urgent.
  using clock = std::chrono::steady_clock;
  std::optional<clock::time_point> answered_at;
  uint64_t incarnation = 0;  // the engine in slot i we know about (0: none)
  while (!l->stopped) {
    // A different engine in the slot (or none) starts from nothing: what the last one said is not its.
    std::shared_ptr<const net::Member> member = roster_->active(i) ? roster_->member(i) : nullptr;
    const uint64_t now_in = member ? member->incarnation : 0;
    if (now_in != incarnation) {
      incarnation = now_in;
      answered_at.reset();
      endpoints_[i].reset();
      std::lock_guard lock(mu_);
      models_[i].reset();
      rebuild_pools();
    }
    const bool due = member && (!answered_at || clock::now() - *answered_at >= cfg_.refresh ||
                                (discover_[i].load(std::memory_order_relaxed) && cfg_.urgent && cfg_.urgent(i)));
    if (due) {
      bool answered = false;
      try {
        answered = co_await ask_models(i, member->url);
        if (discover_[i].load(std::memory_order_relaxed) && !l->stopped) {
          answered = (co_await ask_sources(i, *member)) && answered;
        }
      } catch (const std::exception&) {
        answered = false;
      }
      if (answered) answered_at = clock::now();
      else answered_at.reset();
    }
    l->timers[i]->expires_after(cfg_.retry);
    boost::system::error_code ec;
    co_await l->timers[i]->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<bool> EngineCatalog::ask_models(size_t i, const config::UpstreamUrl& url) {
  net::GetFailure failure = net::GetFailure::kNone;
  auto r = co_await net::simple_get(url, "/v1/models", cfg_.bearer, cfg_.timeout, cfg_.limits.max_body,
                                    failure);
  if (failure != net::GetFailure::kNone || r.status != 200) co_return false;
  auto cards = decode_models(r.body, cfg_.limits);
  if (!cards) co_return false;
  learn_models(i, *cards);
  co_return true;
}

void EngineCatalog::learn_models(size_t i, const std::vector<ModelCard>& cards) {
  std::lock_guard lock(mu_);
  if (i >= models_.size()) return;
  if (models_[i] && models_[i]->size() == cards.size() &&
      std::equal(cards.begin(), cards.end(), models_[i]->begin(), [](const ModelCard& a, const ModelCard& b) {
        return a.id == b.id && a.parent == b.parent && a.max_model_len == b.max_model_len;
      })) {
    // The same models as last time (every refresh; vLLM stamps each answer's `created` and
    // permission ids anew): nothing to rebuild, and the pools' rotations go on.
    return;
  }
  models_[i] = cards;
  rebuild_pools();
}

void EngineCatalog::set_declared(size_t i, std::vector<std::string> models) {
  std::lock_guard lock(mu_);
  if (i >= declared_.size()) return;
  declared_[i] = std::move(models);
  rebuild_pools();
}

void EngineCatalog::rebuild_pools() {
  std::vector<EngineModels> engines(models_.size());
  for (size_t i = 0; i < engines.size(); ++i) {
    engines[i].active = roster_->active(i);
    engines[i].declared = declared_[i];
    engines[i].cards = models_[i];
  }
  pools_.store(ModelPools::build(engines, labels_), std::memory_order_release);
}

asio::awaitable<bool> EngineCatalog::ask_sources(size_t i, const net::Member& member) {
  const config::UpstreamUrl& url = member.url;
  net::GetFailure failure = net::GetFailure::kNone;
  auto r = co_await net::simple_get(url, "/kv_event_sources", cfg_.bearer, cfg_.timeout,
                                    cfg_.limits.max_body, failure);
  if (failure != net::GetFailure::kNone || (r.status != 200 && r.status != 404)) {
    count(i, Discovery::kFetchError);
    co_return false;
  }
  std::optional<Endpoints> found;
  Discovery outcome = Discovery::kFound;
  if (r.status == 404) {
    outcome = Discovery::kNotOffered;
  } else if (auto sources = decode_kv_event_sources(r.body, cfg_.limits); !sources) {
    outcome = Discovery::kBadAnswer;
  } else if (sources->empty()) {
    outcome = Discovery::kNone;
  } else if (!member.dp_rank && sources->size() > 1) {
    outcome = Discovery::kUnsupported;  // several ranks behind one target: declare them (RJ_UPSTREAM_DP_SIZE)
  } else if (const KvEventSource* mine = source_of(*sources, member.dp_rank); mine == nullptr) {
    outcome = Discovery::kNone;  // this rank publishes nothing (or the engine has fewer ranks)
  } else {
    const KvEventSource& s = *mine;
    auto live = resolve_endpoint(s.endpoint, url.host);
    std::optional<std::string> replay = std::string();
    if (!s.replay_endpoint.empty()) replay = resolve_endpoint(s.replay_endpoint, url.host);
    if (!live || !replay) outcome = Discovery::kBadAnswer;
    else found = Endpoints{std::move(*live), std::move(*replay), s.topic};
  }
  count(i, outcome);
  // A failed answer keeps what an earlier one found (a flaky engine is not unsubscribed); an
  // answer that says "none" (or is not offered any more) ends the subscription.
  const bool keep = outcome == Discovery::kBadAnswer;
  // (An answer from an engine that has left the slot since is not the slot's any more.)
  if (roster_->incarnation(i) != member.incarnation) co_return false;
  if (!keep && found != endpoints_[i]) {
    if (found) spdlog::info("kv events: upstream {} publishes its KV events; subscribing", i);
    else spdlog::warn("kv events: upstream {} offers no KV-event source ({})", i, label(outcome));
    endpoints_[i] = found;
    if (on_sources_) on_sources_(i, found);
  }
  co_return outcome == Discovery::kFound || outcome == Discovery::kNone;
}

void EngineCatalog::count(size_t i, Discovery d) {
  discovery_[i][static_cast<size_t>(d)].fetch_add(1, std::memory_order_relaxed);
}

std::optional<bool> EngineCatalog::is_adapter(std::string_view model) const {
  std::lock_guard lock(mu_);
  std::optional<bool> out;
  for (const auto& cards : models_) {
    if (!cards) continue;
    for (const ModelCard& c : *cards) {
      if (c.id != model) continue;
      if (c.adapter) return true;
      out = false;
    }
  }
  return out;
}

void EngineCatalog::write_metrics(metrics::Exposition& x) const {
  const auto& d = kFamilies[0];
  x.family(d);
  for (size_t i = 0; i < discovery_.size(); ++i) {
    if (!discover_[i].load(std::memory_order_relaxed)) continue;
    for (size_t o = 0; o < static_cast<size_t>(Discovery::kCount); ++o) {
      x.sample(d.name, "upstream=\"" + std::to_string(i) + "\",outcome=\"" + std::string(label(static_cast<Discovery>(o))) + "\"",
               discovery_[i][o].load(std::memory_order_relaxed));
    }
  }
  const auto& a = kFamilies[1];
  x.family(a);
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < models_.size(); ++i) {
    const auto n = models_[i] ? std::count_if(models_[i]->begin(), models_[i]->end(), [](const ModelCard& c) { return c.adapter; }) : 0;
    x.sample(a.name, "upstream=\"" + std::to_string(i) + "\"", static_cast<int64_t>(n));
  }
}

void EngineCatalog::write_model_metrics(metrics::Exposition& x, const std::function<bool(size_t)>& healthy) const {
  const std::shared_ptr<const ModelPools> pools = this->pools();
  std::vector<std::string> labels;
  {
    std::lock_guard lock(mu_);
    labels = labels_;
  }
  auto label = [&](uint32_t slot) {
    std::string out = "model=\"";
    out += metrics::escape_label_value(slot < labels.size() ? labels[slot] : std::string("_other"));
    out += '"';
    return out;
  };
  // Per label slot: the engines of its base models (an engine counted once per slot).
  std::vector<EngineSet> engines(kMaxModelLabels + 1);
  for (const ModelPools::Model& m : pools->models()) {
    for (size_t i = 0; i < models_.size(); ++i) {
      if (m.engines.has(i)) engines[m.label].add(i);
    }
  }
  const auto& e = kModelFamilies[0];
  x.family(e);
  for (uint32_t slot = 0; slot <= kMaxModelLabels; ++slot) {
    if (slot >= labels.size() && engines[slot].empty()) continue;
    size_t up = 0;
    for (size_t i = 0; i < models_.size(); ++i) up += engines[slot].has(i) && healthy(i) ? 1 : 0;
    x.sample(e.name, label(slot) + ",state=\"listed\"", static_cast<int64_t>(engines[slot].count()));
    x.sample(e.name, label(slot) + ",state=\"healthy\"", static_cast<int64_t>(up));
  }
  const auto& r = kModelFamilies[1];
  x.family(r);
  for (uint32_t slot = 0; slot <= kMaxModelLabels; ++slot) {
    const uint64_t n = model_requests_[slot].load(std::memory_order_relaxed);
    if (slot >= labels.size() && n == 0) continue;
    x.sample(r.name, label(slot), n);
  }
}

}  // namespace ramjet::upstream
