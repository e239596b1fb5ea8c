// observe/prom_text: a bounded parser for the Prometheus text exposition format (0.0.4), for
// reading engines' own /metrics (vLLM, dcgm-exporter). The input is untrusted: every limit is
// checked before work is done, errors are typed and name the line, never quote it.
//
// Accepted: `# HELP` / `# TYPE` / other comments (skipped), blank lines, CR before LF, and
// samples `name[{label="value",...}] value [timestamp]` with the exposition format's escapes
// (\\, \", \n) in label values, a trailing comma in the label set, values as Go's ParseFloat
// writes them (decimal, exponent, NaN, +Inf, -Inf) and an optional integer timestamp.
// Refused (the whole text): anything else on a sample line, a line or a text over its limit,
// more samples or labels than allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ramjet::metrics {

struct PromTextLimits {
  size_t max_bytes = 4 * 1024 * 1024;  // the whole text
  size_t max_line = 64 * 1024;         // one line, without its LF
  size_t max_samples = 200000;         // sample lines
  size_t max_labels = 64;              // labels on one sample
};

enum class PromTextError {
  kNone,
  kTooLarge,        // the text is over max_bytes
  kLineTooLong,     // a line is over max_line
  kTooManySamples,  // over max_samples
  kTooManyLabels,   // a sample has over max_labels labels
  kBadName,         // a metric or label name is not [a-zA-Z_:][a-zA-Z0-9_:]* / [a-zA-Z_][a-zA-Z0-9_]*
  kBadLabels,       // malformed label set: missing '=', quote, comma or '}', bad escape
  kBadValue,        // the value is missing or not a float
  kBadTimestamp,    // the timestamp is not an integer
  kTrailingText,    // something after the value (and timestamp)
};
std::string_view prom_text_error_label(PromTextError e);  // too_large, line_too_long, ...

struct PromLabel {
  std::string_view name;
  std::string_view value;  // unescaped; valid during the callback only
};

struct PromSample {
  std::string_view name;
  std::span<const PromLabel> labels;
  double value = 0;
  // The label called `name`, or nullptr.
  const PromLabel* label(std::string_view name) const;
};

struct PromTextResult {
  PromTextError error = PromTextError::kNone;
  size_t line = 0;     // 1-based line of the error (0 for kTooLarge)
  size_t samples = 0;  // samples delivered (all of them when error == kNone)
  bool ok() const { return error == PromTextError::kNone; }
};

// Parses `text`, calling on_sample for every sample line in order. On an error parsing stops;
// samples before the bad line were already delivered (callers that need all-or-nothing keep
// their results aside until the result is ok()).
PromTextResult parse_prom_text(std::string_view text, const PromTextLimits& limits,
                               const std::function<void(const PromSample&)>& on_sample);

}  // namespace ramjet::metrics
