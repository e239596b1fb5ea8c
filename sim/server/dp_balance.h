// sim/server/dp_balance: how vLLM 0.32 spreads requests over data-parallel ranks behind one
// port (internal load balancing): the DP coordinator's load snapshots (v1/engine/coordinator.py)
// and each API server's pick (DPLBAsyncMPClient.get_core_engine_for_request, core_client.py).
// Pure logic on injected time; SimServer owns one coordinator and one client per API server and
// leaves the header (X-Data-Parallel-Rank) and the engines to itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ramjet::sim {

// The X-Data-Parallel-Rank header as vLLM's _get_data_parallel_rank reads it: Python's int() of
// the value (surrounding whitespace, a sign, '_' between digits), or nothing when it is not an
// integer (the header is then ignored). `text` is the integer in Python's str() form, for the
// out-of-range message; `value` is set when it fits.
struct DpRankHeader {
  std::string text;
  std::optional<int64_t> value;
};
std::optional<DpRankHeader> parse_dp_rank_header(std::string_view v);
// vLLM's InputProcessor check: an index outside [0, ranks) is a 400 with this message.
std::string dp_rank_out_of_range(const DpRankHeader& h, size_t ranks);

// One rank's load as the coordinator tells the API servers: [waiting, running, kv_cache_usage].
struct RankLoad {
  double waiting = 0;  // a float in the client: it adds client_count per pick between snapshots
  uint32_t running = 0;
  double kv_cache_usage = 0;
};

// The coordinator. An engine publishes its counts after taking input and after each step, only
// when (running, waiting) changed (DPEngineCoreProc._maybe_publish_request_counts; a change of
// kv usage alone is not sent). The coordinator sends the API servers a snapshot
// `publish_interval_s` after the last one when anything changed, else every `idle_interval_s`
// (its poll loop: stats_update_interval_ms 100, or 5000 when nothing changed).
class DpCoordinator {
 public:
  explicit DpCoordinator(size_t ranks, double publish_interval_s = 0.1, double idle_interval_s = 5.0);

  // Returns whether the counts were new (and so will be published).
  bool engine_counts(size_t rank, uint32_t running, uint32_t waiting, double kv_cache_usage);
  // When the next snapshot is due (may be in the past: then publish at once).
  double next_publish_s() const;
  // The snapshot to hand every API server when one is due at `now_s`, else nothing.
  std::optional<std::vector<RankLoad>> maybe_publish(double now_s);

 private:
  std::vector<RankLoad> counts_;
  std::vector<std::pair<uint32_t, uint32_t>> last_sent_;  // (running, waiting) per engine; vLLM starts at (0, 0)
  double interval_s_, idle_interval_s_;
  double last_publish_s_ = -1e18;  // vLLM starts at epoch 0: the first poll publishes at once
  bool changed_ = false;
};

// One API server's choice among `ranks` engines. Without a header, the lowest score wins, the
// scan starting at a rotating index (ties go round robin):
//   score = max(client_count * own_in_flight, waiting + running)
//         + waiting * 6 * max(0, kv_cache_usage - 0.5)        (only while waiting > 0)
// from the last snapshot, whose `waiting` the client raises by client_count per pick until the
// next snapshot replaces it. own_in_flight counts this client's requests not yet finished, pinned
// ones included.
class DpClient {
 public:
  DpClient(size_t ranks, size_t client_count, size_t client_index);

  void update(const std::vector<RankLoad>& snapshot);
  size_t pick();               // a request without a header; counts it in flight there
  void pinned(size_t rank);    // a request with X-Data-Parallel-Rank: counted in flight only
  void finished(size_t rank);  // the engine reported the request finished (or aborted)

  const std::vector<RankLoad>& loads() const { return loads_; }
  uint32_t in_flight(size_t rank) const { return in_flight_[rank]; }

 private:
  std::vector<RankLoad> loads_;
  std::vector<uint32_t> in_flight_;
  size_t client_count_;
  size_t start_;
};

}  // namespace ramjet::sim
