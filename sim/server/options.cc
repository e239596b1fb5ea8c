#include "sim/server/options.h"

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>

namespace ramjet::sim {
namespace {

struct Flag {
  std::string name;
  bool takes_value;
  std::string doc;
  std::function<std::string(const std::string&, SimOptions&)> apply;  // returns an error or ""
};

template <typename T>
std::string parse_num(const std::string& v, T& out, T lo, T hi) {
  T x{};
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size()) return "not a number: " + v;
  if (x < lo || x > hi) return "out of range: " + v;
  out = x;
  return "";
}

std::string parse_double(const std::string& v, double& out, double lo, double hi) {
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used != v.size()) return "not a number: " + v;
    if (!(x >= lo && x <= hi)) return "out of range: " + v;
    out = x;
    return "";
  } catch (...) {
    return "not a number: " + v;
  }
}

// vLLM's LoRAParserAction: `name=path`, or a JSON object {"name", "path", "base_model_name"?}.
std::string parse_lora_module(const std::string& v, SimOptions& o) {
  LoraModule m;
  if (!v.empty() && v.front() == '{') {
    boost::system::error_code ec;
    auto j = boost::json::parse(v, ec);
    if (ec || !j.is_object()) return "invalid JSON: " + v;
    const auto& obj = j.as_object();
    auto str = [&](const char* k) -> const boost::json::string* {
      auto* x = obj.if_contains(k);
      return x && x->is_string() ? &x->as_string() : nullptr;
    };
    if (!str("name") || !str("path")) return "a JSON module needs \"name\" and \"path\" strings";
    m.name = std::string(*str("name"));
    m.path = std::string(*str("path"));
    if (auto* b = str("base_model_name")) m.base_model_name = std::string(*b);
  } else {
    const auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) return "expected name=path: " + v;
    m.name = v.substr(0, eq);
    m.path = v.substr(eq + 1);
  }
  for (const auto& x : o.lora_modules) {
    if (x.name == m.name) return "adapter '" + m.name + "' given twice";
  }
  if (m.name.size() > 1024) return "adapter name longer than 1024 bytes";
  o.lora_modules.push_back(std::move(m));
  return "";
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> f = {
      {"--host", true, "address to listen on (default 0.0.0.0)",
       [](const std::string& v, SimOptions& o) { o.host = v; return std::string(); }},
      {"--port", true, "port (default 8000; 0 = ephemeral, printed at startup)",
       [](const std::string& v, SimOptions& o) { return parse_num<uint16_t>(v, o.port, 0, 65535); }},
      {"--served-model-name", true, "model names served (aliases; the first names responses); default --model",
       [](const std::string& v, SimOptions& o) {
         if (v.empty()) return std::string("must not be empty");
         o.served_model_names.push_back(v);
         return std::string();
       }},
      {"--model", true, "model root reported in /v1/models (default ramjet-sim)",
       [](const std::string& v, SimOptions& o) { o.model_root = v; return std::string(); }},
      {"--engine-version", true, "version served by GET /version (default 0.32.0+ramjet.sim)",
       [](const std::string& v, SimOptions& o) {
         if (v.empty()) return std::string("must not be empty");
         o.engine_version = v;
         return std::string();
       }},
      {"--tokenizer", true, "tokenizer.json: tokenize with it instead of the built-in tokenizer",
       [](const std::string& v, SimOptions& o) { o.prompt.tokenizer = v; return std::string(); }},
      {"--chat-template", true, "chat template (.jinja, or a tokenizer_config.json); default: the "
                                "tokenizer's own",
       [](const std::string& v, SimOptions& o) { o.prompt.chat_template = v; return std::string(); }},
      {"--tokenizer-config", true, "tokenizer_config.json with the template's special tokens",
       [](const std::string& v, SimOptions& o) { o.prompt.tokenizer_config = v; return std::string(); }},
      {"--native-formatter", true, "built-in prompt formatter instead of a template (deepseek-v32)",
       [](const std::string& v, SimOptions& o) { o.prompt.native_formatter = v; return std::string(); }},
      {"--added-tokens", true, "added-tokens override applied to the tokenizer",
       [](const std::string& v, SimOptions& o) { o.prompt.added_tokens = v; return std::string(); }},
      {"--max-model-len", true, "context length",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.engine.max_model_len, 16, 1u << 24); }},
      {"--block-size", true, "KV block size in tokens (default 16; 784 works)",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.engine.block_size, 1, 4096); }},
      {"--max-num-seqs", true, "maximum running sequences",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.engine.max_num_seqs, 1, 65536); }},
      {"--max-num-batched-tokens", true, "per-step token budget (chunked prefill)",
       [](const std::string& v, SimOptions& o) {
         return parse_num<uint32_t>(v, o.engine.max_num_batched_tokens, 1, 1u << 24);
       }},
      {"--num-gpu-blocks-override", true, "number of KV blocks",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.engine.num_gpu_blocks, 1, 1u << 26); }},
      {"--lora-modules", true, "LoRA adapters: name=path ... (or JSON); a request's model names one",
       [](const std::string& v, SimOptions& o) { return parse_lora_module(v, o); }},
      {"--max-loras", true, "LoRA adapters the running batch may use at once (default 1 with --lora-modules)",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.engine.max_loras, 1, 256); }},
      {"--hybrid-mamba", false, "hybrid KV layout: group 0 full attention + group 1 mamba (align mode)",
       [](const std::string&, SimOptions& o) { o.engine.hybrid_mamba = true; return std::string(); }},
      {"--delay-cache-blocks", false, "cache full blocks after the step computing them (concurrent copies)",
       [](const std::string&, SimOptions& o) { o.engine.delay_cache_blocks = true; return std::string(); }},
      {"--cpu-offload-blocks", true,
       "CPU offload tier of N blocks (vLLM's OffloadingConnector, CPU spec): computed blocks are stored "
       "there (LRU), a request loads the run after its GPU hit back, KV events with medium CPU; 0 = off",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.engine.cpu_offload_blocks, 0, 1u << 26); }},
      {"--cpu-offload-load-us-per-token", true,
       "virtual microseconds of step time per prompt token loaded from the CPU tier (default: a tenth "
       "of the preset's prefill cost per token)",
       [](const std::string& v, SimOptions& o) {
         double us = 0;
         if (std::string e = parse_double(v, us, 0, 1e6); !e.empty()) return e;
         o.engine.timing.offload_load_per_token = us / 1e6;
         return std::string();
       }},
      {"--enable-prompt-tokens-details", false, "report usage.prompt_tokens_details.cached_tokens",
       [](const std::string&, SimOptions& o) { o.enable_prompt_tokens_details = true; return std::string(); }},
      {"--no-enable-prefix-caching", false, "disable prefix caching",
       [](const std::string&, SimOptions& o) { o.engine.enable_prefix_caching = false; return std::string(); }},
      {"--kv-events-config", true, "vLLM KV-events config JSON",
       [](const std::string& v, SimOptions& o) {
         std::string e = parse_kv_events_config(v, o.kv);
         return e.empty() ? e : "--kv-events-config: " + e;
       }},
      {"--data-parallel-rank", true, "run DP rank k alone: offsets KV-event ports, labels metrics",
       [](const std::string& v, SimOptions& o) {
         o.dp.rank_given = true;
         return parse_num<int>(v, o.kv.data_parallel_rank, 0, 1024);
       }},
      {"--data-parallel-size", true, "N engine cores (DP ranks 0..N-1) behind this port, internal LB",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.dp.size, 1, 1024); }},
      {"--engine-kind", true, "vllm (default) or sglang: how a request names its data-parallel rank",
       [](const std::string& v, SimOptions& o) {
         if (v != "vllm" && v != "sglang") return std::string("expected vllm or sglang");
         o.dp.sglang = v == "sglang";
         return std::string();
       }},
      {"--api-server-count", true, "API servers balancing over the ranks (default: the DP size)",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.dp.api_server_count, 1, 1024); }},
      {"--enable-sleep-mode", false, "allow POST /sleep (routes only with VLLM_SERVER_DEV_MODE=1, as vLLM)",
       [](const std::string&, SimOptions& o) { o.enable_sleep_mode = true; return std::string(); }},
      {"--wake-ms", true, "virtual milliseconds POST /wake_up takes (default 1000; scaled by --speed)",
       [](const std::string& v, SimOptions& o) { return parse_double(v, o.wake_ms, 0, 3.6e6); }},
      {"--kv-role", true, "KV connector role (P/D disaggregation): kv_producer | kv_consumer | kv_both",
       [](const std::string& v, SimOptions& o) {
         if (v != "kv_producer" && v != "kv_consumer" && v != "kv_both") {
           return std::string("Unsupported kv_role: " + v + ". Supported roles are ('kv_producer', 'kv_consumer', "
                              "'kv_both')");
         }
         o.kv_transfer.role = v;
         return std::string();
       }},
      {"--kv-engine-id", true, "engine id answers name as remote_engine_id (default: a random uuid)",
       [](const std::string& v, SimOptions& o) {
         if (v.empty()) return std::string("must not be empty");
         o.kv_transfer.engine_id = v;
         return std::string();
       }},
      {"--kv-side-channel-host", true, "remote_host of prefill answers (default localhost)",
       [](const std::string& v, SimOptions& o) {
         if (v.empty()) return std::string("must not be empty");
         o.kv_transfer.side_channel_host = v;
         return std::string();
       }},
      {"--kv-side-channel-port", true, "remote_port of prefill answers, served too (default: the HTTP port)",
       [](const std::string& v, SimOptions& o) { return parse_num<uint16_t>(v, o.kv_transfer.side_channel_port, 0, 65535); }},
      {"--kv-lease-seconds", true, "virtual seconds a prefill keeps unpulled blocks (default 30, vLLM's)",
       [](const std::string& v, SimOptions& o) { return parse_double(v, o.kv_transfer.lease_s, 0.001, 1e6); }},
      {"--kv-load-failure-policy", true, "fail (default, a 500) | recompute: a failed pull",
       [](const std::string& v, SimOptions& o) {
         if (v != "fail" && v != "recompute") return std::string("expected fail or recompute");
         o.kv_transfer.load_recompute = v == "recompute";
         return std::string();
       }},
      {"--kv-pull-ms", true, "virtual milliseconds every KV pull takes (default 1)",
       [](const std::string& v, SimOptions& o) { return parse_double(v, o.kv_transfer.pull_ms, 0, 1e6); }},
      {"--kv-pull-us-per-token", true, "virtual microseconds per pulled token (default 0.5)",
       [](const std::string& v, SimOptions& o) { return parse_double(v, o.kv_transfer.pull_us_per_token, 0, 1e6); }},
      {"--preset", true, "engine preset (timing and pool); flags given after it override",
       [](const std::string&, SimOptions&) { return std::string(); }},  // applied first, see parse_options
      {"--speed", true, "virtual-time scale: N runs N times faster than real time (default 1)",
       [](const std::string& v, SimOptions& o) { return parse_double(v, o.speed, 0.001, 1e6); }},
      {"--speculative-tokens", true, "MTP draft tokens per step (0 = standard decoding)",
       [](const std::string& v, SimOptions& o) {
         return parse_num<uint32_t>(v, o.engine.timing.speculative_tokens, 0, 16);
       }},
      {"--kv-events-format", true, "array (vLLM < 0.26) | map (default)",
       [](const std::string& v, SimOptions& o) {
         if (v == "array") o.kv.encoding.layout = cache::kv::Layout::kArray;
         else if (v == "map") o.kv.encoding.layout = cache::kv::Layout::kMap;
         else return std::string("--kv-events-format: array|map");
         return std::string();
       }},
      {"--kv-events-hash", true, "u64 (default) | bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)",
       [](const std::string& v, SimOptions& o) {
         if (v == "u64") o.kv.encoding.int_block_hashes = true;
         else if (v == "bytes") o.kv.encoding.int_block_hashes = false;
         else return std::string("--kv-events-hash: u64|bytes");
         return std::string();
       }},
      {"--kv-events-replay-layout", true, "topic (vLLM >= 0.26, default) | legacy",
       [](const std::string& v, SimOptions& o) {
         if (v == "topic") o.kv.replay_layout = ReplayLayout::kWithTopic;
         else if (v == "legacy") o.kv.replay_layout = ReplayLayout::kLegacy;
         else return std::string("--kv-events-replay-layout: topic|legacy");
         return std::string();
       }},
      {"--hash-seed", true, "like PYTHONHASHSEED: seeds the block-hash chain (default 0)",
       [](const std::string& v, SimOptions& o) { o.engine.hash_seed = v; return std::string(); }},
      {"--default-max-tokens", true, "output length when a request sets none (default 256)",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.default_max_tokens, 1, 1u << 24); }},
      {"--gpus", true, "expose N synthetic GPUs as DCGM-format series on /metrics",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.gpus, 0, 64); }},
      {"--seed", true, "seed for speculative acceptance and error-rate draws",
       [](const std::string& v, SimOptions& o) {
         std::string e = parse_num<uint64_t>(v, o.seed, 0, UINT64_MAX);
         o.engine.random_seed = o.seed;
         return e;
       }},
      {"--fault-refuse-seconds", true, "refuse connections for this long after start",
       [](const std::string& v, SimOptions& o) { return parse_double(v, o.faults.refuse_s, 0, 3600); }},
      {"--fault-crash-after-seconds", true, "exit(1) after this long",
       [](const std::string& v, SimOptions& o) { return parse_double(v, o.faults.crash_after_s, 0, 1e6); }},
      {"--fault-hang", false, "accept and read requests but never answer",
       [](const std::string&, SimOptions& o) { o.faults.hang = true; return std::string(); }},
      {"--fault-slow-ms", true, "extra wall-clock milliseconds per engine step",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.faults.slow_ms, 0, 600000); }},
      {"--fault-error-rate", true, "share of inference requests answered with an error (0..1)",
       [](const std::string& v, SimOptions& o) { return parse_double(v, o.faults.error_rate, 0, 1); }},
      {"--fault-error-status", true, "status of injected errors (default 503)",
       [](const std::string& v, SimOptions& o) { return parse_num<unsigned>(v, o.faults.error_status, 400, 599); }},
      {"--fault-health-fail", false, "GET /health answers 503",
       [](const std::string&, SimOptions& o) { o.faults.health_fail = true; return std::string(); }},
      {"--fault-drop-header-bytes", true, "close the connection, unanswered, on request heads over N bytes",
       [](const std::string& v, SimOptions& o) { return parse_num<uint64_t>(v, o.faults.drop_header_bytes, 0, 1ull << 30); }},
      {"--fault-stall-after-tokens", true, "streams go silent after N tokens (non-streaming: no answer)",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.faults.stall_after_tokens, 0, 1u << 30); }},
      {"--fault-garbage", false, "answer inference requests with bytes that are not HTTP",
       [](const std::string&, SimOptions& o) { o.faults.garbage = true; return std::string(); }},
      {"--h11-max-incomplete-event-size", true, "largest request head in bytes (vLLM default 4194304)",
       [](const std::string& v, SimOptions& o) {
         return parse_num<uint64_t>(v, o.http.max_incomplete_event_size, 1024, 1ull << 30);
       }},
      {"--h11-max-header-count", true, "most request header fields (vLLM default 256)",
       [](const std::string& v, SimOptions& o) { return parse_num<uint32_t>(v, o.http.max_header_count, 1, 1u << 20); }},
      {"--help", false, "this text", [](const std::string&, SimOptions& o) { o.help = true; return std::string(); }},
      {"--version", false, "print the version, commit, build type and compiler, and exit",
       [](const std::string&, SimOptions& o) { o.version = true; return std::string(); }},
  };
  return f;
}

}  // namespace

