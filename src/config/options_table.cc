// The one options table. Adding an option: add a field to Config (config.h), a row here, then
// regenerate docs/configuration.md (config_test says how when it is stale).
#include <array>
#include <bit>
#include <charconv>
#include <string>

#include "config/options.h"

namespace ramjet::config {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB * 1024;
constexpr uint64_t kGiB = kMiB * 1024;

// Routing policies (src/request/route/policy.h: make_policy).
constexpr std::array<std::string_view, 3> kAffinities = {"prefix", "load", "round_robin"};
constexpr std::array<std::string_view, 2> kCreditBases = {"absolute", "relative"};
constexpr std::array<std::string_view, 2> kHorizons = {"off", "auto"};
constexpr std::array<std::string_view, 3> kIdleDrainModes = {"off", "observe", "drain"};
constexpr std::array<std::string_view, 2> kIdleDrainReleases = {"fleet-idle", "utilization"};
constexpr std::array<std::string_view, 2> kIdleDrainActuators = {"sleep", "off"};
constexpr std::array<std::string_view, 2> kSleepLevels = {"1", "2"};
// Decode profiles of an engine: speculative decoding (MTP) or standard decoding.
constexpr std::array<std::string_view, 2> kProfiles = {"mtp", "standard"};
constexpr std::array<std::string_view, 2> kEngineKinds = {"vllm", "sglang"};
constexpr std::array<std::string_view, 3> kEngineRoles = {"both", "prefill", "decode"};
constexpr std::array<std::string_view, 2> kPrefillFailures = {"aggregate", "error"};
constexpr std::array<std::string_view, 4> kTokenizerModes = {"off", "remote-shadow", "local-shadow", "local"};
constexpr std::array<std::string_view, 4> kExactModes = {"auto", "off", "shadow", "on"};
constexpr std::array<std::string_view, 3> kSessionModes = {"off", "shadow", "on"};
constexpr std::array<std::string_view, 3> kExactTokenSources = {"auto", "remote", "local"};
constexpr std::array<std::string_view, 2> kExactInventories = {"events", "companion"};
constexpr std::array<std::string_view, 6> kLogLevels = {"trace", "debug", "info",
                                                        "warn",  "error", "off"};

const std::array kOptions = {
    // --- upstreams ---
    Option{.env = "RJ_UPSTREAM",
           .flag = "--upstream",
           .type = Type::kUrlList,
           .min = 0,
           .max = 256,
           .doc = "Engine base URLs, comma-separated: http[s]://host[:port][/base-path] (this, "
                  "RJ_UPSTREAM_DNS, or both). https:// "
                  "engines are verified (certificate chain and the URL's host name or IP, SNI for "
                  "names) against the system CA store or RJ_UPSTREAM_TLS_CA_FILE; TLS sessions are "
                  "resumed on new connections. Reloaded on SIGHUP when it comes from RJ_CONFIG_FILE: "
                  "engines added join through the readiness gate, engines removed finish their "
                  "requests first.",
           .field = &Config::upstreams},
    Option{.env = "RJ_UPSTREAM_DNS",
           .flag = "--upstream-dns",
           .type = Type::kUrlList,
           .min = 0,
           .max = 64,
           .doc = "Engines discovered from DNS, comma-separated [http[s]://]name:port[/base-path]: "
                  "each name's addresses are engines (one per address, e.g. a Kubernetes headless "
                  "Service; IPv4 ones when a name has both, so a dual-stack pod is one engine), "
                  "looked up again every RJ_UPSTREAM_DNS_INTERVAL_MS. A new "
                  "address joins fenced and must pass the probes and the readiness gate; an address "
                  "that disappears leaves (no new requests, its requests in flight finish, then its "
                  "index, KV subscription and connections are freed). A failed lookup changes "
                  "nothing. https:// names are verified against the name, not the address.",
           .field = &Config::upstream_dns},
    Option{.env = "RJ_UPSTREAM_DNS_INTERVAL_MS",
           .flag = "--upstream-dns-interval-ms",
           .type = Type::kUint,
           .default_text = "5000",
           .min = 100,
           .max = 3600000,
           .doc = "How often every RJ_UPSTREAM_DNS name is looked up again.",
           .field = &Config::upstream_dns_interval_ms},
    Option{.env = "RJ_UPSTREAM_DNS_SERVER",
           .flag = "--upstream-dns-server",
           .type = Type::kString,
           .doc = "Ask this DNS server (IPv4 ip:port) for RJ_UPSTREAM_DNS names instead of the "
                  "system resolver (/etc/hosts, /etc/resolv.conf); names are asked as given, "
                  "without the search list.",
           .field = &Config::upstream_dns_server},
    Option{.env = "RJ_UPSTREAM_MAX",
           .flag = "--upstream-max",
           .type = Type::kUint,
           .default_text = "0",
           .min = 0,
           .max = 1024,
           .doc = "Engines the fleet can hold at once (ordinals 0..N-1). 0 = the RJ_UPSTREAM "
                  "entries alone, or at least 64 when RJ_UPSTREAM_DNS or RJ_CONFIG_FILE can add "
                  "engines. An engine that leaves frees its ordinal once its requests are done; "
                  "one that comes back gets its old ordinal if it is still free.",
           .field = &Config::upstream_max},
    Option{.env = "RJ_CONFIG_FILE",
           .flag = "--config-file",
           .type = Type::kString,
           .doc = "A file of RJ_NAME=value lines (# comments, blank lines; values as in the "
                  "environment) for every option the environment and command line leave unset. "
                  "SIGHUP reads it again, validates the whole configuration and applies what can "
                  "change while running (RJ_UPSTREAM with its RJ_UPSTREAM_PROFILES, RJ_UPSTREAM_MODELS, RJ_UPSTREAM_DP_SIZE, RJ_UPSTREAM_ENGINE, RJ_UPSTREAM_ROLE and KV-endpoint items; "
                  "the weights RJ_ROUTE_ALPHA, RJ_ROUTE_MAX_OVERLAP_BLOCKS, RJ_ROUTE_CREDIT_BASIS, RJ_ROUTE_LOAD_UNIT_BYTES, "
                  "RJ_ROUTE_MAX_LOAD_UNITS, RJ_ROUTE_ADAPTER_LOAD_UNITS, RJ_PROFILE_SHORT_MAX_TOKENS; RJ_LOG_LEVEL), or keeps the running "
                  "configuration and logs every problem; other changed options are named in the log and "
                  "wait for a restart.",
           .field = &Config::config_file},
    Option{.env = "RJ_UPSTREAM_TOKEN",
           .flag = "--upstream-token",
           .type = Type::kString,
           .secret = true,
           .doc = "Bearer token for calls ramjet makes itself (probes, /v1/models); proxied "
                  "requests keep the client's own Authorization, unless RJ_API_KEYS_FILE is set: "
                  "then they carry this token instead.",
           .field = &Config::upstream_token},
    Option{.env = "RJ_UPSTREAM_TLS_CA_FILE",
           .flag = "--upstream-tls-ca-file",
           .type = Type::kString,
           .doc = "PEM file of the CA certificates that https:// engines are verified against, "
                  "instead of the system store (/etc/ssl/certs).",
           .field = &Config::upstream_tls_ca_file},
    Option{.env = "RJ_UPSTREAM_TLS_CERT_FILE",
           .flag = "--upstream-tls-cert-file",
           .type = Type::kString,
           .doc = "Client certificate (PEM, may hold the chain) that ramjet presents to https:// "
                  "engines requiring mutual TLS. Needs RJ_UPSTREAM_TLS_KEY_FILE.",
           .field = &Config::upstream_tls_cert_file},
    Option{.env = "RJ_UPSTREAM_TLS_KEY_FILE",
           .flag = "--upstream-tls-key-file",
           .type = Type::kString,
           .doc = "Private key (PEM, unencrypted) of RJ_UPSTREAM_TLS_CERT_FILE.",
           .field = &Config::upstream_tls_key_file},
    Option{.env = "RJ_UPSTREAM_PROFILES",
           .flag = "--upstream-profiles",
           .type = Type::kList,
           .min = 0,
           .max = 256,
           .choices = kProfiles,
           .doc = "Decode profile of each engine, one per RJ_UPSTREAM entry in the same order, then "
                  "one per RJ_UPSTREAM_DNS name (for all of its engines): "
                  "mtp (speculative decoding) or standard, case-insensitive; empty = no profile "
                  "preference.",
           .field = &Config::upstream_profiles},
    Option{.env = "RJ_UPSTREAM_MODELS",
           .flag = "--upstream-models",
           .type = Type::kList,
           .min = 0,
           .max = 256,
           .doc = "Models each engine serves, one item per RJ_UPSTREAM entry in the same order, then "
                  "one per RJ_UPSTREAM_DNS name (for all of its engines); an item lists model names "
                  "separated by vertical bars, and the LoRA adapters the engine lists on those models follow them. "
                  "An empty item (or no setting) takes the engine's own GET /v1/models. A request goes "
                  "only to engines serving its model; one no engine serves gets 404 from ramjet.",
           .field = &Config::upstream_models},
    Option{.env = "RJ_UPSTREAM_DP_SIZE",
           .flag = "--upstream-dp-size",
           .type = Type::kList,
           .min = 0,
           .max = 256,
           .doc = "Data-parallel ranks of each engine (vLLM --data-parallel-size N), one item per "
                  "RJ_UPSTREAM entry in the same order, then one per RJ_UPSTREAM_DNS name (for all of "
                  "its engines); 1 = one routing target (unset: 1 for all); auto = as many as the "
                  "engine's own /metrics reports (vLLM labels each rank's series engine=\"k\"; read by "
                  "the engine scrape, RJ_ENGINE_SCRAPE_INTERVAL_MS; one target until then, and a "
                  "restart of the engine with another N changes them). An engine with N > 1 takes N ordinals "
                  "(ranks 0..N-1, joining and leaving together): each rank has its own load, cache "
                  "index and KV-event source, and ramjet pins each request to the rank it chose: "
                  "X-Data-Parallel-Rank for vLLM, \"routed_dp_rank\" in the JSON body for SGLang "
                  "(RJ_UPSTREAM_ENGINE); a client's own header is dropped.",
           .field = &Config::upstream_dp_size},
    Option{.env = "RJ_UPSTREAM_ENGINE",
           .flag = "--upstream-engine",
           .type = Type::kList,
           .min = 0,
           .max = 256,
           .choices = kEngineKinds,
           .doc = "What each engine is, one item per RJ_UPSTREAM entry in the same order, then one per "
                  "RJ_UPSTREAM_DNS name (for all of its engines): vllm or sglang, case-insensitive "
                  "(unset: vllm for all). It says how a request is pinned to a data-parallel rank "
                  "(RJ_UPSTREAM_DP_SIZE): vllm gets X-Data-Parallel-Rank; sglang gets "
                  "\"routed_dp_rank\": k as the first member of a JSON-object body (any other body is "
                  "forwarded unchanged, without a rank). Every request to an sglang engine, a whole one "
                  "included, loses the client's own top-level routed_dp_rank and data_parallel_rank "
                  "members; ramjet alone decides the rank.",
           .field = &Config::upstream_engines},
    Option{.env = "RJ_UPSTREAM_ROLE",
           .flag = "--upstream-role",
           .type = Type::kList,
           .min = 0,
           .max = 256,
           .choices = kEngineRoles,
           .doc = "Prefill/decode disaggregation: each engine's part, one item per RJ_UPSTREAM entry in the same "
                  "order, then one per RJ_UPSTREAM_DNS name (for all of its engines): prefill (a vLLM "
                  "kv_producer: computes prompts whose KV cache a decode engine pulls), decode (a kv_consumer) "
                  "or both (empty or unset: both). With a prefill engine listed, a request whose decode engine "
                  "would compute more than RJ_DISAGG_MIN_UNCACHED_TOKENS of its prompt is sent in two legs: "
                  "to a prefill engine with kv_transfer_params asking for remote decode (one token, not "
                  "streamed), then to the decode engine with the transfer parameters that answer carries. "
                  "Other requests go whole to an engine that decodes.",
           .field = &Config::upstream_roles},
    Option{.env = "RJ_DISAGG_MIN_UNCACHED_TOKENS",
           .flag = "--disagg-min-uncached-tokens",
           .type = Type::kUint,
           .default_text = "512",
           .min = 0,
           .max = 100000000,
           .doc = "Disaggregate a request only when its decode engine would compute more than this many prompt "
                  "tokens itself (the prompt less what that engine holds, by the exact index or the prefix "
                  "fingerprints); 0: every request a prefill engine can take. Fewer: the decode engine serves "
                  "it whole, as a prefill leg would cost a transfer for little compute.",
           .field = &Config::disagg_min_uncached_tokens},
    Option{.env = "RJ_DISAGG_PREFILL_MAX_INFLIGHT",
           .flag = "--disagg-prefill-max-inflight",
           .type = Type::kUint,
           .default_text = "0",
           .min = 0,
           .max = 1000000,
           .doc = "Prefill load that stops disaggregation (0: none): when every prefill engine has at least "
                  "this many requests in flight from this process, a request is served whole by its decode "
                  "engine instead of queueing behind other prefills.",
           .field = &Config::disagg_prefill_max_inflight},
    Option{.env = "RJ_DISAGG_PREFILL_FAILURE",
           .flag = "--disagg-prefill-failure",
           .type = Type::kEnum,
           .default_text = "aggregate",
           .choices = kPrefillFailures,
           .doc = "When the prefill leg fails on two prefill engines (or the only one): aggregate serves the "
                  "request whole on its decode engine (it computes the prompt itself); error answers the "
                  "client with the failure (502/504). A prefill leg that did answer is never run twice.",
           .field = &Config::disagg_prefill_failure},
    // --- listeners ---
    Option{.env = "RJ_LISTEN",
           .flag = "--listen",
           .type = Type::kHostPort,
           .default_text = "0.0.0.0:8000",
           .doc = "Listener for the OpenAI-compatible API (port 0 = ephemeral).",
           .field = HostPortField{&Config::listen_host, &Config::listen_port}},
    Option{.env = "RJ_METRICS_LISTEN",
           .flag = "--metrics-listen",
           .type = Type::kHostPort,
           .default_text = "0.0.0.0:9090",
           .doc = "Listener for /metrics and the dashboard (port 0 = ephemeral).",
           .field = HostPortField{&Config::metrics_host, &Config::metrics_port}},
    Option{.env = "RJ_THREADS",
           .flag = "--threads",
           .type = Type::kUint,
           .default_text = "0",
           .min = 0,
           .max = 256,
           .doc = "I/O threads; 0 = one per CPU core.",
           .field = &Config::threads},
    Option{.env = "RJ_LOG_LEVEL",
           .flag = "--log-level",
           .type = Type::kEnum,
           .default_text = "info",
           .choices = kLogLevels,
           .doc = "Log verbosity (JSON lines on stderr).",
           .field = &Config::log_level},
    // --- request shims and rewrites ---
    Option{.env = "RJ_MAX_TOKENS_STRIP",
           .flag = "--max-tokens-strip",
           .type = Type::kUint,
           .default_text = "100000",
           .min = 1,
           .max = uint64_t{1} << 53,
           .doc = "Chat/completions: max_tokens and max_completion_tokens at or above this are "
                  "dropped, so the engine uses the context that is left.",
           .field = &Config::max_tokens_strip},
    Option{.env = "RJ_ADVERTISE_CTX_MARGIN",
           .flag = "--advertise-ctx-margin",
           .type = Type::kUint,
           .default_text = "16384",
           .min = 0,
           .max = uint64_t{1} << 31,
           .doc = "GET /v1/models: context-length fields above this many tokens are reduced by "
                  "it, so clients leave headroom.",
           .field = &Config::advertise_ctx_margin},
    // --- API surface ---
    Option{.env = "RJ_SERVE_TOKENIZE",
           .flag = "--serve-tokenize",
           .type = Type::kBool,
           .default_text = "false",
           .doc = "Also forward POST /tokenize and /detokenize (vLLM's tokenizer endpoints) to an "
                  "engine. Off: the API port serves only chat, completions, responses, messages, "
                  "models and /health, and answers every other path itself (404/405).",
           .field = &Config::serve_tokenize},
    Option{.env = "RJ_PASSTHROUGH_PATHS",
           .flag = "--passthrough-paths",
           .type = Type::kList,
           .min = 0,
           .max = 64,
           .doc = "Extra engine paths the API port forwards unchanged to one engine (any method), "
                  "comma-separated: exact paths, or a prefix ending in '*'. Engine admin and debug "
                  "endpoints (/reset_prefix_cache, /sleep, /metrics, ...) are never reachable "
                  "unless listed here.",
           .field = &Config::passthrough_paths},
    Option{.env = "RJ_API_KEYS_FILE",
           .flag = "--api-keys-file",
           .type = Type::kString,
           .doc = "Client API keys: when set, every request but GET /health (and CORS preflights) needs "
                  "`Authorization: Bearer <key>` or `x-api-key: <key>` with a key from this file, else "
                  "401. One key per line, `key` or `name key` (name: letters, digits, `_-.`, the "
                  "`ramjet_client_requests_by_key_total` label; `unnamed` when absent); a key may be "
                  "written as `sha256:<64 hex>` of its bytes; blank lines and `#` lines are ignored. "
                  "A bad line stops startup (named by number, never quoted); SIGHUP reloads the file "
                  "(a bad file keeps the old keys). The clients' keys are not forwarded: engines get "
                  "RJ_UPSTREAM_TOKEN instead.",
           .field = &Config::api_keys_file},
    Option{.env = "RJ_TLS_CERT_FILE",
           .flag = "--tls-cert-file",
           .type = Type::kString,
           .doc = "Server certificate (PEM; the chain may follow it): with RJ_TLS_KEY_FILE, the API "
                  "and metrics listeners speak HTTPS only (HTTP/1.1, TLS 1.2+; the handshake must finish "
                  "within RJ_HEADER_TIMEOUT_MS). SIGHUP re-reads both files; a bad pair keeps the "
                  "old one.",
           .field = &Config::tls_cert_file},
    Option{.env = "RJ_TLS_KEY_FILE",
           .flag = "--tls-key-file",
           .type = Type::kString,
           .doc = "Private key (PEM, unencrypted) of RJ_TLS_CERT_FILE.",
           .field = &Config::tls_key_file},
    // --- limits and timeouts (ingress) ---
    Option{.env = "RJ_MAX_BODY_BYTES",
           .flag = "--max-body-bytes",
           .type = Type::kUint,
           .default_text = "67108864",
           .min = kKiB,
           .max = kGiB,
           .bytes = true,
           .doc = "Largest accepted request body; larger requests are refused with 413.",
           .field = &Config::max_body_bytes},
    Option{.env = "RJ_MAX_HEADER_BYTES",
           .flag = "--max-header-bytes",
           .type = Type::kUint,
           .default_text = "65536",
           .min = kKiB,
           .max = kMiB,
           .bytes = true,
           .doc = "Largest accepted request line plus headers; larger requests are refused "
                  "with 431.",
           .field = &Config::max_header_bytes},
    Option{.env = "RJ_MAX_BUFFERED_BYTES",
           .flag = "--max-buffered-bytes",
           .type = Type::kUint,
           .default_text = "268435456",
           .min = kKiB,
           .max = 64 * kGiB,
           .bytes = true,
           .doc = "Request body bytes held in memory by all requests together (an inference body "
                  "counts twice: it is parsed; a parse whose document passes 2 MiB holds that too while "
                  "it runs); a request that would pass it is refused with 503 and Retry-After (a body "
                  "over half of it with 413, as over RJ_MAX_BODY_BYTES).",
           .field = &Config::max_buffered_bytes},
    Option{.env = "RJ_HEADER_TIMEOUT_MS",
           .flag = "--header-timeout-ms",
           .type = Type::kUint,
           .default_text = "10000",
           .min = 100,
           .max = 600000,
           .doc = "Time a client has to send the request line and headers.",
           .field = &Config::header_timeout_ms},
    Option{.env = "RJ_BODY_TIMEOUT_MS",
           .flag = "--body-timeout-ms",
           .type = Type::kUint,
           .default_text = "60000",
           .min = 100,
           .max = 3600000,
           .doc = "Time a client has to send the request body.",
           .field = &Config::body_timeout_ms},
    Option{.env = "RJ_KEEPALIVE_TIMEOUT_MS",
           .flag = "--keepalive-timeout-ms",
           .type = Type::kUint,
           .default_text = "75000",
           .min = 100,
           .max = 3600000,
           .doc = "Idle client connections are closed after this long.",
           .field = &Config::keepalive_timeout_ms},
    Option{.env = "RJ_CLIENT_SEND_TIMEOUT_MS",
           .flag = "--client-send-timeout-ms",
           .type = Type::kUint,
           .default_text = "60000",
           .min = 0,
           .max = 3600000,
           .doc = "A client that takes no response bytes for this long (it stopped reading) has "
                  "its request ended and the engine request cancelled; 0 = never.",
           .field = &Config::client_send_timeout_ms},
    Option{.env = "RJ_SHUTDOWN_GRACE_MS",
           .flag = "--shutdown-grace-ms",
           .type = Type::kUint,
           .default_text = "30000",
           .min = 0,
           .max = 3600000,
           .doc = "On SIGTERM/SIGINT, how long in-flight requests may finish before they are "
                  "cut.",
           .field = &Config::shutdown_grace_ms},
    // --- upstream client and health ---
    Option{.env = "RJ_UPSTREAM_CONNECT_TIMEOUT_MS",
           .flag = "--upstream-connect-timeout-ms",
           .type = Type::kUint,
           .default_text = "5000",
           .min = 10,
           .max = 120000,
           .doc = "TCP connect timeout towards an engine.",
           .field = &Config::connect_timeout_ms},
    Option{.env = "RJ_UPSTREAM_POOL_IDLE",
           .flag = "--upstream-pool-idle",
           .type = Type::kUint,
           .default_text = "64",
           .min = 0,
           .max = 4096,
           .doc = "Idle keep-alive connections kept per engine per I/O thread.",
           .field = &Config::pool_max_idle},
    Option{.env = "RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS",
           .flag = "--upstream-first-byte-timeout-ms",
           .type = Type::kUint,
           .default_text = "300000",
           .min = 0,
           .max = 86400000,
           .doc = "From sending a request to an engine until the first byte of its response "
                  "body (queueing and prefill); a non-streaming response sends nothing before it "
                  "is complete, so this bounds its whole generation. Ends the request with 504; "
                  "0 = never.",
           .field = &Config::first_byte_timeout_ms},
    Option{.env = "RJ_UPSTREAM_IDLE_TIMEOUT_MS",
           .flag = "--upstream-idle-timeout-ms",
           .type = Type::kUint,
           .default_text = "120000",
           .min = 0,
           .max = 86400000,
           .doc = "Longest silence from an engine once its response body has begun (a stream "
                  "that stalls); the client gets an SSE error event, the engine request is "
                  "cancelled; 0 = never.",
           .field = &Config::upstream_idle_timeout_ms},
    Option{.env = "RJ_UPSTREAM_MAX_HEADER_BYTES",
           .flag = "--upstream-max-header-bytes",
           .type = Type::kUint,
           .default_text = "4194304",
           .min = kKiB,
           .max = 64 * kMiB,
           .bytes = true,
           .doc = "Largest request head (request line plus headers, as forwarded) the engines "
                  "accept; larger requests get 431 from ramjet instead of a dropped connection. "
                  "Default: vLLM's HTTP server limit (--h11-max-incomplete-event-size).",
           .field = &Config::upstream_max_header_bytes},
    Option{.env = "RJ_UPSTREAM_MAX_HEADER_COUNT",
           .flag = "--upstream-max-header-count",
           .type = Type::kUint,
           .default_text = "256",
           .min = 1,
           .max = 65536,
           .doc = "Most header fields the engines accept in a forwarded request; more get 431 "
                  "from ramjet. Default: vLLM's (--h11-max-header-count).",
           .field = &Config::upstream_max_header_count},
    Option{.env = "RJ_PROBE_INTERVAL_MS",
           .flag = "--probe-interval-ms",
           .type = Type::kUint,
           .default_text = "5000",
           .min = 100,
           .max = 3600000,
           .doc = "Interval between health probes of each engine.",
           .field = &Config::probe_interval_ms},
    Option{.env = "RJ_PROBE_TIMEOUT_MS",
           .flag = "--probe-timeout-ms",
           .type = Type::kUint,
           .default_text = "5000",
           .min = 10,
           .max = 120000,
           .doc = "Timeout of one health probe.",
           .field = &Config::probe_timeout_ms},
    Option{.env = "RJ_PROBE_RECENT_SUCCESS_MS",
           .flag = "--probe-recent-success-ms",
           .type = Type::kUint,
           .default_text = "30000",
           .min = 0,
           .max = 3600000,
           .doc = "A probe that times out or cannot connect does not fence an engine that "
                  "served a request this recently (0 = off).",
           .field = &Config::recent_success_ms},
    Option{.env = "RJ_PROBE_RANK_GENERATION",
           .flag = "--probe-rank-generation",
           .type = Type::kBool,
           .default_text = "false",
           .doc = "For an ordinal that is one data-parallel rank (RJ_UPSTREAM_DP_SIZE): after a passing "
                  "/health, a one-token completion pinned to the rank (X-Data-Parallel-Rank, or routed_dp_rank for SGLang) must answer "
                  "within RJ_PROBE_TIMEOUT_MS, or the probe counts as timed out. The ranks share one "
                  "/health, which answers while one rank's scheduler is wedged; this finds that rank. "
                  "Costs each rank one tiny request per RJ_PROBE_INTERVAL_MS.",
           .field = &Config::probe_rank_generation},
    Option{.env = "RJ_READY_SUCCESSES",
           .flag = "--ready-successes",
           .type = Type::kUint,
           .default_text = "3",
           .min = 1,
           .max = 100,
           .doc = "Consecutive passing health probes a fenced engine needs before it can be "
                  "readmitted.",
           .field = &Config::ready_successes},
    Option{.env = "RJ_READY_STABLE_SECONDS",
           .flag = "--ready-stable-seconds",
           .type = Type::kUint,
           .default_text = "30",
           .min = 0,
           .max = 3600,
           .doc = "After those probes, how long a readmitted engine must stay stable (probes "
                  "keep passing) before it receives traffic; /health shows it as warming "
                  "meanwhile.",
           .field = &Config::ready_stable_seconds},
    Option{.env = "RJ_OUTLIER_CONSECUTIVE_FAILURES",
           .flag = "--outlier-consecutive-failures",
           .type = Type::kUint,
           .default_text = "5",
           .min = 0,
           .max = 1000,
           .doc = "Request failures in a row (5xx, dropped or garbled before an answer, "
                  "timeouts, cut streams) that eject an engine from routing; 0 = never eject.",
           .field = &Config::outlier_consecutive_failures},
    Option{.env = "RJ_OUTLIER_BASE_EJECTION_MS",
           .flag = "--outlier-base-ejection-ms",
           .type = Type::kUint,
           .default_text = "30000",
           .min = 100,
           .max = 3600000,
           .doc = "How long a first ejection lasts; each ejection that follows within "
                  "RJ_OUTLIER_MAX_EJECTION_MS of a return doubles it. Then the readiness gate.",
           .field = &Config::outlier_base_ejection_ms},
    Option{.env = "RJ_OUTLIER_MAX_EJECTION_MS",
           .flag = "--outlier-max-ejection-ms",
           .type = Type::kUint,
           .default_text = "300000",
           .min = 100,
           .max = 86400000,
           .doc = "Longest ejection (a smaller value means RJ_OUTLIER_BASE_EJECTION_MS).",
           .field = &Config::outlier_max_ejection_ms},
    Option{.env = "RJ_OUTLIER_MAX_EJECTION_PERCENT",
           .flag = "--outlier-max-ejection-percent",
           .type = Type::kUint,
           .default_text = "50",
           .min = 0,
           .max = 100,
           .doc = "Most of the fleet ejected at once, in percent (rounded down, but at least one "
                  "engine unless 0), so outliers cannot empty it.",
           .field = &Config::outlier_max_ejection_percent},
    Option{.env = "RJ_OUTLIER_PENALTY_MS",
           .flag = "--outlier-penalty-ms",
           .type = Type::kUint,
           .default_text = "10000",
           .min = 0,
           .max = 3600000,
           .doc = "After two request failures in a row (until the engine's next success, at most "
                  "this long) routing ranks the engine after every engine that is not failing, so "
                  "one that fails fast is never preferred for looking idle; 0 = off.",
           .field = &Config::outlier_penalty_ms},
    // --- routing ---
    Option{.env = "RJ_AFFINITY",
           .flag = "--affinity",
           .type = Type::kEnum,
           .default_text = "prefix",
           .choices = kAffinities,
           .doc = "Routing policy. prefix: prefix-cache affinity minus reserved load (the "
                  "default); load: least reserved load, then rotation; round_robin: load-blind "
                  "rotation (a baseline).",
           .field = &Config::affinity},
    Option{.env = "RJ_ROUTE_ALPHA",
           .flag = "--route-alpha",
           .type = Type::kDecimal,
           .default_text = "4",
           .dmin = 0,
           .dmax = 1000,
           .doc = "Prefix policy: score units (affinity blocks) subtracted per load unit an "
                  "engine has reserved; higher values let load override cache affinity sooner.",
           .field = &Config::route_alpha},
    Option{.env = "RJ_ROUTE_MAX_OVERLAP_BLOCKS",
           .flag = "--route-max-overlap-blocks",
           .type = Type::kUint,
           .default_text = "32",
           .min = 0,
           .max = 65536,
           .doc = "Prefix policy: cap, in fingerprint blocks, on the affinity an engine's cached "
                  "prefix can earn, so a long shared prefix cannot outweigh any amount of load.",
           .field = &Config::route_max_overlap_blocks},
    Option{.env = "RJ_ROUTE_CREDIT_BASIS",
           .flag = "--route-credit-basis",
           .type = Type::kEnum,
           .default_text = "relative",
           .choices = kCreditBases,
           .doc = "Prefix policy: what an engine's cached prefix earns. absolute: its overlap, up to "
                  "RJ_ROUTE_MAX_OVERLAP_BLOCKS. relative: the same while no serving engine's overlap passes the "
                  "cap; past it, every overlap is first lowered by what the warmest one exceeds the cap by, so a "
                  "shared system prompt every engine holds past the cap no longer flattens them all to the cap: "
                  "the engine holding the conversation beyond it keeps its lead until load outweighs that part "
                  "(bench/scoring.sh: 1.04x output, 94 vs 92 % cached, TTFT p95 0.85x with a 96 KiB shared prompt).",
           .field = &Config::route_credit_basis},
    Option{.env = "RJ_ROUTE_HORIZON",
           .flag = "--route-horizon",
           .type = Type::kEnum,
           .default_text = "off",
           .choices = kHorizons,
           .doc = "Prefix policy: when a fingerprint stops earning credit. off: while the approximate "
                  "index keeps it (RJ_ROUTE_INDEX_CAPACITY). auto: only within the engine's eviction horizon, "
                  "its KV pool (vllm:cache_config_info's num_gpu_blocks x block_size, from the engine scrape, "
                  "RJ_ENGINE_SCRAPE_INTERVAL_MS) in prompt bytes: a prefix after which ramjet sent the engine "
                  "more new prompt than its pool holds was evicted by its LRU and earns nothing (a generous bound: "
                  "hits on older prefixes, generated tokens and other routers' traffic age the engine's "
                  "blocks too, unseen). An engine that reports no pool has no horizon.",
           .field = &Config::route_horizon},
    Option{.env = "RJ_ROUTE_CHUNK_BYTES",
           .flag = "--route-chunk-bytes",
           .type = Type::kUint,
           .default_text = "2048",
           .min = 64,
           .max = kMiB,
           .bytes = true,
           .doc = "Canonical prompt bytes per fingerprint block, the unit of prefix affinity.",
           .field = &Config::route_chunk_bytes},
    Option{.env = "RJ_ROUTE_MAX_PREFIX_BYTES",
           .flag = "--route-max-prefix-bytes",
           .type = Type::kUint,
           .default_text = "2097152",
           .min = 0,
           .max = kGiB,
           .bytes = true,
           .doc = "Most canonical prompt bytes fingerprinted per request; bytes beyond it earn "
                  "no affinity (0 = no fingerprints).",
           .field = &Config::route_max_prefix_bytes},
    Option{.env = "RJ_ROUTE_INDEX_CAPACITY",
           .flag = "--route-index-capacity",
           .type = Type::kUint,
           .default_text = "100000",
           .min = 0,
           .max = 67108864,
           .doc = "Prefix fingerprints remembered per engine, least recently used evicted first "
                  "(one block of prompt each, 2 KiB at the default chunk size); 0 disables the "
                  "index.",
           .field = &Config::route_index_capacity},
    Option{.env = "RJ_ROUTE_LOAD_UNIT_BYTES",
           .flag = "--route-load-unit-bytes",
           .type = Type::kUint,
           .default_text = "32768",
           .min = 1,
           .max = uint64_t{1} << 31,
           .bytes = true,
           .doc = "Uncached prompt bytes per load unit when sizing a reservation.",
           .field = &Config::route_load_unit_bytes},
    Option{.env = "RJ_ROUTE_MAX_LOAD_UNITS",
           .flag = "--route-max-load-units",
           .type = Type::kUint,
           .default_text = "8",
           .min = 1,
           .max = 1024,
           .doc = "Largest load one request can reserve, in load units.",
           .field = &Config::route_max_load_units},
    Option{.env = "RJ_ROUTE_ADAPTER_LOAD_UNITS",
           .flag = "--route-adapter-load-units",
           .type = Type::kUint,
           .default_text = "2",
           .min = 0,
           .max = 1024,
           .doc = "Prefix and load policies: what a LoRA adapter request (a model of "
                  "RJ_UPSTREAM_MODELS or an engine's /v1/models that names an adapter) is charged, in "
                  "load units, on an engine where its adapter is not active: an engine's "
                  "vllm:lora_requests_info (read by the engine scrape, RJ_ENGINE_SCRAPE_INTERVAL_MS) "
                  "names the adapters with running or waiting requests and its max_lora. Where the "
                  "adapter is active: nothing (its weights are loaded); a free slot: this many (the "
                  "adapter loads first); every slot taken by other adapters: twice this many (vLLM "
                  "schedules the request only once one of them drains, then evicts it). A score "
                  "term, not a pin: load elsewhere still wins past it, so adapters spread when "
                  "their traffic grows. An engine that reports no adapter state is charged as a "
                  "free slot while another candidate reports, nothing when none does. 0: "
                  "adapter-blind (bench/adapters.sh: 8 adapters, 2 slots per engine: 1.58x output "
                  "tokens/s and TTFT p95 0.06x against 0).",
           .field = &Config::route_adapter_load_units},
    Option{.env = "RJ_ROUTE_DECODE_COST",
           .flag = "--route-decode-cost",
           .type = Type::kBool,
           .default_text = "false",
           .doc = "Prefix policy: charge each engine the time the request's output would take to decode "
                  "there beyond the fastest engine's, in blocks of prefill time (a block of cache credit is "
                  "worth the prefill it saves), so cache, load and decode speed are weighed as one expected "
                  "time to serve. Nothing is configured per engine: each engine's time per output token "
                  "against its in-flight requests is fitted from the responses relayed from it (those that "
                  "report usage: a stream with stream_options.include_usage), a "
                  "request's expected output is its max_tokens times the share of their limit responses used "
                  "(the mean output without a limit), and the prefill speed is learned as for "
                  "RJ_EXACT_ROUTE_BUDGET_SHARE. The time counted is what the request adds there: its own decode "
                  "at the engine's load plus what it slows the requests already there by, and, once some engine "
                  "is charged for its decode, the prefill its requests in flight would wait for where it holds "
                  "less of the prompt than the warmest engine. Differences within "
                  "10 % of the fastest engine are left to the load term; an engine not measured yet is charged "
                  "nothing (it is tried, and so measured). For fleets whose "
                  "engines decode at different speeds (speculative MTP engines beside standard ones, mixed "
                  "GPUs); RJ_UPSTREAM_PROFILES is not needed with it. Read at startup.",
           .field = &Config::route_decode_cost},
    Option{.env = "RJ_ROUTE_PHASE_AWARE_LOAD",
           .flag = "--route-phase-aware-load",
           .type = Type::kBool,
           .default_text = "true",
           .doc = "At a streaming response's first generated token, its reservation shrinks to "
                  "one decode unit (the prefill is done).",
           .field = &Config::route_phase_aware_load},
    Option{.env = "RJ_ROUTE_SINGLE_FLIGHT",
           .flag = "--route-single-flight",
           .type = Type::kBool,
           .default_text = "true",
           .doc = "Concurrent requests with the same new prefix follow the first one's engine "
                  "while it prefills, instead of prefilling the prefix on several engines.",
           .field = &Config::route_single_flight},
    Option{.env = "RJ_ROUTE_SINGLE_FLIGHT_TIMEOUT_MS",
           .flag = "--route-single-flight-timeout-ms",
           .type = Type::kUint,
           .default_text = "60000",
           .min = 100,
           .max = 3600000,
           .doc = "Longest a new prefix keeps later requests on the first one's engine; after "
                  "it they are routed normally.",
           .field = &Config::route_single_flight_timeout_ms},
    Option{.env = "RJ_ROUTE_SINGLE_FLIGHT_CAPACITY",
           .flag = "--route-single-flight-capacity",
           .type = Type::kUint,
           .default_text = "1024",
           .min = 1,
           .max = 1048576,
           .doc = "New prefixes tracked for single-flight at once.",
           .field = &Config::route_single_flight_capacity},
    Option{.env = "RJ_ADMISSION_ENGINE_MAX_INFLIGHT",
           .flag = "--admission-engine-max-inflight",
           .type = Type::kUint,
           .default_text = "0",
           .min = 0,
           .max = 1000000,
           .doc = "The waiting room (off while this and RJ_ADMISSION_ENGINE_MAX_WAITING are 0): an engine "
                  "has room while this process has fewer requests in flight on it (set it near the engine's "
                  "--max-num-seqs). While no engine of a request's model pool has room, the request waits in "
                  "ramjet, by priority class and fairly between clients (by tokens); it leaves for an engine "
                  "of its pool with room, placed among those by cache and load. Bounds: "
                  "RJ_ADMISSION_QUEUE_MAX, _MAX_BYTES, _TIMEOUT_MS (past one: 429 with Retry-After).",
           .field = &Config::admission_engine_max_inflight},
    Option{.env = "RJ_ADMISSION_ENGINE_MAX_WAITING",
           .flag = "--admission-engine-max-waiting",
           .type = Type::kUint,
           .default_text = "0",
           .min = 0,
           .max = 1000000,
           .doc = "The waiting room by the engines' own queues (0 = not read): an engine has room only "
                  "while its vllm:num_requests_waiting, from the engine scrape (RJ_ENGINE_SCRAPE_INTERVAL_MS), "
                  "is below this; a reading older than three scrape intervals counts as no room. With "
                  "RJ_ADMISSION_ENGINE_MAX_INFLIGHT both must hold.",
           .field = &Config::admission_engine_max_waiting},
    Option{.env = "RJ_ADMISSION_ENGINE_MAX_KV_USAGE",
           .flag = "--admission-engine-max-kv-usage",
           .type = Type::kDecimal,
           .default_text = "0",
           .dmin = 0,
           .dmax = 1,
           .doc = "The waiting room by the engines' KV caches (0 = not read): an engine has room only while its "
                  "vllm:kv_cache_usage_perc, from the engine scrape (RJ_ENGINE_SCRAPE_INTERVAL_MS), is below this "
                  "(e.g. 0.95: past it vLLM preempts running requests to make room); a reading older than three "
                  "scrape intervals, or none, counts as no room. With the other caps, all must hold.",
           .field = &Config::admission_engine_max_kv_usage},
    Option{.env = "RJ_ADMISSION_ENGINE_BURST",
           .flag = "--admission-engine-burst",
           .type = Type::kUint,
           .default_text = "0",
           .min = 0,
           .max = 100000,
           .doc = "Burst slots: requests an engine takes past RJ_ADMISSION_ENGINE_MAX_INFLIGHT (none without "
                  "that cap), only for a client holding fewer requests than its fair share of the pool's slots "
                  "(the slots divided among the clients with requests in flight): such a request skips the "
                  "queue instead of waiting for a long generation to end. Set the engine's --max-num-seqs "
                  "to at least the cap plus this, so it runs them at once. 0: none.",
           .field = &Config::admission_engine_burst},
    Option{.env = "RJ_ADMISSION_QUEUE_MAX",
           .flag = "--admission-queue-max",
           .type = Type::kUint,
           .default_text = "256",
           .min = 0,
           .max = 1000000,
           .doc = "Requests that may wait in the waiting room at once; one more gets 429.",
           .field = &Config::admission_queue_max},
    Option{.env = "RJ_ADMISSION_QUEUE_MAX_BYTES",
           .flag = "--admission-queue-max-bytes",
           .type = Type::kUint,
           .default_text = "67108864",
           .min = 0,
           .max = uint64_t{1} << 40,
           .doc = "Request bodies the waiting room may hold at once, in bytes; one that would pass it gets 429.",
           .field = &Config::admission_queue_max_bytes},
    Option{.env = "RJ_ADMISSION_QUEUE_TIMEOUT_MS",
           .flag = "--admission-queue-timeout-ms",
           .type = Type::kUint,
           .default_text = "30000",
           .min = 1,
           .max = 3600000,
           .doc = "The longest a request waits for room; then 429 with Retry-After.",
           .field = &Config::admission_queue_timeout_ms},
    Option{.env = "RJ_ADMISSION_PRIORITY_HEADER",
           .flag = "--admission-priority-header",
           .type = Type::kString,
           .doc = "A request header clients may set to `batch` (or `interactive`) to pick their priority "
                  "class in the waiting room (interactive requests always leave before batch ones); unset, "
                  "no header is honoured. A key listed in RJ_ADMISSION_BATCH_KEYS stays batch whatever it says.",
           .field = &Config::admission_priority_header},
    Option{.env = "RJ_ADMISSION_BATCH_KEYS",
           .flag = "--admission-batch-keys",
           .type = Type::kList,
           .min = 0,
           .max = 4096,
           .doc = "Names of API keys (RJ_API_KEYS_FILE) whose requests are batch in the waiting room.",
           .field = &Config::admission_batch_keys},
    Option{.env = "RJ_ADMISSION_ENGINE_PRIORITY",
           .flag = "--admission-engine-priority",
           .type = Type::kBool,
           .default_text = "false",
           .doc = "The vLLM engines run --scheduling-policy priority: each chat, completions and responses "
                  "request to a vllm engine (RJ_UPSTREAM_ENGINE) carries its priority class (RJ_ADMISSION_BATCH_KEYS, "
                  "RJ_ADMISSION_PRIORITY_HEADER) as vLLM's per-request \"priority\": 0 interactive, 1 batch "
                  "(vLLM serves lower values first and, short of KV room, preempts the highest). A client's own "
                  "top-level priority is left out. Works with or without the waiting room; Messages requests "
                  "(vLLM's has no priority) and SGLang engines get none.",
           .field = &Config::admission_engine_priority},
    // --- idle drain (engine parking) ---
    Option{.env = "RJ_IDLE_DRAIN_MODE",
           .flag = "--idle-drain-mode",
           .type = Type::kEnum,
           .default_text = "off",
           .choices = kIdleDrainModes,
           .doc = "Idle drain (engine parking): drain takes a quiet engine out of placement and, with "
                  "RJ_IDLE_DRAIN_ACTUATOR=sleep, puts it to sleep (vLLM sleep mode: VLLM_SERVER_DEV_MODE=1 "
                  "and --enable-sleep-mode on the engine); it wakes it at once when load or a waiting "
                  "request needs it, holding that request in the waiting room meanwhile. observe: decisions "
                  "logged and counted, nothing done. Needs at least two engines.",
           .field = &Config::idle_drain_mode},
    Option{.env = "RJ_IDLE_DRAIN_RELEASE",
           .flag = "--idle-drain-release",
           .type = Type::kEnum,
           .default_text = "fleet-idle",
           .choices = kIdleDrainReleases,
           .doc = "When engines are drained. fleet-idle: only while no request reached any engine for "
                  "RJ_IDLE_DRAIN_IDLE_AFTER_SECONDS; utilization: whenever an engine was quiet for "
                  "RJ_IDLE_DRAIN_UPSTREAM_IDLE_AFTER_SECONDS and its pool's load over the warm engines left "
                  "stays below half RJ_IDLE_DRAIN_RESUME_LOAD_PER_REPLICA.",
           .field = &Config::idle_drain_release},
    Option{.env = "RJ_IDLE_DRAIN_IDLE_AFTER_SECONDS",
           .flag = "--idle-drain-idle-after-seconds",
           .type = Type::kDecimal,
           .default_text = "900",
           .dmin = 1,
           .dmax = 604800,
           .doc = "The fleet is idle after this long without a request to any engine (fleet-idle release).",
           .field = &Config::idle_drain_idle_after_s},
    Option{.env = "RJ_IDLE_DRAIN_UPSTREAM_IDLE_AFTER_SECONDS",
           .flag = "--idle-drain-upstream-idle-after-seconds",
           .type = Type::kDecimal,
           .default_text = "300",
           .dmin = 1,
           .dmax = 604800,
           .doc = "An engine may be drained after this long without a request.",
           .field = &Config::idle_drain_upstream_idle_after_s},
    Option{.env = "RJ_IDLE_DRAIN_RESUME_LOAD_PER_REPLICA",
           .flag = "--idle-drain-resume-load-per-replica",
           .type = Type::kDecimal,
           .default_text = "4",
           .dmin = 0,
           .dmax = 100000,
           .doc = "A parked engine of a pool is woken at once when the pool's requests in flight per warm "
                  "engine pass this.",
           .field = &Config::idle_drain_resume_load_per_replica},
    Option{.env = "RJ_IDLE_DRAIN_MIN_WARM",
           .flag = "--idle-drain-min-warm",
           .type = Type::kUint,
           .default_text = "1",
           .min = 0,
           .max = 1024,
           .doc = "Warm engines each model pool keeps (0: a pool may park every engine; its next request "
                  "waits for a wake).",
           .field = &Config::idle_drain_min_warm},
    Option{.env = "RJ_IDLE_DRAIN_COOLDOWN_SECONDS",
           .flag = "--idle-drain-cooldown-seconds",
           .type = Type::kDecimal,
           .default_text = "300",
           .dmin = 0,
           .dmax = 86400,
           .doc = "At most one engine is drained per this long; an engine that failed to wake is tried "
                  "again after it.",
           .field = &Config::idle_drain_cooldown_s},
    Option{.env = "RJ_IDLE_DRAIN_GRACE_SECONDS",
           .flag = "--idle-drain-grace-seconds",
           .type = Type::kDecimal,
           .default_text = "30",
           .dmin = 0,
           .dmax = 3600,
           .doc = "A drained engine is put to sleep this long after it left placement, once nothing is in "
                  "flight there.",
           .field = &Config::idle_drain_grace_s},
    Option{.env = "RJ_IDLE_DRAIN_INTERVAL_SECONDS",
           .flag = "--idle-drain-interval-seconds",
           .type = Type::kDecimal,
           .default_text = "15",
           .dmin = 0.05,
           .dmax = 300,
           .doc = "How often the idle drain decides (a request waiting for a parked pool decides at once).",
           .field = &Config::idle_drain_interval_s},
    Option{.env = "RJ_IDLE_DRAIN_ACTUATOR",
           .flag = "--idle-drain-actuator",
           .type = Type::kEnum,
           .default_text = "sleep",
           .choices = kIdleDrainActuators,
           .doc = "sleep: a drained engine gets POST /sleep and POST /wake_up (vLLM sleep mode); off: it "
                  "is only kept out of placement.",
           .field = &Config::idle_drain_actuator},
    Option{.env = "RJ_IDLE_DRAIN_SLEEP_LEVEL",
           .flag = "--idle-drain-sleep-level",
           .type = Type::kEnum,
           .default_text = "1",
           .choices = kSleepLevels,
           .doc = "vLLM sleep level: 1 offloads the weights to host memory, 2 discards them (both discard "
                  "the KV cache).",
           .field = &Config::idle_drain_sleep_level},
    Option{.env = "RJ_IDLE_DRAIN_MAX_PARKED",
           .flag = "--idle-drain-max-parked",
           .type = Type::kUint,
           .default_text = "1",
           .min = 1,
           .max = 1024,
           .doc = "Engines out of placement (draining, asleep, waking, failed to wake) at once, fleet-wide.",
           .field = &Config::idle_drain_max_parked},
    Option{.env = "RJ_IDLE_DRAIN_WAKE_TIMEOUT_SECONDS",
           .flag = "--idle-drain-wake-timeout-seconds",
           .type = Type::kDecimal,
           .default_text = "60",
           .dmin = 0.1,
           .dmax = 3600,
           .doc = "A wake (POST /wake_up, /is_sleeping false, /health 200) or sleep must finish in this "
                  "long; an engine that does not wake in time is fenced (failed) and another one woken.",
           .field = &Config::idle_drain_wake_timeout_s},
    Option{.env = "RJ_ROUTE_ENGINE_LOAD",
           .flag = "--route-engine-load",
           .type = Type::kBool,
           .default_text = "true",
           .doc = "Several routers: load other routers (or clients going around ramjet) put on an "
                  "engine counts with this process's own reservations. It is what the engine reports "
                  "(vllm:num_requests_running + _waiting, read every RJ_ENGINE_SCRAPE_INTERVAL_MS) beyond "
                  "this process's in-flight requests there, in load units; a reading older than three "
                  "scrape intervals counts for nothing. Off, or with the scrape off: own reservations only (plus the "
                  "RJ_PEERS replicas' load, when set).",
           .field = &Config::route_engine_load},
    Option{.env = "RJ_ROUTE_ENGINE_LOAD_WAITING_UNITS",
           .flag = "--route-engine-load-waiting-units",
           .type = Type::kDecimal,
           .default_text = "2",
           .dmin = 0,
           .dmax = 1024,
           .doc = "RJ_ROUTE_ENGINE_LOAD: load units one foreign request waiting in an engine's queue "
                  "weighs (its prefill is still ahead); a running one weighs one unit, as a decoding "
                  "reservation does.",
           .field = &Config::route_engine_load_waiting_units},
    Option{.env = "RJ_PEERS",
           .flag = "--peers",
           .type = Type::kList,
           .min = 0,
           .max = 64,
           .hosts = true,
           .doc = "Several routers share their load directly: the other ramjet replicas' RJ_PEER_LISTEN "
                  "addresses (host:port; a name stands for every address it resolves to, looked up every "
                  "10 s, e.g. a Kubernetes headless Service; this replica's own may be listed too, so every "
                  "replica can take the same list). Every RJ_PEER_INTERVAL_MS each replica sends each peer its in-flight "
                  "requests and load units per engine (UDP, signed with RJ_PEER_SECRET_FILE); a replica "
                  "counts its fresh peers' load with its own, so a burst a round-robin front splits is "
                  "seen whole within one interval. Engines are matched by address, not ordinal. Empty = "
                  "off (the engines' own counts, RJ_ROUTE_ENGINE_LOAD, are the only view of other routers).",
           .field = &Config::peers},
    Option{.env = "RJ_PEER_LISTEN",
           .flag = "--peer-listen",
           .type = Type::kString,
           .doc = "RJ_PEERS: the UDP host:port this replica receives its peers' load on (required with "
                  "RJ_PEERS; port 0 picks one and logs it).",
           .field = &Config::peer_listen},
    Option{.env = "RJ_PEER_SECRET_FILE",
           .flag = "--peer-secret-file",
           .type = Type::kString,
           .doc = "RJ_PEERS: the secret every replica signs and checks the load datagrams with (HMAC-SHA256), "
                  "the same file on every replica: 32 bytes or 64 hex digits (openssl rand -hex 32), owned "
                  "by ramjet's user (or root), mode 600. Required with RJ_PEERS; a datagram that fails the "
                  "check is dropped and counted (ramjet_peer_datagrams_total).",
           .field = &Config::peer_secret_file},
    Option{.env = "RJ_PEER_INTERVAL_MS",
           .flag = "--peer-interval-ms",
           .type = Type::kUint,
           .default_text = "50",
           .min = 10,
           .max = 1000,
           .doc = "RJ_PEERS: how often each replica sends its load; a peer whose last load is older than "
                  "four intervals (at least 250 ms) counts for nothing.",
           .field = &Config::peer_interval_ms},
    Option{.env = "RJ_PROFILE_SHORT_MAX_TOKENS",
           .flag = "--profile-short-max-tokens",
           .type = Type::kUint,
           .default_text = "256",
           .min = 1,
           .max = uint64_t{1} << 31,
           .doc = "Requests asking for at most this many output tokens prefer mtp engines; "
                  "larger or unset limits prefer standard engines (see RJ_UPSTREAM_PROFILES).",
           .field = &Config::profile_short_max_tokens},
    Option{.env = "RJ_SESSION_AFFINITY_MODE",
           .flag = "--session-affinity-mode",
           .type = Type::kEnum,
           .default_text = "off",
           .choices = kSessionModes,
           .doc = "Session affinity as a score prior, never a pin. A request's session (one "
                  "X-Session-ID of 1..256 bytes; stripped before the engine) maps by keyed rendezvous "
                  "hashing to a primary and a secondary engine; on: the primary (the secondary when the "
                  "primary is not eligible) earns RJ_SESSION_AFFINITY_BONUS_BLOCKS of affinity while its "
                  "load is within RJ_SESSION_AFFINITY_MAX_LOAD_DELTA of the least loaded, so it decides "
                  "only where cache and load leave a choice (prefix policy); shadow: computed and counted "
                  "(ramjet_session_affinity_total, the journal) but not used; off: never.",
           .field = &Config::session_affinity_mode},
    Option{.env = "RJ_SESSION_AFFINITY_KEY",
           .flag = "--session-affinity-key",
           .type = Type::kString,
           .secret = true,
           .doc = "Key of the sessions' rendezvous hash (HMAC-SHA256), 32..256 bytes; required unless "
                  "RJ_SESSION_AFFINITY_MODE is off. Routers that share it give a session the same engines.",
           .field = &Config::session_affinity_key},
    Option{.env = "RJ_SESSION_AFFINITY_BONUS_BLOCKS",
           .flag = "--session-affinity-bonus-blocks",
           .type = Type::kUint,
           .default_text = "4",
           .min = 0,
           .max = 65536,
           .doc = "Affinity blocks the session's target engine earns (within RJ_ROUTE_MAX_OVERLAP_BLOCKS, "
                  "which it may not exceed).",
           .field = &Config::session_affinity_bonus_blocks},
    Option{.env = "RJ_SESSION_AFFINITY_MAX_LOAD_DELTA",
           .flag = "--session-affinity-max-load-delta",
           .type = Type::kUint,
           .default_text = "0",
           .min = 0,
           .max = 1024,
           .doc = "The target earns its bonus only while its load units (own and other routers') are at "
                  "most this many above the least-loaded eligible engine's (at most RJ_ROUTE_MAX_LOAD_UNITS).",
           .field = &Config::session_affinity_max_load_delta},
    Option{.env = "RJ_SESSION_AFFINITY_USER_FIELD",
           .flag = "--session-affinity-user-field",
           .type = Type::kBool,
           .default_text = "false",
           .doc = "A request without X-Session-ID is keyed by its body's `user` (OpenAI) or "
                  "`metadata.user_id` (Anthropic), 1..256 bytes.",
           .field = &Config::session_affinity_user_field},
    Option{.env = "RJ_ROUTE_JOURNAL",
           .flag = "--route-journal",
           .type = Type::kBool,
           .default_text = "false",
           .doc = "Write a privacy-bounded JSONL decision journal: a start and a finish record "
                  "per routed request.",
           .field = &Config::route_journal},
    Option{.env = "RJ_ROUTE_JOURNAL_FILE",
           .flag = "--route-journal-file",
           .type = Type::kString,
           .doc = "Decision journal file, opened for appending; empty = stderr.",
           .field = &Config::route_journal_file},
    // --- KV events (exact routing) ---
    Option{.env = "RJ_KV_EVENT_LIVE_ENDPOINTS",
           .flag = "--kv-event-live-endpoints",
           .type = Type::kList,
           .min = 0,
           .max = 256,
           .hosts = true,
           .doc = "Each engine's KV-event publisher (vLLM --kv-events-config endpoint), one per "
                  "RJ_UPSTREAM entry in the same order, \"-\" for an engine without: tcp://host:port "
                  "or ipc://path, or discover: ask the engine's GET /kv_event_sources (newest vLLM) "
                  "for its live and replay endpoints and topic, again every 30 s (a lone discover "
                  "means every engine). ramjet subscribes and keeps an exact index of every engine's "
                  "prefix cache (trust per engine in /health and ramjet_kv_state). Exact routing needs "
                  "every healthy engine's index: a healthy \"-\" engine (or one whose discovery finds "
                  "none) keeps it on the fingerprints. Empty = no KV events.",
           .field = &Config::kv_event_live_endpoints},
    Option{.env = "RJ_KV_EVENT_REPLAY_ENDPOINTS",
           .flag = "--kv-event-replay-endpoints",
           .type = Type::kList,
           .min = 0,
           .max = 256,
           .hosts = true,
           .doc = "Each engine's replay endpoint (vLLM's replay_endpoint), in the same order, \"-\" "
                  "for none. Missed batches are fetched from it; without one, any gap fences the "
                  "engine's index until the engine clears its cache.",
           .field = &Config::kv_event_replay_endpoints},
    Option{.env = "RJ_KV_EVENT_TOPIC",
           .flag = "--kv-event-topic",
           .type = Type::kString,
           .doc = "The topic the engines publish under (vLLM's kv_events_config topic; empty by "
                  "default).",
           .field = &Config::kv_event_topic},
    Option{.env = "RJ_KV_EVENT_TIMEOUT_MS",
           .flag = "--kv-event-timeout-ms",
           .type = Type::kUint,
           .default_text = "5000",
           .min = 100,
           .max = 600000,
           .doc = "Deadline of one replay, connect included; a replay that misses it fences the "
                  "engine's index.",
           .field = &Config::kv_event_timeout_ms},
    Option{.env = "RJ_KV_EVENT_REPLAY_LIMIT",
           .flag = "--kv-event-replay-limit",
           .type = Type::kUint,
           .default_text = "8192",
           .min = 1,
           .max = 1048576,
           .doc = "Most batches one replay may ask for (keep it at or below the engines' "
                  "buffer_steps); a larger gap fences the engine's index.",
           .field = &Config::kv_event_replay_limit},
    Option{.env = "RJ_KV_EVENT_REPLAY_TAIL_LIMIT",
           .flag = "--kv-event-replay-tail-limit",
           .type = Type::kUint,
           .default_text = "4096",
           .min = 1,
           .max = 1048576,
           .doc = "Live batches held while a replay runs; more fence the engine's index.",
           .field = &Config::kv_event_replay_tail_limit},
    Option{.env = "RJ_KV_INDEX_MAX_BLOCKS",
           .flag = "--kv-index-max-blocks",
           .type = Type::kUint,
           .default_text = "262144",
           .min = 1024,
           .max = 2147483648,
           .doc = "Blocks the exact index holds per engine (about 62 bytes each, reserved up front, "
                  "touched as it fills): at least the engine's KV-cache blocks (vLLM logs its GPU KV "
                  "cache size in tokens; divide by the block size) plus the blocks of its CPU and "
                  "storage offload tiers. A full index fences.",
           .field = &Config::kv_index_max_blocks},
    // --- ramjet-companion (exact inventories without token IDs) ---
    Option{.env = "RJ_EXACT_INVENTORY",
           .flag = "--exact-inventory",
           .type = Type::kEnum,
           .default_text = "events",
           .choices = kExactInventories,
           .doc = "Where each engine's exact index comes from. events: ramjet subscribes to the engine's KV "
                  "events (RJ_KV_EVENT_*). companion: a ramjet-companion beside the engine keeps its exact "
                  "state as keyed block digests (no token IDs) and ramjet imports its snapshot, then follows "
                  "its live tail (RJ_COMPANION_ENDPOINTS, RJ_COMPANION_SECRET_FILE, "
                  "RJ_COMPANION_DIGEST_SECRET_FILE); /health shows each replica's \"inventory\".",
           .field = &Config::exact_inventory},
    Option{.env = "RJ_COMPANION_ENDPOINTS",
           .flag = "--companion-endpoints",
           .type = Type::kList,
           .min = 0,
           .max = 256,
           .hosts = true,
           .doc = "Each engine's ramjet-companion, one per RJ_UPSTREAM entry in the same order (required "
                  "with RJ_EXACT_INVENTORY=companion): unix:/path or tcp://host:port, or \"-\" for an engine "
                  "that keeps its own KV events (its RJ_KV_EVENT_LIVE_ENDPOINTS item). Engines that join "
                  "later (RJ_UPSTREAM_DNS, a reload) keep their KV events. Each companion engine holds two "
                  "indexes of RJ_KV_INDEX_MAX_BLOCKS (the next snapshot is imported beside the one in use).",
           .field = &Config::companion_endpoints},
    Option{.env = "RJ_COMPANION_SECRET_FILE",
           .flag = "--companion-secret-file",
           .type = Type::kString,
           .doc = "The session secret the companions share with ramjet (authenticates the hello and every "
                  "frame): a file of 32 bytes or 64 hex digits (openssl rand -hex 32), owned by ramjet's user "
                  "(or root), mode 600. Read at startup; a bad file stops it (required with "
                  "RJ_EXACT_INVENTORY=companion).",
           .field = &Config::companion_secret_file},
    Option{.env = "RJ_COMPANION_DIGEST_SECRET_FILE",
           .flag = "--companion-digest-secret-file",
           .type = Type::kString,
           .doc = "The block-digest key the companions digest token blocks under (the same file as theirs; "
                  "ramjet digests each request's blocks under it for the lookup): same rules as "
                  "RJ_COMPANION_SECRET_FILE (required with RJ_EXACT_INVENTORY=companion).",
           .field = &Config::companion_digest_secret_file},
    // --- exact routing ---
    Option{.env = "RJ_EXACT_ROUTE_MODE",
           .flag = "--exact-route-mode",
           .type = Type::kEnum,
           .default_text = "auto",
           .choices = kExactModes,
           .doc = "Placement from the engines' KV events. on: a request in the size window is "
                  "tokenized and placed on exact resident tokens while every healthy engine's index "
                  "is trusted (otherwise, and on any failure, on the approximate index); shadow: the "
                  "same is computed and counted (ramjet_exact_route_total, X-Ramjet-Route) but not "
                  "used; off: never; auto: on when RJ_KV_EVENT_LIVE_ENDPOINTS is set or "
                  "RJ_EXACT_INVENTORY=companion, else off.",
           .field = &Config::exact_route_mode},
    Option{.env = "RJ_EXACT_TOKENS",
           .flag = "--exact-tokens",
           .type = Type::kEnum,
           .default_text = "auto",
           .choices = kExactTokenSources,
           .doc = "Where exact routing gets a request's prompt tokens. remote: POST /tokenize on a "
                  "healthy engine (chat form with the request's messages, tools, template and "
                  "chat_template_kwargs; reasoning_effort carried into the kwargs): one engine round "
                  "trip per request. local: ramjet's own renderer and tokenizer from RJ_MODEL_DIR (or "
                  "the RJ_TOKENIZER_PATH pins; RJ_TOKENIZER_MODE off becomes local), on the "
                  "RJ_TOKENIZER_WORKERS pool, while every healthy engine is attested by the goldens (or "
                  "a pinned manifest; else the fingerprints place it: unattested); a follow-up turn "
                  "encodes only its new part (the session cache). A request the profile does not render "
                  "(an unknown template kwarg, an effort the model lacks) is tokenized remotely. auto: local when "
                  "RJ_MODEL_DIR is set (and RJ_TOKENIZER_MODE is off or local), else remote.",
           .field = &Config::exact_tokens},
    Option{.env = "RJ_EXACT_ROUTE_MIN_BYTES",
           .flag = "--exact-route-min-bytes",
           .type = Type::kUint,
           .default_text = "32768",
           .min = 0,
           .max = kGiB,
           .bytes = true,
           .doc = "Smallest request body exact routing tokenizes (smaller prompts gain little from "
                  "exact placement and pay the tokenize call).",
           .field = &Config::exact_route_min_bytes},
    Option{.env = "RJ_EXACT_ROUTE_MAX_BYTES",
           .flag = "--exact-route-max-bytes",
           .type = Type::kUint,
           .default_text = "2097152",
           .min = kKiB,
           .max = kGiB,
           .bytes = true,
           .doc = "Largest request body exact routing tokenizes.",
           .field = &Config::exact_route_max_bytes},
    Option{.env = "RJ_EXACT_ROUTE_TIMEOUT_MS",
           .flag = "--exact-route-timeout-ms",
           .type = Type::kUint,
           .default_text = "500",
           .min = 10,
           .max = 60000,
           .doc = "Deadline of the tokenize call on the request path; past it the request is placed "
                  "on the approximate index. The cap of each request's own budget "
                  "(RJ_EXACT_ROUTE_BUDGET_SHARE).",
           .field = &Config::exact_route_timeout_ms},
    Option{.env = "RJ_EXACT_ROUTE_BUDGET_SHARE",
           .flag = "--exact-route-budget-share",
           .type = Type::kDecimal,
           .default_text = "0.1",
           .dmin = 0,
           .dmax = 10,
           .doc = "A request waits for its exact-routing tokens (remote or local) at most this share of "
                  "its expected cold prefill time (its body size x the learned prompt tokens per byte x "
                  "the learned time to first token per computed prompt token, from the responses ramjet "
                  "relays), within 2 ms..RJ_EXACT_ROUTE_TIMEOUT_MS; past it the request goes out on the "
                  "fingerprints (outcome tokenize_timeout): exact routing never makes a request slower "
                  "than the fingerprints by more than that share. 0: RJ_EXACT_ROUTE_TIMEOUT_MS for "
                  "every request.",
           .field = &Config::exact_route_budget_share},
    Option{.env = "RJ_EXACT_PROVISIONAL_TTL_MS",
           .flag = "--exact-provisional-ttl-ms",
           .type = Type::kUint,
           .default_text = "8000",
           .min = 0,
           .max = 600000,
           .doc = "Speculative residency: the blocks of a request's prompt its engine does not hold "
                  "yet count as held there for this long after the placement (or until the engine's "
                  "events confirm them), so the next request with that prefix follows it instead of "
                  "scattering before the events arrive. About the longest prefill plus queueing; 0 = off.",
           .field = &Config::exact_provisional_ttl_ms},
    Option{.env = "RJ_EXACT_ROUTE_CANARY_BPS",
           .flag = "--exact-route-canary-bps",
           .type = Type::kUint,
           .default_text = "10000",
           .min = 0,
           .max = 10000,
           .doc = "Rollout of exact placement, in sessions per 10,000: a request whose single "
                  "X-Session-ID hashes (SHA-256 with RJ_EXACT_ROUTE_CANARY_KEY) into the share is "
                  "placed exactly; the rest, and requests without a session, are computed and "
                  "recorded as shadow decisions only. 10000 = every request, with or without a "
                  "session; 0 = instant rollback (ramjet_exact_route_canary_total).",
           .field = &Config::exact_route_canary_bps},
    Option{.env = "RJ_EXACT_ROUTE_CANARY_KEY",
           .flag = "--exact-route-canary-key",
           .type = Type::kString,
           .secret = true,
           .doc = "Key of the canary's session hash: another key draws another cohort of the same "
                  "size.",
           .field = &Config::exact_route_canary_key},
    Option{.env = "RJ_EXACT_MISS_LIMIT",
           .flag = "--exact-miss-limit",
           .type = Type::kUint,
           .default_text = "5",
           .min = 0,
           .max = 1000,
           .doc = "Exact placements in a row whose prediction the engine's cached_tokens contradicts "
                  "(by more than two blocks) before that engine's exact trust is withdrawn for "
                  "RJ_EXACT_MISS_COOLDOWN_MS (a tokenizer, template or block-size mismatch); 0 = never.",
           .field = &Config::exact_miss_limit},
    Option{.env = "RJ_EXACT_MISS_COOLDOWN_MS",
           .flag = "--exact-miss-cooldown-ms",
           .type = Type::kUint,
           .default_text = "60000",
           .min = 1000,
           .max = 86400000,
           .doc = "How long a withdrawn engine's exact trust stays withdrawn; then it is used again "
                  "and its next miss withdraws it again.",
           .field = &Config::exact_miss_cooldown_ms},
    Option{.env = "RJ_KV_TIER_WEIGHT_CPU",
           .flag = "--kv-tier-weight-cpu",
           .type = Type::kDecimal,
           .default_text = "0.8",
           .dmin = 0,
           .dmax = 1,
           .doc = "Exact routing: what a prompt token an engine holds in its CPU offload tier (vLLM's "
                  "OffloadingConnector, KV events with medium CPU) is worth to the prefix score, a GPU "
                  "token being worth 1: loading it back is far cheaper than recomputing it, dearer "
                  "than a GPU hit. The default follows llm-d (CPU 0.8) and vLLM Router 0.1.17's "
                  "kv_aware policy (host 0.8); Dynamo uses 0.75. 0: CPU-held tokens earn no "
                  "affinity (they still count in the prediction the engine's cached_tokens checks).",
           .field = &Config::kv_tier_weight_cpu},
    Option{.env = "RJ_KV_TIER_WEIGHT_DISK",
           .flag = "--kv-tier-weight-disk",
           .type = Type::kDecimal,
           .default_text = "0.3",
           .dmin = 0,
           .dmax = 1,
           .doc = "Exact routing: the same for a token held in a storage tier (medium STORAGE, or FS "
                  "and OBJ in vLLM 0.26). The default follows vLLM Router 0.1.17's kv_aware policy "
                  "(disk 0.3); Dynamo uses 0.25.",
           .field = &Config::kv_tier_weight_disk},
    // --- observability ---
    Option{.env = "RJ_ENGINE_SCRAPE_INTERVAL_MS",
           .flag = "--engine-scrape-interval-ms",
           .type = Type::kUint,
           .default_text = "500",
           .min = 0,
           .max = 3600000,
           .doc = "Interval between reads of each engine's own /metrics (running and waiting "
                  "requests, KV-cache usage, prefix-cache hits, DCGM GPU series) for the "
                  "dashboard, the ramjet_engine_* metrics and, with RJ_ROUTE_ENGINE_LOAD, routing "
                  "(short, so other routers' load is seen while it lasts; 2000 is enough for the "
                  "dashboard alone); 0 = off.",
           .field = &Config::engine_scrape_interval_ms},
    Option{.env = "RJ_ENGINE_SCRAPE_TIMEOUT_MS",
           .flag = "--engine-scrape-timeout-ms",
           .type = Type::kUint,
           .default_text = "2000",
           .min = 10,
           .max = 120000,
           .doc = "Timeout of one read of an engine's /metrics (the scrape, and GET "
                  "/metrics/upstream/{i} on the metrics listener).",
           .field = &Config::engine_scrape_timeout_ms},
    Option{.env = "RJ_ENGINE_SCRAPE_MAX_BYTES",
           .flag = "--engine-scrape-max-bytes",
           .type = Type::kUint,
           .default_text = "4194304",
           .min = 64 * kKiB,
           .max = 64 * kMiB,
           .bytes = true,
           .doc = "Largest engine /metrics answer read; a larger one is a scrape error (and a "
                  "502 from /metrics/upstream/{i}).",
           .field = &Config::engine_scrape_max_bytes},
    Option{.env = "RJ_GPU_METRICS_URLS",
           .flag = "--gpu-metrics-urls",
           .type = Type::kUrlList,
           .min = 0,
           .max = 256,
           .doc = "DCGM-exporter URLs, one per RJ_UPSTREAM entry in the same order "
                  "(http://host:port[/path]; the path defaults to /metrics), read on the engine "
                  "scrape interval for the dashboard's GPU view. Empty: GPU series come from the "
                  "engines' own /metrics when they carry DCGM series, and from nvidia-smi when "
                  "it is installed here.",
           .field = &Config::gpu_metrics_urls},
    // --- local tokenization (render/service/tokenizer_service.h) ---
    Option{.env = "RJ_TOKENIZER_MODE",
           .flag = "--tokenizer-mode",
           .type = Type::kEnum,
           .default_text = "off",
           .choices = kTokenizerModes,
           .doc = "Local prompt tokenization, off the request path. off: none; remote-shadow: after "
                  "a complete response, ask the engine that served it for its token ids (POST "
                  "/tokenize); local-shadow: that, plus ramjet's own render + encode of the same "
                  "request, compared (parity metrics); local: the local render + encode only. Local "
                  "modes need the tokenizer, template (HF profiles) and manifest pins, and use local "
                  "tokens only for engines whose /v1/models and /version match the manifest.",
           .field = &Config::tokenizer_mode},
    Option{.env = "RJ_TOKENIZER_PROFILE",
           .flag = "--tokenizer-profile",
           .type = Type::kString,
           .doc = "Model profile of the served model (src/model/; `ramjet render` and docs/models.md "
                  "list them). Checked at startup even when RJ_TOKENIZER_MODE is off: an unknown "
                  "value is an error. Required when the mode is not off.",
           .field = &Config::tokenizer_profile},
    Option{.env = "RJ_MODEL_DIR",
           .flag = "--model-dir",
           .type = Type::kList,
           .min = 0,
           .max = 16,
           .doc = "The engines' model folder (as for vllm serve: tokenizer.json, tokenizer_config.json, "
                  "chat_template.jinja or the template in tokenizer_config.json, config.json), the one "
                  "setting local tokens need: ramjet reads the files once at startup and pins their "
                  "SHA-256s (logged), picks the profile from config.json's model_type (unless "
                  "RJ_TOKENIZER_PROFILE is set), and without RJ_TOKENIZER_MANIFEST_PATH proves each "
                  "engine by built-in golden requests: its POST /tokenize must reproduce ramjet's own "
                  "tokens before its requests are tokenized locally, again whenever its identity "
                  "(/v1/models and /version) changes; a mismatch is refused, logged and counted. "
                  "Engines serving several models: one folder per model, separated by commas (each with "
                  "its own profile from its config.json, its goldens and its session cache, "
                  "RJ_TOKENIZER_SESSION_CACHE_BYTES each); an engine is proven by the folder whose goldens "
                  "it reproduces and a request is rendered by the folder that proved its model's engines. "
                  "Not with RJ_TOKENIZER_PATH or RJ_CHAT_TEMPLATE_PATH; several folders not with "
                  "RJ_TOKENIZER_PROFILE or RJ_TOKENIZER_MANIFEST_PATH.",
           .field = &Config::model_dirs},
    Option{.env = "RJ_TOKENIZER_PATH",
           .flag = "--tokenizer-path",
           .type = Type::kString,
           .doc = "The model's tokenizer.json (local modes). Needs RJ_TOKENIZER_SHA256.",
           .field = &Config::tokenizer_path},
    Option{.env = "RJ_TOKENIZER_SHA256",
           .flag = "--tokenizer-sha256",
           .type = Type::kString,
           .doc = "SHA-256 (64 hex) of RJ_TOKENIZER_PATH's bytes; a different file stops startup.",
           .field = &Config::tokenizer_sha256},
    Option{.env = "RJ_CHAT_TEMPLATE_PATH",
           .flag = "--chat-template-path",
           .type = Type::kString,
           .doc = "The chat template (a .jinja file, or the model's tokenizer_config.json) for profiles "
                  "that render with an HF template; must not be set for native-formatter profiles. "
                  "Needs RJ_CHAT_TEMPLATE_SHA256.",
           .field = &Config::chat_template_path},
    Option{.env = "RJ_CHAT_TEMPLATE_SHA256",
           .flag = "--chat-template-sha256",
           .type = Type::kString,
           .doc = "SHA-256 (64 hex) of RJ_CHAT_TEMPLATE_PATH's bytes.",
           .field = &Config::chat_template_sha256},
    Option{.env = "RJ_TOKENIZER_MANIFEST_PATH",
           .flag = "--tokenizer-manifest-path",
           .type = Type::kString,
           .doc = "Compatibility manifest (local modes; format in docs/models.md, written by "
                  "`ramjet manifest`): the engine identity to attest and golden requests with "
                  "the engine's token counts and digests, all re-rendered at startup. Needs "
                  "RJ_TOKENIZER_MANIFEST_SHA256.",
           .field = &Config::tokenizer_manifest_path},
    Option{.env = "RJ_TOKENIZER_MANIFEST_SHA256",
           .flag = "--tokenizer-manifest-sha256",
           .type = Type::kString,
           .doc = "SHA-256 (64 hex) of RJ_TOKENIZER_MANIFEST_PATH's bytes.",
           .field = &Config::tokenizer_manifest_sha256},
    Option{.env = "RJ_TOKENIZER_MIN_BYTES",
           .flag = "--tokenizer-min-bytes",
           .type = Type::kUint,
           .default_text = "32768",
           .min = 0,
           .max = 1 * kGiB,
           .bytes = true,
           .doc = "Smallest request body tokenized in the shadow modes (smaller ones are skipped: "
                  "outside_size_window).",
           .field = &Config::tokenizer_min_bytes},
    Option{.env = "RJ_TOKENIZER_MAX_BYTES",
           .flag = "--tokenizer-max-bytes",
           .type = Type::kUint,
           .default_text = "2097152",
           .min = 1,
           .max = 1 * kGiB,
           .bytes = true,
           .doc = "Largest request body tokenized in the shadow modes.",
           .field = &Config::tokenizer_max_bytes},
    Option{.env = "RJ_TOKENIZER_WORKERS",
           .flag = "--tokenizer-workers",
           .type = Type::kUint,
           .default_text = "1",
           .min = 1,
           .max = 64,
           .doc = "Worker threads for shadow tokenizations.",
           .field = &Config::tokenizer_workers},
    Option{.env = "RJ_TOKENIZER_QUEUE_CAPACITY",
           .flag = "--tokenizer-queue-capacity",
           .type = Type::kUint,
           .default_text = "8",
           .min = 1,
           .max = 65536,
           .doc = "Requests waiting for a worker; when full, new ones are skipped (queue_full), never "
                  "waited for.",
           .field = &Config::tokenizer_queue_capacity},
    Option{.env = "RJ_TOKENIZER_TIMEOUT_MS",
           .flag = "--tokenizer-timeout-ms",
           .type = Type::kUint,
           .default_text = "2000",
           .min = 10,
           .max = 120000,
           .doc = "Deadline of one engine /tokenize call, and of each /v1/models or /version "
                  "identity check.",
           .field = &Config::tokenizer_timeout_ms},
    Option{.env = "RJ_TOKENIZER_SESSION_CACHE_BYTES",
           .flag = "--tokenizer-session-cache-bytes",
           .type = Type::kUint,
           .default_text = "134217728",
           .min = 0,
           .max = 64 * kGiB,
           .bytes = true,
           .doc = "Memory for the local modes' session cache: encoded conversation prefixes cut after "
                  "special tokens, so a follow-up turn encodes only its new messages (ids identical to "
                  "a full encode); half of it for exact routing's last turn of each conversation (body, "
                  "prompt, ids: a follow-up that extends it parses and renders only its new messages) and an "
                  "eighth for the rendered prefixes of a native formatter. 0 = no cache.",
           .field = &Config::tokenizer_session_cache_bytes},
};

}  // namespace

