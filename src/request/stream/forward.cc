// The upstream side of the data plane: prepare, route, dispatch with retry before the first
// response byte, relay chunk by chunk, usage accounting, and cancellation on client disconnect.
#include <sys/socket.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log.h"
#include "net/http.h"
#include "request/route/reservation.h"
#include "request/stream/proxy.h"
#include "request/stream/session.h"
#include "request/usage/usage.h"

namespace ramjet::request {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kRelayBuffer = 16 * 1024;

// Returns when the client closes (then closes the current upstream connection) or when the
// exchange ends (cancelled through w->cancel). Pipelined bytes mean the client is alive.
asio::awaitable<void> watch_client(tcp::socket& client, std::shared_ptr<ClientWatch> w) {
  for (;;) {
    boost::system::error_code ec;
    co_await client.async_wait(
        tcp::socket::wait_read,
        asio::bind_cancellation_slot(w->cancel.slot(), asio::redirect_error(asio::use_awaitable, ec)));
    if (w->done || ec == asio::error::operation_aborted) co_return;
    if (!ec) {
      char byte;
      ssize_t n = ::recv(client.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) co_return;  // pipelined request bytes: alive
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    }
    w->gone = true;
    if (w->upstream) {
      boost::system::error_code ignored;
      w->upstream->stream.socket().close(ignored);
    }
    co_return;
  }
}

StreamKind stream_kind_of(const PreparedRequest& p) {
  if (!p.stream) return StreamKind::kUnknown;
  return *p.stream ? StreamKind::kTrue : StreamKind::kFalse;
}

bool response_has_body(http::verb method, unsigned status) {
  return method != http::verb::head && status >= 200 && status != 204 && status != 304;
}

size_t finish_index(std::string_view bucket) {
  if (bucket == "stop") return 0;
  if (bucket == "length") return 1;
  if (bucket == "tool_calls") return 2;
  if (bucket == "cancelled") return 3;
  return 4;
}

size_t cache_index(std::string_view outcome) {
  if (outcome == "full") return 0;
  if (outcome == "partial") return 1;
  if (outcome == "cold") return 2;
  return 3;
}

// Parses body bytes already in the connection's buffer into the parser's body buffer, without
// I/O, until the buffer is drained, the body buffer is full or the message is complete.
void parse_buffered(net::UpstreamConnection& conn, http::response_parser<http::buffer_body>& p,
                    boost::system::error_code& ec) {
  while (!p.is_done() && p.get().body().size > 0 && conn.buffer.size() > 0) {
    size_t used = p.put(conn.buffer.data(), ec);
    conn.buffer.consume(used);
    if (ec == http::error::need_more || ec == http::error::need_buffer) {
      ec = {};
      break;
    }
    if (ec || used == 0) break;
  }
}

void copy_response_headers(const http::fields& from, http::fields& to, const std::string& ordinal) {
  for (const auto& f : from) to.insert(f.name_string(), f.value());
  net::strip_hop_by_hop(to);
  to.erase("X-Ramjet-Upstream");
  to.set("X-Ramjet-Upstream", ordinal);
}

}  // namespace

