// loadgen/options: ramjet-bench's command line as one table (name, value kind, default, doc)
// from which both parsing and --help come. parse_options() returns every problem at once.
// Pure: files named here are opened by main.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ramjet::bench {

struct Options {
  // target
  std::string target;                // base URL, or "oracle"
  std::vector<std::string> engines;  // --target oracle: the engines' base URLs
  std::string model;                 // "" = first id of GET /v1/models
  // workload
  std::string workload = "shared-prefix";
  uint32_t apps = 4;
  double prefix_kib = 24;
  uint32_t sessions = 0;
  uint32_t turns = 4;
  uint32_t user_words = 48;
  double prompt_kib = 1;
  std::string trace;
  double time_scale = 1.0;
  uint32_t trace_block_tokens = 512;
  std::vector<uint32_t> max_tokens{128};
  bool max_tokens_set = false;
  bool ignore_eos = false;
  bool ignore_eos_set = false;
  uint64_t seed = 1;
  // load shape
  std::vector<uint32_t> concurrency;
  std::vector<double> rate;
  double duration_s = 0;    // 0 with requests_per_step 0: 10 s
  uint64_t requests_per_step = 0;
  double warmup_s = 0;
  double ttft_target_ms = 0;  // --ttft-target-ms: goodput (requests whose TTFT met it) per step
  double timeline_s = 0;  // --timeline: window seconds of each step's timeline (0 = none)
  uint32_t threads = 1;
  bool stream = true;
  double timeout_s = 600;
  double connect_timeout_s = 5;
  uint32_t max_inflight = 10000;
  // output
  std::string label;
  std::string out_json;
  bool append = false;
  std::string out_md;
  std::string out_svg;
  bool quiet = false;
  bool help = false;
  bool version = false;  // --version: print the build (common/build_info.h) and exit

  std::string shape() const;  // "closed", "open" or "trace"
};

// Parses argv (without the program name). Returns every problem found, joined by newlines.
Result<Options> parse_options(const std::vector<std::string_view>& args);

// `ramjet-bench compare a.json b.json ... [--out-md F] [--out-svg F]`
struct CompareOptions {
  std::vector<std::string> inputs;
  std::string out_md;
  std::string out_svg;
};
Result<CompareOptions> parse_compare(const std::vector<std::string_view>& args);

std::string help_text();

// "1,8,32" -> {1,8,32}; used by the table and the tests.
Result<std::vector<uint32_t>> parse_u32_list(std::string_view s, uint32_t min, uint32_t max);
Result<std::vector<double>> parse_double_list(std::string_view s, double min, double max);

}  // namespace ramjet::bench
