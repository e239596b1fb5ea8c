// loadgen/trace: Mooncake-style JSONL request traces, parsed into native entries. Pure.
// Each line: {"timestamp": ms, "input_length": tokens, "output_length": tokens,
//             "hash_ids": [block ids]}; blank lines are skipped. Prompts are built in workload.*.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ramjet::bench {

struct TraceEntry {
  double timestamp_ms = 0;
  uint32_t input_length = 0;
  uint32_t output_length = 0;
  std::vector<uint64_t> hash_ids;
};

struct TraceLimits {
  size_t max_entries = 10'000'000;
  size_t max_hash_ids = 65'536;          // per line
  uint32_t max_input_length = 4'000'000;  // tokens per request
  uint32_t max_output_length = 1'000'000;
};

// Parses the whole file; the first bad line fails it (reason "bad_trace", message with the line
// number, never the line's content). Entries are returned sorted by timestamp (stable).
Result<std::vector<TraceEntry>> parse_trace(std::string_view text, const TraceLimits& limits = {});

}  // namespace ramjet::bench
