#include "config/config.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/options.h"

namespace ramjet::config {
namespace {

using Env = std::map<std::string, std::string>;

ParseResult run(const Env& env, const std::vector<std::string>& args = {}) {
  std::vector<std::string> names;
  for (const auto& [name, value] : env) names.push_back(name);
  EnvLookup lookup = [env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  return parse(names, lookup, args);
}

// An environment that is valid on its own.
Env valid(Env extra = {}) {
  extra.emplace("RJ_UPSTREAM", "http://engine-a:8000");
  return extra;
}

std::string all(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

// Number of errors that contain `needle`.
size_t count(const ParseResult& r, std::string_view needle) {
  size_t n = 0;
  for (const std::string& e : r.errors) n += e.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

TEST(Config, ReportsEveryProblemAtOnce) {
  auto r = run({{"RJ_UPSTREAM", "ftp://engine-a"},
                {"RJ_THREADS", "999"},
                {"RJ_LOG_LEVEL", "loud"},
                {"RJ_LISTEN", "nohost"},
                {"RJ_MAX_BODY_BYTES", "12"},
                {"RJ_BOGUS", "1"},
                {"MD_UPSTREAM", "x"}},
               {"--nope", "--probe-timeout-ms=abc", "--route-max-load-units"});
  EXPECT_EQ(r.errors.size(), 10u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_UPSTREAM: item 1:"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_THREADS=\"999\": out of bounds"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_LOG_LEVEL=\"loud\""), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_LISTEN=\"nohost\": missing port"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_MAX_BODY_BYTES=\"12\": out of bounds"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "unknown variable RJ_BOGUS"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "MD_UPSTREAM"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "unknown flag --nope"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "--probe-timeout-ms=\"abc\" (RJ_PROBE_TIMEOUT_MS): not a decimal"), 1u)
      << all(r.errors);
  EXPECT_EQ(count(r, "--route-max-load-units (RJ_ROUTE_MAX_LOAD_UNITS): missing value"), 1u)
      << all(r.errors);
}

TEST(Config, AValidEnvironmentHasNoErrors) {
  auto r = run(valid({{"RJ_THREADS", "4"}, {"PATH", "/usr/bin"}, {"HOME", "/root"}}));
  EXPECT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.action, Action::kRun);
  EXPECT_EQ(r.config.threads, 4u);
}

TEST(Config, UnknownRjNameFailsStartup) {
  auto r = run(valid({{"RJ_UPSTREAMS", "http://x"}, {"RJ_ROUTE_BETA_FACTOR", "4"}}));
  ASSERT_EQ(r.errors.size(), 2u) << all(r.errors);
  EXPECT_EQ(count(r, "unknown variable RJ_UPSTREAMS; did you mean RJ_UPSTREAM?"), 1u)
      << all(r.errors);
  EXPECT_EQ(count(r, "unknown variable RJ_ROUTE_BETA_FACTOR"), 1u) << all(r.errors);
}

TEST(Config, RetiredPrefixesListEveryStaleKey) {
  auto r = run(valid({{"MD_UPSTREAM", "http://x"},
                      {"DS4_TOKEN", "t"},
                      {"MD_ROUTE_ALPHA", "4"},
                      {"XMD_UNRELATED", "1"},
                      {"ds4_lowercase", "1"}}));
  ASSERT_EQ(r.errors.size(), 1u) << all(r.errors);
  const std::string& e = r.errors[0];
  EXPECT_NE(e.find("DS4_TOKEN, MD_ROUTE_ALPHA, MD_UPSTREAM"), std::string::npos) << e;
  EXPECT_EQ(e.find("XMD_UNRELATED"), std::string::npos) << e;
  EXPECT_EQ(e.find("http://x"), std::string::npos) << "values are never echoed: " << e;
}

TEST(Config, FlagsOverrideEnvironment) {
  auto r = run(valid({{"RJ_THREADS", "4"}, {"RJ_LISTEN", "127.0.0.1:1"}, {"RJ_LOG_LEVEL", "warn"}}),
               {"--threads=8", "--listen", "localhost:0", "--upstream", "http://b:1,http://c:2"});
  EXPECT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config.threads, 8u);
  EXPECT_EQ(r.config.listen_host, "localhost");
  EXPECT_EQ(r.config.listen_port, 0);
  EXPECT_EQ(r.config.log_level, "warn");
  ASSERT_EQ(r.config.upstreams.size(), 2u);
  EXPECT_EQ(r.config.upstreams[0].host, "b");
}

TEST(Config, BadEnvironmentValueIsReportedEvenWhenAFlagOverridesIt) {
  auto r = run(valid({{"RJ_THREADS", "many"}}), {"--threads=2"});
  EXPECT_EQ(r.config.threads, 2u);
  ASSERT_EQ(r.errors.size(), 1u) << all(r.errors);
  EXPECT_NE(r.errors[0].find("RJ_THREADS=\"many\""), std::string::npos) << r.errors[0];
}

TEST(Config, SecretsPrintRedacted) {
  const std::string secret = "s3cr3t-t0ken";
  auto r = run(valid({{"RJ_UPSTREAM_TOKEN", secret}}));
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config.upstream_token, secret);
  std::string described = all(describe(r.config));
  EXPECT_NE(described.find("RJ_UPSTREAM_TOKEN=<redacted>\n"), std::string::npos) << described;
  EXPECT_EQ(described.find(secret), std::string::npos) << described;
  // An unset secret shows as empty, which says "not configured" without revealing anything.
  EXPECT_NE(all(describe(Config{})).find("RJ_UPSTREAM_TOKEN=\n"), std::string::npos);
}

TEST(Config, ErrorsNeverEchoSecretsOrUpstreamHosts) {
  auto r = run({{"RJ_UPSTREAM", "ftp://private-host.internal:8000"}},
               {"--upstream-tokn=s3cr3t", "--upstream-token"});
  ASSERT_EQ(r.errors.size(), 3u) << all(r.errors);
  std::string errors = all(r.errors);
  EXPECT_EQ(errors.find("s3cr3t"), std::string::npos) << errors;
  EXPECT_EQ(errors.find("private-host"), std::string::npos) << errors;
  EXPECT_NE(errors.find("did you mean --upstream-token?"), std::string::npos) << errors;
}

