// The client side of the data plane: connection loop, limits and timeouts, local answers.
#include "request/stream/proxy.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "common/log.h"
#include "request/stream/session.h"

namespace ramjet::request {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Deadline::Deadline(tcp::socket& socket, std::chrono::milliseconds after)
    : state_(std::make_shared<State>()), timer_(socket.get_executor()) {
  timer_.expires_after(after);
  timer_.async_wait([st = state_, &socket](boost::system::error_code ec) {
    if (ec || !st->armed) return;
    st->expired = true;
    boost::system::error_code ignored;
    socket.cancel(ignored);
  });
}

Deadline::~Deadline() {
  state_->armed = false;
  timer_.cancel();
}

Proxy::Proxy(ProxyConfig config, upstream::Fleet& fleet, route::Policy& policy, net::IoPool& io,
             net::PoolSet& pools, const Clock& clock)
    : config_(std::move(config)),
      fleet_(fleet),
      policy_(policy),
      io_(io),
      pools_(pools),
      clock_(clock),
      metrics_(fleet.size()),
      idle_(io.size()) {}

Proxy::~Proxy() = default;

void Proxy::begin_drain() {
  draining_ = true;
  for (size_t t = 0; t < io_.size(); ++t) {
    asio::post(io_.at(t), [this, t] {
      for (Session* s : idle_[t]) {
        boost::system::error_code ignored;
        s->client.cancel(ignored);
      }
    });
  }
}

namespace {

// A bare response for requests rejected before they were fully read; always closes.
asio::awaitable<void> reject(tcp::socket& client, unsigned status, std::string_view message,
                             std::string_view type) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, "application/json");
  res.set(http::field::connection, "close");
  res.body() = error_json(message, type, static_cast<int>(status));
  res.prepare_payload();
  boost::system::error_code ec;
  Deadline d(client, std::chrono::seconds(5));
  co_await http::async_write(client, res, asio::redirect_error(asio::use_awaitable, ec));
}

bool is_quiet_close(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::operation_aborted;
}

}  // namespace

