// observe/engine_scrape: the engine scrape's I/O (observe/engine_stats.h): a bounded child
// process runner for nvidia-smi and the one-shot /metrics fetch behind GET /metrics/upstream/{i}.
// The text readers it applies are in observe/engine_text.h.
#pragma once

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "upstream/engine_stats.h"
#include "upstream/engine_text.h"
#include "metrics/prom_text.h"

namespace ramjet::upstream {

// The first executable `name` in the colon-separated `path` list ("" when none).
std::string find_executable(std::string_view name, std::string_view path);

// Runs argv[0] (a path) with argv, stdin from /dev/null and stderr discarded, reading at most
// `max_bytes` of its stdout. Returns the output when it exited 0 within `timeout`; kills it
// (SIGKILL) and returns nullopt otherwise. Blocking: never call it on an io thread.
std::optional<std::string> run_bounded(const std::vector<std::string>& argv,
                                       std::chrono::milliseconds timeout, size_t max_bytes);

// GET /metrics of engine `i` once (the scraper's timeout, size cap and bearer token).
struct EngineMetricsFetch {
  bool ok = false;  // 200 with a body within the cap
  unsigned status = 0;
  std::optional<ScrapeError> error;
  std::string body;
};
boost::asio::awaitable<EngineMetricsFetch> fetch_engine_metrics(const EngineScrapeConfig& config,
                                                                size_t engine);

}  // namespace ramjet::upstream
