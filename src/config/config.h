// ramjet configuration: one options table (RJ_* name, type, default, bounds, one-line doc),
// mirrored as --flags. Owns parsing and validation only; components read the typed Config.
// `ramjet --help` and docs/configuration.md are generated from the same table.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ramjet::config {

// One parsed upstream base URL: http://host[:port][/base-path] (trailing '/' trimmed).
struct UpstreamUrl {
  std::string host;       // never logged (privacy): use the ordinal
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix" without trailing '/'
  std::string host_header() const;  // "host:port" (port omitted when 80)
};

struct Config {
  // --- upstreams ---
  std::vector<UpstreamUrl> upstreams;   // RJ_UPSTREAM (comma list, required, 1..256)
  std::string upstream_token;           // RJ_UPSTREAM_TOKEN (secret; LB-originated calls only)
  // --- listeners ---
  std::string listen_host = "0.0.0.0";  // RJ_LISTEN host:port
  uint16_t listen_port = 8000;
  std::string metrics_host = "0.0.0.0";  // RJ_METRICS_LISTEN host:port
  uint16_t metrics_port = 9090;
  uint32_t threads = 0;  // RJ_THREADS (0 = one per core), 0..256
  std::string log_level = "info";  // RJ_LOG_LEVEL trace|debug|info|warn|error|off
  // --- request shims and rewrites ---
  uint64_t max_tokens_strip = 100000;      // RJ_MAX_TOKENS_STRIP (1..2^53)
  uint64_t advertise_ctx_margin = 16384;   // RJ_ADVERTISE_CTX_MARGIN (0..2^31)
  // --- limits and timeouts (ingress) ---
  uint64_t max_body_bytes = 64ull << 20;   // RJ_MAX_BODY_BYTES (1 KiB..1 GiB)
  uint32_t max_header_bytes = 64 * 1024;   // RJ_MAX_HEADER_BYTES (1 KiB..1 MiB)
  uint32_t header_timeout_ms = 10000;      // RJ_HEADER_TIMEOUT_MS (100..600000)
  uint32_t body_timeout_ms = 60000;        // RJ_BODY_TIMEOUT_MS (100..3600000)
  uint32_t keepalive_timeout_ms = 75000;   // RJ_KEEPALIVE_TIMEOUT_MS (100..3600000)
  uint32_t shutdown_grace_ms = 30000;      // RJ_SHUTDOWN_GRACE_MS (0..3600000)
  // --- upstream client and health ---
  uint32_t connect_timeout_ms = 5000;      // RJ_UPSTREAM_CONNECT_TIMEOUT_MS (10..120000)
  uint32_t pool_max_idle = 64;             // RJ_UPSTREAM_POOL_IDLE (0..4096) idle conns per engine per io thread
  uint32_t probe_interval_ms = 5000;       // RJ_PROBE_INTERVAL_MS (100..3600000)
  uint32_t probe_timeout_ms = 5000;        // RJ_PROBE_TIMEOUT_MS (10..120000)
  uint32_t recent_success_ms = 30000;      // RJ_PROBE_RECENT_SUCCESS_MS (0..3600000)
  // --- routing (load) ---
  std::string affinity = "load";           // RJ_AFFINITY (load; more policies come with routing)
  uint64_t route_load_unit_bytes = 32768;  // RJ_ROUTE_LOAD_UNIT_BYTES (1..2^31)
  uint32_t route_max_load_units = 8;       // RJ_ROUTE_MAX_LOAD_UNITS (1..1024)
};

// Environment lookup: returns the value of a variable or nullopt. Injected for tests.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

enum class Action { kRun, kHelp, kHelpMarkdown };

struct ParseResult {
  Config config;
  Action action = Action::kRun;
  std::vector<std::string> errors;  // every problem at once; empty = valid
};

// Parses env (all names in `env_names`, i.e. the keys of the process environment) and argv
// (flags override env). Unknown RJ_* names and any MD_* / DS4_* name are errors, listed in full.
// Flag syntax: --upstream=URL or --upstream URL; --help; --help-markdown.
ParseResult parse(const std::vector<std::string>& env_names, const EnvLookup& env,
                  const std::vector<std::string>& args);

// Convenience for main(): reads ::environ and argv.
ParseResult parse_process(int argc, char** argv);

// `ramjet --help` text and docs/configuration.md, both generated from the table.
std::string help_text();
std::string markdown_reference();

// "name=value" lines for the effective configuration; secrets print as <redacted>.
std::vector<std::string> describe(const Config& c);

}  // namespace ramjet::config
