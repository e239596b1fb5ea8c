// app/admin: the metrics listener (RJ_METRICS_LISTEN): GET /metrics (Prometheus text) and
// GET /health. The dashboard and per-engine metric passthrough come with observability.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "observe/metrics.h"
#include "upstream/fleet.h"

namespace ramjet::app {

boost::asio::awaitable<void> serve_admin(boost::asio::ip::tcp::socket socket,
                                         const observe::Registry& registry,
                                         const upstream::Fleet& fleet);

}  // namespace ramjet::app
