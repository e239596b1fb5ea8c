// The upstream side of the data plane: prepare, route, dispatch with retry before the first
// response byte, relay chunk by chunk, usage accounting, and cancellation on client disconnect.
//
// Heads are serialised here into the session's reused string and written together with the
// body bytes in one gather write (tried synchronously first: the sockets are non-blocking);
// responses are parsed with Beast's parser, and their body bytes are relayed straight from the
// upstream connection's read buffer, without a copy.
#include <charconv>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>

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

constexpr size_t kReadMax = 64 * 1024;
constexpr std::string_view kRouteHeader = "X-Ramjet-Upstream";

void on_client_event(const std::shared_ptr<ClientWatch>& w, boost::system::error_code ec, size_t n);

// A one-byte MSG_PEEK receive: it completes when the client sends bytes (which stay in the
// socket for the connection loop), closes, or resets. Unlike a wait for readability, queueing
// it needs no epoll_ctl when the socket was drained by the last read.
void wait_client(const std::shared_ptr<ClientWatch>& w) {
  w->waiting = true;
  w->client->async_receive(asio::buffer(&w->peek, 1), tcp::socket::message_peek,
                           [w](boost::system::error_code ec, size_t n) { on_client_event(w, ec, n); });
}

// A FIN or reset while an exchange is active marks the client gone and closes the current
// upstream connection; pipelined bytes mean the client is alive.
void on_client_event(const std::shared_ptr<ClientWatch>& w, boost::system::error_code ec, size_t n) {
  w->waiting = false;
  if (!w->active || w->client == nullptr || ec == asio::error::operation_aborted) return;
  if (!ec && n > 0) return;  // pipelined request bytes: alive
  w->gone = true;
  if (w->upstream) {
    boost::system::error_code ignored;
    w->upstream->socket.close(ignored);
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

// Parses what the connection's buffer holds, without I/O: the head, or body pieces (views into
// the buffer, valid until the next read) until the buffer is drained, the piece list is full or
// the message is complete.
void parse_buffered(net::UpstreamConnection& conn, net::ResponseParser& p, boost::system::error_code& ec) {
  if (p.is_done() || conn.buffer.size() == 0) return;
  size_t used = p.put(conn.buffer.data(), ec);
  conn.buffer.consume(used);
  if (ec == http::error::need_more || ec == http::error::need_buffer) ec = {};
}

// After a read from the engine failed with `ec`: end of stream completes a close-delimited
// body and is end_of_stream before any byte, as Beast's read operations report it.
void on_read_error(net::ResponseParser& p, boost::system::error_code& ec) {
  if (ec != asio::error::eof) return;
  ec = {};
  if (p.got_some()) {
    p.put_eof(ec);
  } else {
    ec = http::error::end_of_stream;
  }
}

// Response head fields as relayed: hop-by-hop headers (and those named in Connection) and any
// X-Ramjet-Upstream removed, then X-Ramjet-Upstream: <ordinal>.
void append_response_fields(std::string& out, const net::HeadFields& fields, std::string_view ordinal) {
  const net::HopByHop hop(fields, kRouteHeader);
  for (size_t i = 0; i < fields.size(); ++i) {
    if (!hop.drop(fields, i)) net::append_field(out, fields.name(i), fields.value(i));
  }
  net::append_field(out, kRouteHeader, ordinal);
}

}  // namespace

void watch_client(const std::shared_ptr<ClientWatch>& w) {
  w->active = true;
  w->gone = false;
  if (!w->waiting && w->client != nullptr) wait_client(w);
}

void unwatch_client(ClientWatch& w) {
  w.active = false;
  w.upstream = nullptr;
  if (w.waiting && w.client != nullptr) {
    boost::system::error_code ignored;
    w.client->cancel(ignored);  // only the watch is pending on the client socket now
  }
}

asio::awaitable<void> Proxy::forward(Session& s, Exchange& x) {
  metrics_.inflight.add(1);
  struct Inflight {
    observe::Gauge& g;
    ~Inflight() { g.sub(1); }
  } inflight{metrics_.inflight};

  // Parse once: only inference endpoints are parsed, and only here.
  PreparedRequest prep;
  if (is_inference(x.endpoint)) {
    prep = prepare(x.endpoint, std::move(s.body), config_.prepare);
    if (prep.malformed_json) metrics_.malformed_json[ep_index(x.endpoint)].inc();
    if (prep.shims.max_tokens_stripped) metrics_.shim_rewrites[0].inc();
    if (prep.shims.max_completion_tokens_stripped) metrics_.shim_rewrites[1].inc();
    if (prep.shims.contents_flattened) metrics_.shim_rewrites[2].inc(prep.shims.contents_flattened);
    if (prep.shims.reasoning_effort_dropped) metrics_.shim_rewrites[3].inc();
  } else {
    prep.endpoint = x.endpoint;
    prep.body = std::move(s.body);
  }
  // The body's allocation goes back to the session for the next request.
  struct GiveBack {
    std::string& to;
    std::string& from;
    ~GiveBack() { to = std::move(from); }
  } give_back{s.body, prep.body};
  x.stream_kind = stream_kind_of(prep);
  metrics_.request_body_bytes.inc(prep.body.size());

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

  ClientWatch& watch = *s.watch;
  watch_client(s.watch);
  struct StopWatch {
    ClientWatch& w;
    ~StopWatch() { unwatch_client(w); }
  } stop_watch{watch};

  const net::RequestHead& req = s.req;
  // Hop-by-hop headers, inbound X-Ramjet-Upstream and Expect are not forwarded; Host and
  // Content-Length are set here.
  const net::HopByHop hop(req.fields, kRouteHeader);
  const bool send_length = !prep.body.empty() || req.method == http::verb::post ||
                           req.method == http::verb::put || req.method == http::verb::patch;

  UpstreamError last_error = UpstreamError::kConnect;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t u = order[k].ordinal;
    const bool last = k + 1 == order.size();
    upstream::Engine& engine = fleet_.at(u);
    if (d.fail_open) metrics_.fail_open_dispatches[u].inc();
    route::LoadReservation reservation(engine, order[k].request_load_units);
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (watch.gone) break;
      boost::system::error_code ec;
      net::ConnectionPtr conn = pools_.at(s.thread, u).take();
      if (!conn) {
        net::ConnectFailure cf = net::ConnectFailure::kNone;
        conn = co_await net::connect(engine.url(), config_.connect_timeout, cf, &watch.upstream);
        watch.upstream = nullptr;
        if (!conn) {
          if (watch.gone) break;
          last_error = cf == net::ConnectFailure::kTimeout ? UpstreamError::kTimeout : UpstreamError::kConnect;
          metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(last_error)].inc();
          fleet_.fence(u, last_error == UpstreamError::kTimeout ? upstream::FenceReason::kTimeout
                                                                : upstream::FenceReason::kConnect);
          break;  // next candidate
        }
      }
      watch.upstream = conn.get();

      s.out.clear();
      s.out.append(req.method_string);
      s.out.push_back(' ');
      s.out.append(engine.url().base_path);
      s.out.append(req.target);
      s.out.append(" HTTP/1.1\r\n");
      for (size_t i = 0; i < req.fields.size(); ++i) {
        if (hop.drop(req.fields, i) || req.fields.id(i) == http::field::expect) continue;
        net::append_field(s.out, req.fields.name(i), req.fields.value(i));
      }
      net::append_field(s.out, "Host", host_headers_[u]);
      if (send_length) {
        s.out.append("Content-Length: ");
        net::append_decimal(s.out, prep.body.size());
        s.out.append("\r\n");
      }
      s.out.append("\r\n");
      OutBuffers out;
      out.add(s.out);
      out.add(prep.body);
      if (!out.send_now(conn->socket, ec) && !ec) {
        co_await asio::async_write(conn->socket, out.rest(), asio::redirect_error(asio::use_awaitable, ec));
      }

      net::ResponseParser parser(s.res);
      parser.body_limit(boost::none);
      parser.header_limit(256 * 1024);
      if (req.method == http::verb::head) parser.skip(true);
      while (!ec) {
        parse_buffered(*conn, parser, ec);
        if (ec || parser.is_header_done()) break;
        size_t n = co_await conn->socket.async_read_some(
            conn->buffer.prepare(beast::read_size(conn->buffer, kReadMax)),
            asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
          on_read_error(parser, ec);
          if (!ec) ec = http::error::partial_message;  // the head cannot end at EOF
          break;
        }
        conn->buffer.commit(n);
      }
      if (ec) {
        watch.upstream = nullptr;
        if (watch.gone) break;
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

      const unsigned status = s.res.status;
      if ((status == 502 || status == 503) && !last) {
        watch.upstream = nullptr;
        last_error = UpstreamError::kRetryableStatus;
        metrics_.upstream_errors[ep_index(x.endpoint)][static_cast<size_t>(last_error)].inc();
        fleet_.fence(u, upstream::FenceReason::kRetryableStatus);
        break;  // conn closes with its scope; the next candidate gets the request
      }
      fleet_.on_response(u, status);

      Attempt a{*conn, parser, engine, watch, prep, reservation};
      RelayResult r = (x.endpoint == Endpoint::kModels && status == 200)
                          ? co_await relay_models(s, x, a)
                          : co_await relay(s, x, a);
      watch.upstream = nullptr;
      const double seconds = static_cast<double>(clock_.now_ns() - x.start_ns) / 1e9;
      metrics_.request_duration.observe(seconds);
      switch (r) {
        case RelayResult::kComplete:
          if (!x.counted) metrics_.count_request(x.endpoint, x.stream_kind, status);
          if (parser.keep_alive() && parser.is_done()) pools_.at(s.thread, u).put(std::move(conn));
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
    if (watch.gone) break;
  }

  if (watch.gone) {
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
  const net::ResponseHead& up = s.res;
  const unsigned status = up.status;
  x.status = status;
  const unsigned version = s.req.version;
  const bool has_body = response_has_body(s.req.method, status);
  const auto length = a.parser.content_length();
  bool chunked = false;
  if (!length && has_body) {
    if (version >= 11) {
      chunked = true;
    } else {
      s.close_after = true;  // HTTP/1.0: the body ends when the connection does
    }
  }

  s.out.clear();
  net::append_status_line(s.out, version, status, up.reason);
  append_response_fields(s.out, up.fields, a.engine.label());
  if (length) {
    s.out.append("Content-Length: ");
    net::append_decimal(s.out, *length);
    s.out.append("\r\n");
  } else if (chunked) {
    s.out.append("Transfer-Encoding: chunked\r\n");
  }
  net::append_connection(s.out, version, x.keep_alive && !draining_ && !s.close_after);
  s.out.append("\r\n");

  const bool account = is_inference(x.endpoint) && status == 200;
  const bool sse = up.fields.get(http::field::content_type).find("text/event-stream") != std::string_view::npos;
  UsageAccumulator usage(x.endpoint, sse);
  int64_t first_token_ns = 0;

  boost::system::error_code ec;
  OutBuffers out;
  bool head_pending = true;
  // Headers go out at once when no body bytes are waiting (an SSE stream still in prefill);
  // otherwise they leave together with the first piece of the body, in one write.
  if (!has_body || (a.conn.buffer.size() == 0 && !a.parser.is_done())) {
    out.add(s.out);
    if (!out.send_now(s.client, ec) && !ec) {
      co_await asio::async_write(s.client, out.rest(), asio::redirect_error(asio::use_awaitable, ec));
    }
    if (ec) co_return RelayResult::kClientGone;
    if (!has_body) co_return RelayResult::kComplete;
    head_pending = false;
  }

  a.parser.eager(true);
  char chunk_size[24];
  for (;;) {
    a.parser.clear_pieces();
    if (!a.parser.is_done()) {
      // Everything the engine has already sent is relayed in one write (several SSE events
      // often arrive together); the socket is read only when nothing is buffered.
      parse_buffered(a.conn, a.parser, ec);
      if (!ec && a.parser.piece_count() == 0 && !a.parser.is_done()) {
        size_t n = co_await a.conn.socket.async_read_some(
            a.conn.buffer.prepare(beast::read_size(a.conn.buffer, kReadMax)),
            asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
          on_read_error(a.parser, ec);
        } else {
          a.conn.buffer.commit(n);
          parse_buffered(a.conn, a.parser, ec);
        }
      }
      if (ec) co_return a.watch.gone ? RelayResult::kClientGone : RelayResult::kUpstreamError;
      if (a.parser.piece_count() == 0 && !a.parser.is_done()) continue;
    }
    const size_t n = a.parser.piece_bytes();
    const std::string_view* pieces = a.parser.pieces();
    if (n && account) {
      for (size_t i = 0; i < a.parser.piece_count(); ++i) {
        if (usage.feed(pieces[i]) && first_token_ns == 0) {
          first_token_ns = clock_.now_ns();
          metrics_.ttft.observe(static_cast<double>(first_token_ns - x.start_ns) / 1e9);
        }
      }
    }
    metrics_.response_body_bytes.inc(n);

    out.clear();
    if (head_pending) {
      out.add(s.out);
      head_pending = false;
    }
    if (chunked && n) {  // one chunk carries everything relayed in this write
      char* end = std::to_chars(chunk_size, chunk_size + sizeof chunk_size - 2, n, 16).ptr;
      *end++ = '\r';
      *end++ = '\n';
      out.add(std::string_view(chunk_size, static_cast<size_t>(end - chunk_size)));
    }
    for (size_t i = 0; i < a.parser.piece_count(); ++i) out.add(pieces[i]);
    if (chunked && n) out.add("\r\n");
    if (chunked && a.parser.is_done()) out.add("0\r\n\r\n");
    if (!out.empty() && !out.send_now(s.client, ec) && !ec) {
      co_await asio::async_write(s.client, out.rest(), asio::redirect_error(asio::use_awaitable, ec));
    }
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
  const net::ResponseHead& up = s.res;
  std::string body;
  boost::system::error_code ec;
  a.parser.eager(true);
  while (!a.parser.is_done()) {
    a.parser.clear_pieces();
    parse_buffered(a.conn, a.parser, ec);
    if (!ec && a.parser.piece_count() == 0 && !a.parser.is_done()) {
      size_t n = co_await a.conn.socket.async_read_some(
          a.conn.buffer.prepare(beast::read_size(a.conn.buffer, kReadMax)),
          asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        on_read_error(a.parser, ec);
      } else {
        a.conn.buffer.commit(n);
        parse_buffered(a.conn, a.parser, ec);
      }
    }
    if (ec) co_return a.watch.gone ? RelayResult::kClientGone : RelayResult::kUpstreamError;
    for (size_t i = 0; i < a.parser.piece_count(); ++i) body.append(a.parser.pieces()[i]);
    if (body.size() > config_.max_models_body) {
      s.close_after = true;
      co_await send_error(s, x, 502, "upstream model list too large", "upstream_error");
      co_return RelayResult::kComplete;
    }
  }
  if (auto rewritten = rewrite_models_context(body, config_.advertise_ctx_margin)) body = std::move(*rewritten);
  if (s.req.method == http::verb::head) body.clear();
  x.status = up.status;
  s.out.clear();
  net::append_status_line(s.out, s.req.version, up.status, up.reason);
  append_response_fields(s.out, up.fields, a.engine.label());
  net::append_connection(s.out, s.req.version, x.keep_alive && !draining_ && !s.close_after);
  s.out.append("Content-Length: ");
  net::append_decimal(s.out, body.size());
  s.out.append("\r\n\r\n");
  OutBuffers out;
  out.add(s.out);
  out.add(body);
  if (!out.send_now(s.client, ec) && !ec) {
    co_await asio::async_write(s.client, out.rest(), asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return ec ? RelayResult::kClientGone : RelayResult::kComplete;
}

}  // namespace ramjet::request
