#include "app/admin.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <openssl/err.h>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <memory>
#include <optional>

#include "upstream/engine_scrape.h"
#include "observe/web/assets.h"
#include "request/ingress/endpoint.h"

namespace ramjet::app {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// ------------------------------------------------------------------------------ dashboard

observe::DashboardConfig dashboard_config(const request::ProxyMetrics& proxy) {
  observe::DashboardConfig c;
  c.ttft_bounds = proxy.ttft.bounds();
  c.decode_bounds = proxy.decode_rate.bounds();
  c.tpot_bounds = proxy.tpot.bounds();
  return c;
}

observe::DashboardSources dashboard_sources(const request::ProxyMetrics& m, const upstream::Fleet& fleet,
                                            const route::Router& router, const observe::DecisionLog* decisions,
                                            const upstream::EngineScraper* scraper,
                                            const cache::events::KvFleet* kv,
                                            const route::PredictionCheck* predictions,
                                            const upstream::EngineCatalog* catalog) {
  observe::DashboardSources s;
  s.ramjet = [&m, decisions](observe::Reading& r) {
    r.completion_tokens = m.completion_tokens.get();
    r.prompt_tokens = m.prompt_tokens.get();
    r.cached_prompt_tokens = m.cached_prompt_tokens.get();
    r.requests = decisions ? decisions->total() : 0;  // routed requests
    m.ttft.read(r.ttft.counts, r.ttft.total);
    m.decode_rate.read(r.decode_rate.counts, r.decode_rate.total);
    m.tpot.read(r.tpot.counts, r.tpot.total);
    r.inflight = m.inflight.get();
    r.fail_open = m.route_fail_open.get() != 0;
  };
  s.fleet = [&m, &fleet, &router, decisions](observe::Reading& r) {
    r.engines.resize(fleet.size());
    for (size_t i = 0; i < fleet.size(); ++i) {
      const upstream::Engine& e = fleet.at(i);
      observe::EngineReading& er = r.engines[i];
      er.profile = route::profile_label(router.profile(i));
      const net::SlotState slot = fleet.roster().state(i);
      er.state = slot == net::SlotState::kVacant    ? "vacant"
                 : slot == net::SlotState::kLeaving ? "leaving"
                                                    : std::string(upstream::engine_state_label(e.state()));
      er.inflight = e.inflight();
      er.load_units = e.load_units();
      er.routed = decisions ? decisions->routed_to(i) : 0;
      er.fail_open_dispatches = i < m.upstreams ? m.fail_open_dispatches[i].get() : 0;
    }
  };
  if (scraper && scraper->enabled()) {
    s.engine_samples = [scraper] { return scraper->engines(); };
    s.gpu_samples = [scraper] { return scraper->gpus(); };
  }
  if (kv && kv->enabled()) {
    s.kv_index = [kv](size_t i) -> std::string_view {
      if (i >= kv->size() || !kv->has_events(i)) return "none";
      return cache::events::label(kv->mode(i));
    };
    s.kv_source = [kv](size_t i) -> std::string_view { return i < kv->size() ? kv->inventory_label(i) : "none"; };
  }
  if (predictions) s.exact_withdrawn = [predictions](size_t i) { return predictions->withdrawn(i); };
  if (catalog) s.models = [catalog](size_t i) { return catalog->pools()->engine_models(i); };
  return s;
}

namespace {

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

asio::awaitable<void> sample_loop(observe::Dashboard& dashboard, observe::DashboardSources sources) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  auto next = std::chrono::steady_clock::now();
  while (!dashboard.stopped()) {
    dashboard.tick(observe::read_sources(sources, unix_ms_now()));
    next += std::chrono::seconds(1);
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + std::chrono::seconds(1);  // fell behind: skip, do not burst
    timer.expires_at(next);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

// `name=<integer>` from the query string of `target`.
std::optional<int64_t> query_int(std::string_view target, std::string_view name) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    if (eq != std::string_view::npos && pair.substr(0, eq) == name) {
      int64_t v = 0;
      std::string_view num = pair.substr(eq + 1);
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (ec == std::errc() && p == num.data() + num.size()) return v;
      return std::nullopt;
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

template <class Stream>
asio::awaitable<bool> write_chunk(Stream& stream, std::string_view data) {
  boost::system::error_code ec;
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(10));  // a client that stops reading is dropped
  co_await asio::async_write(stream, http::make_chunk(asio::const_buffer(data.data(), data.size())),
                             asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

// GET /api/v1/stream: an SSE `state` event after every dashboard tick (once a second), a comment
// when nothing happened for 15 s, and `event: bye` plus the end of the chunked body on shutdown.
template <class Stream>
asio::awaitable<void> serve_sse(Stream& stream, unsigned version, bool keep_alive,
                                observe::Dashboard& dashboard, net::DrainGate* gate) {
  net::DrainGate::Hold hold;
  if (gate) hold = gate->enter();
  struct Waker {
    explicit Waker(const asio::any_io_executor& ex) : timer(ex) {}
    asio::steady_timer timer;
    std::atomic<bool> pending{false};
  };
  auto waker = std::make_shared<Waker>(co_await asio::this_coro::executor);
  std::weak_ptr<Waker> weak = waker;
  // Called from the sampler's thread: the timer is cancelled on its own thread.
  auto id = dashboard.add_client([weak] {
    if (auto w = weak.lock()) {
      w->pending.store(true);
      asio::post(w->timer.get_executor(), [weak] {
        if (auto w2 = weak.lock()) w2->timer.cancel();
      });
    }
  });
  if (id && gate && !hold) {  // shutting down: no new stream
    dashboard.remove_client(*id);
    id.reset();
  }
  boost::system::error_code ec;
  if (!id) {
    http::response<http::string_body> busy{http::status::service_unavailable, version};
    busy.set(http::field::content_type, "application/json");
    busy.set(http::field::retry_after, "5");
    busy.body() = request::error_json("too many dashboard streams", "too_many_streams", 503);
    busy.keep_alive(false);
    busy.prepare_payload();
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(10));
    co_await http::async_write(stream, busy, asio::redirect_error(asio::use_awaitable, ec));
    co_return;
  }
  struct Remove {
    observe::Dashboard& d;
    uint64_t id;
    ~Remove() { d.remove_client(id); }
  } remove{dashboard, *id};  // before the hold is released: the stream is gone when the gate hears it

  http::response<http::empty_body> res{http::status::ok, version};
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-store");
  res.keep_alive(keep_alive);
  res.chunked(true);
  http::response_serializer<http::empty_body> sr{res};
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(10));
  co_await http::async_write_header(stream, sr, asio::redirect_error(asio::use_awaitable, ec));
  if (ec || !co_await write_chunk(stream, "retry: 2000\n\n")) co_return;
  uint64_t sent = UINT64_MAX;
  for (;;) {
    if (dashboard.stopped()) {
      if (co_await write_chunk(stream, "event: bye\ndata: {}\n\n")) {
        beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(2));
        co_await asio::async_write(stream, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, ec));
      }
      co_return;
    }
    const uint64_t ticks = dashboard.ticks();
    if (ticks != sent) {
      std::shared_ptr<const std::string> state = dashboard.state_json();
      std::string event;
      event.reserve(state->size() + 32);
      event += "event: state\ndata: ";
      event += *state;  // one line: the JSON has no newline
      event += "\n\n";
      if (!co_await write_chunk(stream, event)) co_return;
      sent = ticks;
    }
    if (waker->pending.exchange(false)) continue;
    waker->timer.expires_after(std::chrono::seconds(15));
    co_await waker->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!ec && !co_await write_chunk(stream, ": keep-alive\n\n")) co_return;
  }
}