TEST(Config, DescribePrintsOneLinePerOptionWithoutUpstreamHosts) {
  auto r = run({{"RJ_UPSTREAM", "http://private-host:8000,http://other:8000"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  auto lines = describe(r.config);
  ASSERT_EQ(lines.size(), options().size());
  EXPECT_EQ(lines[0], "RJ_UPSTREAM=2 upstreams (hosts not logged)");
  EXPECT_EQ(all(lines).find("private-host"), std::string::npos);
}

TEST(Config, UpstreamListTrimsSlashesAndWhitespace) {
  auto r = run({{"RJ_UPSTREAM",
                 " http://engine-a:8000/ ,http://engine-b/v1//,\thttp://10.0.0.3:9000/base/path/ "
                 ",HTTP://[fd00::1]:8001"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  const auto& u = r.config.upstreams;
  ASSERT_EQ(u.size(), 4u);
  EXPECT_EQ(u[0].host, "engine-a");
  EXPECT_EQ(u[0].port, 8000);
  EXPECT_EQ(u[0].base_path, "");
  EXPECT_EQ(u[1].host, "engine-b");
  EXPECT_EQ(u[1].port, 80);
  EXPECT_EQ(u[1].base_path, "/v1");
  EXPECT_EQ(u[2].host, "10.0.0.3");
  EXPECT_EQ(u[2].port, 9000);
  EXPECT_EQ(u[2].base_path, "/base/path");
  EXPECT_EQ(u[3].host, "fd00::1");
  EXPECT_EQ(u[3].port, 8001);
}

TEST(Config, HostHeaderOmitsPort80AndBracketsIpv6) {
  EXPECT_EQ((UpstreamUrl{"engine", 80, ""}).host_header(), "engine");
  EXPECT_EQ((UpstreamUrl{"engine", 8000, "/v1"}).host_header(), "engine:8000");
  EXPECT_EQ((UpstreamUrl{"fd00::1", 8000, ""}).host_header(), "[fd00::1]:8000");
  EXPECT_EQ((UpstreamUrl{"::1", 80, ""}).host_header(), "[::1]");
}

TEST(Config, HttpsUpstreamsAreTls) {
  auto r = run({{"RJ_UPSTREAM", "http://a:1,https://b,HTTPS://c:8443/v1"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  const auto& u = r.config.upstreams;
  ASSERT_EQ(u.size(), 3u);
  EXPECT_FALSE(u[0].tls);
  EXPECT_TRUE(u[1].tls);
  EXPECT_EQ(u[1].port, 443);
  EXPECT_EQ(u[1].host_header(), "b");  // the scheme's default port is left out
  EXPECT_TRUE(u[2].tls);
  EXPECT_EQ(u[2].host_header(), "c:8443");
  EXPECT_EQ(u[2].base_path, "/v1");
}

TEST(Config, TlsFilesComeInPairs) {
  auto r = run({{"RJ_UPSTREAM", "https://b"}, {"RJ_TLS_CERT_FILE", "/x.pem"}, {"RJ_UPSTREAM_TLS_KEY_FILE", "/k.pem"}});
  ASSERT_EQ(r.errors.size(), 2u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_TLS_CERT_FILE and RJ_TLS_KEY_FILE"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_UPSTREAM_TLS_CERT_FILE and RJ_UPSTREAM_TLS_KEY_FILE"), 1u) << all(r.errors);
}

TEST(Config, IdleDrainIsOffByDefaultAndDrainingNeedsTwoEngines) {
  auto r = run(valid());
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config.idle_drain_mode, "off");
  EXPECT_EQ(r.config.idle_drain_idle_after_s, 900);
  EXPECT_EQ(r.config.idle_drain_upstream_idle_after_s, 300);
  EXPECT_EQ(r.config.idle_drain_min_warm, 1u);
  EXPECT_EQ(r.config.idle_drain_max_parked, 1u);
  EXPECT_EQ(r.config.idle_drain_sleep_level, "1");
  r = run(valid({{"RJ_IDLE_DRAIN_MODE", "drain"}}));
  ASSERT_EQ(r.errors.size(), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_IDLE_DRAIN_MODE=drain needs at least two engines"), 1u) << all(r.errors);
  EXPECT_TRUE(run(valid({{"RJ_IDLE_DRAIN_MODE", "observe"}})).errors.empty());
  r = run({{"RJ_UPSTREAM", "http://a,http://b"}, {"RJ_IDLE_DRAIN_MODE", "drain"}, {"RJ_IDLE_DRAIN_SLEEP_LEVEL", "3"},
           {"RJ_IDLE_DRAIN_INTERVAL_SECONDS", "301"}});
  EXPECT_EQ(r.errors.size(), 2u) << all(r.errors);
}

TEST(Config, MalformedUpstreamsAreNamedByOrdinal) {
  auto r = run({{"RJ_UPSTREAM",
                 "engine:8000,http://,http://user:pw@h,http://h/x?y=1,http://h:0,http://h:65536,"
                 "ftp://h,http://a b,http://999.1.1.1,http://::1,http://h/sp ace,,http://[zz]:1"}});
  std::string errors = all(r.errors);
  EXPECT_EQ(r.errors.size(), 13u) << errors;
  for (int i = 1; i <= 13; ++i) {
    EXPECT_EQ(count(r, "RJ_UPSTREAM: item " + std::to_string(i) + ": "), 1u) << i << "\n" << errors;
  }
  EXPECT_EQ(count(r, "credentials"), 1u) << errors;
  EXPECT_EQ(errors.find("pw"), std::string::npos) << errors;
}

TEST(Config, DuplicateUpstreamsAreRejected) {
  auto r = run({{"RJ_UPSTREAM", "http://a:8000,http://A:8000/"}});
  ASSERT_EQ(r.errors.size(), 1u) << all(r.errors);
  EXPECT_NE(r.errors[0].find("item 2: repeats"), std::string::npos) << r.errors[0];
}

TEST(Config, MissingUpstreamIsRequired) {
  for (const Env& env : {Env{}, Env{{"RJ_UPSTREAM", ""}}, Env{{"RJ_UPSTREAM", " \t "}}}) {
    auto r = run(env);
    ASSERT_EQ(r.errors.size(), 1u) << all(r.errors);
    EXPECT_TRUE(r.errors[0].starts_with("RJ_UPSTREAM is required")) << r.errors[0];
  }
  // Empty items are a malformed list, not a missing one.
  auto commas = run({{"RJ_UPSTREAM", " , "}});
  EXPECT_EQ(count(commas, "RJ_UPSTREAM is required"), 0u) << all(commas.errors);
  EXPECT_EQ(count(commas, ": empty"), 2u) << all(commas.errors);
  // A blank flag clears an upstream list that came from the environment.
  auto cleared = run(valid(), {"--upstream="});
  EXPECT_EQ(count(cleared, "RJ_UPSTREAM is required"), 1u) << all(cleared.errors);
}

TEST(Config, HelpSkipsTheRequiredCheck) {
  auto help = run({}, {"--help"});
  EXPECT_EQ(help.action, Action::kHelp);
  EXPECT_TRUE(help.errors.empty()) << all(help.errors);
  auto md = run({}, {"--help-markdown"});
  EXPECT_EQ(md.action, Action::kHelpMarkdown);
  EXPECT_TRUE(md.errors.empty()) << all(md.errors);
  // Other problems are still reported; main decides what to do with them.
  auto bad = run({{"RJ_THREADS", "x"}}, {"--help"});
  EXPECT_EQ(bad.errors.size(), 1u) << all(bad.errors);
}

TEST(Config, DefaultsMatchTheReference) {
  auto r = run(valid());
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  const Config& c = r.config;
  EXPECT_EQ(c.listen_host, "0.0.0.0");
  EXPECT_EQ(c.listen_port, 8000);
  EXPECT_EQ(c.metrics_host, "0.0.0.0");
  EXPECT_EQ(c.metrics_port, 9090);
  EXPECT_EQ(c.max_tokens_strip, 100000u);
  EXPECT_EQ(c.advertise_ctx_margin, 16384u);
  EXPECT_EQ(c.max_body_bytes, 64u << 20);
  EXPECT_EQ(c.affinity, "prefix");
  EXPECT_EQ(c.log_level, "info");
  EXPECT_EQ(c.route_alpha, 4.0);
  EXPECT_EQ(c.route_max_overlap_blocks, 32u);
  EXPECT_EQ(c.route_chunk_bytes, 2048u);
  EXPECT_EQ(c.route_max_prefix_bytes, 2u << 20);
  EXPECT_EQ(c.route_index_capacity, 100000u);
  EXPECT_EQ(c.route_load_unit_bytes, 32768u);
  EXPECT_EQ(c.route_max_load_units, 8u);
  EXPECT_TRUE(c.route_phase_aware_load);
  EXPECT_TRUE(c.route_single_flight);
  EXPECT_EQ(c.route_single_flight_timeout_ms, 60000u);
  EXPECT_EQ(c.route_single_flight_capacity, 1024u);
  EXPECT_EQ(c.profile_short_max_tokens, 256u);
  EXPECT_FALSE(c.route_journal);
  EXPECT_TRUE(c.route_journal_file.empty());
  EXPECT_EQ(c.ready_successes, 3u);
  EXPECT_EQ(c.ready_stable_seconds, 30u);
  EXPECT_TRUE(c.upstream_profiles.empty());
  EXPECT_TRUE(c.upstream_token.empty());
  EXPECT_EQ(c.engine_scrape_interval_ms, 500u);  // short: routing reads it (RJ_ROUTE_ENGINE_LOAD)
  EXPECT_TRUE(c.route_engine_load);
  EXPECT_EQ(c.route_engine_load_waiting_units, 2.0);
  EXPECT_EQ(c.engine_scrape_timeout_ms, 2000u);
  EXPECT_EQ(c.engine_scrape_max_bytes, 4u << 20);
  EXPECT_TRUE(c.gpu_metrics_urls.empty());
}

TEST(Config, TheModelFolderIsTheOneSettingForLocalTokens) {
  auto plain = run(valid());
  ASSERT_TRUE(plain.errors.empty()) << all(plain.errors);
  EXPECT_EQ(plain.config.exact_tokens, "auto");
  EXPECT_FALSE(exact_tokens_local(plain.config));  // auto without a folder: remote
  auto folder = run(valid({{"RJ_MODEL_DIR", "/models/qwen3"}}));
  ASSERT_TRUE(folder.errors.empty()) << all(folder.errors);
  EXPECT_TRUE(exact_tokens_local(folder.config));
  auto remote = run(valid({{"RJ_MODEL_DIR", "/models/qwen3"}, {"RJ_EXACT_TOKENS", "remote"}}));
  EXPECT_FALSE(exact_tokens_local(remote.config));
  // The folder names the files: no second source for them.
  auto both = run(valid({{"RJ_MODEL_DIR", "/m"}, {"RJ_TOKENIZER_PATH", "/m/tokenizer.json"},
                         {"RJ_CHAT_TEMPLATE_SHA256", std::string(64, 'a')}}));
  EXPECT_EQ(count(both, "set with RJ_MODEL_DIR"), 2u) << all(both.errors);
  // local needs the files from somewhere, and a renderer that is not a shadow's.
  auto nothing = run(valid({{"RJ_EXACT_TOKENS", "local"}}));
  EXPECT_EQ(count(nothing, "RJ_EXACT_TOKENS=local needs the model's files: RJ_MODEL_DIR"), 1u) << all(nothing.errors);
  auto shadow = run(valid({{"RJ_MODEL_DIR", "/m"}, {"RJ_TOKENIZER_MODE", "local-shadow"}, {"RJ_EXACT_TOKENS", "local"}}));
  EXPECT_EQ(count(shadow, "needs RJ_TOKENIZER_MODE=local or off"), 1u) << all(shadow.errors);
  auto auto_shadow = run(valid({{"RJ_MODEL_DIR", "/m"}, {"RJ_TOKENIZER_MODE", "local-shadow"}}));
  ASSERT_TRUE(auto_shadow.errors.empty()) << all(auto_shadow.errors);
  EXPECT_FALSE(exact_tokens_local(auto_shadow.config));  // a shadow's folder: exact asks the engines
}

TEST(Config, GpuMetricsUrlsAreOnePerUpstreamAndNeverEchoed) {
  auto ok = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"},
                 {"RJ_GPU_METRICS_URLS", "http://dcgm-a:9400/metrics, http://dcgm-b:9400"}});
  ASSERT_TRUE(ok.errors.empty()) << all(ok.errors);
  ASSERT_EQ(ok.config.gpu_metrics_urls.size(), 2u);
  EXPECT_EQ(ok.config.gpu_metrics_urls[0].host, "dcgm-a");
  EXPECT_EQ(ok.config.gpu_metrics_urls[0].base_path, "/metrics");
  EXPECT_EQ(ok.config.gpu_metrics_urls[1].base_path, "");
  const std::string described = all(describe(ok.config));
  EXPECT_NE(described.find("RJ_GPU_METRICS_URLS=2 URLs (hosts not logged)\n"), std::string::npos) << described;
  EXPECT_EQ(described.find("dcgm-a"), std::string::npos) << described;

  auto short_list = run({{"RJ_UPSTREAM", "http://a:1,http://b:1,http://c:1"},
                         {"RJ_GPU_METRICS_URLS", "http://secret-dcgm:9400"}});
  ASSERT_EQ(short_list.errors.size(), 1u) << all(short_list.errors);
  EXPECT_NE(short_list.errors[0].find("RJ_GPU_METRICS_URLS: 1 URLs for 3 RJ_UPSTREAM entries"), std::string::npos)
      << short_list.errors[0];
  EXPECT_EQ(all(short_list.errors).find("secret-dcgm"), std::string::npos);
}

TEST(Config, KvEventEndpointsAreOnePerUpstreamCheckedAndNeverEchoed) {
  auto ok = run({{"RJ_UPSTREAM", "http://a:1,http://b:1,http://c:1"},
                 {"RJ_KV_EVENT_LIVE_ENDPOINTS", "tcp://engine-a:5557,-,ipc:///run/vllm/kv"},
                 {"RJ_KV_EVENT_REPLAY_ENDPOINTS", "tcp://[fd00::1]:5558,-,-"},
                 {"RJ_KV_EVENT_TOPIC", "kv-events"}});
  ASSERT_TRUE(ok.errors.empty()) << all(ok.errors);
  EXPECT_EQ(ok.config.kv_event_live_endpoints[1], "-");
  EXPECT_EQ(ok.config.kv_event_topic, "kv-events");
  const std::string described = all(describe(ok.config));
  EXPECT_NE(described.find("RJ_KV_EVENT_LIVE_ENDPOINTS=3 items (hosts not logged)\n"), std::string::npos) << described;
  EXPECT_EQ(described.find("engine-a"), std::string::npos) << described;

  auto bad = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"},
                  {"RJ_KV_EVENT_LIVE_ENDPOINTS", "tcp://*x:5557,udp://secret-host:1,tcp://secret-host:0"}});
  EXPECT_EQ(count(bad, "RJ_KV_EVENT_LIVE_ENDPOINTS: 3 endpoints for 2 RJ_UPSTREAM entries"), 1u) << all(bad.errors);
  EXPECT_EQ(count(bad, "item 1: a subscriber connects"), 1u) << all(bad.errors);
  // * alone is each engine's own address (vLLM's own bind form).
  EXPECT_TRUE(run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_KV_EVENT_LIVE_ENDPOINTS", "tcp://*:5557"}}).errors.empty());
  EXPECT_EQ(count(bad, "item 2: expected tcp://host:port"), 1u) << all(bad.errors);
  EXPECT_EQ(count(bad, "item 3: port must be 1..65535"), 1u) << all(bad.errors);
  EXPECT_EQ(all(bad.errors).find("secret-host"), std::string::npos);

  auto replay_only = run(valid({{"RJ_KV_EVENT_REPLAY_ENDPOINTS", "tcp://a:5558"}}));
  EXPECT_EQ(count(replay_only, "set without RJ_KV_EVENT_LIVE_ENDPOINTS"), 1u) << all(replay_only.errors);
}

TEST(Config, PeersNeedAListenAddressASecretAndHostPortItems) {
  auto ok = run(valid({{"RJ_PEERS", "ramjet-peers.llm.svc:7070,10.0.0.2:7070,[fd00::3]:7070"},
                       {"RJ_PEER_LISTEN", "0.0.0.0:7070"},
                       {"RJ_PEER_SECRET_FILE", "/etc/ramjet/peer.key"}}));
  ASSERT_TRUE(ok.errors.empty()) << all(ok.errors);
  EXPECT_EQ(ok.config.peers.size(), 3u);
  EXPECT_EQ(ok.config.peer_interval_ms, 50u);
  const std::string described = all(describe(ok.config));
  EXPECT_EQ(described.find("ramjet-peers"), std::string::npos) << "hosts are not logged: " << described;
  auto missing = run(valid({{"RJ_PEERS", "a:7070"}}));
  EXPECT_EQ(count(missing, "RJ_PEER_LISTEN: RJ_PEERS needs"), 1u) << all(missing.errors);
  EXPECT_EQ(count(missing, "RJ_PEER_SECRET_FILE: RJ_PEERS needs"), 1u) << all(missing.errors);
  auto bad = run(valid({{"RJ_PEERS", "a:7070,b,c:http,d:70000"}, {"RJ_PEER_LISTEN", ":7070"}, {"RJ_PEER_SECRET_FILE", "/k"}}));
  EXPECT_EQ(count(bad, "RJ_PEERS: item 2 is not host:port"), 1u) << all(bad.errors);
  EXPECT_EQ(count(bad, "RJ_PEERS: item 3 is not host:port"), 1u) << all(bad.errors);
  EXPECT_EQ(count(bad, "RJ_PEERS: item 4 is not host:port"), 1u) << all(bad.errors);
  EXPECT_EQ(bad.errors.size(), 3u) << all(bad.errors);
  auto alone = run(valid({{"RJ_PEER_LISTEN", ":7070"}, {"RJ_PEER_SECRET_FILE", "/k"}}));
  EXPECT_EQ(count(alone, "RJ_PEER_LISTEN: set without RJ_PEERS"), 1u) << all(alone.errors);
  EXPECT_EQ(count(alone, "RJ_PEER_SECRET_FILE: set without RJ_PEERS"), 1u) << all(alone.errors);
  auto fast = run(valid({{"RJ_PEER_INTERVAL_MS", "5"}}));
  EXPECT_FALSE(fast.errors.empty()) << "10..1000";
}

TEST(Config, CompanionInventoryNeedsOneEndpointPerUpstreamAndBothSecretFiles) {
  EXPECT_EQ(run(valid()).config.exact_inventory, "events");
  auto ok = run({{"RJ_UPSTREAM", "http://a:1,http://b:1,http://c:1"},
                 {"RJ_EXACT_INVENTORY", "companion"},
                 {"RJ_COMPANION_ENDPOINTS", "unix:/run/ramjet/companion-a.sock,-,tcp://[fd00::7]:7070"},
                 {"RJ_COMPANION_SECRET_FILE", "/etc/ramjet/session.key"},
                 {"RJ_COMPANION_DIGEST_SECRET_FILE", "/etc/ramjet/digest.key"},
                 {"RJ_KV_EVENT_LIVE_ENDPOINTS", "-,tcp://b:5557,-"}});
  ASSERT_TRUE(ok.errors.empty()) << all(ok.errors);
  EXPECT_EQ(ok.config.exact_inventory, "companion");
  EXPECT_EQ(ok.config.companion_endpoints[1], "-");
  EXPECT_EQ(ok.config.companion_secret_file, "/etc/ramjet/session.key");
  const std::string described = all(describe(ok.config));
  EXPECT_NE(described.find("RJ_COMPANION_ENDPOINTS=3 items (hosts not logged)\n"), std::string::npos) << described;
  EXPECT_EQ(described.find("fd00::7"), std::string::npos) << described;
  // Exact routing may be asked for by companions alone.
  auto on = run({{"RJ_UPSTREAM", "http://a:1"},
                 {"RJ_EXACT_INVENTORY", "companion"},
                 {"RJ_EXACT_ROUTE_MODE", "on"},
                 {"RJ_COMPANION_ENDPOINTS", "tcp://a:7070"},
                 {"RJ_COMPANION_SECRET_FILE", "/s"},
                 {"RJ_COMPANION_DIGEST_SECRET_FILE", "/d"}});
  EXPECT_TRUE(on.errors.empty()) << all(on.errors);
  // One source per engine.
  auto both = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"},
                   {"RJ_EXACT_INVENTORY", "companion"},
                   {"RJ_COMPANION_ENDPOINTS", "tcp://a:7070,-"},
                   {"RJ_COMPANION_SECRET_FILE", "/s"},
                   {"RJ_COMPANION_DIGEST_SECRET_FILE", "/d"},
                   {"RJ_KV_EVENT_LIVE_ENDPOINTS", "tcp://a:5557,tcp://b:5557"}});
  EXPECT_EQ(count(both, "item 1 names a companion for an engine that also has an RJ_KV_EVENT_LIVE_ENDPOINTS item"), 1u)
      << all(both.errors);
  EXPECT_EQ(both.errors.size(), 1u) << all(both.errors);

  auto missing = run(valid({{"RJ_EXACT_INVENTORY", "companion"}}));
  EXPECT_EQ(count(missing, "RJ_COMPANION_ENDPOINTS: 0 endpoints for 1 RJ_UPSTREAM entries"), 1u) << all(missing.errors);
  EXPECT_EQ(count(missing, "RJ_COMPANION_SECRET_FILE: RJ_EXACT_INVENTORY=companion needs"), 1u) << all(missing.errors);
  EXPECT_EQ(count(missing, "RJ_COMPANION_DIGEST_SECRET_FILE: RJ_EXACT_INVENTORY=companion needs"), 1u)
      << all(missing.errors);

  auto bad = run({{"RJ_UPSTREAM", "http://a:1,http://b:1,http://c:1,http://d:1"},
                  {"RJ_EXACT_INVENTORY", "companion"},
                  {"RJ_COMPANION_ENDPOINTS", "unix:relative/secret-path,udp://secret-host:1,tcp://secret-host:0,ipc:///x"},
                  {"RJ_COMPANION_SECRET_FILE", "/s"},
                  {"RJ_COMPANION_DIGEST_SECRET_FILE", "/d"}});
  EXPECT_EQ(count(bad, "item 1: unix: needs an absolute path"), 1u) << all(bad.errors);
  EXPECT_EQ(count(bad, "item 2: expected unix:/path, tcp://host:port or -"), 1u) << all(bad.errors);
  EXPECT_EQ(count(bad, "item 3: port must be 1..65535"), 1u) << all(bad.errors);
  EXPECT_EQ(count(bad, "item 4: expected unix:/path"), 1u) << all(bad.errors);
  EXPECT_EQ(all(bad.errors).find("secret-"), std::string::npos);
  auto wrong_count = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"},
                          {"RJ_EXACT_INVENTORY", "companion"},
                          {"RJ_COMPANION_ENDPOINTS", "tcp://a:7070"},
                          {"RJ_COMPANION_SECRET_FILE", "/s"},
                          {"RJ_COMPANION_DIGEST_SECRET_FILE", "/d"}});
  EXPECT_EQ(count(wrong_count, "RJ_COMPANION_ENDPOINTS: 1 endpoints for 2 RJ_UPSTREAM entries"), 1u)
      << all(wrong_count.errors);

  auto stray = run(valid({{"RJ_COMPANION_ENDPOINTS", "tcp://a:7070"}, {"RJ_COMPANION_SECRET_FILE", "/s"}}));
  EXPECT_EQ(count(stray, "set without RJ_EXACT_INVENTORY=companion"), 2u) << all(stray.errors);
  EXPECT_EQ(count(run(valid({{"RJ_EXACT_INVENTORY", "digests"}})), "RJ_EXACT_INVENTORY"), 1u);
}

TEST(Config, EngineScrapeIntervalZeroTurnsTheScrapeOff) {
  auto r = run(valid({{"RJ_ENGINE_SCRAPE_INTERVAL_MS", "0"}}));
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config.engine_scrape_interval_ms, 0u);
  EXPECT_EQ(count(run(valid({{"RJ_ENGINE_SCRAPE_MAX_BYTES", "1024"}})), "out of bounds"), 1u);
}

