// sim/server/sglang_dp: how an SGLang server with --dp-size N behind one port pins a request to a
// data-parallel rank, for ramjet-sim --engine-kind sglang (docs/sglang-data-parallel.md has the
// sources). The rest of the sim stays vLLM's; only the choice of rank, its errors and the
// balancing without a rank follow SGLang:
//   - the body's "routed_dp_rank" (an integer or null); "data_parallel_rank", its deprecated name,
//     counts when routed_dp_rank is null or absent (protocol.py _migrate_deprecated_dp_rank);
//   - X-Data-Parallel-Rank, where SGLang reads it (chat, completions, messages), wins over the body
//     (serving_base.extract_routed_dp_rank_from_header: Python int() of it; not an integer: 400);
//   - TokenizerManager.generate_request refuses a rank outside [0, dp_size) before any output
//     (a 400 for a stream too) and ignores rank 0 with dp_size 1;
//   - without a rank the DataParallelController deals requests round robin (load_balance_method
//     auto = round_robin outside PD disaggregation); a pinned request does not advance it.
// Pure logic; SimServer applies it (server.cc place()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "common/result.h"
#include "sim/server/dp_balance.h"

namespace ramjet::sim {

// Which request fields an SGLang route reads for its rank.
struct SglangRankSources {
  bool body = false;    // routed_dp_rank / data_parallel_rank
  bool header = false;  // X-Data-Parallel-Rank
};

// The rank a request asks for (nullopt: none; `text` is Python's str() of it, `value` set when it
// fits), or the message of SGLang's 400. `header`: the X-Data-Parallel-Rank value, if any.
Result<std::optional<DpRankHeader>, std::string> sglang_requested_rank(const boost::json::object& body,
                                                                       std::optional<std::string_view> header,
                                                                       SglangRankSources reads);
// The rank to pin to (nullopt: balance), or the out-of-range message.
Result<std::optional<size_t>, std::string> sglang_rank_check(const std::optional<DpRankHeader>& rank, size_t dp_size);

// SGLang's OpenAI error body (ErrorResponse.model_dump()).
std::string sglang_error(std::string_view message, std::string_view type, unsigned code);

// DataParallelController.round_robin_scheduler's counter.
class RoundRobin {
 public:
  size_t next(size_t ranks) {
    const size_t r = counter_ % ranks;
    counter_ = (r + 1) % ranks;
    return r;
  }

 private:
  size_t counter_ = 0;
};

}  // namespace ramjet::sim
