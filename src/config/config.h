// ramjet configuration: one options table (RJ_* name, type, default, bounds, one-line doc),
// mirrored as --flags. Owns parsing and validation only; components read the typed Config.
// `ramjet --help` and docs/configuration.md are generated from the same table.
#pragma once

#include <charconv>
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
  bool tls = false;       // https:// (port 443 unless given)
  // The DNS name the operator gave when `host` is one of its addresses (RJ_UPSTREAM_DNS): the
  // TLS server name (SNI, certificate check) and the Host header; empty otherwise. Never logged.
  std::string name{};
  const std::string& server_name() const { return name.empty() ? host : name; }
  std::string host_header() const;  // "host:port" (port omitted when the scheme's default)
  // host_header() appended to `out` (anything with append(std::string_view)) without building a
  // string: the data plane writes it into every forwarded head.
  template <typename Out>
  void append_host_header(Out& out) const {
    const std::string& n = server_name();
    const bool v6 = n.find(':') != std::string::npos;
    if (v6) out.append("[");
    out.append(n);
    if (v6) out.append("]");
    if (port != (tls ? 443 : 80)) {
      char digits[8] = {':'};
      const auto r = std::to_chars(digits + 1, digits + sizeof digits, port);
      out.append(std::string_view(digits, static_cast<size_t>(r.ptr - digits)));
    }
  }
};

struct Config;
// RJ_UPSTREAM_DP_SIZE item `i` as a number (1 when absent, empty or `auto`).
uint32_t dp_size_item(const Config& c, size_t i);
// RJ_UPSTREAM_DP_SIZE item `i` is `auto`: the engine's ranks are what its /metrics reports (the
// engine scrape; upstream::Membership::discovered_ranks), one routing target until it says.
bool dp_auto_item(const Config& c, size_t i);
// What an engine is (RJ_UPSTREAM_ENGINE): how a request is pinned to one of its data-parallel
// ranks (vLLM: the X-Data-Parallel-Rank header; SGLang: "routed_dp_rank" in the JSON body).
enum class EngineKind : uint8_t { kVllm, kSglang };
// RJ_UPSTREAM_ENGINE item `i` (vLLM when absent).
EngineKind engine_kind_item(const Config& c, size_t i);
// An engine's part in prefill/decode disaggregation (RJ_UPSTREAM_ROLE): a prefill engine computes
// prompts whose KV cache a decode engine pulls; an engine of either part may serve whole requests.
enum class EngineRole : uint8_t { kBoth, kPrefill, kDecode };
// RJ_UPSTREAM_ROLE item `i` (both when absent or empty).
EngineRole engine_role_item(const Config& c, size_t i);
// An endpoint item of rank `rank`, as vLLM offsets it (ZmqEventPublisher.offset_endpoint_port):
// tcp://host:P -> tcp://host:P+rank (port 0 stays 0); "-", "discover" and rank 0 unchanged.
std::string offset_endpoint(const std::string& item, uint32_t rank);