TEST(Config, HelpMetricsIsAnActionThatSkipsTheRequiredCheck) {
  auto r = run({}, {"--help-metrics"});
  EXPECT_EQ(r.action, Action::kHelpMetrics);
  EXPECT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(count(run({}, {"--help-metrics=1"}), "--help-metrics takes no value"), 1u);
}

TEST(Config, TheDefaultAffinityIsPrefix) {
  EXPECT_EQ(Config{}.affinity, "prefix");
  EXPECT_EQ(find_by_env("RJ_AFFINITY")->default_text, "prefix");
  EXPECT_EQ(bounds_text(*find_by_env("RJ_AFFINITY")), "prefix, load, round_robin");
}

TEST(Config, TableDefaultsAreTheConfigDefaults) {
  auto lines = describe(Config{});
  auto table = options();
  ASSERT_EQ(lines.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].required) continue;
    EXPECT_EQ(lines[i], std::string(table[i].env) + "=" + std::string(table[i].default_text));
  }
}

TEST(Config, BoundsAreEnforced) {
  for (const Option& o : options()) {
    if (o.type != Type::kUint) continue;
    auto value = [&](uint64_t v) { return run(valid({{std::string(o.env), std::to_string(v)}})); };
    EXPECT_TRUE(value(o.min).errors.empty()) << o.env << " min: " << all(value(o.min).errors);
    EXPECT_TRUE(value(o.max).errors.empty()) << o.env << " max: " << all(value(o.max).errors);
    EXPECT_EQ(count(value(o.max + 1), "out of bounds"), 1u) << o.env;
    if (o.min > 0) {
      EXPECT_EQ(count(value(o.min - 1), "out of bounds"), 1u) << o.env;
    }
  }
  for (const Option& o : options()) {
    if (o.type != Type::kDecimal) continue;
    auto value = [&](double v) { return run(valid({{std::string(o.env), format_decimal(v)}})); };
    EXPECT_TRUE(value(o.dmin).errors.empty()) << o.env << " min: " << all(value(o.dmin).errors);
    EXPECT_TRUE(value(o.dmax).errors.empty()) << o.env << " max: " << all(value(o.dmax).errors);
    EXPECT_EQ(count(value(o.dmax + 0.5), "out of bounds"), 1u) << o.env;
    if (o.dmin > 0) {
      EXPECT_EQ(count(value(o.dmin / 2), "out of bounds"), 1u) << o.env;
    }
  }
  EXPECT_EQ(count(run({{"RJ_THREADS", "99999999999999999999999"}}), "out of bounds"), 1u);
  EXPECT_EQ(count(run({{"RJ_THREADS", "-1"}}), "not a decimal integer"), 1u);

  std::string many;
  for (int i = 0; i < 257; ++i) many += "http://e" + std::to_string(i) + ",";
  auto r257 = run({{"RJ_UPSTREAM", many.substr(0, many.size() - 1)}});
  EXPECT_EQ(count(r257, "RJ_UPSTREAM: 257 items; expected 0..256"), 1u) << all(r257.errors);
  auto r256 = run({{"RJ_UPSTREAM", many.substr(0, many.rfind(",http://e256"))}});
  EXPECT_TRUE(r256.errors.empty()) << all(r256.errors);
  EXPECT_EQ(r256.config.upstreams.size(), 256u);
}

