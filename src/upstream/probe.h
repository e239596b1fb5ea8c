// upstream/probe: the active health probe loop. Every interval, each engine gets GET /health
// (falling back to GET /v1/models when /health answers 404); healthy iff 200 with a body of at
// most 64 KiB (and, with rank_generation, a data-parallel rank's pinned one-token completion
// answered in time). Results go to Fleet, which applies the fencing rules and the readiness gate.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "upstream/fleet.h"

namespace ramjet::upstream {

struct ProbeConfig {
  std::chrono::milliseconds interval{5000};
  std::chrono::milliseconds timeout{5000};
  std::string bearer;          // RJ_UPSTREAM_TOKEN: only LB-originated calls carry it
  size_t max_body = 64 * 1024;
  // RJ_PROBE_RANK_GENERATION: a data-parallel rank's probe also asks POST /v1/completions for one
  // token, pinned to the rank (no model named: the engine's own); only no answer in time fails it
  // (a wedged rank behind a /health that still answers); any answer passes.
  bool rank_generation = false;
};

class Prober {
 public:
  Prober(Fleet& fleet, boost::asio::io_context& ctx, ProbeConfig config);
  void start();
  void stop();  // thread-safe

 private:
  boost::asio::awaitable<void> loop();
  boost::asio::awaitable<void> probe_one(size_t i);

  Fleet& fleet_;
  boost::asio::io_context& ctx_;
  ProbeConfig config_;
  boost::asio::steady_timer timer_;
  std::atomic<bool> stopped_{false};
  std::vector<char> busy_;  // one probe per engine at a time (touched on ctx_ only)
};

}  // namespace ramjet::upstream