struct Config {
  // --- upstreams ---
  std::vector<UpstreamUrl> upstreams;   // RJ_UPSTREAM (comma list, 0..256; this or RJ_UPSTREAM_DNS)
  // RJ_UPSTREAM_DNS: names whose A/AAAA records are engines (host = the name), 0..64;
  // RJ_UPSTREAM_DNS_INTERVAL_MS, RJ_UPSTREAM_DNS_SERVER (IPv4 ip:port, "" = system resolver).
  std::vector<UpstreamUrl> upstream_dns;
  uint32_t upstream_dns_interval_ms = 5000;
  std::string upstream_dns_server;
  uint32_t upstream_max = 0;  // RJ_UPSTREAM_MAX: ordinals (slots); 0 = auto (see slots())
  // Slots for engines: RJ_UPSTREAM_MAX, or the static list alone when nothing can add engines,
  // else at least 64.
  size_t slots() const {
    if (upstream_max) return upstream_max < upstreams.size() ? upstreams.size() : upstream_max;
    return upstream_dns.empty() && config_file.empty() && !dp_discovered() ? upstreams.size()
                                                                            : std::max<size_t>(64, upstreams.size());
  }
  // Some RJ_UPSTREAM_DP_SIZE item is `auto` (its ranks join when the engine reports them).
  bool dp_discovered() const {
    for (const std::string& item : upstream_dp_size) {
      if (item == "auto") return true;
    }
    return false;
  }
  std::string config_file;  // RJ_CONFIG_FILE: RJ_NAME=value lines, re-read on SIGHUP
  std::string upstream_token;           // RJ_UPSTREAM_TOKEN (secret; LB-originated calls only)
  // RJ_UPSTREAM_TLS_CA_FILE / _CERT_FILE / _KEY_FILE: https:// engines (net/tls.h)
  std::string upstream_tls_ca_file, upstream_tls_cert_file, upstream_tls_key_file;
  // RJ_UPSTREAM_PROFILES: "mtp" or "standard" per RJ_UPSTREAM entry, then per RJ_UPSTREAM_DNS
  // name, in order (lowercase); empty, or exactly one each (checked).
  std::vector<std::string> upstream_profiles;
  // RJ_UPSTREAM_MODELS: per source (as upstream_profiles), "a|b|c" or "" (learn from /v1/models).
  std::vector<std::string> upstream_models;
  // RJ_UPSTREAM_DP_SIZE: per source (as upstream_profiles), N in 1..1024 or `auto` (unset: 1 each): the engine runs N
  // data-parallel ranks (vLLM --data-parallel-size N), each its own routing target. After parse()
  // the static list is expanded (expand_ranks): an entry with N > 1 is N consecutive entries of
  // `upstreams` (and of every per-source list) with upstream_ranks 0..N-1; upstream_dp_size then
  // holds, per expanded source, the engine's N as a number ("1" for no ranks).
  std::vector<std::string> upstream_dp_size;
  std::vector<std::optional<uint32_t>> upstream_ranks;  // per `upstreams` entry: its rank (parse() fills it)
  // RJ_UPSTREAM_ENGINE: per source (as upstream_profiles), "vllm" or "sglang" (unset: vllm each).
  std::vector<std::string> upstream_engines;
  // RJ_UPSTREAM_ROLE: per source (as upstream_profiles), "prefill", "decode", "both" or "" (both).
  std::vector<std::string> upstream_roles;
  // Prefill/decode disaggregation (with a prefill engine in RJ_UPSTREAM_ROLE).
  uint32_t disagg_min_uncached_tokens = 512;      // RJ_DISAGG_MIN_UNCACHED_TOKENS (0: always)
  uint32_t disagg_prefill_max_inflight = 0;       // RJ_DISAGG_PREFILL_MAX_INFLIGHT (0: no cap)
  std::string disagg_prefill_failure = "aggregate";  // RJ_DISAGG_PREFILL_FAILURE: aggregate|error
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
  // --- API surface (request/ingress/endpoint.h) ---
  bool serve_tokenize = false;                 // RJ_SERVE_TOKENIZE: forward /tokenize, /detokenize
  std::vector<std::string> passthrough_paths;  // RJ_PASSTHROUGH_PATHS: "/path" or "/prefix*" (checked)
  std::string api_keys_file;  // RJ_API_KEYS_FILE: client API keys ("" = off; request/ingress/api_keys.h)
  std::string tls_cert_file, tls_key_file;  // RJ_TLS_CERT_FILE / RJ_TLS_KEY_FILE: HTTPS listeners
  // --- limits and timeouts (ingress) ---
  uint64_t max_body_bytes = 64ull << 20;   // RJ_MAX_BODY_BYTES (1 KiB..1 GiB)
  uint32_t max_header_bytes = 64 * 1024;   // RJ_MAX_HEADER_BYTES (1 KiB..1 MiB)
  uint64_t max_buffered_bytes = 256ull << 20;  // RJ_MAX_BUFFERED_BYTES (1 KiB..64 GiB)
  uint32_t header_timeout_ms = 10000;      // RJ_HEADER_TIMEOUT_MS (100..600000)
  uint32_t body_timeout_ms = 60000;        // RJ_BODY_TIMEOUT_MS (100..3600000)
  uint32_t keepalive_timeout_ms = 75000;   // RJ_KEEPALIVE_TIMEOUT_MS (100..3600000)
  uint32_t client_send_timeout_ms = 60000; // RJ_CLIENT_SEND_TIMEOUT_MS (0..3600000; 0 = never)
  uint32_t shutdown_grace_ms = 30000;      // RJ_SHUTDOWN_GRACE_MS (0..3600000)
  // --- upstream client and health ---
  uint32_t connect_timeout_ms = 5000;      // RJ_UPSTREAM_CONNECT_TIMEOUT_MS (10..120000)
  uint32_t pool_max_idle = 64;             // RJ_UPSTREAM_POOL_IDLE (0..4096) idle conns per engine per io thread
  uint32_t first_byte_timeout_ms = 300000;     // RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS (0..86400000; 0 = never)
  uint32_t upstream_idle_timeout_ms = 120000;  // RJ_UPSTREAM_IDLE_TIMEOUT_MS (0..86400000; 0 = never)
  uint64_t upstream_max_header_bytes = 4u << 20;  // RJ_UPSTREAM_MAX_HEADER_BYTES (1 KiB..64 MiB)
  uint32_t upstream_max_header_count = 256;       // RJ_UPSTREAM_MAX_HEADER_COUNT (1..65536)
  uint32_t probe_interval_ms = 5000;       // RJ_PROBE_INTERVAL_MS (100..3600000)
  uint32_t probe_timeout_ms = 5000;        // RJ_PROBE_TIMEOUT_MS (10..120000)
  uint32_t recent_success_ms = 30000;      // RJ_PROBE_RECENT_SUCCESS_MS (0..3600000)
  bool probe_rank_generation = false;      // RJ_PROBE_RANK_GENERATION: a pinned 1-token probe per rank
  uint32_t admission_engine_max_inflight = 0;   // RJ_ADMISSION_ENGINE_MAX_INFLIGHT (0 = no cap)
  uint32_t admission_engine_max_waiting = 0;    // RJ_ADMISSION_ENGINE_MAX_WAITING (0 = not read)
  uint32_t admission_queue_max = 256;           // RJ_ADMISSION_QUEUE_MAX
  uint64_t admission_queue_max_bytes = 64u << 20;  // RJ_ADMISSION_QUEUE_MAX_BYTES
  uint32_t admission_queue_timeout_ms = 30000;  // RJ_ADMISSION_QUEUE_TIMEOUT_MS
  std::string admission_priority_header;        // RJ_ADMISSION_PRIORITY_HEADER
  std::vector<std::string> admission_batch_keys;  // RJ_ADMISSION_BATCH_KEYS
  bool admission_engine_priority = false;         // RJ_ADMISSION_ENGINE_PRIORITY
  uint64_t admission_engine_burst = 0;            // RJ_ADMISSION_ENGINE_BURST
  double admission_engine_max_kv_usage = 0;       // RJ_ADMISSION_ENGINE_MAX_KV_USAGE
  // Idle drain (engine parking, upstream/idle_drain.h).
  std::string idle_drain_mode = "off";              // RJ_IDLE_DRAIN_MODE: off|observe|drain
  std::string idle_drain_release = "fleet-idle";    // RJ_IDLE_DRAIN_RELEASE: fleet-idle|utilization
  double idle_drain_idle_after_s = 900;             // RJ_IDLE_DRAIN_IDLE_AFTER_SECONDS
  double idle_drain_upstream_idle_after_s = 300;    // RJ_IDLE_DRAIN_UPSTREAM_IDLE_AFTER_SECONDS
  double idle_drain_resume_load_per_replica = 4;    // RJ_IDLE_DRAIN_RESUME_LOAD_PER_REPLICA
  uint32_t idle_drain_min_warm = 1;                 // RJ_IDLE_DRAIN_MIN_WARM
  double idle_drain_cooldown_s = 300;               // RJ_IDLE_DRAIN_COOLDOWN_SECONDS
  double idle_drain_grace_s = 30;                   // RJ_IDLE_DRAIN_GRACE_SECONDS
  double idle_drain_interval_s = 15;                // RJ_IDLE_DRAIN_INTERVAL_SECONDS
  std::string idle_drain_actuator = "sleep";        // RJ_IDLE_DRAIN_ACTUATOR: sleep|off
  std::string idle_drain_sleep_level = "1";         // RJ_IDLE_DRAIN_SLEEP_LEVEL: 1|2
  uint32_t idle_drain_max_parked = 1;               // RJ_IDLE_DRAIN_MAX_PARKED
  double idle_drain_wake_timeout_s = 60;            // RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS
  uint32_t ready_successes = 3;            // RJ_READY_SUCCESSES (1..100) passing probes to readmit
  uint32_t ready_stable_seconds = 30;      // RJ_READY_STABLE_SECONDS (0..3600) warming period
  // Outlier ejection (upstream/outlier.h)
  uint32_t outlier_consecutive_failures = 5;     // RJ_OUTLIER_CONSECUTIVE_FAILURES (0..1000; 0 = off)
  uint32_t outlier_base_ejection_ms = 30000;     // RJ_OUTLIER_BASE_EJECTION_MS (100..3600000)
  uint32_t outlier_max_ejection_ms = 300000;     // RJ_OUTLIER_MAX_EJECTION_MS (100..86400000)
  uint32_t outlier_max_ejection_percent = 50;    // RJ_OUTLIER_MAX_EJECTION_PERCENT (0..100)
  uint32_t outlier_penalty_ms = 10000;           // RJ_OUTLIER_PENALTY_MS (0..3600000; 0 = off)
  // --- routing ---
  std::string affinity = "prefix";         // RJ_AFFINITY prefix|load|round_robin (policy.h)
  double route_alpha = 4;                  // RJ_ROUTE_ALPHA (0..1000) score per reserved load unit
  uint32_t route_max_overlap_blocks = 32;  // RJ_ROUTE_MAX_OVERLAP_BLOCKS (0..65536) affinity cap
  std::string route_credit_basis = "relative";  // RJ_ROUTE_CREDIT_BASIS: absolute|relative
  std::string route_horizon = "off";            // RJ_ROUTE_HORIZON: off|auto
  uint64_t route_chunk_bytes = 2048;       // RJ_ROUTE_CHUNK_BYTES (64..1 MiB) per fingerprint block
  uint64_t route_max_prefix_bytes = 2ull << 20;  // RJ_ROUTE_MAX_PREFIX_BYTES (0..1 GiB; 0 = none)
  uint32_t route_index_capacity = 100000;  // RJ_ROUTE_INDEX_CAPACITY (0..2^26) per engine; 0 = off
  uint64_t route_load_unit_bytes = 32768;  // RJ_ROUTE_LOAD_UNIT_BYTES (1..2^31)
  uint32_t route_max_load_units = 8;       // RJ_ROUTE_MAX_LOAD_UNITS (1..1024)
  uint32_t route_adapter_load_units = 2;   // RJ_ROUTE_ADAPTER_LOAD_UNITS (0..1024)
  bool route_decode_cost = false;          // RJ_ROUTE_DECODE_COST
  bool route_phase_aware_load = true;      // RJ_ROUTE_PHASE_AWARE_LOAD
  bool route_single_flight = true;         // RJ_ROUTE_SINGLE_FLIGHT
  bool route_engine_load = true;           // RJ_ROUTE_ENGINE_LOAD: other routers' load counts
  double route_engine_load_waiting_units = 2;  // RJ_ROUTE_ENGINE_LOAD_WAITING_UNITS (0..1024)
  std::vector<std::string> peers;           // RJ_PEERS: peer replicas' RJ_PEER_LISTEN host:port (0..64)
  std::string peer_listen;                  // RJ_PEER_LISTEN (UDP host:port)
  std::string peer_secret_file;             // RJ_PEER_SECRET_FILE (read by app/main.cc)
  uint32_t peer_interval_ms = 50;           // RJ_PEER_INTERVAL_MS (10..1000)
  // RJ_ROUTE_SINGLE_FLIGHT_TIMEOUT_MS (100..3600000), RJ_ROUTE_SINGLE_FLIGHT_CAPACITY (1..2^20)
  uint32_t route_single_flight_timeout_ms = 60000;
  uint32_t route_single_flight_capacity = 1024;  // new prefixes tracked at once
  uint64_t profile_short_max_tokens = 256;  // RJ_PROFILE_SHORT_MAX_TOKENS (1..2^31) <= prefers mtp
  // RJ_SESSION_AFFINITY_* (request/route/session_affinity.h)
  std::string session_affinity_mode = "off";        // off|shadow|on
  std::string session_affinity_key;                 // 32..256 bytes when not off (secret)
  uint32_t session_affinity_bonus_blocks = 4;       // <= RJ_ROUTE_MAX_OVERLAP_BLOCKS
  uint32_t session_affinity_max_load_delta = 0;     // <= RJ_ROUTE_MAX_LOAD_UNITS
  bool session_affinity_user_field = false;         // the body's user field keys the session
  bool route_journal = false;               // RJ_ROUTE_JOURNAL: JSONL decision journal
  std::string route_journal_file;           // RJ_ROUTE_JOURNAL_FILE ("" = stderr)
  // --- KV events (cache/events; exact routing) ---
  // RJ_KV_EVENT_LIVE_ENDPOINTS / _REPLAY_ENDPOINTS: one ZeroMQ endpoint per upstream, in RJ_UPSTREAM
  // order, "-" for an engine without (checked: tcp://host:port or ipc://path).
  std::vector<std::string> kv_event_live_endpoints;
  std::vector<std::string> kv_event_replay_endpoints;
  std::string kv_event_topic;                   // RJ_KV_EVENT_TOPIC (vLLM's kv_events_config.topic)
  uint32_t kv_event_timeout_ms = 5000;          // RJ_KV_EVENT_TIMEOUT_MS (100..600000) one replay
  uint32_t kv_event_replay_limit = 8192;        // RJ_KV_EVENT_REPLAY_LIMIT (1..1048576) batches
  uint32_t kv_event_replay_tail_limit = 4096;   // RJ_KV_EVENT_REPLAY_TAIL_LIMIT (1..1048576)
  uint32_t kv_index_max_blocks = 262144;        // RJ_KV_INDEX_MAX_BLOCKS (1024..2^31) per engine
  // --- ramjet-companion (companion/client; issue 16) ---
  std::string exact_inventory = "events";       // RJ_EXACT_INVENTORY events|companion
  // RJ_COMPANION_ENDPOINTS: one per RJ_UPSTREAM entry, in order, "-" for an engine that keeps its
  // own KV events (checked: unix:/abs/path or tcp://host:port).
  std::vector<std::string> companion_endpoints;
  std::string companion_secret_file;            // RJ_COMPANION_SECRET_FILE (read by app/main.cc)
  std::string companion_digest_secret_file;     // RJ_COMPANION_DIGEST_SECRET_FILE
  // --- exact routing (request/route/exact_overlap.h, request/stream/exact_tokens.h) ---
  std::string exact_route_mode = "auto";        // RJ_EXACT_ROUTE_MODE auto|off|shadow|on
  std::string exact_tokens = "auto";            // RJ_EXACT_TOKENS auto|remote|local (exact_tokens_local())
  uint64_t exact_provisional_ttl_ms = 8000;      // RJ_EXACT_PROVISIONAL_TTL_MS (0 = off)
  uint64_t exact_route_min_bytes = 32768;       // RJ_EXACT_ROUTE_MIN_BYTES (0..1 GiB)
  uint64_t exact_route_max_bytes = 2u << 20;    // RJ_EXACT_ROUTE_MAX_BYTES (1 KiB..1 GiB)
  uint32_t exact_route_timeout_ms = 500;        // RJ_EXACT_ROUTE_TIMEOUT_MS (10..60000)
  double exact_route_budget_share = 0.1;        // RJ_EXACT_ROUTE_BUDGET_SHARE (0..10)
  uint32_t exact_route_canary_bps = 10000;     // RJ_EXACT_ROUTE_CANARY_BPS (0..10000)
  std::string exact_route_canary_key;           // RJ_EXACT_ROUTE_CANARY_KEY (secret)
  uint32_t exact_miss_limit = 5;                // RJ_EXACT_MISS_LIMIT (0..1000; 0 = never withdraw)
  uint32_t exact_miss_cooldown_ms = 60000;      // RJ_EXACT_MISS_COOLDOWN_MS (1000..86400000)
  // Exact overlap credit per token an engine holds in an offload tier (a GPU token counts 1)
  double kv_tier_weight_cpu = 0.8;   // RJ_KV_TIER_WEIGHT_CPU (0..1)
  double kv_tier_weight_disk = 0.3;  // RJ_KV_TIER_WEIGHT_DISK (0..1)
  // --- observability ---
  uint32_t engine_scrape_interval_ms = 500;   // RJ_ENGINE_SCRAPE_INTERVAL_MS (0..3600000; 0 = off)
  uint32_t engine_scrape_timeout_ms = 2000;   // RJ_ENGINE_SCRAPE_TIMEOUT_MS (10..120000)
  uint64_t engine_scrape_max_bytes = 4ull << 20;  // RJ_ENGINE_SCRAPE_MAX_BYTES (64 KiB..64 MiB)
  // RJ_GPU_METRICS_URLS: DCGM-exporter URLs, empty or exactly one per upstream (checked).
  std::vector<UpstreamUrl> gpu_metrics_urls;
  // --- local tokenization (file and profile checks: render/service/tokenizer_service.h) ---
  std::string tokenizer_mode = "off";       // RJ_TOKENIZER_MODE off|remote-shadow|local-shadow|local
  std::string tokenizer_profile;            // RJ_TOKENIZER_PROFILE (a model::PROFILES label)
  std::vector<std::string> model_dirs;      // RJ_MODEL_DIR: tokenizer, template, config.json in each model's folder
  std::string tokenizer_path, tokenizer_sha256;          // RJ_TOKENIZER_PATH / _SHA256
  std::string chat_template_path, chat_template_sha256;  // RJ_CHAT_TEMPLATE_PATH / _SHA256
  std::string tokenizer_manifest_path, tokenizer_manifest_sha256;  // RJ_TOKENIZER_MANIFEST_PATH / _SHA256
  uint64_t tokenizer_min_bytes = 32768;     // RJ_TOKENIZER_MIN_BYTES (0..1 GiB)
  uint64_t tokenizer_max_bytes = 2u << 20;  // RJ_TOKENIZER_MAX_BYTES (1..1 GiB)
  uint32_t tokenizer_workers = 1;           // RJ_TOKENIZER_WORKERS (1..64)
  uint32_t tokenizer_queue_capacity = 8;    // RJ_TOKENIZER_QUEUE_CAPACITY (1..65536)
  uint32_t tokenizer_timeout_ms = 2000;     // RJ_TOKENIZER_TIMEOUT_MS (10..120000)
  uint64_t tokenizer_session_cache_bytes = 128u << 20;  // RJ_TOKENIZER_SESSION_CACHE_BYTES (0..64 GiB; 0 = off)
};