TEST(Config, ListenAddressesAcceptIpv4LocalhostHostnamesAndPortZero) {
  for (std::string ok : {"127.0.0.1:0", "localhost:65535", "lb-1.example.com:8000", "ramjet_lb:80",
                         " 0.0.0.0:9090 "}) {
    auto r = run(valid({{"RJ_METRICS_LISTEN", ok}}));
    EXPECT_TRUE(r.errors.empty()) << ok << ": " << all(r.errors);
  }
  for (std::string bad : {"1.2.3.256:80", "host:65536", ":8000", "host", "[::1]:80", "::1:80",
                          "ho st:80", "-host:80", "host:", "host:8o"}) {
    auto r = run(valid({{"RJ_LISTEN", bad}}));
    EXPECT_EQ(count(r, "RJ_LISTEN="), 1u) << bad << ": " << all(r.errors);
  }
}

TEST(Config, EnumValuesAreCaseInsensitiveAndCanonical) {
  auto r = run(valid({{"RJ_LOG_LEVEL", "WARN"}, {"RJ_AFFINITY", " Load "}}));
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config.log_level, "warn");
  EXPECT_EQ(r.config.affinity, "load");
  for (std::string policy : {"prefix", "load", "round_robin"}) {
    auto p = run(valid({{"RJ_AFFINITY", policy}}));
    EXPECT_TRUE(p.errors.empty()) << policy << ": " << all(p.errors);
    EXPECT_EQ(p.config.affinity, policy);
  }
  auto bad = run(valid({{"RJ_AFFINITY", "kv"}}));
  EXPECT_EQ(count(bad, "expected one of: prefix, load, round_robin"), 1u) << all(bad.errors);
}

