// ramjet-companion: one per vLLM engine, started beside it (issue 16). It follows the engine's KV
// events into a digest inventory and serves snapshot + live tail to ramjet over Unix and/or TCP
// sockets (companion/server), with an optional /metrics and /health endpoint
// (companion/status_http). This file owns the flags, the secret files and the signals.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <pthread.h>

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
  bool help = false, version = false;
};

struct Flag {
  std::string_view name;
  std::string_view arg;  // empty: takes no value
  std::string_view doc;
  std::function<std::string(const std::string&, Flags&)> apply;  // an error, or ""
};

std::string number(const std::string& v, uint64_t& out, uint64_t lo, uint64_t hi, int base = 10) {
  if (v.empty() || v.find_first_not_of(base == 8 ? "01234567" : "0123456789") != std::string::npos) {
    return "not a number: " + v;
  }
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), nullptr, base);
  if (errno != 0 || x < lo || x > hi) {
    return "out of range (" + std::to_string(lo) + ".." + std::to_string(hi) + "): " + v;
  }
  out = x;
  return "";
}

std::function<std::string(const std::string&, Flags&)> num(uint64_t Flags::*field, uint64_t lo, uint64_t hi) {
  return [=](const std::string& v, Flags& f) { return number(v, f.*field, lo, hi); };
}

std::string endpoint(const std::string& v, Endpoint& out) {
  auto e = parse_endpoint(v);
  if (!e) return e.error();
  out = std::move(*e);
  return "";
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> f = {
      {"--kv-live", "tcp://host:port", "the engine's KV-event publisher (required; vLLM's kv_events_config.endpoint)",
       [](const std::string& v, Flags& o) {
         if (v.find("://") == std::string::npos) return std::string("a ZeroMQ endpoint like tcp://host:port: ") + v;
         o.kv_live = v;
         return std::string();
       }},
      {"--kv-replay", "tcp://host:port",
       "the engine's replay endpoint (vLLM's replay_endpoint; none: every gap fences)",
       [](const std::string& v, Flags& o) {
         if (v.find("://") == std::string::npos) return std::string("a ZeroMQ endpoint like tcp://host:port: ") + v;
         o.kv_replay = v;
         return std::string();
       }},
      {"--kv-topic", "T", "the engine's KV-event topic (default \"\")",
       [](const std::string& v, Flags& o) { o.kv_topic = v; return std::string(); }},
      {"--listen", "ENDPOINT", "where ramjet connects: unix:/abs/path or tcp://host:port (repeatable, at least one)",
       [](const std::string& v, Flags& o) {
         Endpoint e;
         std::string err = endpoint(v, e);
         if (err.empty()) o.listen.push_back(std::move(e));
         return err;
       }},
      {"--secret-file", "PATH", "the 32-byte session secret shared with ramjet (required; mode 0600)",
       [](const std::string& v, Flags& o) { o.secret_file = v; return std::string(); }},
      {"--digest-secret-file", "PATH", "the 32-byte block-digest secret shared with ramjet (required; mode 0600)",
       [](const std::string& v, Flags& o) { o.digest_secret_file = v; return std::string(); }},
      {"--allow-uid", "N", "a UID allowed on the Unix sockets (repeatable; default: this process's effective UID)",
       [](const std::string& v, Flags& o) {
         uint64_t uid = 0;
         std::string err = number(v, uid, 0, 4294967294u);
         if (err.empty()) o.allow_uids.push_back(static_cast<long>(uid));
         return err;
       }},
      {"--unix-mode", "OCTAL", "mode of the Unix socket files (default 0660)",
       [](const std::string& v, Flags& o) {
         uint64_t m = 0;
         std::string err = number(v, m, 0, 0777, 8);
         if (err.empty()) o.unix_mode = static_cast<unsigned>(m);
         return err;
       }},
      {"--metrics", "tcp://host:port", "serve GET /metrics and GET /health here (default: none)",
       [](const std::string& v, Flags& o) {
         Endpoint e;
         std::string err = endpoint(v, e);
         if (err.empty()) o.metrics = std::move(e);
         return err;
       }},
      {"--client-send-buffer", "BYTES",
       "a client's queued event bytes beyond which it is disconnected as slow (default 67108864)",
       num(&Flags::send_buffer, 4096, uint64_t{1} << 36)},
      {"--heartbeat-ms", "MS",
       "a CaughtUp frame after this long without one (default 500; at most 1000: ramjet fences a "
       "companion silent for 3 s)",
       num(&Flags::heartbeat_ms, 10, 1000)},
      {"--hello-timeout-ms", "MS", "a client's hello must arrive within this (default 2000)",
       num(&Flags::hello_timeout_ms, 10, 60000)},
      {"--wait-trusted-ms", "MS",
       "a client waits this long for a trusted engine state (default 5000; at most 8000: ramjet gives "
       "up on a first frame after 10 s)",
       num(&Flags::wait_trusted_ms, 0, 8000)},
      {"--max-clients", "N", "connections served at once (default 64)", num(&Flags::max_clients, 1, 4096)},
      {"--index-max-blocks", "N", "blocks the digest inventory may hold (default 262144)",
       num(&Flags::index_max_blocks, 1, uint64_t{1} << 24)},
      {"--replay-timeout-ms", "MS", "one replay from the engine, connect included (default 5000)",
       num(&Flags::replay_timeout_ms, 10, 600000)},
      {"--replay-limit", "N", "batches one replay may ask for; a larger gap fences (default 8192)",
       num(&Flags::replay_limit, 0, uint64_t{1} << 24)},
      {"--log-level", "LEVEL", "trace|debug|info|warn|error|off (default info)",
       [](const std::string& v, Flags& o) {
         static constexpr std::string_view kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
         for (auto l : kLevels) {
           if (v == l) {
             o.log_level = v;
             return std::string();
           }
         }
         return "unknown log level: " + v;
       }},
      {"--help", "", "this text", [](const std::string&, Flags& o) { o.help = true; return std::string(); }},
      {"--version", "", "the version line",
       [](const std::string&, Flags& o) { o.version = true; return std::string(); }},
  };
  return f;
}

