#include "metrics/metrics.h"

#include <cmath>
#include <cstdio>

#include "metrics/build_metrics.h"

namespace ramjet::metrics {

std::string_view metric_kind_name(MetricKind k) {
  switch (k) {
    case MetricKind::kCounter: return "counter";
    case MetricKind::kGauge: return "gauge";
    case MetricKind::kHistogram: return "histogram";
  }
  return "untyped";
}

void Exposition::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += help;
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void Exposition::prefix(std::string_view name, std::string_view labels) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    out_ += labels;
    out_ += '}';
  }
  out_ += ' ';
}

void Exposition::sample(std::string_view name, std::string_view labels, double value) {
  prefix(name, labels);
  if (std::isnan(value)) {
    out_ += "NaN";
  } else if (std::isinf(value)) {
    out_ += value > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", value);
    out_ += buf;
  }
  out_ += '\n';
}

void Exposition::sample(std::string_view name, std::string_view labels, uint64_t value) {
  prefix(name, labels);
  out_ += std::to_string(value);
  out_ += '\n';
}

void Exposition::sample(std::string_view name, std::string_view labels, int64_t value) {
  prefix(name, labels);
  out_ += std::to_string(value);
  out_ += '\n';
}

void Registry::add(Writer w) {
  std::lock_guard lock(mu_);
  writers_.push_back(std::move(w));
}

std::string Registry::render() const {
  Exposition e;
  write_build_info(e);  // first: which build answers this scrape
  std::lock_guard lock(mu_);
  for (const auto& w : writers_) w(e);
  return e.take();
}

}  // namespace ramjet::metrics
