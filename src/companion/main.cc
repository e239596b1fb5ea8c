// ramjet-companion: one per vLLM engine, started beside it (issue 16). It follows the engine's KV
// events into a digest inventory and serves snapshot + live tail to ramjet over Unix and/or TCP
// sockets (companion/server), with an optional /metrics and /health endpoint
// (companion/status_http). This file owns the flags, the secret files and the signals.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pthread.h>

#include <CLI/CLI.hpp>
#include <openssl/crypto.h>

#include "common/build_info.h"
#include "common/log.h"
#include "companion/server.h"
#include "companion/status_http.h"
#include "metrics/metrics.h"

using namespace ramjet;
using namespace ramjet::companion;

namespace {

struct Flags {
  std::string kv_live, kv_replay, kv_topic;
  std::vector<Endpoint> listen;
  std::string secret_file, digest_secret_file;
  std::vector<long> allow_uids;
  unsigned unix_mode = 0660;
  std::optional<Endpoint> metrics;
  uint64_t send_buffer = 64u << 20;
  uint64_t heartbeat_ms = 500, hello_timeout_ms = 2000, wait_trusted_ms = 5000;
  uint64_t max_clients = 64, index_max_blocks = 262144;
  uint64_t replay_timeout_ms = 5000, replay_limit = 8192;
  std::string log_level = "info";
};

// A ZeroMQ endpoint for the engine's sockets (ZeroMQ checks the rest when it connects).
const CLI::Validator kZmqEndpoint(
    [](std::string& v) { return v.find("://") == std::string::npos ? "a ZeroMQ endpoint like tcp://host:port" : ""; },
    "tcp://host:port");

// A decimal number, as written (CLI11 alone would also read 0x.. as hex and 0.. as octal): digits
// only, leading zeros dropped.
const CLI::Validator kDecimal(
    [](std::string& v) -> std::string {
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) return "not a number: " + v;
      v.erase(0, std::min(v.find_first_not_of('0'), v.size() - 1));
      return "";
    },
    "N");

// The flags into `f`; CLI11 prints --help and --version and checks ranges and required flags.
void declare(CLI::App& app, Flags& f, std::vector<std::string>& listen, std::optional<std::string>& metrics,
             std::string& unix_mode) {
  app.add_option("--kv-live", f.kv_live, "the engine's KV-event publisher (vLLM's kv_events_config.endpoint)")
      ->required()
      ->check(kZmqEndpoint);
  app.add_option("--kv-replay", f.kv_replay, "the engine's replay endpoint (vLLM's replay_endpoint; none: every gap fences)")
      ->check(kZmqEndpoint);
  app.add_option("--kv-topic", f.kv_topic, "the engine's KV-event topic (default \"\")");
  app.add_option("--listen", listen, "where ramjet connects: unix:/abs/path or tcp://host:port (repeatable)")
      ->required()
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--secret-file", f.secret_file, "the 32-byte session secret shared with ramjet (mode 0600)")->required();
  app.add_option("--digest-secret-file", f.digest_secret_file,
                 "the 32-byte block-digest secret shared with ramjet (mode 0600)")
      ->required();
  app.add_option("--allow-uid", f.allow_uids, "a UID allowed on the Unix sockets (repeatable; default: this process's effective UID)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(kDecimal)
      ->check(CLI::Range(0L, 4294967294L));
  app.add_option("--unix-mode", unix_mode, "mode of the Unix socket files, octal (default 0660)");
  app.add_option("--metrics", metrics, "serve GET /metrics and GET /health here: tcp://host:port (default: none)");
  app.add_option("--client-send-buffer", f.send_buffer,
                 "a client's queued event bytes beyond which it is disconnected as slow (default 67108864)")
      ->check(kDecimal)
      ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 36));
  app.add_option("--heartbeat-ms", f.heartbeat_ms,
                 "a CaughtUp frame after this long without one (default 500; at most 1000: ramjet fences a "
                 "companion silent for 3 s)")
      ->check(kDecimal)
      ->check(CLI::Range(uint64_t{10}, uint64_t{1000}));
  app.add_option("--hello-timeout-ms", f.hello_timeout_ms, "a client's hello must arrive within this (default 2000)")
      ->check(kDecimal)
      ->check(CLI::Range(uint64_t{10}, uint64_t{60000}));
  app.add_option("--wait-trusted-ms", f.wait_trusted_ms,
                 "a client waits this long for a trusted engine state (default 5000; at most 8000: ramjet gives "
                 "up on a first frame after 10 s)")
      ->check(kDecimal)
      ->check(CLI::Range(uint64_t{0}, uint64_t{8000}));
  app.add_option("--max-clients", f.max_clients, "connections served at once (default 64)")
      ->check(kDecimal)
      ->check(CLI::Range(uint64_t{1}, uint64_t{4096}));
  app.add_option("--index-max-blocks", f.index_max_blocks, "blocks the digest inventory may hold (default 262144)")
      ->check(kDecimal)
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  app.add_option("--replay-timeout-ms", f.replay_timeout_ms, "one replay from the engine, connect included (default 5000)")
      ->check(kDecimal)
      ->check(CLI::Range(uint64_t{10}, uint64_t{600000}));
  app.add_option("--replay-limit", f.replay_limit, "batches one replay may ask for; a larger gap fences (default 8192)")
      ->check(kDecimal)
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 24));
  app.add_option("--log-level", f.log_level, "trace|debug|info|warn|error|off (default info)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.set_version_flag("--version", version_line("ramjet-companion"), "the version line");
}

