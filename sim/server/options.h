// ramjet-sim command line: vLLM's `vllm serve` flags where vLLM has the option, plus our own
// (--preset, --speed, --speculative-tokens, --kv-events-format, --gpus, --engine-version, the
// real-tokenizer files, fault flags).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/engine/engine.h"
#include "sim/kv/publisher.h"

namespace ramjet::sim {

struct Faults {
  double refuse_s = 0;          // --fault-refuse-seconds: no listener for this long after start
  double crash_after_s = 0;     // --fault-crash-after-seconds: exit(1) after this long (0 = never)
  bool hang = false;            // --fault-hang: accept and read requests, never answer
  uint32_t slow_ms = 0;         // --fault-slow-ms: extra time added to every engine step
  double error_rate = 0;        // --fault-error-rate: share of inference requests answered with an error
  unsigned error_status = 503;  // --fault-error-status
  bool health_fail = false;     // --fault-health-fail: GET /health answers 503
  // --fault-drop-header-bytes: a request head over this many bytes gets the connection closed
  // without an answer (a server or sidecar with a small header limit; vLLM itself answers 400)
  uint64_t drop_header_bytes = 0;
  // --fault-stall-after-tokens: a streaming response goes silent after its head and this many
  // generated tokens (a hung GPU); a non-streaming one never answers. 0 = off.
  uint32_t stall_after_tokens = 0;
  bool garbage = false;         // --fault-garbage: inference requests get bytes that are not HTTP
};

// vLLM's HTTP server limits (uvicorn + h11, vllm/entrypoints/constants.py): a request head over
// max_incomplete_event_size bytes or with more than max_header_count fields is answered 400
// "Invalid HTTP request received." and the connection closed, as uvicorn does.
struct HttpLimits {
  uint64_t max_incomplete_event_size = 4u << 20;  // --h11-max-incomplete-event-size
  uint32_t max_header_count = 256;                // --h11-max-header-count
};

// The real-tokenizer mode (sim/server/prompt.h): empty tokenizer = the built-in tokenizer.
struct PromptFlags {
  std::string tokenizer;         // --tokenizer: tokenizer.json
  std::string chat_template;     // --chat-template: .jinja or tokenizer_config.json
  std::string tokenizer_config;  // --tokenizer-config: special tokens for the template
  std::string native_formatter;  // --native-formatter: instead of a template (deepseek-v32)
  std::string added_tokens;      // --added-tokens: added-tokens override for the tokenizer
};

// One --lora-modules entry (vLLM's LoRAModulePath): served under `name`, id = its 1-based
// position (vLLM's lora_int_id counter), listed by /v1/models with parent = base_model_name or
// the served model. The simulator never reads `path`.
struct LoraModule {
  std::string name;
  std::string path;
  std::string base_model_name;
};

// Data parallelism (vLLM's --data-parallel-size / --data-parallel-rank / --api-server-count):
// which DP ranks this process runs. --data-parallel-size N alone: N engine cores behind this
// port (internal load balancing over api_server_count API-server clients); --data-parallel-rank
// k: this process is rank k alone (external load balancing, and with no size given the
// simulator's standalone rank). The KV-event rank lives in PublisherConfig::data_parallel_rank.
struct DataParallel {
  uint32_t size = 1;              // --data-parallel-size
  bool rank_given = false;        // --data-parallel-rank was given
  uint32_t api_server_count = 0;  // --api-server-count; 0 = vLLM's default (size, or 1 with a rank)
  // --engine-kind sglang: a request names its rank and is balanced as SGLang's --dp-size does it
  // (sim/server/sglang_dp.h); everything else stays vLLM's.
  bool sglang = false;
};

// Prefill/decode disaggregation (docs/sim.md §8.4): vLLM's --kv-transfer-config with the
// NixlConnector (pull mode), as far as requests and routers see it. The role only enables the
// connector: as in vLLM, a request's kv_transfer_params decide whether it is a prefill leg
// (do_remote_decode) or a decode leg (do_remote_prefill), whatever the role.
struct KvTransferOptions {
  std::string role;                            // --kv-role kv_producer|kv_consumer|kv_both; "" = none
  std::string engine_id;                       // --kv-engine-id (vLLM: engine_id, default a uuid4)
  std::string side_channel_host = "localhost";  // --kv-side-channel-host (VLLM_NIXL_SIDE_CHANNEL_HOST)
  // --kv-side-channel-port: the port answers carry as remote_port and the side channel listens
  // on; 0 (default) = the HTTP port (vLLM: VLLM_NIXL_SIDE_CHANNEL_PORT, default 5600).
  uint16_t side_channel_port = 0;
  double lease_s = 30;              // --kv-lease-seconds (kv_connector_extra_config.kv_lease_duration)
  bool load_recompute = false;      // --kv-load-failure-policy recompute (vLLM's default: fail)
  double pull_ms = 1.0;             // --kv-pull-ms: virtual milliseconds every pull takes
  double pull_us_per_token = 0.5;   // --kv-pull-us-per-token: virtual microseconds per pulled token
  double timeout_s = 5.0;           // side-channel call timeout (wall seconds; vLLM's handshake ~5 s)
  bool enabled() const { return !role.empty(); }
};

struct SimOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8000;
  // --served-model-name a [b ...]: aliases of the one model; the first names responses and the
  // metrics' model_name. Empty until parse_options, which defaults it to {--model}, as vLLM.
  std::vector<std::string> served_model_names;
  std::string model_root = "ramjet-sim";
  std::string engine_version = "0.32.0+ramjet.sim";  // GET /version (the vLLM release modelled)
  PromptFlags prompt;
  std::vector<LoraModule> lora_modules;  // --lora-modules name=path ... (or JSON objects)
  EngineConfig engine;
  bool enable_prompt_tokens_details = false;
  uint32_t default_max_tokens = 256;  // the sim never emits EOS; real models stop on their own
  double speed = 1.0;                 // virtual time runs this many times faster than real time
  PublisherConfig kv;
  DataParallel dp;
  uint32_t gpus = 0;                  // synthetic DCGM-format GPU series on /metrics
  // Sleep mode, as vLLM: the routes exist only in dev mode (VLLM_SERVER_DEV_MODE=1 in the
  // environment, read by main), and sleeping needs --enable-sleep-mode.
  bool enable_sleep_mode = false;     // --enable-sleep-mode
  bool dev_mode = false;              // VLLM_SERVER_DEV_MODE (not a flag: vLLM reads the environment)
  double wake_ms = 1000;              // --wake-ms: virtual milliseconds POST /wake_up takes
  uint64_t seed = 1;
  KvTransferOptions kv_transfer;
  Faults faults;
  HttpLimits http;
  bool help = false;
  bool version = false;  // --version: print the build (common/build_info.h) and exit

  const std::string& served_model_name() const { return served_model_names.front(); }  // vLLM's model_name()
  bool serves(std::string_view name) const;  // one of the served names (not an adapter)
  // The DP ranks of the engine cores this process runs, in rank order (one unless internal LB).
  std::vector<int> local_ranks() const;
  uint32_t api_servers() const;  // API-server clients balancing over local_ranks()
};

// Parses argv (without the program name). Returns every error found.
std::vector<std::string> parse_options(const std::vector<std::string>& args, SimOptions& out);
std::string usage_text();

}  // namespace ramjet::sim