TEST(Config, DecimalsAcceptPlainNumbersWithAnOptionalFraction) {
  Problems p;
  for (auto [text, want] :
       std::initializer_list<std::pair<std::string_view, double>>{{"0", 0},
                                                                  {"4", 4},
                                                                  {"2.5", 2.5},
                                                                  {"0.125", 0.125},
                                                                  {" 1000 ", 1000},
                                                                  {"007.50", 7.5},
                                                                  {"0.0", 0}}) {
    auto v = parse_decimal(text, 0, 1000, p);
    ASSERT_TRUE(v.has_value()) << text << ": " << all(p);
    EXPECT_EQ(*v, want) << text;
  }
  EXPECT_TRUE(p.empty()) << all(p);
}

TEST(Config, DecimalsRefuseSignsExponentsHexInfNanAndABarePoint) {
  for (std::string_view bad : {"-1", "+1", "1e3", "1E3", "inf", "nan", "INF", "0x10", "4.", ".5",
                               ".", "", " ", "1.2.3", "1,5", "4 5", "2.5x", "-0"}) {
    Problems p;
    EXPECT_FALSE(parse_decimal(bad, 0, 1000, p).has_value()) << bad;
    ASSERT_EQ(p.size(), 1u) << bad << ": " << all(p);
    EXPECT_TRUE(p[0].starts_with("not a decimal number") || p[0].starts_with("empty"))
        << bad << ": " << p[0];
  }
}