// The values CLI11 leaves as text: endpoints and the octal mode. An error names the flag.
std::string finish(Flags& f, const std::vector<std::string>& listen, const std::optional<std::string>& metrics,
                   const std::string& unix_mode) {
  for (const auto& l : listen) {
    auto e = parse_endpoint(l);
    if (!e) return "--listen: " + e.error();
    f.listen.push_back(std::move(*e));
  }
  if (metrics) {
    auto e = parse_endpoint(*metrics);
    if (!e) return "--metrics: " + e.error();
    f.metrics = std::move(*e);
  }
  if (!unix_mode.empty()) {
    char* end = nullptr;
    const unsigned long m = std::strtoul(unix_mode.c_str(), &end, 8);
    if (unix_mode.find_first_not_of("01234567") != std::string::npos || *end != '\0' || m > 0777) {
      return "--unix-mode: an octal mode up to 0777: " + unix_mode;
    }
    f.unix_mode = static_cast<unsigned>(m);
  }
  return "";
}

std::string joined(const std::vector<Endpoint>& es) {
  std::string s;
  for (const auto& e : es) s += (s.empty() ? "" : ",") + e.text();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One per vLLM engine: follows its KV events into a digest inventory and serves snapshot + live "
               "tail to ramjet (RJ_EXACT_INVENTORY=companion).",
               "ramjet-companion"};
  Flags f;
  std::vector<std::string> listen;
  std::optional<std::string> metrics;
  std::string unix_mode;
  declare(app, f, listen, metrics, unix_mode);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ramjet-companion: %s\nramjet-companion: --help lists the flags\n", e.what());
    return 2;
  }
  if (std::string e = finish(f, listen, metrics, unix_mode); !e.empty()) {
    std::fprintf(stderr, "ramjet-companion: %s\n", e.c_str());
    return 2;
  }
  auto secret = read_secret_file(f.secret_file);
  if (!secret) {
    std::fprintf(stderr, "ramjet-companion: --secret-file: %s\n", secret.error().c_str());
    return 2;
  }
  auto digest_secret = read_secret_file(f.digest_secret_file);
  if (!digest_secret) {
    std::fprintf(stderr, "ramjet-companion: --digest-secret-file: %s\n", digest_secret.error().c_str());
    return 2;
  }
  auto digest = cache::DigestKey::from_secret(*digest_secret);
  OPENSSL_cleanse(digest_secret->data(), digest_secret->size());
  if (!digest) {
    std::fprintf(stderr, "ramjet-companion: --digest-secret-file: not a usable key\n");
    return 2;
  }

  log::init(f.log_level);
  std::signal(SIGPIPE, SIG_IGN);
  // SIGTERM and SIGINT wait for sigwait() below: every thread started from here on blocks them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  ServerOptions o;
  o.listen = f.listen;
  o.unix_mode = f.unix_mode;
  o.secret = *secret;
  OPENSSL_cleanse(secret->data(), secret->size());
  o.digest = std::move(digest);
  o.allowed_uids = f.allow_uids;
  o.hello_timeout = std::chrono::milliseconds(f.hello_timeout_ms);
  o.heartbeat = std::chrono::milliseconds(f.heartbeat_ms);
  o.wait_trusted = std::chrono::milliseconds(f.wait_trusted_ms);
  o.send_buffer_bytes = f.send_buffer;
  o.max_clients = f.max_clients;
  o.engine.live_endpoint = f.kv_live;
  o.engine.replay_endpoint = f.kv_replay;
  o.engine.topic = f.kv_topic;
  o.engine.replay_timeout = std::chrono::milliseconds(f.replay_timeout_ms);
  o.engine.fence.replay_limit = f.replay_limit;
  o.inventory.shard.max_blocks = static_cast<uint32_t>(f.index_max_blocks);
  // The largest snapshot an index of this size can need (ramjet accepts the same for the same
  // RJ_KV_INDEX_MAX_BLOCKS).
  o.frames.max_snapshot_bytes = snapshot_limits_for(f.index_max_blocks).max_bytes;
  Server server(std::move(o));
  if (auto e = server.start()) {
    std::fprintf(stderr, "ramjet-companion: listen: %s\n", e->c_str());
    return 1;
  }

  metrics::Registry registry;
  registry.add([&server](metrics::Exposition& x) { server.write_metrics(x); });
  StatusHttp http([&](std::string_view method, std::string_view path) {
    if (method == "GET" && path == "/metrics") {
      return HttpResponse{
          .status = 200, .content_type = "text/plain; version=0.0.4; charset=utf-8", .body = registry.render()};
    }
    if (method == "GET" && path == "/health") {
      return HttpResponse{.status = 200, .content_type = "application/json", .body = server.health_json()};
    }
    return HttpResponse{.status = 404, .content_type = "text/plain; charset=utf-8", .body = "not found\n"};
  });
  std::string ready = "ramjet-companion listening on " + joined(server.bound());
  if (f.metrics) {
    if (auto e = http.start(*f.metrics)) {
      std::fprintf(stderr, "ramjet-companion: --metrics: %s\n", e->c_str());
      server.stop();
      return 1;
    }
    ready += " metrics=" + http.bound().text();
  }
  std::printf("%s\n", ready.c_str());
  std::fflush(stdout);
  spdlog::info("companion: ready ({} listeners, engine kv state {})", server.bound().size(),
               cache::events::label(server.mode()));

  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("companion: signal {}: stopping", sig);
  http.stop();
  server.stop();
  return 0;
}