std::vector<std::string> parse_options(const std::vector<std::string>& args, SimOptions& out) {
  std::vector<std::string> errors;
  // The preset comes first whatever its position, so explicit flags override it.
  std::string preset_name = "tiny";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--preset" && i + 1 < args.size()) preset_name = args[i + 1];
    if (args[i].rfind("--preset=", 0) == 0) preset_name = args[i].substr(9);
  }
  if (auto p = preset(preset_name)) {
    out.engine = *p;
  } else {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    errors.push_back("--preset: unknown preset '" + preset_name + "' (known: " + known + ")");
  }
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], value;
    bool has_value = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = nullptr;
    for (const auto& f : flags())
      if (f.name == a) flag = &f;
    if (!flag) {
      errors.push_back("unknown argument: " + a);
      continue;
    }
    if (flag->takes_value && !has_value) {
      if (i + 1 >= args.size()) {
        errors.push_back(a + ": missing value");
        continue;
      }
      value = args[++i];
    } else if (!flag->takes_value && has_value) {
      errors.push_back(a + ": takes no value");
      continue;
    }
    // argparse: a repeated --served-model-name replaces the earlier one (--lora-modules adds).
    if (a == "--served-model-name") out.served_model_names.clear();
    if (std::string e = flag->apply(value, out); !e.empty()) errors.push_back(a + ": " + e);
    // --lora-modules and --served-model-name take several values (nargs='+'): the arguments up
    // to the next flag.
    if ((a == "--lora-modules" || a == "--served-model-name") && !has_value) {
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        if (std::string e = flag->apply(args[++i], out); !e.empty()) errors.push_back(a + ": " + e);
      }
    }
  }
  if (out.served_model_names.empty()) out.served_model_names.push_back(out.model_root);  // vLLM: [args.model]
  for (const auto& m : out.lora_modules) {
    // vLLM's _check_load_lora_adapter_request, which fails the start for a static adapter.
    if (out.serves(m.name)) {
      errors.push_back("--lora-modules: The lora adapter '" + m.name + "' conflicts with a served base model.");
    }
  }
  // vLLM's --enable-lora (which --lora-modules needs) defaults max_loras to 1.
  if (!out.lora_modules.empty() && out.engine.max_loras == 0) out.engine.max_loras = 1;
  if (out.engine.cpu_offload_blocks > 0 && out.engine.hybrid_mamba) {
    errors.push_back("--cpu-offload-blocks: not with --hybrid-mamba (the sim offloads full-attention blocks only)");
  }
  if (out.engine.cpu_offload_blocks > 0 && !out.engine.enable_prefix_caching) {
    errors.push_back("--cpu-offload-blocks: needs prefix caching");
  }
  // ParallelConfig: a rank outside [0, size) is refused (size 1 keeps the simulator's standalone
  // rank: any --data-parallel-rank).
  if (out.dp.rank_given && out.dp.size > 1 && static_cast<uint32_t>(out.kv.data_parallel_rank) >= out.dp.size) {
    errors.push_back("--data-parallel-rank: data_parallel_rank (" + std::to_string(out.kv.data_parallel_rank) +
                     ") must be in the range [0, " + std::to_string(out.dp.size) + ")");
  }
  if (out.kv_transfer.enabled()) {
    out.engine.kv_connector = true;
    out.engine.kv_load_recompute = out.kv_transfer.load_recompute;
    if (out.local_ranks().size() > 1) errors.push_back("--kv-role: one engine core per process (no --data-parallel-size)");
    if (out.engine.hybrid_mamba) errors.push_back("--kv-role: not modelled with --hybrid-mamba");
  } else {
    for (const char* f : {"--kv-engine-id", "--kv-side-channel-host", "--kv-side-channel-port", "--kv-lease-seconds",
                          "--kv-load-failure-policy", "--kv-pull-ms", "--kv-pull-us-per-token"}) {
      for (const auto& a : args) {
        if (a == f || a.rfind(std::string(f) + "=", 0) == 0) errors.push_back(std::string(f) + ": needs --kv-role");
      }
    }
  }
  const PromptFlags& pf = out.prompt;
  if (pf.tokenizer.empty()) {
    for (auto [name, v] : {std::pair{"--chat-template", &pf.chat_template},
                           std::pair{"--tokenizer-config", &pf.tokenizer_config},
                           std::pair{"--native-formatter", &pf.native_formatter},
                           std::pair{"--added-tokens", &pf.added_tokens}}) {
      if (!v->empty()) errors.push_back(std::string(name) + ": needs --tokenizer");
    }
  } else if (!pf.chat_template.empty() && !pf.native_formatter.empty()) {
    errors.push_back("--chat-template and --native-formatter are exclusive");
  }
  return errors;
}

