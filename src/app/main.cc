// ramjet: composition root. Parses configuration, wires the fleet, the routing policy, the
// proxy and the listeners onto the io threads, and drains gracefully on SIGTERM/SIGINT.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <sys/resource.h>

#include <openssl/crypto.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <string_view>
#include <thread>

#include "app/admin.h"
#include "common/build_info.h"
#include "common/log.h"
#include "config/config.h"
#include "net/client.h"
#include "net/io_pool.h"
#include "net/listener.h"
#include "net/tls.h"
#include "observe/dashboard.h"
#include "observe/decision_log.h"
#include "upstream/engine_stats.h"
#include "observe/metric_docs.h"
#include "observe/journal.h"
#include "render/service/manifest_cli.h"
#include "render/service/tokenizer_service.h"
#include "render/prompt/cli.h"
#include "cache/events/kv_fleet.h"
#include "cache/index/approx_index.h"
#include "companion/client.h"
#include "request/route/exact_overlap.h"
#include "upstream/engine_catalog.h"
#include "upstream/parking.h"
#include "upstream/engine_load.h"
#include "upstream/peer_load.h"
#include "request/ingress/api_keys.h"
#include "request/route/router.h"
#include "request/stream/observers.h"
#include "request/stream/proxy.h"
#include "upstream/dns.h"
#include "upstream/fleet.h"
#include "upstream/membership.h"
#include "upstream/probe.h"

namespace asio = boost::asio;
using namespace ramjet;
using std::chrono::milliseconds;

namespace {

// Every problem at once on stderr; the exit status of a configuration error.
int report_configuration_errors(const std::vector<std::string>& errors) {
  for (const auto& e : errors) std::fprintf(stderr, "ramjet: configuration error: %s\n", e.c_str());
  std::fprintf(stderr, "ramjet: %zu configuration error(s); see ramjet --help\n", errors.size());
  return 2;
}

// Every client connection, upstream connection and idle keep-alive socket is a descriptor: take
// the hard limit (as vLLM's set_ulimit and nginx's worker_rlimit_nofile do), so a burst of
// connections meets the hard limit the operator set, not the shell's soft default of 1024.
void raise_descriptor_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  const rlim_t was = r.rlim_cur;
  r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &r) == 0) {
    spdlog::debug("descriptor limit raised from {} to {}", static_cast<uint64_t>(was), static_cast<uint64_t>(r.rlim_cur));
  }
}

// A KV-event endpoint item for one engine: tcp://*:port is the engine's own address.
std::string own_endpoint(const std::string& item, const config::UpstreamUrl& url) {
  if (!item.starts_with("tcp://*:")) return item;
  const std::string host = url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  return "tcp://" + host + item.substr(7);
}

// The engines a source lists, as upstream::Membership takes them: the static RJ_UPSTREAM list
// (source 0) with its profiles and KV-event items, or one RJ_UPSTREAM_DNS name's template.
std::vector<upstream::Listed> static_engines(const config::Config& cfg) {
  std::vector<upstream::Listed> out;
  for (size_t i = 0; i < cfg.upstreams.size(); ++i) {
    upstream::Listed l{cfg.upstreams[i]};
    if (i < cfg.upstream_profiles.size()) l.profile = cfg.upstream_profiles[i];
    if (i < cfg.upstream_models.size()) l.models = cfg.upstream_models[i];
    if (i < cfg.kv_event_live_endpoints.size()) l.kv_live = cfg.kv_event_live_endpoints[i];
    if (i < cfg.kv_event_replay_endpoints.size()) l.kv_replay = cfg.kv_event_replay_endpoints[i];
    // (config expanded an engine with ranks into one entry per rank)
    if (i < cfg.upstream_ranks.size()) l.dp_rank = cfg.upstream_ranks[i];
    l.dp_size = config::dp_size_item(cfg, i);
    l.dp_auto = config::dp_auto_item(cfg, i);
    l.engine = config::engine_kind_item(cfg, i);
    l.role = config::engine_role_item(cfg, i);
    out.push_back(std::move(l));
  }
  return out;
}

// An RJ_UPSTREAM_MODELS item as the catalog takes it.
std::vector<std::string> declared_models(std::string_view item) {
  std::vector<std::string> out;
  for (std::string_view name : config::model_names(item)) out.emplace_back(name);
  return out;
}

std::vector<upstream::Listed> dns_names(const config::Config& cfg) {
  std::vector<upstream::Listed> out;
  for (size_t n = 0; n < cfg.upstream_dns.size(); ++n) {
    const size_t k = cfg.upstreams.size() + n;  // its position in the per-source lists
    upstream::Listed l{cfg.upstream_dns[n]};
    if (k < cfg.upstream_profiles.size()) l.profile = cfg.upstream_profiles[k];
    if (k < cfg.upstream_models.size()) l.models = cfg.upstream_models[k];
    if (k < cfg.kv_event_live_endpoints.size()) l.kv_live = cfg.kv_event_live_endpoints[k];
    if (k < cfg.kv_event_replay_endpoints.size()) l.kv_replay = cfg.kv_event_replay_endpoints[k];
    l.dp_size = config::dp_size_item(cfg, k);  // each address's ranks (upstream::ranks_of)
    l.dp_auto = config::dp_auto_item(cfg, k);
    l.engine = config::engine_kind_item(cfg, k);
    l.role = config::engine_role_item(cfg, k);
    out.push_back(std::move(l));
  }
  return out;
}

// The routing weights (RJ_ROUTE_*); a reload may change them.
route::RouteConfig route_config(const config::Config& cfg) {
  route::RouteConfig rc;
  rc.load_unit_bytes = cfg.route_load_unit_bytes;
  rc.max_load_units = cfg.route_max_load_units;
  rc.alpha = cfg.route_alpha;
  rc.max_overlap_blocks = cfg.route_max_overlap_blocks;
  rc.relative_credit = cfg.route_credit_basis == "relative";
  rc.chunk_bytes = cfg.route_chunk_bytes;
  rc.short_max_tokens = cfg.profile_short_max_tokens;
  rc.adapter_load_units = cfg.route_adapter_load_units;
  rc.decode_cost = cfg.route_decode_cost;
  return rc;
}

