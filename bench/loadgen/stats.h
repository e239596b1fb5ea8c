// loadgen/stats: per-request samples and their aggregation into one ladder step's numbers.
// Pure. Who produces samples (runner.*) and how steps are printed (report.*) live elsewhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ramjet::bench {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One request as the load generator saw it. Times are seconds; start/end are relative to the
// step start, ttft/tpot/latency relative to the moment the request was written.
struct Sample {
  double start_s = 0;
  double end_s = 0;
  double latency_s = 0;
  double ttft_s = -1;   // -1: no token arrived
  double tpot_s = -1;   // -1: fewer than two tokens
  uint32_t output_tokens = 0;
  int64_t prompt_tokens = -1;  // -1: the server sent no usage
  int64_t cached_tokens = -1;
  std::string error;   // "" = ok; otherwise a stable reason ("timeout", "http_503", ...)
  std::string engine;      // X-Ramjet-Upstream value, engine ordinal (oracle) or "direct"
};

// One window of a step's timeline (--timeline S): the requests that ended in [t_s, t_s + S).
struct Window {
  double t_s = 0;  // window start, seconds from the step start
  uint64_t ok = 0;
  uint64_t errors = 0;
  double cached_pct = kNaN;  // over its ok requests that reported usage
  double ttft_p50_ms = kNaN;
  double ttft_p95_ms = kNaN;
};

// One ladder step (one concurrency or one rate).
struct StepReport {
  double x = 0;  // concurrency, rate (req/s), or 0 for a trace replay
  uint64_t ok = 0;
  uint64_t errors = 0;
  std::map<std::string, uint64_t> error_reasons;
  double elapsed_s = 0;
  uint64_t output_tokens = 0;
  double output_tok_s = 0;
  double req_s = 0;
  double ttft_p50_ms = kNaN, ttft_p95_ms = kNaN, ttft_p99_ms = kNaN;
  double tpot_p50_ms = kNaN, tpot_p95_ms = kNaN;
  double latency_p50_ms = kNaN, latency_p95_ms = kNaN;
  uint64_t prompt_tokens = 0;  // over ok requests that reported usage
  uint64_t cached_tokens = 0;
  double cached_pct = kNaN;    // 100 * cached / prompt; NaN when no usage was reported
  std::map<std::string, uint64_t> engines;  // ok requests per engine
  // --ttft-target-ms: requests answered whose first token came within the target (`good`), per
  // elapsed second (goodput), and as a share of every request sent in the step (errors and
  // refusals included). NaN without a target.
  double ttft_target_ms = 0;
  uint64_t good = 0;
  double goodput_req_s = kNaN;
  double attainment_pct = kNaN;
  std::vector<Window> timeline;             // --timeline: by completion time; empty otherwise
};

// Percentile of sorted values by linear interpolation between closest ranks (numpy's default):
// p in [0, 100]. NaN for an empty input.
double percentile_sorted(const std::vector<double>& sorted, double p);
// Sorts a copy and takes the percentile.
double percentile(std::vector<double> values, double p);

// Aggregates the samples that started at or after `window_start_s` (the end of the warm-up).
// elapsed = last end − window start; rates are per elapsed second.
// With `ttft_target_ms` > 0, also goodput and attainment (StepReport::good).
StepReport aggregate(const std::vector<Sample>& samples, double x, double window_start_s = 0,
                     double ttft_target_ms = 0);

// The samples bucketed by when they ended, `width_s` seconds per window from 0 to the last end
// (a window nothing ended in is listed with zeros): what changed during a step, such as a router
// restarted in the middle of it.
std::vector<Window> timeline(const std::vector<Sample>& samples, double width_s);

}  // namespace ramjet::bench