// /, /ui, /ui/<file> and /api/v1/{state,series,decisions}. False when `path` is not one of them.
bool serve_dashboard(const http::request<http::string_body>& req, std::string_view target, std::string_view path,
                     const DashboardRoutes& ui, http::response<http::string_body>& res) {
  if (path == "/" || path == "/ui") {
    res.result(http::status::found);
    res.set(http::field::location, "/ui/");
    return true;
  }
  if (path.starts_with("/ui/")) {
    std::string_view name = path.substr(4);
    if (name.empty()) name = "index.html";
    const observe::web::Asset* a = observe::web::find_asset(name);
    if (!a) return false;
    res.set(http::field::etag, a->etag);
    res.set(http::field::cache_control, "no-cache");  // revalidate: the ETag answers 304
    res.set("X-Content-Type-Options", "nosniff");
    if (req[http::field::if_none_match] == a->etag) {
      res.result(http::status::not_modified);
      return true;
    }
    res.set(http::field::content_type, a->content_type);
    res.body() = std::string(a->bytes);
    return true;
  }
  auto json = [&](std::string body) {
    res.set(http::field::content_type, "application/json");
    res.set(http::field::cache_control, "no-store");
    res.body() = std::move(body);
  };
  if (path == "/api/v1/state") {
    json(*ui.dashboard->state_json());
    return true;
  }
  if (path == "/api/v1/series") {
    json(ui.dashboard->series_json(query_int(target, "window").value_or(900)));
    return true;
  }
  if (path == "/api/v1/decisions") {
    int64_t n = std::clamp<int64_t>(query_int(target, "n").value_or(50), 0, 100000);
    json(ui.decisions ? ui.decisions->json(static_cast<size_t>(n)) : std::string("{\"total\":0,\"capacity\":0,\"decisions\":[]}"));
    return true;
  }
  return false;
}

}  // namespace

void start_dashboard_sampler(asio::io_context& ctx, observe::Dashboard& dashboard, observe::DashboardSources sources) {
  asio::co_spawn(ctx, sample_loop(dashboard, std::move(sources)), asio::detached);
}

// ------------------------------------------------------------------------------ the listener