// What a SIGHUP reload applies while running, and how each takes the new value; any other option
// that changed waits for a restart.
struct Reloadable {
  std::string_view env;
  void (*take)(config::Config& running, const config::Config& next);
};
constexpr std::array<Reloadable, 16> kReloadable = {{
    {"RJ_UPSTREAM",
     [](config::Config& r, const config::Config& n) {
       r.upstreams = n.upstreams;
       r.upstream_ranks = n.upstream_ranks;
     }},
    {"RJ_UPSTREAM_DP_SIZE", [](config::Config& r, const config::Config& n) { r.upstream_dp_size = n.upstream_dp_size; }},
    {"RJ_UPSTREAM_PROFILES", [](config::Config& r, const config::Config& n) { r.upstream_profiles = n.upstream_profiles; }},
    {"RJ_UPSTREAM_ENGINE", [](config::Config& r, const config::Config& n) { r.upstream_engines = n.upstream_engines; }},
    {"RJ_UPSTREAM_ROLE", [](config::Config& r, const config::Config& n) { r.upstream_roles = n.upstream_roles; }},
    {"RJ_UPSTREAM_MODELS", [](config::Config& r, const config::Config& n) { r.upstream_models = n.upstream_models; }},
    {"RJ_KV_EVENT_LIVE_ENDPOINTS",
     [](config::Config& r, const config::Config& n) { r.kv_event_live_endpoints = n.kv_event_live_endpoints; }},
    {"RJ_KV_EVENT_REPLAY_ENDPOINTS",
     [](config::Config& r, const config::Config& n) { r.kv_event_replay_endpoints = n.kv_event_replay_endpoints; }},
    {"RJ_ROUTE_ALPHA", [](config::Config& r, const config::Config& n) { r.route_alpha = n.route_alpha; }},
    {"RJ_ROUTE_MAX_OVERLAP_BLOCKS",
     [](config::Config& r, const config::Config& n) { r.route_max_overlap_blocks = n.route_max_overlap_blocks; }},
    {"RJ_ROUTE_CREDIT_BASIS", [](config::Config& r, const config::Config& n) { r.route_credit_basis = n.route_credit_basis; }},
    {"RJ_ROUTE_LOAD_UNIT_BYTES",
     [](config::Config& r, const config::Config& n) { r.route_load_unit_bytes = n.route_load_unit_bytes; }},
    {"RJ_ROUTE_MAX_LOAD_UNITS", [](config::Config& r, const config::Config& n) { r.route_max_load_units = n.route_max_load_units; }},
    {"RJ_ROUTE_ADAPTER_LOAD_UNITS", [](config::Config& r, const config::Config& n) { r.route_adapter_load_units = n.route_adapter_load_units; }},
    {"RJ_PROFILE_SHORT_MAX_TOKENS",
     [](config::Config& r, const config::Config& n) { r.profile_short_max_tokens = n.profile_short_max_tokens; }},
    {"RJ_LOG_LEVEL", [](config::Config& r, const config::Config& n) { r.log_level = n.log_level; }},
}};

route::Profile profile_of(std::string_view p) {
  return p == "mtp" ? route::Profile::kMtp : p == "standard" ? route::Profile::kStandard : route::Profile::kNone;
}

// RJ_KV_EVENT_*: slot i's subscription, or none ("-", or no endpoints at all). When engines can
// join later, every slot has a subscriber (waiting, fenced, until an engine with endpoints joins).
std::vector<std::optional<cache::events::SubscriberOptions>> kv_sources(const config::Config& cfg) {
  std::vector<std::optional<cache::events::SubscriberOptions>> out(cfg.slots());
  const bool dynamic = cfg.slots() > cfg.upstreams.size();
  for (size_t i = 0; i < out.size() && !cfg.kv_event_live_endpoints.empty(); ++i) {
    const bool fixed = i < cfg.upstreams.size() && i < cfg.kv_event_live_endpoints.size();
    if (fixed && cfg.kv_event_live_endpoints[i] == "-" && !dynamic) continue;
    cache::events::SubscriberOptions o;
    // "discover": the engine catalog finds the endpoints (until then the subscriber waits, fenced).
    if (fixed && cfg.kv_event_live_endpoints[i] != "discover" && cfg.kv_event_live_endpoints[i] != "-") {
      o.live_endpoint = own_endpoint(cfg.kv_event_live_endpoints[i], cfg.upstreams[i]);
    }
    if (fixed && i < cfg.kv_event_replay_endpoints.size() && cfg.kv_event_replay_endpoints[i] != "-") {
      o.replay_endpoint = own_endpoint(cfg.kv_event_replay_endpoints[i], cfg.upstreams[i]);
    }
    o.topic = cfg.kv_event_topic;
    o.replay_timeout = milliseconds(cfg.kv_event_timeout_ms);
    o.fence = cache::events::FenceLimits{.replay_limit = cfg.kv_event_replay_limit,
                                         .tail_limit = cfg.kv_event_replay_tail_limit};
    out[i] = std::move(o);
  }
  return out;
}

// RJ_EXACT_INVENTORY=companion: the session secret and the block-digest key (a file that breaks a
// rule stops startup, named with the rule) and one client per engine whose RJ_COMPANION_ENDPOINTS
// item is not "-", by ordinal. Engines that join later keep their KV events. The secrets' bytes
// are wiped here once the clients hold their copies.
bool make_companions(const config::Config& cfg, const cache::events::InventoryLimits& limits,
                     std::vector<std::unique_ptr<cache::events::InventorySource>>& out, std::string& problem) {
  auto session = companion::read_secret_file(cfg.companion_secret_file);
  if (!session) {
    problem = "RJ_COMPANION_SECRET_FILE: " + session.error();
    return false;
  }
  auto digest_secret = companion::read_secret_file(cfg.companion_digest_secret_file);
  if (!digest_secret) {
    OPENSSL_cleanse(session->data(), session->size());
    problem = "RJ_COMPANION_DIGEST_SECRET_FILE: " + digest_secret.error();
    return false;
  }
  if (CRYPTO_memcmp(session->data(), digest_secret->data(), session->size()) == 0) {
    spdlog::warn("RJ_COMPANION_SECRET_FILE and RJ_COMPANION_DIGEST_SECRET_FILE hold the same secret: give each its own");
  }
  std::shared_ptr<const cache::DigestKey> key = cache::DigestKey::from_secret(*digest_secret);
  OPENSSL_cleanse(digest_secret->data(), digest_secret->size());
  out.resize(cfg.slots());
  for (size_t i = 0; i < cfg.companion_endpoints.size() && i < out.size() && problem.empty(); ++i) {
    if (cfg.companion_endpoints[i] == "-") continue;
    auto endpoint = companion::parse_endpoint(cfg.companion_endpoints[i]);
    if (!endpoint) {
      problem = "RJ_COMPANION_ENDPOINTS: item " + std::to_string(i + 1) + ": " + endpoint.error();
      break;
    }
    out[i] = std::make_unique<companion::Client>(companion::ClientOptions{.upstream = i,
                                                                          .endpoint = std::move(*endpoint),
                                                                          .digest = key,
                                                                          .inventory = limits,
                                                                          .decode = {},
                                                                          .connect_timeout = milliseconds(2000),
                                                                          .first_frame_timeout = milliseconds(10000),
                                                                          .frame_timeout = milliseconds(3000),
                                                                          .backoff_min = milliseconds(250),
                                                                          .backoff_max = milliseconds(5000)},
                                                 *session);
  }
  OPENSSL_cleanse(session->data(), session->size());
  return problem.empty();
}

// The tokenizer shadow (RJ_TOKENIZER_MODE) hears of every complete 200 chat or completions
// response once its last byte went out; offer() only queues (never blocks).
class ShadowOffer final : public request::ExchangeObserver {
 public:
  // `skip_routed`: mode local with RJ_EXACT_TOKENS=local — a request exact routing already
  // rendered locally is not rendered a second time (its render is the local one).
  ShadowOffer(render::TokenizerService& t, bool skip_routed)
      : ExchangeObserver(request::kFinished), t_(t), skip_routed_(skip_routed) {}
  void finished(request::ExchangeRecord& x) override {
    const bool chat = x.endpoint == request::Endpoint::kChat;
    if (skip_routed_ && x.prep->exact.status == request::ExactTokens::kTokenized) return;
    if (x.accounted && x.result == "complete" && x.upstream && (chat || x.endpoint == request::Endpoint::kCompletions)) {
      t_.offer(*x.upstream, chat, x.prep->body);
    }
  }

 private:
  render::TokenizerService& t_;
  bool skip_routed_;
};

}  // namespace