std::string usage() {
  std::string s =
      "usage: ramjet-companion --kv-live tcp://ENGINE:5557 [--kv-replay tcp://ENGINE:5558] --listen ENDPOINT...\n"
      "                        --secret-file PATH --digest-secret-file PATH [options]\n"
      "One per vLLM engine: follows its KV events into a digest inventory and serves snapshot + live tail to\n"
      "ramjet (issue 16).\n\n";
  for (const auto& f : flags()) {
    std::string left = "  " + std::string(f.name) + (f.arg.empty() ? "" : " " + std::string(f.arg));
    if (left.size() < 34) left.resize(34, ' ');
    else left += "\n" + std::string(34, ' ');
    s += left + std::string(f.doc) + "\n";
  }
  return s;
}

std::vector<std::string> parse(int argc, char** argv, Flags& out) {
  std::vector<std::string> errors;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::optional<std::string> value;
    if (const size_t eq = a.find('='); a.starts_with("--") && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a.resize(eq);
    }
    const Flag* flag = nullptr;
    for (const auto& f : flags()) {
      if (f.name == a) flag = &f;
    }
    if (!flag) {
      errors.push_back("unknown flag " + a);
      continue;
    }
    if (flag->arg.empty()) {
      if (value) errors.push_back(a + " takes no value");
      else (void)flag->apply("", out);
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) {
        errors.push_back(a + " needs a value");
        continue;
      }
      value = argv[++i];
    }
    if (std::string e = flag->apply(*value, out); !e.empty()) errors.push_back(a + ": " + e);
  }
  if (out.help || out.version) return errors;
  if (out.kv_live.empty()) errors.push_back("--kv-live is required");
  if (out.listen.empty()) errors.push_back("--listen is required (at least one)");
  if (out.secret_file.empty()) errors.push_back("--secret-file is required");
  if (out.digest_secret_file.empty()) errors.push_back("--digest-secret-file is required");
  return errors;
}

std::string joined(const std::vector<Endpoint>& es) {
  std::string s;
  for (const auto& e : es) s += (s.empty() ? "" : ",") + e.text();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  const auto errors = parse(argc, argv, f);
  if (f.help) {
    std::cout << usage();
    return 0;
  }
  if (f.version) {
    std::cout << version_line("ramjet-companion") << '\n';
    return 0;
  }
  if (!errors.empty()) {
    for (const auto& e : errors) std::fprintf(stderr, "ramjet-companion: %s\n", e.c_str());
    std::fprintf(stderr, "ramjet-companion: --help lists the flags\n");
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