bool SimOptions::serves(std::string_view name) const {
  return std::find(served_model_names.begin(), served_model_names.end(), name) != served_model_names.end();
}

std::vector<int> SimOptions::local_ranks() const {
  if (dp.rank_given || dp.size <= 1) return {kv.data_parallel_rank};
  std::vector<int> r;
  for (uint32_t i = 0; i < dp.size; ++i) r.push_back(static_cast<int>(i));
  return r;
}

uint32_t SimOptions::api_servers() const {
  if (dp.api_server_count) return dp.api_server_count;
  return dp.rank_given ? 1 : dp.size;  // vllm serve's default: the DP size for internal LB
}

std::string usage_text() {
  std::string s = "usage: ramjet-sim [options]\n  A vLLM-compatible engine simulator (OpenAI chat, completions and Responses and\n"
                  "  Anthropic Messages over HTTP + SSE, prefix-cache block pool, KV events over ZeroMQ,\n"
                  "  vLLM /metrics, faults). A Responses or Messages request that declares tools and ends\n"
                  "  with a user turn is answered with one call of its first (or named) tool, arguments\n"
                  "  {\"input\": \"<generated text>\"}. Presets: ";
  for (const auto& n : preset_names()) s += n + " ";
  s += "\n\n";
  for (const auto& f : flags()) {
    std::string left = f.name + (f.takes_value ? " V" : "");
    s += "  " + left + std::string(left.size() < 30 ? 30 - left.size() : 1, ' ') + f.doc + "\n";
  }
  return s;
}

}  // namespace ramjet::sim