int main(int argc, char** argv) {
  // `ramjet render ...`: offline prompt rendering (src/render/prompt/cli.h); reads no
  // configuration.
  if (argc > 1 && std::string_view(argv[1]) == "render") {
    return render::cli::run(argc - 1, argv + 1);
  }
  // `ramjet manifest ...`: a tokenizer compatibility manifest from a live engine
  // (render/service/manifest_cli.h).
  if (argc > 1 && std::string_view(argv[1]) == "manifest") {
    return render::manifest_cli::run(argc - 1, argv + 1);
  }
  // `ramjet --version`: one line (common/build_info.h), before any configuration is read.
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--version") {
      std::cout << version_line("ramjet") << '\n';
      return 0;
    }
  }
  auto parsed = config::parse_process(argc, argv);
  if (parsed.action == config::Action::kHelp) {
    std::cout << config::help_text();
    return 0;
  }
  if (parsed.action == config::Action::kHelpMetrics) {
    std::cout << observe::metrics_markdown();
    return 0;
  }
  if (parsed.action == config::Action::kHelpMarkdown) {
    std::cout << config::markdown_reference();
    return 0;
  }
  if (!parsed.errors.empty()) {
    return report_configuration_errors(parsed.errors);
  }
  const config::Config& cfg = parsed.config;
  log::init(cfg.log_level);
  for (const auto& name : parsed.shadowed) {
    spdlog::warn("{} is set in the environment and in RJ_CONFIG_FILE: the environment's value is used, a reload "
                 "cannot change it", name);
  }
  raise_descriptor_limit();
  // TLS, before any connection is made: the upstream client context (https:// engines; a bad CA
  // file, certificate or key stops startup) and the listeners' certificate (RJ_TLS_*).
  {
    auto upstream_tls = net::UpstreamTls::create({cfg.upstream_tls_ca_file, cfg.upstream_tls_cert_file,
                                                  cfg.upstream_tls_key_file});
    if (!upstream_tls) return report_configuration_errors({upstream_tls.error().message});
    net::UpstreamTls::install(std::move(upstream_tls).value());
  }
  std::unique_ptr<net::ServerTls> server_tls;
  if (!cfg.tls_cert_file.empty()) {
    auto made = net::ServerTls::create(cfg.tls_cert_file, cfg.tls_key_file);
    if (!made) return report_configuration_errors({made.error().message});
    server_tls = std::move(made).value();
  }
  // The engines by ordinal slot (net/roster.h): RJ_UPSTREAM in the first slots; engines from
  // RJ_UPSTREAM_DNS or a reload join the others (upstream/membership.h).
  std::vector<config::EngineKind> engine_kinds;
  std::vector<config::EngineRole> engine_roles;
  for (size_t i = 0; i < cfg.upstreams.size(); ++i) {
    engine_kinds.push_back(config::engine_kind_item(cfg, i));
    engine_roles.push_back(config::engine_role_item(cfg, i));
  }
  net::Roster roster(cfg.upstreams, cfg.slots(), cfg.upstream_ranks, engine_kinds, engine_roles);
  // Engines may join and leave while running (DNS names, a reloadable file, spare ordinals).
  const bool engines_change = !cfg.upstream_dns.empty() || !cfg.config_file.empty() || cfg.slots() > cfg.upstreams.size();
  for (const auto& line : config::describe(cfg)) spdlog::debug("config {}", log::json_escape(line));
  // RJ_API_KEYS_FILE: an unreadable file, a bad line or no key at all stops startup.
  std::unique_ptr<request::ApiKeys> api_keys;
  if (!cfg.api_keys_file.empty()) {
    auto loaded = request::ApiKeys::load(cfg.api_keys_file);
    if (!loaded) return report_configuration_errors({"RJ_API_KEYS_FILE: " + loaded.error().message});
    api_keys = std::move(loaded).value();
    spdlog::info("client API keys required: {} keys loaded", api_keys->size());
  }

  const size_t threads = cfg.threads ? cfg.threads : std::max(1u, std::thread::hardware_concurrency());
  net::IoPool io(threads);
  const Clock& clock = SteadyClock::instance();
  upstream::Fleet fleet(roster, clock, cfg.recent_success_ms,
                        upstream::Readiness{cfg.ready_successes,
                                            int64_t{cfg.ready_stable_seconds} * 1000},
                        upstream::OutlierConfig{cfg.outlier_consecutive_failures, cfg.outlier_base_ejection_ms,
                                                cfg.outlier_max_ejection_ms, cfg.outlier_max_ejection_percent,
                                                cfg.outlier_penalty_ms});
  auto policy = route::make_policy(cfg.affinity, route_config(cfg));
  if (!policy) {
    std::fprintf(stderr, "ramjet: unknown routing policy\n");
    return 2;
  }
  cache::ApproxIndex index(fleet.size(), cache::ApproxIndexLimits{cfg.route_index_capacity});
  route::SingleFlight single_flight(
      fleet.size(),
      route::SingleFlightConfig{cfg.route_single_flight, cfg.route_max_overlap_blocks,
                                cfg.route_single_flight_capacity, cfg.route_single_flight_timeout_ms},
      clock);
  std::vector<route::Profile> profiles;
  for (const std::string& p : cfg.upstream_profiles) {
    profiles.push_back(p == "mtp" ? route::Profile::kMtp : route::Profile::kStandard);
  }
  // KV events (RJ_KV_EVENT_*): a subscriber and an exact inventory per engine that publishes, or
  // (RJ_EXACT_INVENTORY=companion) a companion client for each engine with an RJ_COMPANION_ENDPOINTS
  // item; exact routing (RJ_EXACT_ROUTE_MODE) asks them before the approximate index.
  // The engines' own events carry their offload tiers too (vLLM's OffloadingConnector); a companion's
  // snapshot carries GPU copies only, so its inventories skip them.
  const cache::events::InventoryLimits inventory_limits{.shard = {.max_blocks = cfg.kv_index_max_blocks}};
  cache::events::InventoryLimits tiered_limits = inventory_limits;
  tiered_limits.tiers = true;
  std::vector<const companion::Client*> companions;  // owned by kv (metrics)
  std::vector<std::unique_ptr<cache::events::InventorySource>> external;
  if (cfg.exact_inventory == "companion") {
    std::string problem;
    if (!make_companions(cfg, inventory_limits, external, problem)) return report_configuration_errors({problem});
    for (const auto& x : external) {
      if (x) companions.push_back(static_cast<const companion::Client*>(x.get()));
    }
    spdlog::info("exact inventories: {} of {} engines from their ramjet-companion", companions.size(),
                 cfg.upstreams.size());
  }
  cache::events::KvFleet kv(kv_sources(cfg), tiered_limits, std::move(external));
  for (size_t i = 0; i < cfg.upstream_ranks.size(); ++i) kv.set_rank(i, cfg.upstream_ranks[i]);
  const route::ExactMode exact_mode = cfg.exact_route_mode == "on"       ? route::ExactMode::kOn
                                      : cfg.exact_route_mode == "shadow" ? route::ExactMode::kShadow
                                      : cfg.exact_route_mode == "auto" && kv.enabled() ? route::ExactMode::kOn
                                                                                       : route::ExactMode::kOff;
  // RJ_TOKENIZER_* and RJ_MODEL_DIR: the profile is checked even when off; local modes load and
  // pin the tokenizer, template and manifest and re-render the manifest's goldens (a mismatch
  // stops here). RJ_EXACT_TOKENS=local with exact routing on makes mode off local.
  std::vector<std::string> tokenizer_errors;
  render::TokenizerServiceConfig tokenizer_config = render::tokenizer_service_config(cfg, exact_mode != route::ExactMode::kOff);
  tokenizer_config.roster = &roster;
  if (!cfg.model_dirs.empty() && tokenizer_config.mode == render::TokenizerMode::kOff)
    spdlog::warn("RJ_MODEL_DIR is set but unused: exact routing is off (no RJ_KV_EVENT_LIVE_ENDPOINTS or companions) "
                 "and RJ_TOKENIZER_MODE is off");
  auto tokenizer = render::TokenizerService::create(tokenizer_config, tokenizer_errors);
  if (!tokenizer) {
    return report_configuration_errors(tokenizer_errors);
  }
  route::PredictionCheck predictions(fleet.size(),
                                     route::PredictionCheckConfig{.miss_limit = cfg.exact_miss_limit,
                                                                  .cooldown_ms = int64_t{cfg.exact_miss_cooldown_ms}},
                                     clock);
  route::ExactOverlap exact(kv, fleet, exact_mode, &predictions,
                            cache::ProvisionalLimits{.ttl_ms = static_cast<int64_t>(cfg.exact_provisional_ttl_ms)});
  exact.set_tier_weights(route::TierWeights{.cpu = cfg.kv_tier_weight_cpu, .disk = cfg.kv_tier_weight_disk});
  // What the engines say about themselves (upstream/engine_catalog.h): their model lists (which
  // engines serve a request's model, ramjet's own GET /v1/models, which names are LoRA adapters:
  // exact routing's namespaces) and, for `discover` engines, their KV-event endpoints, handed to
  // the subscribers.
  std::unique_ptr<upstream::EngineCatalog> catalog;
  {
    upstream::EngineCatalogConfig cc;
    cc.roster = &roster;
    // Slots past the static list hold engines from RJ_UPSTREAM_DNS (or a reload): discovered when
    // the DNS names' KV items say so (config checks they all say the same).
    const bool later_discover = std::find(cfg.kv_event_live_endpoints.begin() + static_cast<std::ptrdiff_t>(std::min(
                                              cfg.upstreams.size(), cfg.kv_event_live_endpoints.size())),
                                          cfg.kv_event_live_endpoints.end(), "discover") != cfg.kv_event_live_endpoints.end();
    for (size_t i = 0; i < roster.capacity(); ++i) {
      cc.discover.push_back(i < cfg.upstreams.size()
                                ? i < cfg.kv_event_live_endpoints.size() && cfg.kv_event_live_endpoints[i] == "discover"
                                : later_discover);
      cc.declared.push_back(i < cfg.upstreams.size() && i < cfg.upstream_models.size()
                                ? declared_models(cfg.upstream_models[i])
                                : std::vector<std::string>{});
    }
    cc.bearer = cfg.upstream_token;
    cc.retry = milliseconds(cfg.probe_interval_ms);
    cc.urgent = [&kv](size_t i) { return kv.trusted(i) == nullptr; };  // restarted on other ports?
    catalog = std::make_unique<upstream::EngineCatalog>(
        std::move(cc), [&kv](size_t i, const std::optional<upstream::EngineCatalog::Endpoints>& e) {
          if (!e) return kv.set_endpoints(i, std::nullopt);
          cache::events::SubscriberOptions o;
          o.live_endpoint = e->live;
          o.replay_endpoint = e->replay;
          o.topic = e->topic;
          kv.set_endpoints(i, std::move(o));
        });
    if (exact_mode != route::ExactMode::kOff) exact.set_catalog(catalog.get());
  }
  route::ApproxOverlap approx(index);
  exact.set_estimates(&approx);  // an engine whose index is not trusted: its fingerprint estimate
  std::vector<route::OverlapSource*> sources;
  if (exact_mode != route::ExactMode::kOff) sources.push_back(&exact);
  sources.push_back(&approx);
  route::Router router(std::move(policy), fleet, std::move(sources), single_flight, std::move(profiles));
  // Several routers (RJ_ROUTE_ENGINE_LOAD): the engines' own running/waiting counts, less this
  // process's in-flight requests, count as other routers' load (the engine scrape writes them).
  upstream::EngineLoadBoard engine_load(
      clock, upstream::EngineLoadConfig{.enabled = cfg.route_engine_load && cfg.engine_scrape_interval_ms > 0,
                                        .stale_ms = 3 * int64_t{cfg.engine_scrape_interval_ms},
                                        .waiting_units = cfg.route_engine_load_waiting_units});
  // Several routers, directly (RJ_PEERS): the peer replicas' own load per engine, every
  // RJ_PEER_INTERVAL_MS, counts with this process's reservations (upstream/peer_load.h).
  std::unique_ptr<upstream::PeerLoadBoard> peer_board;
  std::unique_ptr<upstream::PeerSync> peer_sync;
  if (!cfg.peers.empty()) {
    auto secret = companion::read_secret_file(cfg.peer_secret_file);
    if (!secret) {
      spdlog::error("RJ_PEER_SECRET_FILE: {}", log::json_escape(secret.error()));
      return 1;
    }
    const int64_t interval = cfg.peer_interval_ms;
    peer_board = std::make_unique<upstream::PeerLoadBoard>(fleet.size(), std::max<int64_t>(250, 4 * interval), clock);
    peer_sync = std::make_unique<upstream::PeerSync>(
        upstream::PeerSyncConfig{.listen = cfg.peer_listen, .peers = cfg.peers, .secret = *secret, .interval_ms = interval},
        fleet, *peer_board);
    OPENSSL_cleanse(secret->data(), secret->size());
    engine_load.set_peers(peer_board.get());
  }
  if (engine_load.enabled()) router.set_engine_load(&engine_load);
  // LoRA adapter requests prefer engines where their adapter is active (RJ_ROUTE_ADAPTER_LOAD_UNITS;
  // the engine scrape writes the board; a reading three scrapes old says nothing).
  route::AdapterBoard adapters(fleet.size(), 3 * std::max<int64_t>(1000, cfg.engine_scrape_interval_ms));
  router.set_adapters(&adapters);
  route::DecodeCost decode_cost(fleet.size());
  if (cfg.route_decode_cost) router.set_decode_cost(&decode_cost);
  router.set_session_affinity(route::SessionAffinityConfig{
      .mode = cfg.session_affinity_mode == "on"       ? route::SessionAffinityMode::kOn
              : cfg.session_affinity_mode == "shadow" ? route::SessionAffinityMode::kShadow
                                                      : route::SessionAffinityMode::kOff,
      .key = cfg.session_affinity_key,
      .bonus_blocks = cfg.session_affinity_bonus_blocks,
      .max_load_delta = int64_t{cfg.session_affinity_max_load_delta}});
  if (cfg.route_horizon == "auto" && cfg.engine_scrape_interval_ms == 0) {
    spdlog::warn("RJ_ROUTE_HORIZON=auto but RJ_ENGINE_SCRAPE_INTERVAL_MS=0: no engine's KV pool is read, so no horizon applies");
  }
  if (cfg.route_engine_load && !engine_load.config().enabled) {
    spdlog::warn("RJ_ROUTE_ENGINE_LOAD is on but RJ_ENGINE_SCRAPE_INTERVAL_MS=0: routing does not see the engines' own counts{}",
                 peer_sync ? " (only its peers' load, RJ_PEERS)" : "");
  }
  net::PoolSet pools(threads, fleet.size(), cfg.pool_max_idle);
  // Engines that join later (RJ_UPSTREAM_DNS names, a reload's RJ_UPSTREAM): the longest Host
  // header and base path any of them can bring (a DNS name is at most 253 bytes).
  size_t max_engine_prefix = 0;
  for (const auto& d : cfg.upstream_dns) max_engine_prefix = std::max(max_engine_prefix, d.host_header().size() + d.base_path.size());
  if (!cfg.config_file.empty()) max_engine_prefix = std::max<size_t>(max_engine_prefix, 253 + 6 + 256);

  request::ProxyConfig pc;
  // A body the buffer budget could never hold (an inference body counts twice) is refused as too
  // large, not told to retry.
  pc.max_body_bytes = std::min(cfg.max_body_bytes, cfg.max_buffered_bytes / 2);
  pc.max_header_bytes = cfg.max_header_bytes;
  pc.header_timeout = milliseconds(cfg.header_timeout_ms);
  pc.body_timeout = milliseconds(cfg.body_timeout_ms);
  pc.keepalive_timeout = milliseconds(cfg.keepalive_timeout_ms);
  pc.connect_timeout = milliseconds(cfg.connect_timeout_ms);
  pc.first_byte_timeout = milliseconds(cfg.first_byte_timeout_ms);
  pc.upstream_idle_timeout = milliseconds(cfg.upstream_idle_timeout_ms);
  pc.client_send_timeout = milliseconds(cfg.client_send_timeout_ms);
  pc.upstream_max_header_bytes = cfg.upstream_max_header_bytes;
  pc.upstream_max_header_count = cfg.upstream_max_header_count;
  pc.max_engine_prefix_bytes = max_engine_prefix;
  pc.max_buffered_bytes = cfg.max_buffered_bytes;
  pc.served = request::ServedPaths{cfg.serve_tokenize, cfg.passthrough_paths};
  pc.advertise_ctx_margin = cfg.advertise_ctx_margin;
  pc.prepare.max_tokens_strip = cfg.max_tokens_strip;
  pc.prepare.session_user_field = cfg.session_affinity_mode != "off" && cfg.session_affinity_user_field;
  pc.prepare.fingerprints.chunk_bytes = cfg.route_chunk_bytes;
  pc.prepare.fingerprints.max_prefix_bytes = cfg.route_max_prefix_bytes;
  pc.phase_aware_load = cfg.route_phase_aware_load;
  pc.api_keys = api_keys.get();
  pc.tls = server_tls.get();
  pc.models = catalog.get();
  // The waiting room (RJ_ADMISSION_*): on when an engine's room is bounded.
  std::unique_ptr<request::Admission> admission;
  auto make_waiting_room = [&] {  // its bounds (RJ_ADMISSION_QUEUE_*): also the idle drain's, below
    request::AdmissionConfig ac;
    ac.max_queued = cfg.admission_queue_max;
    ac.max_queued_bytes = cfg.admission_queue_max_bytes;
    ac.max_wait = milliseconds(cfg.admission_queue_timeout_ms);
    if (api_keys) ac.client_labels = api_keys->names();
    return std::make_unique<request::Admission>(std::move(ac));
  };
  // The class (RJ_ADMISSION_BATCH_KEYS, _PRIORITY_HEADER) counts with or without the waiting room:
  // vLLM's per-request priority carries it too (RJ_ADMISSION_ENGINE_PRIORITY).
  pc.admission = {.engine_load = &engine_load,
                  .priority_header = cfg.admission_priority_header,
                  .batch_keys = cfg.admission_batch_keys,
                  .engine_priority = cfg.admission_engine_priority};
  std::unique_ptr<request::ClientShares> client_shares;  // RJ_ADMISSION_ENGINE_BURST
  if (cfg.admission_engine_max_inflight > 0 || cfg.admission_engine_max_waiting > 0 ||
      cfg.admission_engine_max_kv_usage > 0) {
    admission = make_waiting_room();
    pc.admission.room = admission.get();
    pc.admission.engine_max_inflight = cfg.admission_engine_max_inflight;
    pc.admission.engine_max_waiting = cfg.admission_engine_max_waiting;
    pc.admission.engine_max_kv_usage = cfg.admission_engine_max_kv_usage;
    if (cfg.admission_engine_burst > 0) {
      client_shares = std::make_unique<request::ClientShares>();
      pc.admission.engine_burst = static_cast<uint32_t>(cfg.admission_engine_burst);
      pc.admission.shares = client_shares.get();
    }
    if (cfg.admission_engine_burst > 0 && cfg.admission_engine_max_inflight == 0)
      spdlog::warn("RJ_ADMISSION_ENGINE_BURST is set but RJ_ADMISSION_ENGINE_MAX_INFLIGHT is not: burst slots are "
                   "past that cap, so there are none");
    if ((cfg.admission_engine_max_waiting > 0 || cfg.admission_engine_max_kv_usage > 0) &&
        cfg.engine_scrape_interval_ms == 0)
      spdlog::warn("RJ_ADMISSION_ENGINE_MAX_WAITING or _MAX_KV_USAGE is set but RJ_ENGINE_SCRAPE_INTERVAL_MS is 0: no engine's "
                   "queue is ever read, so no engine has room and every request waits until it is refused");
  }
  // Idle drain (RJ_IDLE_DRAIN_*, upstream/parking.h): quiet engines out of placement and asleep,
  // woken when load or a waiting request needs them. A request whose pool has only parked engines
  // waits in the waiting room while one wakes: with the waiting room off, one with its default
  // bounds and no engine cap holds just those requests.
  std::unique_ptr<upstream::EngineParking> parking;
  if (cfg.idle_drain_mode != "off") {
    upstream::IdleDrainConfig ic;
    ic.mode = cfg.idle_drain_mode == "drain" ? upstream::DrainMode::kDrain : upstream::DrainMode::kObserve;
    ic.release = cfg.idle_drain_release == "utilization" ? upstream::DrainRelease::kUtilization
                                                         : upstream::DrainRelease::kFleetIdle;
    auto ms = [](double s) { return static_cast<int64_t>(s * 1000.0); };
    ic.idle_after_ms = ms(cfg.idle_drain_idle_after_s);
    ic.upstream_idle_after_ms = ms(cfg.idle_drain_upstream_idle_after_s);
    ic.resume_load_per_replica = cfg.idle_drain_resume_load_per_replica;
    ic.min_warm = cfg.idle_drain_min_warm;
    ic.cooldown_ms = ms(cfg.idle_drain_cooldown_s);
    ic.grace_ms = ms(cfg.idle_drain_grace_s);
    ic.interval_ms = std::max<int64_t>(1, ms(cfg.idle_drain_interval_s));
    ic.sleep_actuator = cfg.idle_drain_actuator == "sleep";
    ic.sleep_level = cfg.idle_drain_sleep_level == "2" ? 2 : 1;
    ic.max_parked = cfg.idle_drain_max_parked;
    ic.wake_timeout_ms = ms(cfg.idle_drain_wake_timeout_s);
    parking = std::make_unique<upstream::EngineParking>(fleet, io.at(0), clock, ic, cfg.upstream_token);
    parking->set_pool_of([&catalog](size_t i) {
      const auto pools = catalog->pools();
      return pools ? static_cast<uint32_t>(std::hash<std::string>{}(pools->engine_models(i))) : uint32_t{0};
    });
    parking->set_on_parked([&index](size_t i) { index.clear(i); });  // the sleep discarded its KV cache
    fleet.add_replica_label({"idle_drain", [p = parking.get()](size_t i) { return p->health_label(i); }});
    if (ic.mode == upstream::DrainMode::kDrain) {
      pc.parking = parking.get();
      if (!admission) {
        admission = make_waiting_room();
        pc.admission.room = admission.get();
      }
    }
  }
  pc.disagg = {.enabled = !cfg.upstream_roles.empty(),
               .min_uncached_tokens = cfg.disagg_min_uncached_tokens,
               .prefill_max_inflight = cfg.disagg_prefill_max_inflight,
               .fallback_aggregate = cfg.disagg_prefill_failure != "error"};
  if (api_keys && !cfg.upstream_token.empty()) pc.upstream_authorization = "Bearer " + cfg.upstream_token;
  request::TokenizeBudget tokenize_budget(request::TokenizeBudgetConfig{
      .share = cfg.exact_route_budget_share, .cap = milliseconds(cfg.exact_route_timeout_ms)});
  pc.exact = request::ExactTokensConfig{.enabled = exact_mode != route::ExactMode::kOff,
                                        .min_bytes = cfg.exact_route_min_bytes,
                                        .max_bytes = cfg.exact_route_max_bytes,
                                        .timeout = milliseconds(cfg.exact_route_timeout_ms),
                                        .bearer = cfg.upstream_token,
                                        .canary_bps = cfg.exact_route_canary_bps,
                                        .canary_key = cfg.exact_route_canary_key,
                                        .local = exact_mode != route::ExactMode::kOff && config::exact_tokens_local(cfg)
                                                     ? tokenizer.get()
                                                     : nullptr,
                                        .budget = &tokenize_budget};
  // Client connections and dashboard streams hold it; SIGTERM closes it and waits for them.
  net::DrainGate drain;
  request::Proxy proxy(pc, fleet, router, io, pools, clock, drain);
  // What a served exchange changes in routing. Index learning comes first: when a response
  // completes, the index holds its prefix before the single-flight lead on it ends, so a
  // follower deciding on another thread in between sees one or the other, never neither.
  request::IndexLearning index_learning(router);
  request::SingleFlightLeads single_flight_leads(router);
  proxy.add_observer(&index_learning);
  proxy.add_observer(&single_flight_leads);
  // A prediction the engine contradicted is looked at again (route/late_check.h): late or
  // evicted, or a miss.
  route::LateCheck late_check(
      predictions,
      [&exact](size_t engine, std::span<const uint32_t> tokens, std::string_view model, std::string_view salt) {
        return exact.resident_now(engine, tokens, model, salt);
      },
      [&exact](size_t engine, std::span<const uint32_t> tokens, std::string_view model, std::string_view salt,
               uint64_t from_tokens, const route::ExactStamp& stamp) {
        return exact.held_since(engine, tokens, model, salt, from_tokens, stamp);
      });
  request::ExactPredictions exact_predictions(predictions, &late_check);
  request::TokenizeBudgetLearning tokenize_budget_learning(tokenize_budget);
  proxy.add_observer(&tokenize_budget_learning);  // also each request's first-byte budget
  request::DecodeCostLearning decode_cost_learning(decode_cost, tokenize_budget, fleet, clock);
  if (cfg.route_decode_cost) proxy.add_observer(&decode_cost_learning);
  if (exact_mode == route::ExactMode::kOn) proxy.add_observer(&exact_predictions);
  std::unique_ptr<observe::Journal> journal;
  if (cfg.route_journal) {
    std::string error;
    journal = observe::Journal::open(observe::JournalConfig{.enabled = true, .path = cfg.route_journal_file}, &error);
    if (!journal) {
      spdlog::error("route journal: {}", log::json_escape(error));
      return 1;
    }
  }
  std::unique_ptr<observe::JournalObserver> journal_observer;
  if (journal) {
    journal_observer = std::make_unique<observe::JournalObserver>(*journal, router, cfg.route_phase_aware_load);
    proxy.add_observer(journal_observer.get());
  }
  // The dashboard (/ui on the metrics listener): the last routing decisions and 15 min of series.
  observe::DecisionLog decisions(200, fleet.size());
  observe::DecisionLogObserver decision_observer(decisions, router);
  proxy.add_observer(&decision_observer);
  observe::Dashboard dashboard(app::dashboard_config(proxy.metrics()));

  // Engines' own /metrics (load, KV usage, prefix cache, GPUs) for the dashboard and metrics.
  // With RJ_UPSTREAM_DP_SIZE=auto each scrape also says how many data-parallel ranks the engine
  // runs; membership (below, on io 0) lists it with that many targets.
  upstream::Membership* members = nullptr;
  upstream::EngineScraper engine_scraper(upstream::EngineScrapeConfig{
      .interval = milliseconds(cfg.engine_scrape_interval_ms),
      .timeout = milliseconds(cfg.engine_scrape_timeout_ms),
      .bearer = cfg.upstream_token,
      .max_body = cfg.engine_scrape_max_bytes,
      .engines = cfg.upstreams,
      .roster = &roster,
      .gpu_urls = cfg.gpu_metrics_urls,
      .on_sample = [&engine_load, &adapters, &clock, &fleet, &index, &tokenize_budget, &io, &roster, &members,
                    horizon = cfg.route_horizon == "auto",
                    chunk = std::max<uint64_t>(1, cfg.route_chunk_bytes)](size_t i, const upstream::EngineSample* s) {
        // (membership ignores an engine no source lists with auto; a reload may list it so)
        if (s != nullptr && s->ok && s->dp_ranks) {
          if (const std::shared_ptr<const net::Member> m = roster.member(i)) {
            asio::post(io.at(0), [&members, url = m->url, n = *s->dp_ranks] {
              if (members != nullptr) members->discovered_ranks(url, n);
            });
          }
        }
        // (recorded even when routing does not read the board: the waiting room may)
        // RJ_ROUTE_HORIZON=auto: the engine's KV pool in fingerprint chunks of prompt bytes.
        if (horizon && s != nullptr && s->ok && s->kv_capacity_tokens && i < index.engines()) {
          const double per_byte = tokenize_budget.tokens_per_byte() > 0 ? tokenize_budget.tokens_per_byte() : 0.25;
          const double chunks = *s->kv_capacity_tokens / per_byte / static_cast<double>(chunk);
          index.set_horizon(i, static_cast<uint64_t>(std::clamp(chunks, 1.0, 1e12)));
        }
        if (s != nullptr && s->ok && s->lora) {
          adapters.record(i, s->lora->max_loras, s->lora->active, clock.now_ms());
        } else {
          adapters.forget(i);
        }
        if (s != nullptr && s->ok && s->running && s->waiting && i < fleet.size()) {
          engine_load.record(i, *s->running, *s->waiting, fleet.at(i).inflight(),
                             s->kv_usage);
        } else {
          engine_load.forget(i);
        }
      },
      .on_fetch = [&engine_load, &fleet](size_t i) {
        if (i < fleet.size()) engine_load.fetching(i, fleet.at(i).inflight());
      },
  });
  proxy.metrics().set_profiles([&router](size_t i) { return router.profile(i); });
  proxy.metrics().set_ranks([&roster](size_t i) -> std::optional<std::pair<uint32_t, size_t>> {
    const auto m = roster.member(i);
    if (!m || !m->dp_rank) return std::nullopt;
    size_t first = i;
    for (size_t j : roster.siblings(i)) first = std::min(first, j);
    return std::pair<uint32_t, size_t>{*m->dp_rank, first};
  });

  // Membership (upstream/membership.h): source 0 is the static list, sources 1.. the DNS names.
  // What a slot's engine leaves behind is freed when the slot is vacated; a joining engine
  // starts from a clean slot.
  // What an engine's source says about it (its profile, KV endpoints), on joining and when a
  // reload changes it.
  auto membership_changed = [&](size_t slot, const upstream::Listed& l) {
    router.set_profile(slot, profile_of(l.profile));
    adapters.forget(slot);  // (until its next scrape)
    catalog->set_declared(slot, declared_models(l.models));
    catalog->set_discover(slot, l.kv_live == "discover");
    if (l.kv_live.empty() || l.kv_live == "-") {
      kv.set_endpoints(slot, std::nullopt);
    } else if (l.kv_live != "discover") {
      cache::events::SubscriberOptions o;
      o.live_endpoint = own_endpoint(l.kv_live, l.url);
      if (!l.kv_replay.empty() && l.kv_replay != "-") o.replay_endpoint = own_endpoint(l.kv_replay, l.url);
      o.topic = cfg.kv_event_topic;
      kv.set_endpoints(slot, std::move(o));
    }
  };
  upstream::Membership membership(
      roster, fleet, 1 + cfg.upstream_dns.size(), static_engines(cfg),
      upstream::Membership::Hooks{
          .joined =
              [&](size_t slot, const upstream::Listed& l) {
                index.clear(slot);
                predictions.reset(slot);
                decode_cost.forget(slot);
                kv.set_rank(slot, l.dp_rank);
                membership_changed(slot, l);
              },
          .changed = [&](size_t slot, const upstream::Listed& l) { membership_changed(slot, l); },
          .vacated =
              [&](size_t slot) {
                kv.set_endpoints(slot, std::nullopt);  // unsubscribed, its exact index dropped
                kv.set_rank(slot, std::nullopt);
                index.clear(slot);
                for (size_t t = 0; t < threads; ++t) {  // its idle connections, each on its own thread
                  asio::post(io.at(t), [&pools, t, slot] { pools.at(t, slot).clear(); });
                }
                predictions.reset(slot);
                decode_cost.forget(slot);
                engine_scraper.forget(slot);
                engine_load.forget(slot);
                catalog->set_discover(slot, false);
                catalog->set_declared(slot, {});
              },
      });
  members = &membership;
  auto sweeper = std::make_shared<asio::steady_timer>(io.at(0));  // membership.sweep() every 500 ms
  upstream::DnsDiscovery dns(
      upstream::DnsConfig{.names = dns_names(cfg),
                          .interval = milliseconds(cfg.upstream_dns_interval_ms),
                          .server = cfg.upstream_dns_server},
      [&io, &membership](size_t name, std::vector<upstream::Listed> engines) {
        asio::post(io.at(0), [&membership, name, engines = std::move(engines)] { membership.update(1 + name, engines); });
      });

  metrics::Registry registry;
  registry.set_upstream_filter([&roster](size_t i) { return i < roster.capacity() && roster.listed(i); });
  registry.add([&](metrics::Exposition& x) { proxy.metrics().write(x); });
  registry.add([&](metrics::Exposition& x) { fleet.write_metrics(x); });
  registry.add([&](metrics::Exposition& x) { router.write_metrics(x); });
  if (cfg.route_decode_cost) registry.add([&](metrics::Exposition& x) { decode_cost.write_metrics(x); });
  if (engines_change) registry.add([&](metrics::Exposition& x) { membership.write_metrics(x); });
  if (!cfg.upstream_dns.empty()) registry.add([&](metrics::Exposition& x) { dns.write_metrics(x); });
  if (journal) registry.add([&](metrics::Exposition& x) { journal->write_metrics(x); });
  if (engine_scraper.enabled()) registry.add([&](metrics::Exposition& x) { engine_scraper.write_metrics(x); });
  registry.add([&](metrics::Exposition& x) { tokenizer->write_metrics(x); });
  if (admission) registry.add([&](metrics::Exposition& x) { admission->write_metrics(x); });
  if (parking) registry.add([&](metrics::Exposition& x) { parking->write_metrics(x); });
  if (api_keys) registry.add([&](metrics::Exposition& x) { api_keys->write_metrics(x); });
  if (server_tls) registry.add([&](metrics::Exposition& x) { net::write_server_tls_metrics(x, server_tls.get()); });
  if (exact_mode == route::ExactMode::kOn) registry.add([&](metrics::Exposition& x) { predictions.write_metrics(x); });
  if (exact_mode != route::ExactMode::kOff) registry.add([&](metrics::Exposition& x) { tokenize_budget.write_metrics(x); });
  registry.add([&](metrics::Exposition& x) {
    catalog->write_metrics(x);
    catalog->write_model_metrics(x, [&](size_t i) { return i < fleet.size() && roster.active(i) && fleet.at(i).healthy(); });
  });
  if (peer_sync) registry.add([&](metrics::Exposition& x) { peer_sync->write_metrics(x); });
  if (kv.enabled()) {
    registry.add([&](metrics::Exposition& x) { kv.write_metrics(x); });
    if (!companions.empty()) registry.add([&](metrics::Exposition& x) { companion::write_metrics(x, companions); });
    fleet.add_replica_flag({"kv_trusted", [&kv](size_t i) { return kv.trusted(i) != nullptr; }});
    fleet.add_replica_label({"inventory", [&kv](size_t i) { return kv.inventory_label(i); }});
    fleet.add_replica_number({"kv_untrusted_seconds", [&kv, &clock](size_t i) {
                                return kv.untrusted_seconds(i, clock.now_ms());
                              }});
  }
  // An ordinal that is one data-parallel rank says which (RJ_UPSTREAM_DP_SIZE); others leave it out.
  fleet.add_replica_number({"dp_rank", [&roster](size_t i) -> std::optional<double> {
                              const auto m = roster.member(i);
                              if (!m || !m->dp_rank) return std::nullopt;
                              return static_cast<double>(*m->dp_rank);
                            }});
  if (tokenizer->manifest()) {  // local modes: /health shows which engines get local tokens
    fleet.add_replica_flag({"tokenizer_attested", [t = tokenizer.get()](size_t i) { return t->attested(i); }});
  }
  // In mode local the shadow would only render again what exact routing (RJ_EXACT_TOKENS=local)
  // rendered before the decision: those requests are skipped, the others still counted.
  ShadowOffer shadow(*tokenizer, pc.exact.local != nullptr && tokenizer->mode() == render::TokenizerMode::kLocal);
  if (tokenizer->enabled()) proxy.add_observer(&shadow);

  auto api = net::Listener::bind(io, cfg.listen_host, cfg.listen_port,
                                 [&](asio::ip::tcp::socket s) { return proxy.serve(std::move(s)); });
  if (!api) {
    spdlog::error("api listener: {}", log::json_escape(api.error().message));
    return 1;
  }
  auto admin = net::Listener::bind(io, cfg.metrics_host, cfg.metrics_port, [&](asio::ip::tcp::socket s) {
    return app::serve_admin(std::move(s), registry, fleet,
                            app::DashboardRoutes{&dashboard, &decisions, &drain, server_tls.get()}, &engine_scraper);
  });
  if (!admin) {
    spdlog::error("metrics listener: {}", log::json_escape(admin.error().message));
    return 1;
  }
  if (peer_sync) {
    if (auto problem = peer_sync->start()) {
      spdlog::error("peers: {}", log::json_escape(*problem));
      return 1;
    }
    spdlog::info("peers: load shared with {} peers every {} ms, received on udp port={}", cfg.peers.size(),
                 cfg.peer_interval_ms, peer_sync->port());
  }

  auto prober = std::make_unique<upstream::Prober>(fleet, io.at(0),
                          upstream::ProbeConfig{.interval = milliseconds(cfg.probe_interval_ms),
                                                .timeout = milliseconds(cfg.probe_timeout_ms),
                                                .bearer = cfg.upstream_token,
                                                .rank_generation = cfg.probe_rank_generation});
  auto signals = std::make_unique<asio::signal_set>(io.at(0), SIGTERM, SIGINT);
  bool draining = false;
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (draining) {
      spdlog::warn("second signal {}: stopping now", sig);
      io.stop();
      return;
    }
    draining = true;
    spdlog::info("signal {}: draining (grace {} ms)", sig, cfg.shutdown_grace_ms);
    (*api)->close();
    proxy.begin_drain();
    prober->stop();
    if (parking) parking->stop();
    sweeper->cancel();
    engine_scraper.stop();
    kv.stop();
    catalog->begin_stop();
    tokenizer->begin_stop();
    dashboard.stop();
    drain.close();
    drain.async_wait(io.at(0).get_executor(), milliseconds(cfg.shutdown_grace_ms), [&io, &drain](bool drained) {
      if (!drained) spdlog::warn("shutdown grace period over with {} connections or streams open", drain.holders());
      io.stop();
    });
    signals->async_wait(on_signal);
  };
  signals->async_wait(on_signal);
  // SIGHUP reloads what may change under a running ramjet, callback by callback (API keys; a
  // failed reload keeps the old state and says why). A signal_set of its own: it never drains.
  std::vector<std::function<void()>> reloads;
  if (api_keys) reloads.emplace_back([&api_keys] { api_keys->reload(); });
  if (server_tls) {
    reloads.emplace_back([&server_tls] {
      auto r = server_tls->reload();
      if (r) spdlog::info("tls: certificate reloaded");
      else spdlog::error("tls: reload failed, keeping the current certificate: {}", log::json_escape(r.error().message));
    });
  }
  // RJ_CONFIG_FILE: the whole configuration read again (environment, command line, the file) and
  // validated; what may change while running is applied, the rest is named in the log.
  config::Config running = cfg;
  if (!cfg.config_file.empty()) {
    reloads.emplace_back([&, argc, argv] {
      config::ParseResult next = config::parse_process(argc, argv);
      const config::Config& n = next.config;
      if (next.errors.empty() && n.upstreams.size() > roster.capacity()) {
        next.errors.push_back("RJ_UPSTREAM: " + std::to_string(n.upstreams.size()) + " engines but " +
                              std::to_string(roster.capacity()) + " ordinals (RJ_UPSTREAM_MAX, a restart setting)");
      }
      if (next.errors.empty() && n.affinity != running.affinity) {
        next.errors.push_back("RJ_AFFINITY: the routing policy's kind changes only with a restart");
      }
      if (!next.errors.empty()) {
        for (const auto& e : next.errors) spdlog::error("reload: configuration error: {}", log::json_escape(e));
        spdlog::error("reload: {} problem(s); the running configuration stays", next.errors.size());
        membership.count_reload(false);
        return;
      }
      for (const auto& name : next.shadowed) {
        spdlog::warn("reload: {} is set in the environment too: the file's value is not used", name);
      }
      // The reloadable settings from the new configuration; those needing a restart stay as
      // running (so they are named again until then, and a new policy never mixes them in).
      const std::vector<std::string> before = config::describe(running), after = config::describe(n);
      std::vector<std::string> restart;
      for (size_t i = 0; i < before.size() && i < after.size(); ++i) {
        if (before[i] == after[i]) continue;
        const std::string name = after[i].substr(0, after[i].find('='));
        if (std::none_of(kReloadable.begin(), kReloadable.end(), [&](const Reloadable& r) { return r.env == name; })) {
          restart.push_back(name);
        }
      }
      // (Always taken: describe() shows URL lists by count only, so it cannot tell they changed.)
      config::Config kept = running;
      for (const Reloadable& r : kReloadable) r.take(kept, n);
      membership.update(0, static_engines(kept));
      router.set_policy(route::make_policy(kept.affinity, route_config(kept)));
      if (kept.log_level != running.log_level) log::set_level(kept.log_level);
      for (const auto& name : restart) spdlog::warn("reload: {} changed; it takes effect after a restart", name);
      spdlog::info("reload: configuration applied ({} engines listed, {} setting(s) wait for a restart)",
                   roster.listed_count(), restart.size());
      membership.count_reload(true);
      running = std::move(kept);
    });
  }
  auto hangups = std::make_unique<asio::signal_set>(io.at(0), SIGHUP);
  std::function<void(boost::system::error_code, int)> on_hangup = [&](boost::system::error_code ec, int) {
    if (ec) return;
    spdlog::info("SIGHUP: reloading ({} reloadable)", reloads.size());
    for (const auto& reload : reloads) reload();
    hangups->async_wait(on_hangup);
  };
  hangups->async_wait(on_hangup);
  std::signal(SIGPIPE, SIG_IGN);

  prober->start();
  if (parking) parking->start();
  dns.start();
  // Leaving engines are vacated once their requests are done.
  std::function<void()> sweep = [&] {
    sweeper->expires_after(milliseconds(500));
    sweeper->async_wait([&](boost::system::error_code ec) {
      if (ec || draining) return;
      membership.sweep();
      sweep();
    });
  };
  if (engines_change) sweep();
  kv.start();
  catalog->start(io.at(0));
  engine_scraper.start(io.at(0));
  tokenizer->start(io.at(0));
  {
    observe::DashboardSources sources =
        app::dashboard_sources(proxy.metrics(), fleet, router, &decisions, &engine_scraper, &kv,
                               exact_mode == route::ExactMode::kOn ? &predictions : nullptr, catalog.get());
    if (admission) {  // the waiting room's depth beside the in-flight count
      sources.ramjet = [inner = std::move(sources.ramjet), room = admission.get()](observe::Reading& r) {
        inner(r);
        r.waiting = static_cast<int64_t>(room->queued());
      };
    }
    if (parking) sources.idle_drain = [p = parking.get()](size_t i) { return p->health_label(i); };
    app::start_dashboard_sampler(io.at(0), dashboard, std::move(sources));
  }
  (*api)->start();
  (*admin)->start();
  auto a = (*api)->local_endpoint();
  auto m = (*admin)->local_endpoint();
  spdlog::info("listening api={}:{} metrics={}:{} upstreams={} threads={}", a.address().to_string(), a.port(),
               m.address().to_string(), m.port(), fleet.size(), threads);

  io.run();
  drain.abandon();  // a forced stop leaves the wait armed: nothing may post to a context going away
  // Orderly teardown: objects owning sockets or timers first, then the io contexts with every
  // pending coroutine frame (which may still reference the proxy, pools and fleet), then the rest.
  signals.reset();
  hangups.reset();
  prober.reset();
  parking.reset();
  dns.stop();
  sweeper.reset();
  engine_scraper.stop();  // releases its timer before the io contexts go
  tokenizer->stop();
  catalog.reset();  // its timers belong to io.at(0)
  api->reset();
  admin->reset();
  pools.clear();
  io.destroy();
  spdlog::info("stopped");
  return 0;
}
