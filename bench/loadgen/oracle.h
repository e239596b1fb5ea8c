// loadgen/oracle: the routing decision of `--target oracle`, the upper bound a prefix-aware router
// can reach: ask every engine how much of the prompt it holds (ramjet-sim's POST /sim/resident)
// and pick the best. Pure; the queries themselves are sent by runner.*.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ramjet::bench {

struct ResidentAnswer {
  bool ok = false;  // false: the engine did not answer (it is then never chosen unless all failed)
  uint64_t prompt_tokens = 0;
  uint64_t resident_tokens = 0;
  uint64_t running = 0;
  uint64_t waiting = 0;
};

// {"prompt_tokens":n,"resident_tokens":m,"running":r,"waiting":w}
Result<ResidentAnswer> parse_resident(std::string_view body);

// The /sim/resident request body for a chat messages array (JSON text).
std::string resident_body(std::string_view messages_json);

// Most resident tokens; ties -> fewest running + waiting; ties -> round robin (`rr` advances on
// every tie-break). When no engine answered: plain round robin over all engines.
size_t choose_engine(const std::vector<ResidentAnswer>& answers, uint64_t& rr);

}  // namespace ramjet::bench
