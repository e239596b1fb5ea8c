// loadgen/report: a run (one label, one ladder) as JSON, Markdown and SVG. Several runs in one
// JSON file (--append) or several files (`compare`) are rendered side by side. Pure: callers read
// and write the files. The SVG renderer lives in svg.cc.
#pragma once

#include <boost/json/value.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "stats.h"

namespace ramjet::bench {

struct RunReport {
  std::string label;
  std::string target;      // base URL, or "oracle" with its engines
  std::string workload;    // one-line description of the workload and its parameters
  std::string shape;       // "closed" (x = concurrency), "open" (x = rate), "trace"
  std::string started_at;  // UTC, ISO 8601 (informational)
  std::vector<StepReport> steps;
};

std::string_view x_name(std::string_view shape);  // "concurrency", "rate (req/s)", "trace"
// Whether a step was measured against a TTFT target (--ttft-target-ms: goodput columns).
bool has_goodput(const RunReport& r);

boost::json::value to_json(const RunReport& run);
Result<RunReport> run_from_json(const boost::json::value& v);

// The file format: {"format":"ramjet-bench/1","runs":[...]}.
std::string runs_to_json_text(const std::vector<RunReport>& runs);
Result<std::vector<RunReport>> runs_from_json_text(std::string_view text);

// One table per run and, for two or more runs, a comparison table per load shape.
std::string render_markdown(const std::vector<RunReport>& runs);
// Per load shape: output tok/s (goodput, when measured) and TTFT p95 against x, one line per run.
std::string render_svg(const std::vector<RunReport>& runs);

// Number formatting shared by the renderers ("-" for NaN).
std::string format_number(double v);

}  // namespace ramjet::bench
