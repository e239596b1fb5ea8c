// observe/metric_docs: every component's metric family list in one place, for docs/metrics.md
// (`ramjet --help-metrics`) and for the test that holds each writer to its list.
//
// The lists themselves live with their writers (request::proxy_families(),
// upstream::fleet_families(), upstream::engine_families()); the routing and journal lists are
// declared here, next to the writers they describe (route::Router::write_metrics,
// observe::Journal::write_metrics), and metric_docs_test checks those writers against them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "metrics/metrics.h"

namespace ramjet::observe {

struct MetricSection {
  std::string_view title;  // "Data plane"
  std::string_view source;  // the writer: "request::ProxyMetrics::write (src/request/stream/metrics.cc)"
  std::string_view when;    // when the families are exported ("always", "with RJ_ROUTE_JOURNAL")
  std::span<const metrics::Family> families;
};

// Every section, in docs order.
std::vector<MetricSection> metric_sections();

// /metrics as a freshly started ramjet with three upstreams renders it, section by section (every
// component constructed with defaults; journal families excluded: opening one writes a file).
// Used for the docs' label values and histogram buckets, and by the tests.
std::vector<std::string> render_sections_for_docs();

// docs/metrics.md.
std::string metrics_markdown();

}  // namespace ramjet::observe