// RJ_EXACT_TOKENS as it applies: local, or auto with RJ_MODEL_DIR set (and no shadow mode, whose
// jobs would hold the render pool: then remote).
inline bool exact_tokens_local(const Config& c) {
  return c.exact_tokens == "local" || (c.exact_tokens == "auto" && !c.model_dirs.empty() &&
                                       (c.tokenizer_mode == "off" || c.tokenizer_mode == "local"));
}

// Environment lookup: returns the value of a variable or nullopt. Injected for tests.
using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;

enum class Action { kRun, kHelp, kHelpMarkdown, kHelpMetrics };

struct ParseResult {
  Config config;
  Action action = Action::kRun;
  std::vector<std::string> errors;  // every problem at once; empty = valid
  // RJ_CONFIG_FILE names the environment also sets (its value wins; the file's is not used).
  std::vector<std::string> shadowed;
};

// Parses env (all names in `env_names`, i.e. the keys of the process environment) and argv
// (flags override env). Unknown RJ_* names and any MD_* / DS4_* name are errors, listed in full.
// Flag syntax: --upstream=URL or --upstream URL; --help; --help-markdown; --help-metrics.
ParseResult parse(const std::vector<std::string>& env_names, const EnvLookup& env,
                  const std::vector<std::string>& args);

// Convenience for main(): reads ::environ and argv.
ParseResult parse_process(int argc, char** argv);

// `ramjet --help` text and docs/configuration.md, both generated from the table.
// One RJ_UPSTREAM_MODELS item's model names ("a|b" -> a, b; spaces around a name trimmed; ""
// -> none: the engine's own /v1/models decides).
std::vector<std::string_view> model_names(std::string_view item);

std::string help_text();
std::string markdown_reference();

// "name=value" lines for the effective configuration; secrets print as <redacted>.
std::vector<std::string> describe(const Config& c);

}  // namespace ramjet::config