TEST(Config, DecimalBoundsAreInclusiveAndReportedAsNumbers) {
  Problems p;
  EXPECT_EQ(parse_decimal("0.5", 0.5, 2.5, p), 0.5);
  EXPECT_EQ(parse_decimal("2.5", 0.5, 2.5, p), 2.5);
  EXPECT_TRUE(p.empty()) << all(p);
  EXPECT_FALSE(parse_decimal("0.499", 0.5, 2.5, p).has_value());
  EXPECT_FALSE(parse_decimal("2.5000001", 0.5, 2.5, p).has_value());
  std::string huge(400, '9');  // beyond any double
  EXPECT_FALSE(parse_decimal(huge, 0.5, 2.5, p).has_value());
  ASSERT_EQ(p.size(), 3u) << all(p);
  for (const std::string& problem : p) EXPECT_EQ(problem, "out of bounds; expected 0.5..2.5");

  auto r = run(valid({{"RJ_ROUTE_ALPHA", "1000.5"}}));
  EXPECT_EQ(count(r, "RJ_ROUTE_ALPHA=\"1000.5\": out of bounds; expected 0..1000"), 1u)
      << all(r.errors);
  auto ok = run(valid(), {"--route-alpha=0.25"});
  EXPECT_TRUE(ok.errors.empty()) << all(ok.errors);
  EXPECT_EQ(ok.config.route_alpha, 0.25);
  EXPECT_NE(all(describe(ok.config)).find("RJ_ROUTE_ALPHA=0.25\n"), std::string::npos);
}

TEST(Config, DecimalsFormatWithoutExponentOrTrailingZeros) {
  EXPECT_EQ(format_decimal(0), "0");
  EXPECT_EQ(format_decimal(4), "4");
  EXPECT_EQ(format_decimal(2.5), "2.5");
  EXPECT_EQ(format_decimal(0.125), "0.125");
  EXPECT_EQ(format_decimal(1e20), "100000000000000000000");
}