asio::awaitable<void> Proxy::forward(Session& s, Exchange& x) {
  metrics_.inflight.add(1);
  struct Inflight {
    observe::Gauge& g;
    ~Inflight() { g.sub(1); }
  } inflight{metrics_.inflight};

  // Parse once: only inference endpoints are parsed, and only here.
  PreparedRequest prep;
  if (is_inference(x.endpoint)) {
    prep = prepare(x.endpoint, std::move(x.req.body()), config_.prepare);
    if (prep.malformed_json) metrics_.malformed_json[ep_index(x.endpoint)].inc();
    if (prep.shims.max_tokens_stripped) metrics_.shim_rewrites[0].inc();
    if (prep.shims.max_completion_tokens_stripped) metrics_.shim_rewrites[1].inc();
    if (prep.shims.contents_flattened) metrics_.shim_rewrites[2].inc(prep.shims.contents_flattened);
    if (prep.shims.reasoning_effort_dropped) metrics_.shim_rewrites[3].inc();
  } else {
    prep.endpoint = x.endpoint;
    prep.body = std::move(x.req.body());
  }
  x.stream_kind = stream_kind_of(prep);
  metrics_.request_body_bytes.inc(prep.body.size());

  auto& fields = x.req.base();
  net::strip_hop_by_hop(fields);
  fields.erase("X-Ramjet-Upstream");

  route::Decision d = policy_.decide(prep, route::FleetSnapshot::of(fleet_));
  metrics_.route_decisions[static_cast<size_t>(d.outcome)].inc();
  int64_t was_open = metrics_.route_fail_open.get();
  metrics_.route_fail_open.set(d.fail_open ? 1 : 0);
  if (was_open != (d.fail_open ? 1 : 0)) {
    spdlog::warn(d.fail_open ? "no healthy upstream: failing open" : "healthy upstream again: fail-open ended");
  }
  auto order = d.dispatch_order();
  if (order.empty()) {
    co_await send_error(s, x, 503, "upstream unavailable", "no_healthy_upstream");
    co_return;
  }

  auto watch = std::make_shared<ClientWatch>();
  asio::co_spawn(co_await asio::this_coro::executor, watch_client(s.client, watch), asio::detached);
  struct StopWatch {
    ClientWatch& w;
    ~StopWatch() {
      w.done = true;
      w.upstream = nullptr;
      w.cancel.emit(asio::cancellation_type::terminal);
    }
  } stop_watch{*watch};

  UpstreamError last_error = UpstreamError::kConnect;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t u = order[k].ordinal;
    const bool last = k + 1 == order.size();
    upstream::Engine& engine = fleet_.at(u);
    if (d.fail_open) metrics_.fail_open_dispatches[u].inc();
    route::LoadReservation reservation(engine, order[k].request_load_units);
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (watch->gone) break;
      boost::system::error_code ec;
      net::ConnectionPtr conn = pools_.at(s.thread, u).take();
      if (!conn) {
        net::ConnectFailure cf = net::ConnectFailure::kNone;
        conn = co_await net::connect(engine.url(), config_.connect_timeout, cf, &watch->upstream);
        watch->upstream = nullptr;
        if (!conn) {
          if (watch->gone) break;
          last_error = cf == net::ConnectFailure::kTimeout ? UpstreamError::kTimeout : UpstreamError::kConnect;
          metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(last_error)].inc();
          fleet_.fence(u, last_error == UpstreamError::kTimeout ? upstream::FenceReason::kTimeout
                                                                : upstream::FenceReason::kConnect);
          break;  // next candidate
        }
      }
      watch->upstream = conn.get();

      http::request<http::buffer_body> up{x.req.method(), engine.url().base_path + std::string(x.req.target()), 11};
      for (const auto& f : fields) up.insert(f.name_string(), f.value());
      up.set(http::field::host, engine.url().host_header());
      up.keep_alive(true);
      if (!prep.body.empty() || x.req.method() == http::verb::post || x.req.method() == http::verb::put ||
          x.req.method() == http::verb::patch) {
        up.content_length(prep.body.size());
      }
      up.body().data = prep.body.empty() ? nullptr : const_cast<char*>(prep.body.data());
      up.body().size = prep.body.size();
      up.body().more = false;
      co_await http::async_write(conn->stream, up, asio::redirect_error(asio::use_awaitable, ec));

      http::response_parser<http::buffer_body> parser;
      parser.body_limit(boost::none);
      parser.header_limit(256 * 1024);
      if (x.req.method() == http::verb::head) parser.skip(true);
      if (!ec) {
        co_await http::async_read_header(conn->stream, conn->buffer, parser,
                                         asio::redirect_error(asio::use_awaitable, ec));
      }
      if (ec) {
        watch->upstream = nullptr;
        if (watch->gone) break;
        // A pooled connection the engine closed while idle: retry once on a fresh one.
        if (conn->reused && attempt == 0 &&
            (ec == http::error::end_of_stream || ec == asio::error::eof ||
             ec == asio::error::connection_reset || ec == asio::error::broken_pipe)) {
          continue;
        }
        last_error = UpstreamError::kProtocol;
        metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(last_error)].inc();
        fleet_.fence(u, upstream::FenceReason::kProtocol);
        break;
      }

      const unsigned status = parser.get().result_int();
      if ((status == 502 || status == 503) && !last) {
        watch->upstream = nullptr;
        last_error = UpstreamError::kRetryableStatus;
        metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(last_error)].inc();
        fleet_.fence(u, upstream::FenceReason::kRetryableStatus);
        break;  // conn closes with its scope; the next candidate gets the request
      }
      fleet_.on_response(u, status);

      Attempt a{*conn, parser, engine, *watch, prep, reservation};
      RelayResult r = (x.endpoint == Endpoint::kModels && status == 200)
                          ? co_await relay_models(s, x, a)
                          : co_await relay(s, x, a);
      watch->upstream = nullptr;
      const double seconds = static_cast<double>(clock_.now_ns() - x.start_ns) / 1e9;
      metrics_.request_duration.observe(seconds);
      switch (r) {
        case RelayResult::kComplete:
          if (!x.counted) metrics_.count_request(x.endpoint, x.stream_kind, status);
          if (parser.get().keep_alive() && parser.is_done()) pools_.at(s.thread, u).put(std::move(conn));
          break;
        case RelayResult::kClientGone:
          metrics_.client_disconnects[ep_index(x.endpoint)].inc();
          metrics_.count_request(x.endpoint, x.stream_kind, 499);
          s.close_after = true;
          break;
        case RelayResult::kUpstreamError:
          metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(UpstreamError::kReadError)].inc();
          metrics_.count_request(x.endpoint, x.stream_kind, status);
          fleet_.fence(u, upstream::FenceReason::kProtocol);
          s.close_after = true;  // the response is truncated: the client must see the connection end
          break;
      }
      co_return;
    }
    if (watch->gone) break;
  }

  if (watch->gone) {
    metrics_.client_disconnects[ep_index(x.endpoint)].inc();
    metrics_.count_request(x.endpoint, x.stream_kind, 499);
    s.close_after = true;
    co_return;
  }
  const unsigned status = last_error == UpstreamError::kTimeout ? 504 : 502;
  co_await send_error(s, x, status, "upstream unavailable",
                      last_error == UpstreamError::kTimeout ? "upstream_timeout" : "upstream_error");
}