asio::awaitable<void> Proxy::serve(tcp::socket socket) {
  connections_.fetch_add(1);
  struct Count {
    std::atomic<int64_t>& n;
    ~Count() { n.fetch_sub(1); }
  } count{connections_};
  Session s(std::move(socket));
  s.thread = net::IoPool::current_index();
  if (s.thread >= io_.size()) s.thread = 0;
  try {
    bool first = true;
    for (;;) {
      boost::system::error_code ec;
      if (s.buffer.size() == 0) {
        // Wait for the next request; an idle keep-alive connection closes quietly.
        if (draining_) break;
        idle_[s.thread].insert(&s);
        size_t n = 0;
        {
          Deadline d(s.client, first ? config_.header_timeout : config_.keepalive_timeout);
          n = co_await s.client.async_read_some(s.buffer.prepare(16 * 1024),
                                                asio::redirect_error(asio::use_awaitable, ec));
        }
        idle_[s.thread].erase(&s);
        if (ec) break;
        s.buffer.commit(n);
      }
      first = false;

      http::request_parser<http::string_body> parser;
      parser.header_limit(config_.max_header_bytes);
      parser.body_limit(config_.max_body_bytes);
      bool expired = false;
      {
        // Beast's header_limit bounds one parse step, not the whole header: count what the
        // parser consumed so many small header lines cannot exceed RJ_MAX_HEADER_BYTES either.
        Deadline d(s.client, config_.header_timeout);
        size_t header_bytes = 0;
        while (!ec && !parser.is_header_done()) {
          header_bytes += co_await http::async_read_some(s.client, s.buffer, parser,
                                                         asio::redirect_error(asio::use_awaitable, ec));
          if (!ec && header_bytes > config_.max_header_bytes) ec = http::error::header_limit;
        }
        expired = d.expired();
      }
      if (ec) {
        if (ec == http::error::body_limit) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBodyTooLarge)].inc();
          co_await reject(s.client, 413, "request body too large", "invalid_request_error");
        } else if (expired) {
          metrics_.rejections[static_cast<size_t>(Rejection::kHeaderTimeout)].inc();
          co_await reject(s.client, 408, "request header timeout", "timeout_error");
        } else if (ec == http::error::header_limit) {
          metrics_.rejections[static_cast<size_t>(Rejection::kHeaderTooLarge)].inc();
          co_await reject(s.client, 431, "request header fields too large", "invalid_request_error");
        } else if (!is_quiet_close(ec)) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBadRequest)].inc();
          co_await reject(s.client, 400, "malformed HTTP request", "invalid_request_error");
        }
        break;
      }
      auto& head = parser.get();
      if (parser.content_length() && *parser.content_length() > config_.max_body_bytes) {
        metrics_.rejections[static_cast<size_t>(Rejection::kBodyTooLarge)].inc();
        co_await reject(s.client, 413, "request body too large", "invalid_request_error");
        break;
      }
      if (beast::iequals(head[http::field::expect], "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        co_await asio::async_write(s.client, asio::buffer(kContinue.data(), kContinue.size()),
                                   asio::redirect_error(asio::use_awaitable, ec));
        if (ec) break;
      }
      head.erase(http::field::expect);
      if (!parser.is_done()) {
        Deadline d(s.client, config_.body_timeout);
        co_await http::async_read(s.client, s.buffer, parser,
                                  asio::redirect_error(asio::use_awaitable, ec));
        expired = d.expired();
      }
      if (ec) {
        if (ec == http::error::body_limit) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBodyTooLarge)].inc();
          co_await reject(s.client, 413, "request body too large", "invalid_request_error");
        } else if (expired) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBodyTimeout)].inc();
          co_await reject(s.client, 408, "request body timeout", "timeout_error");
        } else if (!is_quiet_close(ec)) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBadRequest)].inc();
          co_await reject(s.client, 400, "malformed HTTP request body", "invalid_request_error");
        }
        break;
      }

      Exchange x;
      x.req = parser.release();
      x.keep_alive = x.req.keep_alive();
      co_await handle(s, x);
      if (!x.keep_alive || s.close_after || draining_) break;
    }
  } catch (const std::exception& e) {
    spdlog::error("connection handler failed: {}", log::json_escape(e.what()));
  }
  boost::system::error_code ignored;
  s.client.shutdown(tcp::socket::shutdown_send, ignored);
  s.client.close(ignored);
}

asio::awaitable<void> Proxy::handle(Session& s, Exchange& x) {
  x.endpoint = classify(x.req.method_string(), x.req.target());
  x.start_ns = clock_.now_ns();
  if (x.endpoint == Endpoint::kHealth) {
    unsigned status = fleet_.healthy_count() > 0 ? 200 : 503;
    co_await send_local(s, x, status, "application/json", fleet_.health_json());
    co_return;
  }
  co_await forward(s, x);
}

asio::awaitable<void> Proxy::send_local(Session& s, Exchange& x, unsigned status,
                                        std::string content_type, std::string body) {
  http::response<http::string_body> res{static_cast<http::status>(status), x.req.version()};
  res.set(http::field::content_type, content_type);
  res.keep_alive(x.keep_alive && !draining_ && !s.close_after);
  if (x.req.method() != http::verb::head) res.body() = std::move(body);
  res.prepare_payload();
  x.status = status;
  if (!x.counted) metrics_.count_request(x.endpoint, x.stream_kind, status);
  x.counted = true;
  boost::system::error_code ec;
  co_await http::async_write(s.client, res, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) s.close_after = true;
}

asio::awaitable<void> Proxy::send_error(Session& s, Exchange& x, unsigned status,
                                        std::string_view message, std::string_view type) {
  co_await send_local(s, x, status, "application/json",
                      error_json(message, type, static_cast<int>(status)));
}

}  // namespace ramjet::request