TEST(Config, UpstreamProfilesAreMtpOrStandardStoredLowercase) {
  auto r = run({{"RJ_UPSTREAM", "http://a:1,http://b:1,http://c:1"},
                {"RJ_UPSTREAM_PROFILES", " MTP ,standard,Standard"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config.upstream_profiles, (std::vector<std::string>{"mtp", "standard", "standard"}));
  EXPECT_NE(all(describe(r.config)).find("RJ_UPSTREAM_PROFILES=mtp,standard,standard\n"),
            std::string::npos);
}

TEST(Config, AnEngineWithDataParallelRanksBecomesOneEntryPerRank) {
  auto r = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"},
                {"RJ_UPSTREAM_DP_SIZE", "3,1"},
                {"RJ_UPSTREAM_PROFILES", "mtp,standard"},
                {"RJ_KV_EVENT_LIVE_ENDPOINTS", "tcp://*:5557,discover"},
                {"RJ_KV_EVENT_REPLAY_ENDPOINTS", "tcp://*:5600,-"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  const Config& c = r.config;
  ASSERT_EQ(c.upstreams.size(), 4u);
  EXPECT_EQ(c.upstreams[2].host, "a");
  EXPECT_EQ(c.upstreams[3].host, "b");
  EXPECT_EQ(c.upstream_ranks, (std::vector<std::optional<uint32_t>>{0u, 1u, 2u, std::nullopt}));
  EXPECT_EQ(c.upstream_profiles, (std::vector<std::string>{"mtp", "mtp", "mtp", "standard"}));
  // vLLM offsets each rank's publisher ports by its rank.
  EXPECT_EQ(c.kv_event_live_endpoints,
            (std::vector<std::string>{"tcp://*:5557", "tcp://*:5558", "tcp://*:5559", "discover"}));
  EXPECT_EQ(c.kv_event_replay_endpoints, (std::vector<std::string>{"tcp://*:5600", "tcp://*:5601", "tcp://*:5602", "-"}));
  EXPECT_EQ(c.slots(), 4u);
  EXPECT_EQ(dp_size_item(c, 0), 3u);
  EXPECT_EQ(dp_size_item(c, 3), 1u);
}

TEST(Config, AnAutoDataParallelSizeIsOneTargetUntilTheEngineSaysAndLeavesRoomForItsRanks) {
  auto r = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_UPSTREAM_DP_SIZE", "auto,2"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  const Config& c = r.config;
  ASSERT_EQ(c.upstreams.size(), 3u);  // a, then b's two ranks
  EXPECT_EQ(c.upstream_ranks, (std::vector<std::optional<uint32_t>>{std::nullopt, 0u, 1u}));
  EXPECT_TRUE(dp_auto_item(c, 0));
  EXPECT_FALSE(dp_auto_item(c, 1));
  EXPECT_EQ(dp_size_item(c, 0), 1u);
  EXPECT_TRUE(c.dp_discovered());
  EXPECT_EQ(c.slots(), 64u);  // its ranks join later
  auto off = run({{"RJ_UPSTREAM", "http://a:1"}, {"RJ_UPSTREAM_DP_SIZE", "auto"}, {"RJ_ENGINE_SCRAPE_INTERVAL_MS", "0"}});
  ASSERT_EQ(off.errors.size(), 1u) << all(off.errors);
  EXPECT_NE(off.errors[0].find("RJ_ENGINE_SCRAPE_INTERVAL_MS"), std::string::npos);
  auto full = run({{"RJ_UPSTREAM", "http://a:1"}, {"RJ_UPSTREAM_DP_SIZE", "auto"}, {"RJ_UPSTREAM_MAX", "1"}});
  ASSERT_EQ(full.errors.size(), 1u) << all(full.errors);
  EXPECT_NE(full.errors[0].find("RJ_UPSTREAM_MAX"), std::string::npos);
}

TEST(Config, DataParallelSizesAreCountedPerSourceAndBounded) {
  auto r = run({{"RJ_UPSTREAM", "http://a:1"}, {"RJ_UPSTREAM_DNS", "vllm:8000"}, {"RJ_UPSTREAM_DP_SIZE", "2,4"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config.upstreams.size(), 2u);
  EXPECT_EQ(dp_size_item(r.config, 2), 4u);  // the DNS name's item follows the expanded entries
  auto few = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_UPSTREAM_DP_SIZE", "2"}});
  ASSERT_EQ(few.errors.size(), 1u) << all(few.errors);
  EXPECT_NE(few.errors[0].find("RJ_UPSTREAM_DP_SIZE: 1 items for 2 RJ_UPSTREAM entries"), std::string::npos);
  for (const char* bad : {"0", "x", "1025", "-1"}) {
    auto b = run({{"RJ_UPSTREAM", "http://a:1"}, {"RJ_UPSTREAM_DP_SIZE", bad}});
    ASSERT_EQ(b.errors.size(), 1u) << bad;
    EXPECT_EQ(b.errors[0], "RJ_UPSTREAM_DP_SIZE: item 1 is neither a number of ranks in 1..1024 nor auto");
  }
  auto one = run({{"RJ_UPSTREAM", "http://a:1"}, {"RJ_UPSTREAM_DP_SIZE", "1"}});
  ASSERT_TRUE(one.errors.empty());
  EXPECT_EQ(one.config.upstream_ranks, (std::vector<std::optional<uint32_t>>{std::nullopt}));
}

TEST(Config, EngineKindsAreVllmOrSglangPerSourceAndFollowTheRanks) {
  auto r = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"},
                {"RJ_UPSTREAM_DNS", "sgl:30000"},
                {"RJ_UPSTREAM_DP_SIZE", "2,1,4"},
                {"RJ_UPSTREAM_ENGINE", " SGLang ,vllm,sglang"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  const Config& c = r.config;
  ASSERT_EQ(c.upstreams.size(), 3u);  // a's two ranks, then b
  EXPECT_EQ(c.upstream_engines, (std::vector<std::string>{"sglang", "sglang", "vllm", "sglang"}));
  EXPECT_EQ(engine_kind_item(c, 0), EngineKind::kSglang);
  EXPECT_EQ(engine_kind_item(c, 1), EngineKind::kSglang);
  EXPECT_EQ(engine_kind_item(c, 2), EngineKind::kVllm);
  EXPECT_EQ(engine_kind_item(c, 3), EngineKind::kSglang);  // the DNS name's, after the expanded entries
  EXPECT_NE(all(describe(c)).find("RJ_UPSTREAM_ENGINE=sglang,sglang,vllm,sglang\n"), std::string::npos);

  auto unset = run({{"RJ_UPSTREAM", "http://a:1"}});
  ASSERT_TRUE(unset.errors.empty());
  EXPECT_EQ(engine_kind_item(unset.config, 0), EngineKind::kVllm);
  EXPECT_EQ(engine_kind_item(unset.config, 5), EngineKind::kVllm);
}

TEST(Config, AnUnknownEngineKindOrAWrongCountIsNamed) {
  auto bad = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_UPSTREAM_ENGINE", "vllm,trtllm"}});
  ASSERT_EQ(bad.errors.size(), 1u) << all(bad.errors);
  EXPECT_EQ(bad.errors[0], "RJ_UPSTREAM_ENGINE: item 2: expected vllm or sglang");
  auto empty_item = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_UPSTREAM_ENGINE", "sglang,"}});
  ASSERT_EQ(empty_item.errors.size(), 1u) << all(empty_item.errors);
  EXPECT_EQ(empty_item.errors[0], "RJ_UPSTREAM_ENGINE: item 2 is empty");
  auto few = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_UPSTREAM_ENGINE", "sglang"}});
  ASSERT_EQ(few.errors.size(), 1u) << all(few.errors);
  EXPECT_NE(few.errors[0].find("RJ_UPSTREAM_ENGINE: 1 items for 2 RJ_UPSTREAM entries and 0 RJ_UPSTREAM_DNS names"),
            std::string::npos)
      << few.errors[0];
}

TEST(Config, AnUnknownUpstreamProfileIsNamedByItsPosition) {
  auto r = run({{"RJ_UPSTREAM", "http://a:1,http://b:1,http://c:1"},
                {"RJ_UPSTREAM_PROFILES", "mtp,standard,eagle"}});
  ASSERT_EQ(r.errors.size(), 1u) << all(r.errors);
  EXPECT_EQ(r.errors[0], "RJ_UPSTREAM_PROFILES: item 3: expected mtp or standard");
  EXPECT_TRUE(r.config.upstream_profiles.empty());

  auto empty_item =
      run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_UPSTREAM_PROFILES", "mtp,"}});
  ASSERT_EQ(empty_item.errors.size(), 1u) << all(empty_item.errors);
  EXPECT_EQ(empty_item.errors[0], "RJ_UPSTREAM_PROFILES: item 2 is empty");
}

TEST(Config, UpstreamProfilesMustMatchTheUpstreamCount) {
  auto more =
      run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_UPSTREAM_PROFILES", "mtp,standard,mtp"}});
  ASSERT_EQ(more.errors.size(), 1u) << all(more.errors);
  EXPECT_NE(more.errors[0].find("RJ_UPSTREAM_PROFILES: 3 profiles for 2 RJ_UPSTREAM entries"),
            std::string::npos)
      << more.errors[0];
  auto fewer = run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}}, {"--upstream-profiles=mtp"});
  EXPECT_EQ(count(fewer, "1 profiles for 2 RJ_UPSTREAM entries"), 1u) << all(fewer.errors);
  // Empty means "no profiles"; a missing or invalid upstream list is reported on its own.
  EXPECT_TRUE(
      run({{"RJ_UPSTREAM", "http://a:1,http://b:1"}, {"RJ_UPSTREAM_PROFILES", ""}}).errors.empty());
  auto missing = run({{"RJ_UPSTREAM_PROFILES", "mtp"}});
  ASSERT_EQ(missing.errors.size(), 1u) << all(missing.errors);
  EXPECT_TRUE(missing.errors[0].starts_with("RJ_UPSTREAM is required")) << missing.errors[0];
}

TEST(Config, FlagSyntaxRejectsPositionalArgumentsAndValuesOnHelp) {
  auto r = run(valid(), {"serve", "--", "--help=yes", "-x", "--threads", "--listen=0.0.0.0:1"});
  EXPECT_EQ(r.errors.size(), 5u) << all(r.errors);
  EXPECT_EQ(count(r, "argument 1 is not a --flag"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "--help takes no value"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "--threads (RJ_THREADS): missing value"), 1u) << all(r.errors);
  EXPECT_EQ(r.config.listen_port, 1);
  EXPECT_EQ(r.action, Action::kRun);
}

TEST(Config, BoolAndListParsersAcceptTheDocumentedSpellings) {
  Problems p;
  for (std::string_view t : {"true", "1", "YES", " on "}) EXPECT_EQ(parse_bool(t, p), true) << t;
  for (std::string_view f : {"false", "0", "no", "Off"}) EXPECT_EQ(parse_bool(f, p), false) << f;
  EXPECT_TRUE(p.empty());
  EXPECT_FALSE(parse_bool("maybe", p).has_value());
  EXPECT_EQ(p.size(), 1u);

  p.clear();
  auto list = parse_list(" a , b,c ", 1, 3, p);
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(*list, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(parse_list("a,,b,c", 1, 3, p).has_value());
  EXPECT_EQ(p.size(), 2u);  // the empty item, and four items > 3
}

TEST(Config, TableRowsAreWellFormed) {
  std::set<std::string_view> envs, flags;
  for (const Option& o : options()) {
    SCOPED_TRACE(std::string(o.env));
    EXPECT_TRUE(o.env.starts_with("RJ_"));
    std::string flag = "--";
    for (char c : o.env.substr(3)) flag += c == '_' ? '-' : static_cast<char>(std::tolower(c));
    EXPECT_EQ(o.flag, flag);
    EXPECT_TRUE(envs.insert(o.env).second);
    EXPECT_TRUE(flags.insert(o.flag).second);
    EXPECT_FALSE(o.doc.empty());
    EXPECT_EQ(o.doc.find('\n'), std::string_view::npos);
    EXPECT_EQ(o.doc.find('|'), std::string_view::npos);
    bool field_matches = false;
    switch (o.type) {
      case Type::kString:
      case Type::kEnum:
        field_matches = std::holds_alternative<std::string Config::*>(o.field);
        break;
      case Type::kUint:
        field_matches =
            std::holds_alternative<uint64_t Config::*>(o.field) ||
            (std::holds_alternative<uint32_t Config::*>(o.field) && o.max <= UINT32_MAX);
        EXPECT_LE(o.min, o.max);
        break;
      case Type::kDecimal:
        field_matches = std::holds_alternative<double Config::*>(o.field);
        EXPECT_TRUE(std::isfinite(o.dmin) && std::isfinite(o.dmax));
        EXPECT_LE(0, o.dmin);
        EXPECT_LE(o.dmin, o.dmax);
        break;
      case Type::kBool:
        field_matches = std::holds_alternative<bool Config::*>(o.field);
        break;
      case Type::kList:
        field_matches = std::holds_alternative<std::vector<std::string> Config::*>(o.field);
        break;
      case Type::kHostPort:
        field_matches = std::holds_alternative<HostPortField>(o.field);
        break;
      case Type::kUrlList:
        field_matches = std::holds_alternative<std::vector<UpstreamUrl> Config::*>(o.field);
        break;
    }
    EXPECT_TRUE(field_matches);
    // Choices: required for an enum, optional for a list (allowed items), unused elsewhere.
    if (o.type == Type::kEnum) {
      EXPECT_FALSE(o.choices.empty());
    } else if (o.type != Type::kList) {
      EXPECT_TRUE(o.choices.empty());
    }
    if (o.type != Type::kDecimal) {
      EXPECT_TRUE(o.dmin == 0 && o.dmax == 0);
    }
    if (o.required) {
      EXPECT_TRUE(o.default_text.empty());
    } else if (o.type != Type::kString && o.env != "RJ_UPSTREAM") {  // (it or RJ_UPSTREAM_DNS is required)
      // The default is written as a user would write it and passes the same checks.
      auto r = run(valid({{std::string(o.env), std::string(o.default_text)}}));
      EXPECT_TRUE(r.errors.empty()) << all(r.errors);
    }
  }
}

TEST(Config, HelpListsEveryOption) {
  std::string help = help_text();
  EXPECT_TRUE(help.starts_with("Usage: ramjet")) << help;
  for (const Option& o : options()) {
    EXPECT_NE(help.find(std::string(o.flag) + " "), std::string::npos) << o.flag;
    EXPECT_NE(help.find(std::string(o.env) + " "), std::string::npos) << o.env;
  }
  EXPECT_NE(help.find("trace, debug, info, warn, error, off"), std::string::npos);
}

TEST(Config, MarkdownReferenceHasOneRowPerOption) {
  std::string md = markdown_reference();
  EXPECT_TRUE(md.starts_with("# Configuration\n")) << md;
  EXPECT_NE(md.find("| Variable | Flag | Type | Default | Bounds | Description |"),
            std::string::npos);
  for (const Option& o : options()) {
    EXPECT_NE(md.find("| `" + std::string(o.env) + "` | `" + std::string(o.flag) + "` |"),
              std::string::npos)
        << o.env;
  }
  EXPECT_NE(md.find("| `RJ_MAX_BODY_BYTES` | `--max-body-bytes` | uint | `67108864` (64 MiB) | "
                    "1 KiB..1 GiB |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `RJ_ROUTE_ALPHA` | `--route-alpha` | decimal | `4` | 0..1000 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| `RJ_UPSTREAM_PROFILES` | `--upstream-profiles` | list | (none) | "
                    "0..256 items, each mtp or standard |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- **decimal**: "), std::string::npos) << md;
}

TEST(Config, ParseProcessReadsEnvironAndArgv) {
  ASSERT_EQ(setenv("RJ_THREADS", "3", 1), 0);
  std::string prog = "ramjet", flag = "--upstream=http://engine-a:8000";
  char* argv[] = {prog.data(), flag.data(), nullptr};
  auto r = parse_process(2, argv);
  unsetenv("RJ_THREADS");
  EXPECT_EQ(r.config.threads, 3u);
  ASSERT_EQ(r.config.upstreams.size(), 1u);
  EXPECT_EQ(r.config.upstreams[0].port, 8000);
}

TEST(Config, DocsConfigurationMdIsUpToDate) {
  const std::string path = std::string(RAMJET_SOURCE_DIR) + "/docs/configuration.md";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << path << " is missing; generate it with "
                         << "`build/dev/src/app/ramjet --help-markdown > docs/configuration.md`";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string on_disk = ss.str();
  const std::string expected = markdown_reference();
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
  FAIL() << "docs/configuration.md is out of date with the options table (first difference at "
         << "line " << line << ").\n  on disk:   " << la << "\n  generated: " << lb
         << "\nRegenerate with `build/dev/src/app/ramjet --help-markdown > docs/configuration.md`.";
}

}  // namespace
}  // namespace ramjet::config

namespace ramjet::config {
namespace {

TEST(Config, DnsNamesListEnginesWithOrWithoutAScheme) {
  auto r = run({{"RJ_UPSTREAM_DNS", "vllm-mtp.serving.svc:8000, https://vllm-std.serving.svc:8443/v1"},
                {"RJ_UPSTREAM_PROFILES", "mtp,standard"},
                {"RJ_KV_EVENT_LIVE_ENDPOINTS", "tcp://*:5557"},
                {"RJ_UPSTREAM_DNS_SERVER", "10.96.0.10:53"}});
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  ASSERT_EQ(r.config.upstream_dns.size(), 2u);
  EXPECT_EQ(r.config.upstream_dns[0].host, "vllm-mtp.serving.svc");
  EXPECT_FALSE(r.config.upstream_dns[0].tls);
  EXPECT_TRUE(r.config.upstream_dns[1].tls);
  EXPECT_EQ(r.config.upstream_dns[1].base_path, "/v1");
  EXPECT_TRUE(r.config.upstreams.empty());
  EXPECT_EQ(r.config.kv_event_live_endpoints.size(), 2u);  // one for every name
  EXPECT_EQ(r.config.slots(), 64u);
  EXPECT_EQ(run({{"RJ_UPSTREAM", "http://a:1"}}).config.slots(), 1u);  // nothing can join later
}

TEST(Config, DnsNamesAreChecked) {
  auto r = run({{"RJ_UPSTREAM", "http://a:1"},
                {"RJ_UPSTREAM_DNS", "engines:8000"},
                {"RJ_UPSTREAM_PROFILES", "mtp"},
                {"RJ_KV_EVENT_LIVE_ENDPOINTS", "tcp://a:5557,tcp://engines:5557"},
                {"RJ_UPSTREAM_DNS_SERVER", "dns.local:53"}});
  EXPECT_EQ(count(r, "1 profiles for 1 RJ_UPSTREAM entries and 1 RJ_UPSTREAM_DNS names"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "item 2 (an RJ_UPSTREAM_DNS name): give tcp://*:port"), 1u) << all(r.errors);
  EXPECT_EQ(count(r, "RJ_UPSTREAM_DNS_SERVER: expected an IPv4 address and port"), 1u) << all(r.errors);
  EXPECT_EQ(count(run({{"RJ_UPSTREAM", "http://a:1"}, {"RJ_UPSTREAM_DNS_SERVER", "10.0.0.1:53"}}),
                  "RJ_UPSTREAM_DNS_SERVER: set without RJ_UPSTREAM_DNS"),
            1u);
  auto dns_only = run({{"RJ_UPSTREAM_DNS", "engines:8000"}});
  EXPECT_TRUE(dns_only.errors.empty()) << all(dns_only.errors);
}

}  // namespace
}  // namespace ramjet::config