namespace {

// GET /metrics/upstream/{i}: engine i's own /metrics (the engine scrape's timeout, size cap and
// bearer token). 404 for an ordinal that does not exist; 502 JSON when the engine does not answer
// 200 within the bounds.
asio::awaitable<void> engine_metrics(std::string_view ordinal, const upstream::Fleet& fleet,
                                     const upstream::EngineScraper& engines, http::response<http::string_body>& res) {
  size_t i = 0;
  auto [end, ec] = std::from_chars(ordinal.data(), ordinal.data() + ordinal.size(), i);
  if (ordinal.empty() || ec != std::errc() || end != ordinal.data() + ordinal.size() || i >= fleet.size() ||
      i >= engines.slots() || !fleet.roster().listed(i)) {
    res.result(http::status::not_found);
    res.set(http::field::content_type, "application/json");
    res.body() = request::error_json("no such upstream", "not_found_error", 404);
    co_return;
  }
  upstream::EngineMetricsFetch f = co_await upstream::fetch_engine_metrics(engines.config(), i);
  if (!f.ok) {
    std::string why = f.error == upstream::ScrapeError::kHttp
                          ? "answered " + std::to_string(f.status)
                          : std::string(upstream::scrape_error_label(f.error.value_or(upstream::ScrapeError::kProtocol)));
    res.result(http::status::bad_gateway);
    res.set(http::field::content_type, "application/json");
    res.body() = request::error_json("upstream " + std::to_string(i) + " /metrics: " + why, "upstream_error", 502);
    co_return;
  }
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = std::move(f.body);
}

}  // namespace

namespace {

// The requests of one connection, plain (beast::tcp_stream) or HTTPS (beast::ssl_stream).
template <class Stream>
asio::awaitable<void> serve_requests(Stream& stream, const metrics::Registry& registry,
                                     const upstream::Fleet& fleet, const DashboardRoutes& ui,
                                     const upstream::EngineScraper* engines) {
  beast::flat_buffer buffer;
  for (;;) {
    boost::system::error_code ec;
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(64 * 1024);
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(30));
    co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    if (parser.chunked()) {
      // Every admin route is a GET without a body. A chunked one is refused unread: Beast's
      // final-chunk step asserts it has five bytes buffered, which a client trickling "0\r\n\r\n"
      // breaks (a Debug ramjet aborted; net::ResponseParser, request/stream/proxy.cc).
      http::response<http::string_body> res{http::status::bad_request, parser.get().version()};
      res.set(http::field::content_type, "application/json");
      res.body() = request::error_json("a request body is not accepted here", "invalid_request_error", 400);
      res.keep_alive(false);
      res.prepare_payload();
      co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
      break;
    }
    if (!parser.is_done()) {
      co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    auto& req = parser.get();
    std::string_view target = req.target();
    std::string_view path = target.substr(0, target.find('?'));
    if (ui.dashboard && req.method() == http::verb::get && path == "/api/v1/stream") {
      co_await serve_sse(stream, req.version(), req.keep_alive(), *ui.dashboard, ui.gate);
      break;  // an event stream ends its connection
    }
    http::response<http::string_body> res{http::status::ok, req.version()};
    if (ui.dashboard && req.method() == http::verb::get && serve_dashboard(req, target, path, ui, res)) {
      // answered by the dashboard
    } else if (req.method() == http::verb::get && path == "/metrics") {
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = registry.render();
    } else if (engines && req.method() == http::verb::get && path.starts_with("/metrics/upstream/")) {
      co_await engine_metrics(path.substr(std::string_view("/metrics/upstream/").size()), fleet, *engines, res);
    } else if (req.method() == http::verb::get && path == "/health") {
      res.result(fleet.healthy_count() > 0 ? http::status::ok : http::status::service_unavailable);
      res.set(http::field::content_type, "application/json");
      res.body() = fleet.health_json();
    } else {
      res.result(http::status::not_found);
      res.set(http::field::content_type, "application/json");
      res.body() = request::error_json("not found", "not_found_error", 404);
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
}

}  // namespace

asio::awaitable<void> serve_admin(asio::ip::tcp::socket socket, const metrics::Registry& registry,
                                  const upstream::Fleet& fleet, DashboardRoutes ui,
                                  const upstream::EngineScraper* engines) {
  beast::tcp_stream tcp(std::move(socket));
  if (ui.tls == nullptr) {
    co_await serve_requests(tcp, registry, fleet, ui, engines);
  } else {
    // HTTPS only: the handshake under the same 30 s a request head gets.
    const std::shared_ptr<asio::ssl::context> ctx = ui.tls->current();
    beast::ssl_stream<beast::tcp_stream> tls(std::move(tcp), *ctx);
    boost::system::error_code ec;
    beast::get_lowest_layer(tls).expires_after(std::chrono::seconds(30));
    co_await tls.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      ui.tls->count_handshake_failure(net::ServerTls::Listener::kMetrics);
      ERR_clear_error();
      co_return;
    }
    co_await serve_requests(tls, registry, fleet, ui, engines);
    boost::system::error_code ignored;
    beast::get_lowest_layer(tls).socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    co_return;
  }
  boost::system::error_code ignored;
  tcp.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace ramjet::app
