// app/admin: the metrics listener (RJ_METRICS_LISTEN): GET /metrics (Prometheus text),
// GET /health, and the dashboard: the static UI at /ui/ (/ and /ui redirect there) and its JSON
// API (/api/v1/state, /api/v1/series?window=s, /api/v1/decisions?n=k, /api/v1/stream as SSE);
// GET /metrics/upstream/{i}: engine i's own /metrics passed through (bounded size and time).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "cache/events/kv_fleet.h"
#include "net/drain_gate.h"
#include "net/tls.h"
#include "observe/dashboard.h"
#include "observe/decision_log.h"
#include "upstream/engine_catalog.h"
#include "upstream/engine_stats.h"
#include "metrics/metrics.h"
#include "request/route/prediction_check.h"
#include "request/route/router.h"
#include "request/stream/metrics.h"
#include "upstream/fleet.h"

namespace ramjet::app {

// The dashboard's pieces on the metrics listener (nullptr: /ui and /api/v1/* answer 404).
struct DashboardRoutes {
  observe::Dashboard* dashboard = nullptr;
  const observe::DecisionLog* decisions = nullptr;
  net::DrainGate* gate = nullptr;  // every event stream holds it (net/drain_gate.h)
  const net::ServerTls* tls = nullptr;  // RJ_TLS_CERT_FILE: the listener speaks HTTPS only
};

// The dashboard's configuration for this process's histograms (bucket bounds).
observe::DashboardConfig dashboard_config(const request::ProxyMetrics& proxy);

// What the dashboard samples: ramjet's own counters and histograms, the fleet (state, load,
// declared profiles), the decisions routed to each engine, the engine scrape (optional) and each
// engine's KV-event index state and exact trust (optional; shown when an engine publishes KV
// events, and when exact placements are checked).
observe::DashboardSources dashboard_sources(const request::ProxyMetrics& proxy, const upstream::Fleet& fleet,
                                            const route::Router& router, const observe::DecisionLog* decisions,
                                            const upstream::EngineScraper* scraper,
                                            const cache::events::KvFleet* kv = nullptr,
                                            const route::PredictionCheck* predictions = nullptr,
                                            const upstream::EngineCatalog* catalog = nullptr);

// Samples `sources` into `dashboard` once a second on `ctx` until dashboard.stop().
void start_dashboard_sampler(boost::asio::io_context& ctx, observe::Dashboard& dashboard,
                             observe::DashboardSources sources);

boost::asio::awaitable<void> serve_admin(boost::asio::ip::tcp::socket socket,
                                         const metrics::Registry& registry,
                                         const upstream::Fleet& fleet, DashboardRoutes ui = {},
                                         const upstream::EngineScraper* engines = nullptr);

}  // namespace ramjet::app