std::string format_number(uint64_t v, bool bytes) {
  if (bytes && v >= kKiB) {
    static constexpr std::array<std::pair<uint64_t, std::string_view>, 3> kUnits = {
        {{kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}}};
    for (const auto& [unit, name] : kUnits) {
      if (v % unit == 0) return std::to_string(v / unit) + " " + std::string(name);
    }
  }
  if (!bytes && v >= (uint64_t{1} << 20) && std::has_single_bit(v)) {
    return "2^" + std::to_string(std::countr_zero(v));
  }
  return std::to_string(v);
}

std::string format_decimal(double v) {
  char buf[400];  // fixed notation of any finite double fits
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

std::span<const Option> options() {
  return kOptions;
}

const Option* find_by_env(std::string_view env) {
  for (const Option& o : kOptions) {
    if (o.env == env) return &o;
  }
  return nullptr;
}

const Option* find_by_flag(std::string_view flag) {
  for (const Option& o : kOptions) {
    if (o.flag == flag) return &o;
  }
  return nullptr;
}

std::string_view type_name(Type t) {
  switch (t) {
    case Type::kString:
      return "string";
    case Type::kUint:
      return "uint";
    case Type::kDecimal:
      return "decimal";
    case Type::kBool:
      return "bool";
    case Type::kEnum:
      return "enum";
    case Type::kList:
      return "list";
    case Type::kHostPort:
      return "host:port";
    case Type::kUrlList:
      return "url-list";
  }
  return "?";
}

std::string_view type_syntax(Type t) {
  switch (t) {
    case Type::kString:
      return "any text, taken as is.";
    case Type::kUint:
      return "a decimal integer without sign or separators.";
    case Type::kDecimal:
      return "a non-negative decimal number such as `4` or `2.5`: digits with an optional "
             "fractional part (`4.` and `.5` are refused); no sign, exponent, `inf` or `nan`.";
    case Type::kBool:
      return "true/false, 1/0, yes/no or on/off.";
    case Type::kEnum:
      return "one of the listed values (case-insensitive).";
    case Type::kList:
      return "comma-separated items; whitespace around items is ignored.";
    case Type::kHostPort:
      return "host:port where host is an IPv4 address, `localhost` or a hostname, and port is "
             "0..65535 (0 = ephemeral).";
    case Type::kUrlList:
      return "comma-separated `http://host[:port][/base-path]`; whitespace around items and "
             "trailing `/` are trimmed, the port defaults to 80, IPv6 hosts go in brackets. "
             "`https://` is not supported yet; credentials, queries and fragments are refused.";
  }
  return "";
}

std::string bounds_text(const Option& o) {
  switch (o.type) {
    case Type::kUint:
      return format_number(o.min, o.bytes) + ".." + format_number(o.max, o.bytes);
    case Type::kDecimal:
      return format_decimal(o.dmin) + ".." + format_decimal(o.dmax);
    case Type::kList:
    case Type::kUrlList: {
      std::string s = std::to_string(o.min) + ".." + std::to_string(o.max) + " items";
      for (size_t i = 0; i < o.choices.size(); ++i) {
        s += i == 0 ? ", each " : i + 1 == o.choices.size() ? " or " : ", ";
        s += o.choices[i];
      }
      return s;
    }
    case Type::kEnum: {
      std::string s;
      for (std::string_view c : o.choices) {
        if (!s.empty()) s += ", ";
        s += c;
      }
      return s;
    }
    case Type::kHostPort:
      return "port 0..65535";
    case Type::kString:
    case Type::kBool:
      return "";
  }
  return "";
}

std::string default_display(const Option& o, bool markdown) {
  if (o.required) return "(required)";
  if (o.default_text.empty()) return "(none)";
  std::string shown(o.default_text);
  if (markdown) shown = std::string("`").append(o.default_text).append("`");  // (no "lit" + string: GCC 12 -O3 -Wrestrict)
  if (o.type == Type::kUint && o.bytes) {
    uint64_t v = 0;
    std::from_chars(o.default_text.data(), o.default_text.data() + o.default_text.size(), v);
    std::string human = format_number(v, true);
    if (human != o.default_text) shown += " (" + human + ")";
  }
  return shown;
}

}  // namespace ramjet::config