asio::awaitable<Proxy::RelayResult> Proxy::relay(Session& s, Exchange& x, Attempt& a) {
  auto& up = a.parser.get();
  const unsigned status = up.result_int();
  x.status = status;
  http::response<http::buffer_body> res{up.result(), x.req.version()};
  copy_response_headers(up.base(), res.base(), a.engine.label());
  const bool has_body = response_has_body(x.req.method(), status);
  if (a.parser.content_length()) {
    res.content_length(*a.parser.content_length());
  } else if (has_body) {
    if (x.req.version() >= 11) {
      res.chunked(true);
    } else {
      s.close_after = true;  // HTTP/1.0: the body ends when the connection does
    }
  }
  res.keep_alive(x.keep_alive && !draining_ && !s.close_after);

  const bool account = is_inference(x.endpoint) && status == 200;
  const bool sse = up[http::field::content_type].find("text/event-stream") != std::string_view::npos;
  UsageAccumulator usage(x.endpoint, sse);
  int64_t first_token_ns = 0;

  boost::system::error_code ec;
  http::response_serializer<http::buffer_body> sr{res};
  if (!has_body) {
    co_await http::async_write_header(s.client, sr, asio::redirect_error(asio::use_awaitable, ec));
    co_return ec ? RelayResult::kClientGone : RelayResult::kComplete;
  }
  // Headers go out at once when no body bytes are waiting (an SSE stream still in prefill);
  // otherwise they leave together with the first piece of the body, in one write.
  if (a.conn.buffer.size() == 0 && !a.parser.is_done()) {
    co_await http::async_write_header(s.client, sr, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return RelayResult::kClientGone;
  }

  char buf[kRelayBuffer];
  for (;;) {
    size_t n = 0;
    if (!a.parser.is_done()) {
      up.body().data = buf;
      up.body().size = sizeof buf;
      // Everything the engine has already sent is relayed in one write (several SSE events
      // often arrive together); the socket is read only when nothing is buffered.
      parse_buffered(a.conn, a.parser, ec);
      if (!ec && up.body().size == sizeof buf && !a.parser.is_done()) {
        co_await http::async_read_some(a.conn.stream, a.conn.buffer, a.parser,
                                       asio::redirect_error(asio::use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (!ec) parse_buffered(a.conn, a.parser, ec);
      }
      if (ec) co_return a.watch.gone ? RelayResult::kClientGone : RelayResult::kUpstreamError;
      n = sizeof buf - up.body().size;
      if (n == 0 && !a.parser.is_done()) continue;
    }
    if (n && account) {
      if (usage.feed(std::string_view(buf, n)) && first_token_ns == 0) {
        first_token_ns = clock_.now_ns();
        metrics_.ttft.observe(static_cast<double>(first_token_ns - x.start_ns) / 1e9);
      }
    }
    metrics_.response_body_bytes.inc(n);
    res.body().data = n ? buf : nullptr;
    res.body().size = n;
    res.body().more = !a.parser.is_done();
    co_await http::async_write(s.client, sr, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return RelayResult::kClientGone;
    if (a.parser.is_done()) break;
  }

  if (account) {
    usage.finish();
    const Usage& u = usage.usage();
    metrics_.usage_parse_failures.inc(usage.parse_failures());
    if (u.prompt_tokens) metrics_.prompt_tokens.inc(*u.prompt_tokens);
    if (u.cached_tokens) metrics_.cached_prompt_tokens.inc(*u.cached_tokens);
    if (u.completion_tokens) metrics_.completion_tokens.inc(*u.completion_tokens);
    if (!u.finish_reason.empty()) {
      metrics_.finish_reasons[ep_index(x.endpoint)][finish_index(finish_bucket(u.finish_reason))].inc();
    }
    metrics_.cache_requests[ep_index(x.endpoint)][cache_index(cache_outcome(u))].inc();
    if (first_token_ns && u.completion_tokens && *u.completion_tokens > 8) {
      double decode_s = static_cast<double>(clock_.now_ns() - first_token_ns) / 1e9;
      if (decode_s > 0.5) metrics_.decode_rate.observe(static_cast<double>(*u.completion_tokens - 1) / decode_s);
    }
  }
  co_return RelayResult::kComplete;
}

asio::awaitable<Proxy::RelayResult> Proxy::relay_models(Session& s, Exchange& x, Attempt& a) {
  auto& up = a.parser.get();
  std::string body;
  char buf[kRelayBuffer];
  boost::system::error_code ec;
  while (!a.parser.is_done()) {
    up.body().data = buf;
    up.body().size = sizeof buf;
    co_await http::async_read_some(a.conn.stream, a.conn.buffer, a.parser,
                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) co_return a.watch.gone ? RelayResult::kClientGone : RelayResult::kUpstreamError;
    body.append(buf, sizeof buf - up.body().size);
    if (body.size() > config_.max_models_body) {
      s.close_after = true;
      co_await send_error(s, x, 502, "upstream model list too large", "upstream_error");
      co_return RelayResult::kComplete;
    }
  }
  if (auto rewritten = rewrite_models_context(body, config_.advertise_ctx_margin)) body = std::move(*rewritten);
  http::response<http::string_body> res{up.result(), x.req.version()};
  copy_response_headers(up.base(), res.base(), a.engine.label());
  res.keep_alive(x.keep_alive && !draining_ && !s.close_after);
  if (x.req.method() != http::verb::head) res.body() = std::move(body);
  res.prepare_payload();
  x.status = res.result_int();
  co_await http::async_write(s.client, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return ec ? RelayResult::kClientGone : RelayResult::kComplete;
}

}  // namespace ramjet::request
