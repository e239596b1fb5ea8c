#include "observe/metric_docs.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>

#include "cache/events/kv_fleet.h"
#include "cache/index/approx_index.h"
#include "common/clock.h"
#include "companion/client.h"
#include "companion/server.h"
#include "upstream/engine_stats.h"
#include "observe/journal.h"
#include "metrics/build_metrics.h"
#include "metrics/prom_text.h"
#include "request/route/exact_overlap.h"
#include "net/tls.h"
#include "request/admission/admission.h"
#include "request/ingress/api_keys.h"
#include "request/route/router.h"
#include "render/service/tokenizer_service.h"
#include "request/stream/metrics.h"
#include "request/stream/tokenize_budget.h"
#include "upstream/engine_catalog.h"
#include "upstream/dns.h"
#include "upstream/engine_load.h"
#include "upstream/fleet.h"
#include "upstream/membership.h"
#include "upstream/parking.h"
#include "upstream/peer_load.h"

namespace ramjet::observe {
namespace {

std::string md_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// What one rendered section shows per family: label values (in order of appearance) and the
// histogram's bucket bounds.
struct Seen {
  std::map<std::string, std::vector<std::string>> values;
  std::vector<std::string> buckets;
};

std::map<std::string, Seen> inspect(const std::string& text, std::span<const metrics::Family> families) {
  std::map<std::string, Seen> out;
  metrics::parse_prom_text(text, metrics::PromTextLimits{}, [&](const metrics::PromSample& s) {
    for (const metrics::Family& f : families) {
      std::string_view n = s.name;
      if (f.kind == metrics::MetricKind::kHistogram) {
        if (!n.starts_with(f.name)) continue;
        std::string_view suffix = n.substr(f.name.size());
        if (suffix != "_bucket" && suffix != "_sum" && suffix != "_count") continue;
      } else if (n != f.name) {
        continue;
      }
      Seen& seen = out[std::string(f.name)];
      for (const metrics::PromLabel& l : s.labels) {
        if (l.name == "le") {
          if (l.value != "+Inf" &&
              std::find(seen.buckets.begin(), seen.buckets.end(), l.value) == seen.buckets.end()) {
            seen.buckets.emplace_back(l.value);
          }
          continue;
        }
        auto& v = seen.values[std::string(l.name)];
        if (std::find(v.begin(), v.end(), l.value) == v.end()) v.emplace_back(l.value);
      }
      return;
    }
  });
  return out;
}

}  // namespace

std::vector<MetricSection> metric_sections() {
  return {
      {"Build", "metrics::write_build_info (src/metrics/build_metrics.cc)", "always, first in every scrape",
       metrics::build_families()},
      {"Data plane", "request::ProxyMetrics::write (src/request/stream/metrics.cc)", "always",
       request::proxy_families()},
      {"Upstreams", "upstream::Fleet::write_metrics (src/upstream/fleet.cc)", "always",
       upstream::fleet_families()},
      {"Routing", "route::Router::write_metrics (src/request/route/router.cc)",
       "always (ramjet_exact_route_* with exact routing on or in shadow; "
       "ramjet_upstream_foreign_load_units with RJ_ROUTE_ENGINE_LOAD on, the default; "
       "ramjet_session_affinity_total with RJ_SESSION_AFFINITY_MODE on or shadow)",
       route::route_families()},
      {"Decode cost", "route::DecodeCost::write_metrics (src/request/route/decode_cost.cc)",
       "when RJ_ROUTE_DECODE_COST is on (per engine once it has a fit)", route::decode_cost_families()},
      {"Engine scrape", "upstream::EngineScraper::write_metrics (src/upstream/engine_scrape.cc)",
       "when RJ_ENGINE_SCRAPE_INTERVAL_MS is not 0 (the default is 500)", upstream::engine_families()},
      {"Local tokenization",
       "render::TokenizerService::write_metrics (src/render/service/tokenizer_service.cc)",
       "when RJ_TOKENIZER_MODE is not off (`ramjet_tokenizer_info` always; remote series in the shadow "
       "modes, local and attestation series in the local modes; shown here for local-shadow)",
       render::tokenizer_families()},
      {"KV events", "cache::events::KvFleet::write_metrics (src/cache/events/kv_fleet.cc)",
       "for the engines that have an RJ_KV_EVENT_LIVE_ENDPOINTS entry or a companion (RJ_COMPANION_ENDPOINTS)",
       cache::events::kv_families()},
      {"Companions", "companion::write_metrics (src/companion/client.cc)",
       "with RJ_EXACT_INVENTORY=companion, for the engines that have an RJ_COMPANION_ENDPOINTS entry (their "
       "ramjet_kv_* series above say where the index comes from: ramjet_kv_inventory_source)",
       companion::companion_families()},
      {"ramjet-companion (its own --metrics endpoint)", "companion::Server::write_metrics (src/companion/server_metrics.cc)",
       "on each ramjet-companion's `--metrics` endpoint (GET /metrics), not on ramjet's; no labels name the "
       "engine: scrape each companion as its own target",
       companion::Server::families()},
      {"Engine catalog", "upstream::EngineCatalog::write_metrics (src/upstream/engine_catalog.cc)",
       "always (discovery series for `discover` engines only)", upstream::catalog_families()},
      {"Models", "upstream::EngineCatalog::write_model_metrics (src/upstream/engine_catalog.cc)",
       "always (one `model` series per base model the engines list or RJ_UPSTREAM_MODELS declares; "
       "shown here for engines declaring qwen3 and llama)",
       upstream::model_families()},
      {"Exact predictions", "route::PredictionCheck::write_metrics (src/request/route/prediction_check.cc)",
       "when exact routing is on (RJ_EXACT_ROUTE_MODE on, or auto with KV endpoints)", route::prediction_families()},
      {"Exact tokenize budget", "request::TokenizeBudget::write_metrics (src/request/stream/tokenize_budget.cc)",
       "when exact routing is on or in shadow", request::tokenize_budget_families()},
      {"Waiting room", "request::Admission::write_metrics (src/request/admission/admission.cc)",
       "when RJ_ADMISSION_ENGINE_MAX_INFLIGHT or RJ_ADMISSION_ENGINE_MAX_WAITING is set", request::admission_families()},
      {"Idle drain (engine parking)", "upstream::EngineParking::write_metrics (src/upstream/parking.cc)",
       "when RJ_IDLE_DRAIN_MODE is observe or drain", upstream::parking_families()},
      {"Client API keys", "request::ApiKeys::write_metrics (src/request/ingress/api_keys.cc)",
       "when RJ_API_KEYS_FILE is set (one `key` series per name in the file; shown here for a file with "
       "keys named alice and bob and one without a name)",
       request::api_key_families()},
      {"Listener TLS", "net::write_server_tls_metrics (src/net/tls.cc)", "when RJ_TLS_CERT_FILE is set",
       net::server_tls_families()},
      {"Engine membership", "upstream::Membership::write_metrics (src/upstream/membership.cc)",
       "when engines can join later (RJ_UPSTREAM_DNS or RJ_CONFIG_FILE set, or RJ_UPSTREAM_MAX above the "
       "RJ_UPSTREAM entries)",
       upstream::membership_families()},
      {"DNS discovery", "upstream::DnsDiscovery::write_metrics (src/upstream/dns.cc)", "when RJ_UPSTREAM_DNS is set",
       upstream::dns_families()},
      {"Peer replicas", "upstream::PeerSync::write_metrics (src/upstream/peer_load.cc)", "when RJ_PEERS is set",
       upstream::peer_sync_families()},
      {"Route journal", "observe::Journal::write_metrics (src/observe/journal.cc)", "with RJ_ROUTE_JOURNAL=true",
       journal_families()},
  };
}

std::vector<std::string> render_sections_for_docs() {
  // Three upstreams, one per declared profile, so the info gauge shows every profile value; the
  // third is https:// (its TLS series).
  const std::vector<config::UpstreamUrl> urls = {
      {"engine-a", 8000, ""}, {"engine-b", 8000, ""}, {"engine-c", 8443, "", true}};
  const Clock& clock = SteadyClock::instance();
  upstream::Fleet fleet(urls, clock, 30000);
  cache::ApproxIndex index(urls.size());
  route::SingleFlight single_flight(urls.size(), route::SingleFlightConfig{}, clock);
  route::ApproxOverlap approx(index);
  // Exact routing in shadow (its outcome counter is written only when an exact source exists),
  // and the KV events of one engine with a (never started) subscription and two without.
  cache::events::SubscriberOptions so;
  so.live_endpoint = "tcp://engine-a:5557";
  cache::events::KvFleet kv({so, std::nullopt, std::nullopt}, cache::events::InventoryLimits{.shard = {.max_blocks = 1024}});
  route::ExactOverlap exact(kv, fleet, route::ExactMode::kShadow);
  route::Router router(route::make_policy("prefix", route::RouteConfig{}), fleet, {&exact, &approx}, single_flight, {});
  upstream::EngineLoadBoard engine_load(clock, upstream::EngineLoadConfig{});
  router.set_engine_load(&engine_load);
  router.set_session_affinity(route::SessionAffinityConfig{.mode = route::SessionAffinityMode::kShadow,
                                                           .key = std::string(32, 'k')});
  request::ProxyMetrics proxy(urls.size());
  proxy.set_profiles([](size_t i) {
    return i == 1 ? route::Profile::kMtp : i == 2 ? route::Profile::kStandard : route::Profile::kNone;
  });
  upstream::EngineScrapeConfig sc;
  sc.engines = urls;
  upstream::EngineScraper scraper(sc);

  std::vector<std::string> out;
  // Placeholders, not this build's values: the docs stay the same whichever build writes them.
  metrics::Exposition build;
  metrics::write_build_info(build, BuildInfo{"MAJOR.MINOR.PATCH", "COMMIT", "BUILD_TYPE", "COMPILER"});
  out.push_back(build.take());
  metrics::Exposition a;
  proxy.write(a);
  out.push_back(a.take());
  metrics::Exposition b;
  fleet.write_metrics(b);
  out.push_back(b.take());
  metrics::Exposition c;
  router.write_metrics(c);
  out.push_back(c.take());
  // Two engines measured, the third not yet (its per-engine series are absent).
  route::DecodeCost decode(urls.size());
  for (int i = 0; i < 8; ++i) {
    decode.learn(0, 101, 100'000'000, 1 + i % 3);
    decode.learn(1, 101, 200'000'000, 1 + i % 3);
  }
  decode.learn_output(1000, 500);
  metrics::Exposition dc;
  decode.write_metrics(dc);
  out.push_back(dc.take());
  metrics::Exposition d;
  scraper.write_metrics(d);
  out.push_back(d.take());
  metrics::Exposition e;
  render::TokenizerService::unloaded_for_docs(render::TokenizerMode::kLocalShadow, urls.size())->write_metrics(e);
  out.push_back(e.take());
  metrics::Exposition f;
  kv.write_metrics(f);
  out.push_back(f.take());
  // One engine with a companion (never started: every series at zero).
  const std::array<uint8_t, cache::kDigestSecretBytes> digest_secret{};
  companion::Client client(companion::ClientOptions{.upstream = 1,
                                                    .endpoint = *companion::parse_endpoint("unix:/run/companion.sock"),
                                                    .digest = cache::DigestKey::from_secret(digest_secret),
                                                    .inventory = {.shard = {.max_blocks = 1024}},
                                                    .decode = {},
                                                    .connect_timeout = std::chrono::milliseconds(2000),
                                                    .first_frame_timeout = std::chrono::milliseconds(10000),
                                                    .frame_timeout = std::chrono::milliseconds(3000),
                                                    .backoff_min = std::chrono::milliseconds(250),
                                                    .backoff_max = std::chrono::milliseconds(5000)},
                           companion::SessionSecret{});
  const companion::Client* clients[] = {nullptr, &client, nullptr};
  metrics::Exposition fc;
  companion::write_metrics(fc, clients);
  out.push_back(fc.take());
  // A companion process, never started: every series at zero.
  companion::ServerOptions so_companion;
  so_companion.digest = cache::DigestKey::from_secret(digest_secret);
  so_companion.inventory = {.shard = {.max_blocks = 1024}};
  const companion::Server companion_server(std::move(so_companion));
  metrics::Exposition fs;
  companion_server.write_metrics(fs);
  out.push_back(fs.take());
  upstream::EngineCatalogConfig catalog_config;
  catalog_config.upstreams = urls;
  catalog_config.discover = {true, false, false};
  catalog_config.declared = {{"qwen3"}, {"qwen3"}, {"llama"}};
  upstream::EngineCatalog catalog(catalog_config, nullptr);
  metrics::Exposition f2;
  catalog.write_metrics(f2);
  out.push_back(f2.take());
  metrics::Exposition fm;
  catalog.write_model_metrics(fm, [](size_t) { return true; });
  out.push_back(fm.take());
  route::PredictionCheck check(urls.size(), route::PredictionCheckConfig{}, clock);
  metrics::Exposition g;
  check.write_metrics(g);
  out.push_back(g.take());
  const request::TokenizeBudget budget;
  metrics::Exposition gb;
  budget.write_metrics(gb);
  out.push_back(gb.take());
  request::Admission room(request::AdmissionConfig{.client_labels = {"alice", "bob"}});
  metrics::Exposition ad;
  room.write_metrics(ad);
  out.push_back(ad.take());
  boost::asio::io_context parking_io;  // never run: every series at zero
  upstream::EngineParking parking(fleet, parking_io, clock, upstream::IdleDrainConfig{}, "");
  metrics::Exposition pk;
  parking.write_metrics(pk);
  out.push_back(pk.take());
  request::ApiKeys keys("", request::KeySet::parse("alice sk-a\nbob sk-b\nsk-c\n").value());
  metrics::Exposition h;
  keys.write_metrics(h);
  out.push_back(h.take());
  metrics::Exposition t;
  net::write_server_tls_metrics(t, nullptr);
  out.push_back(t.take());
  net::Roster roster(urls, 8);
  upstream::Fleet spare(roster, clock, 30000);
  upstream::Membership membership(roster, spare, 2, {}, {});
  metrics::Exposition m;
  membership.write_metrics(m);
  out.push_back(m.take());
  upstream::DnsDiscovery dns(upstream::DnsConfig{.names = {upstream::Listed{urls[0]}}}, nullptr);
  metrics::Exposition n;
  dns.write_metrics(n);
  out.push_back(n.take());
  upstream::PeerLoadBoard peer_board(urls.size(), 250, clock);
  upstream::PeerSync peers(upstream::PeerSyncConfig{}, fleet, peer_board);  // never started
  metrics::Exposition p;
  peers.write_metrics(p);
  out.push_back(p.take());
  out.emplace_back();  // the journal (not opened here; last)
  return out;
}

std::string metrics_markdown() {
  const std::vector<MetricSection> sections = metric_sections();
  const std::vector<std::string> rendered = render_sections_for_docs();
  std::string out =
      "# Metrics\n"
      "\n"
      "This file is generated by `ramjet --help-metrics` from the metric family lists in the "
      "source (one list per component; each writer takes its names and help from its list); do "
      "not edit it by hand. `metric_docs_test` fails when the two disagree; regenerate with "
      "`build/dev/src/app/ramjet --help-metrics > docs/metrics.md`.\n"
      "\n"
      "`GET /metrics` on the metrics listener (`RJ_METRICS_LISTEN`, default `:9090`) answers "
      "Prometheus text format 0.0.4. Upstream labels are opaque ordinals (`0`, `1`, ... in "
      "`RJ_UPSTREAM` order); hosts never appear. Every closed label set is exported from the "
      "start with zero values, so a rate over any series works before its first event; the "
      "open ones (`code` of `ramjet_requests_total`) appear once seen, and engine-reported "
      "gauges (`ramjet_engine_*`) once the engine reports them. Updates on the request path "
      "are relaxed atomic increments (no lock).\n"
      "\n"
      "`GET /metrics/upstream/{i}` on the same listener answers engine `i`'s own `/metrics`, "
      "passed through (bounded by `RJ_ENGINE_SCRAPE_MAX_BYTES` and "
      "`RJ_ENGINE_SCRAPE_TIMEOUT_MS`; 404 for an ordinal that does not exist, 502 with a JSON "
      "error when the engine does not answer).\n";
  for (size_t i = 0; i < sections.size(); ++i) {
    const MetricSection& s = sections[i];
    const auto seen = inspect(i < rendered.size() ? rendered[i] : std::string(), s.families);
    out += "\n## " + std::string(s.title) + "\n\n";
    out += "Written by `" + std::string(s.source.substr(0, s.source.find(" ("))) + "` (" +
           std::string(s.source.substr(s.source.find('(') + 1, s.source.find(')') - s.source.find('(') - 1)) +
           "); exported " + std::string(s.when) + ".\n\n";
    out += "| Family | Type | Labels | Description |\n| --- | --- | --- | --- |\n";
    for (const metrics::Family& f : s.families) {
      auto it = seen.find(std::string(f.name));
      std::string labels;
      std::string_view rest = f.labels;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string key(rest.substr(0, comma));
        rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
        if (!labels.empty()) labels += "; ";
        labels += "`" + key + "`";
        if (key == "upstream") {
          labels += " (ordinal)";
        } else if (it != seen.end()) {
          auto v = it->second.values.find(key);
          if (v != it->second.values.end() && !v->second.empty()) {
            labels += ": ";
            for (size_t k = 0; k < v->second.size(); ++k) labels += (k ? ", " : "") + v->second[k];
          }
        }
      }
      std::string doc(f.help);
      if (f.kind == metrics::MetricKind::kHistogram && it != seen.end() && !it->second.buckets.empty()) {
        doc += " Buckets (`le`): ";
        for (size_t k = 0; k < it->second.buckets.size(); ++k) doc += (k ? ", " : "") + it->second.buckets[k];
        doc += ".";
      }
      out += "| `" + std::string(f.name) + "` | " + std::string(metrics::metric_kind_name(f.kind)) + " | " +
             md_escape(labels.empty() ? "—" : labels) + " | " + md_escape(doc) + " |\n";
    }
  }
  return out;
}

}  // namespace ramjet::observe
