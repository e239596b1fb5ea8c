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

bool Exposition::hidden(std::string_view labels) const {
  if (!upstream_visible_) return false;
  constexpr std::string_view key = "upstream=\"";
  for (size_t at = labels.find(key); at != std::string_view::npos; at = labels.find(key, at + 1)) {
    if (at != 0 && labels[at - 1] != ',') continue;  // e.g. a key ending in "upstream"
    size_t ordinal = 0;
    size_t p = at + key.size();
    if (p >= labels.size() || labels[p] < '0' || labels[p] > '9') return false;
    for (; p < labels.size() && labels[p] >= '0' && labels[p] <= '9'; ++p) ordinal = ordinal * 10 + static_cast<size_t>(labels[p] - '0');
    if (p >= labels.size() || labels[p] != '"') return false;
    return !upstream_visible_(ordinal);
  }
  return false;
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

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Exposition::sample(std::string_view name, std::string_view labels, double value) {
  if (hidden(labels)) return;
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
  if (hidden(labels)) return;
  prefix(name, labels);
  out_ += std::to_string(value);
  out_ += '\n';
}

void Exposition::sample(std::string_view name, std::string_view labels, int64_t value) {
  if (hidden(labels)) return;
  prefix(name, labels);
  out_ += std::to_string(value);
  out_ += '\n';
}

void Registry::add(Writer w) {
  std::lock_guard lock(mu_);
  writers_.push_back(std::move(w));
}

void Registry::set_upstream_filter(std::function<bool(size_t)> visible) {
  std::lock_guard lock(mu_);
  upstream_visible_ = std::move(visible);
}

std::string Registry::render() const {
  Exposition e;
  write_build_info(e);  // first: which build answers this scrape
  std::lock_guard lock(mu_);
  e.set_upstream_filter(upstream_visible_);
  for (const auto& w : writers_) w(e);
  return e.take();
}

}  // namespace ramjet::metrics
