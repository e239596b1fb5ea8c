// The response side of the data plane: the client response's head and framing, the body relayed
// chunk by chunk with backpressure and the first-byte, idle and client-send timeouts, usage
// accounting, and how a response that cannot complete ends (a JSON error before its head, an
// SSE error event after it). Dispatch and retry are in forward.cc.
//
// Body bytes are relayed straight from the upstream connection's read buffer, without a copy,
// with the head and chunk framing in one gather write (tried synchronously first: the sockets
// are non-blocking).
#include <charconv>
#include <exception>

#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>

#include "net/http.h"
#include "request/stream/proxy.h"
#include "request/stream/session.h"
#include "request/usage/usage.h"

namespace ramjet::request {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

bool response_has_body(http::verb method, unsigned status) {
  return method != http::verb::head && status >= 200 && status != 204 && status != 304;
}

// Response head fields as relayed: hop-by-hop headers (and those named in Connection) and any
// X-Ramjet-Upstream removed, then X-Ramjet-Upstream: <ordinal>.
void append_response_fields(net::HeadBuffer& out, const net::HeadFields& fields, std::string_view ordinal) {
  const net::HopByHop hop(fields, kRouteHeader);
  for (size_t i = 0; i < fields.size(); ++i) {
    if (hop.drop(fields, i) || beast::iequals(fields.name(i), kReceiptHeader) ||
        beast::iequals(fields.name(i), kPrefillHeader)) {
      continue;
    }
    net::append_field(out, fields.name(i), fields.value(i));
  }
  net::append_field(out, kRouteHeader, ordinal);
}

// X-Ramjet-Route: how exact routing answered for this request and, when it looked the prompt up,
// the tokens it predicted `engine` holds ("estimated" when that engine's index was not trusted and
// its fingerprint estimate placed it) and, when some were only placed there moments ago, the
// tokens it is about to hold (speculative residency), and, when the engine holds some of them in
// an offload tier, the prediction by tier ("tier_tokens=gpu:N,cpu:M,disk:K") — counts only, no payload.
// A request in two legs gets its prefill leg's (build_response_head).
void append_receipt(net::HeadBuffer& out, const route::Routed* routed, size_t engine) {
  if (routed == nullptr || routed->exact == route::ExactOutcome::kNone) return;
  std::string v(route::label(routed->exact));
  if (engine < routed->exact_stamps.size() && routed->exact_stamps[engine].estimated) {
    v += "; estimated";  // exact_partial: this engine's index was not trusted, nothing was predicted
  } else if (engine < routed->exact_tokens.size()) {
    v += "; predicted_cached_tokens=" + std::to_string(routed->exact_tokens[engine]);
    if (engine < routed->exact_tiers.size() && routed->exact_tiers[engine].by_tier[1] + routed->exact_tiers[engine].by_tier[2] > 0) {
      const cache::TierBlocks& t = routed->exact_tiers[engine];
      v += "; tier_tokens=gpu:" + std::to_string(t.by_tier[0]) + ",cpu:" + std::to_string(t.by_tier[1]) +
           ",disk:" + std::to_string(t.by_tier[2]);
    }
  }
  if (engine < routed->exact_provisional.size() && routed->exact_provisional[engine] > 0) {
    v += "; provisional_tokens=" + std::to_string(routed->exact_provisional[engine]);
  }
  net::append_field(out, kReceiptHeader, v);
}

// Keeps the last two bytes an SSE stream relayed, to tell whether it stopped between events.
void remember_tail(char (&tail)[2], std::string_view piece) {
  if (piece.size() >= 2) {
    tail[0] = piece[piece.size() - 2];
    tail[1] = piece.back();
  } else if (piece.size() == 1) {
    tail[0] = tail[1];
    tail[1] = piece[0];
  }
}

}  // namespace

void parse_buffered(net::UpstreamConnection& conn, net::ResponseParser& p, boost::system::error_code& ec) {
  if (p.is_done() || conn.buffer.size() == 0) return;
  size_t used = p.put(conn.buffer.data(), ec);
  conn.buffer.consume(used);
  if (net::ResponseParser::wants_input(ec)) ec = {};
}

namespace {

// The watch's read ended with `ec`, its bytes (if any) in the buffer.
void client_read_done(ClientWatch& w, boost::system::error_code ec) {
  w.has_result = true;
  w.result = ec;
  // A FIN or reset while forwarding: stop the engine now. Bytes mean the client is alive.
  if (w.active && ec && ec != asio::error::operation_aborted) {
    w.gone = true;
    if (w.upstream) {
      boost::system::error_code ignored;
      w.upstream->stream.close(ignored);
    }
  }
  if (w.waiter) {  // resume the connection loop
    ClientWatch::Waiter waiter = std::move(*w.waiter);
    w.waiter.reset();
    waiter();
  }
}

// The plain read: tried at once, else it waits, into the buffer as it is now.
void client_read_some(const std::shared_ptr<ClientWatch>& w) {
  w->client->async_read_some_unowned(w->buffer->prepare(net::read_room(*w->buffer, kReadMax)),
                                     [w](boost::system::error_code ec, size_t n) {
                                       w->reading = false;
                                       if (w->client == nullptr) return;  // the connection is gone
                                       if (!ec) w->buffer->commit(n);
                                       client_read_done(*w, ec);
                                     });
}

}  // namespace

void start_client_read(const std::shared_ptr<ClientWatch>& w) {
  if (w->reading || w->has_result || w->client == nullptr) return;
  w->reading = true;
  if (w->client->tls() || w->buffer->capacity() > 0) {
    // TLS: its layer may hold bytes the socket does not show. A buffer with storage: read into it.
    client_read_some(w);
    return;
  }
  // A plain connection's buffer takes its storage, a pooled block (net/block_pool.h), only once
  // the socket is readable: the block another connection gave back last, still in this core's
  // cache, rather than one this connection held since its last request. (Asio re-arms the
  // socket's readiness when a wait starts, so bytes or a close already there end the wait.)
  w->client->socket().async_wait(asio::ip::tcp::socket::wait_read, [w](boost::system::error_code ec) {
    if (w->client == nullptr) {  // the connection is gone
      w->reading = false;
      return;
    }
    size_t n = 0;
    if (!ec) {
      try {
        n = w->client->read_now(w->buffer->prepare(net::read_room(*w->buffer, kReadMax)), ec);
      } catch (const std::exception&) {  // no memory for the block (not thrown out of the io loop)
        ec = asio::error::no_buffer_space;
      }
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        // Readable, yet nothing to read (a readiness an earlier read already answered): the block
        // goes back and the wait starts again — unless the connection's deadline went off in
        // between, when its cancel found no operation to end.
        net::release_if_empty(*w->buffer);
        w->reading = false;
        if (w->deadline != nullptr && w->deadline->expired()) {
          client_read_done(*w, asio::error::operation_aborted);
        } else {
          start_client_read(w);
        }
        return;
      }
    }
    w->reading = false;
    if (!ec) w->buffer->commit(n);
    client_read_done(*w, ec);
  });
}

void watch_client(const std::shared_ptr<ClientWatch>& w) {
  w->active = true;
  w->gone = false;
  // Bytes already buffered (a pipelined request) mean the client is alive: nothing to watch.
  if (w->buffer->size() == 0) start_client_read(w);
}

void unwatch_client(ClientWatch& w) {
  w.active = false;
  w.upstream = nullptr;
}

// Decides the client response's framing and serialises its head into s.out. Returns whether
// the response has a body; sets *chunked.
bool Proxy::build_response_head(Session& s, Exchange& x, const upstream::Engine& engine, bool* chunked) {
  const net::ResponseHead& up = s.res;
  const unsigned version = s.req.version;
  const bool has_body = response_has_body(s.req.method, up.status);
  const auto length = s.parser->content_length();
  *chunked = false;
  if (!length && has_body) {
    if (version >= 11) {
      *chunked = true;
    } else {
      s.close_after = true;  // HTTP/1.0: the body ends when the connection does
    }
  }
  x.status = up.status;
  net::HeadBuffer& out = s.out;
  out.clear();
  net::append_status_line(out, version, up.status, up.reason);
  append_response_fields(out, up.fields, engine.label());
  if (x.prefill_upstream && x.prefill_routed != nullptr) {
    // Two legs: the usage's cached_tokens is the prefill engine's hit (vLLM passes it on), so the
    // receipt is that engine's prediction.
    net::append_field(out, kPrefillHeader, fleet_.at(*x.prefill_upstream).label());
    append_receipt(out, x.prefill_routed, *x.prefill_upstream);
  } else {
    append_receipt(out, x.routed, engine.ordinal());
  }
  if (length) {
    out.append("Content-Length: ");
    net::append_decimal(out, *length);
    out.append("\r\n");
  } else if (*chunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  }
  net::append_connection(out, version, x.keep_alive && !draining_ && !s.close_after);
  out.append("\r\n");
  return has_body;
}

// Usage accounting at the end of a complete 200 response on an inference endpoint.
void Proxy::finish_usage(Session& s, Exchange& x) {
  UsageAccumulator& usage = *s.usage;
  usage.finish();
  metrics_.usage_parse_failures.inc(usage.parse_failures());
  notify<kUsage>(&ExchangeObserver::usage, x, usage.usage());
}

// The engine's response is complete: observers hear it once per attempt (the attempt's end
// reports `failed` unless this ran).
void Proxy::engine_completed(Exchange& x, Attempt& a) {
  x.engine_done = true;
  notify<kCompleted>(&ExchangeObserver::completed, x, a.engine.ordinal());
}

// Feeds one relayed batch of body pieces to usage accounting; records the first-token time.
void Proxy::account_pieces(Session& s, Exchange& x) {
  const net::ResponseParser& p = *s.parser;
  for (size_t i = 0; i < p.piece_count(); ++i) {
    if (s.usage->feed(p.piece(i), p.is_done() && i + 1 == p.piece_count()) && x.first_token_ns == 0) {
      x.first_token_ns = clock_.now_ns();
      notify<kFirstToken>(&ExchangeObserver::first_token, x);
    }
  }
}

void Proxy::arm_upstream(net::UpstreamConnection& conn, const Exchange& x) const {
  if (!x.body_started) {
    conn.deadline.arm_at(x.first_byte_deadline);  // max: no first-byte timeout
  } else if (config_.upstream_idle_timeout.count() > 0) {
    conn.deadline.arm(config_.upstream_idle_timeout);
  } else {
    conn.deadline.disarm();
  }
}

// Why a read from the engine failed mid-response: the client left (the watch closed the
// connection), the engine went silent past its deadline, or the engine cut the response.
Proxy::RelayResult Proxy::read_failure(const Attempt& a) {
  if (a.watch.gone) return RelayResult::kClientGone;
  return a.conn.deadline.expired() ? RelayResult::kUpstreamTimeout : RelayResult::kUpstreamCut;
}

// The client-send timeout is idle-based: every write that moves bytes re-arms it, so a slow
// reader is never cut, only one that stopped.
asio::awaitable<void> Proxy::write_rest(Session& s, Exchange& x, boost::system::error_code& ec) {
  const bool timed = config_.client_send_timeout.count() > 0;
  OutBuffers& out = s.out_buffers;
  while (!out.empty() && !ec) {
    if (timed) s.deadline.arm(config_.client_send_timeout);
    const auto [write_ec, n] = co_await s.client.async_write_some(out.rest(), net::awaited);
    ec = write_ec;
    out.consume(n);
  }
  if (timed) {
    if (ec && s.deadline.expired()) x.client_send_timed_out = true;
    s.deadline.disarm();
  }
}

// Relay: the head goes out at once when no body bytes are waiting (an SSE stream still in
// prefill), otherwise with the first piece of the body, in one write. Then every read from the
// engine is written to the client before the next read (backpressure); everything already
// buffered is relayed together (several SSE events often arrive at once), as one chunk when the
// client response is chunked.
asio::awaitable<Proxy::RelayResult> Proxy::relay_body(Session& s, Exchange& x, Attempt& a) {
  net::UpstreamConnection& conn = a.conn;
  net::ResponseParser& parser = a.parser;
  OutBuffers& out = s.out_buffers;
  boost::system::error_code ec;
  const bool has_body = build_response_head(s, x, a.engine, &x.chunked);
  const bool account = is_inference(x.endpoint) && s.res.status == 200;
  x.sse = s.res.fields.get(http::field::content_type).find("text/event-stream") != std::string_view::npos;
  s.sse_tail[0] = s.sse_tail[1] = '\n';
  if (account) {
    s.usage.emplace(x.endpoint, x.sse);
    x.usage_read = &s.usage->usage();  // what was read so far, however the relay ends
  }
  x.accounted = account;
  // Phase-aware load: once a streaming response generates, the engine is decoding this
  // request, no longer reading its prompt: keep one decode unit until the end.
  const bool shrink_at_first_token = account && x.sse && config_.phase_aware_load;
  bool head_pending = true;
  if (!has_body || (conn.buffer.size() == 0 && !parser.is_done())) {
    out.clear();
    out.add(s.out);
    if (!out.send_now(s.client, ec) && !ec) co_await write_rest(s, x, ec);
    head_pending = false;
    x.head_sent = true;
  }
  parser.eager(true);
  while (!ec && has_body) {
    parser.clear_pieces();
    if (!parser.is_done()) {
      parse_buffered(conn, parser, ec);
      if (!ec && parser.piece_count() == 0 && !parser.is_done()) {
        arm_upstream(conn, x);
        auto [read_ec, n] = co_await conn.stream.async_read_some(
            conn.buffer.prepare(beast::read_size(conn.buffer, kReadMax)), net::awaited);
        ec = read_ec;
        if (ec) {
          parser.read_error(ec);
        } else {
          conn.buffer.commit(n);
          parse_buffered(conn, parser, ec);
        }
      }
      if (ec) co_return read_failure(a);
      if (parser.piece_count() == 0 && !parser.is_done()) continue;
    }
    const size_t n = parser.piece_bytes();
    if (n) x.body_started = true;
    if (parser.is_done()) {
      // The engine's work is over: observers learn it (after a 200 the overlap sources learn the
      // engine holds the prefix now, a single-flight lead ends) and its load is released, all
      // before the last bytes go out, so the client's next request (which may be decided on
      // another thread the moment those bytes arrive) sees the engine as it now is.
      engine_completed(x, a);
      a.reservation.release();
    }
    out.clear();
    if (head_pending) {
      out.add(s.out);
      head_pending = false;
      x.head_sent = true;
    }
    if (x.chunked && n) {  // one chunk carries everything relayed in this write
      char* end = std::to_chars(s.chunk_size, s.chunk_size + sizeof s.chunk_size - 2, n, 16).ptr;
      *end++ = '\r';
      *end++ = '\n';
      out.add(std::string_view(s.chunk_size, static_cast<size_t>(end - s.chunk_size)));
    }
    for (size_t i = 0; i < parser.piece_count(); ++i) out.add(parser.piece(i));
    if (x.chunked && n) out.add("\r\n");
    if (x.chunked && parser.is_done()) out.add("0\r\n\r\n");
    if (!out.empty() && !out.send_now(s.client, ec) && !ec) co_await write_rest(s, x, ec);
    // Accounting reads the pieces after they went out (they stay valid until the next read), so
    // parsing SSE events never delays the bytes on their way to the client.
    metrics_.response_body_bytes.inc(n);
    x.response_bytes += n;
    if (x.sse) {
      for (size_t i = 0; i < parser.piece_count(); ++i) remember_tail(s.sse_tail, parser.piece(i));
    }
    if (n && account) {
      const bool had_token = x.first_token_ns != 0;
      account_pieces(s, x);
      if (!had_token && x.first_token_ns != 0 && shrink_at_first_token) a.reservation.shrink_to(1);
    }
    if (ec || parser.is_done()) break;
  }
  if (ec) co_return x.client_send_timed_out ? RelayResult::kClientTimeout : RelayResult::kClientGone;
  if (!x.engine_done) engine_completed(x, a);  // no body (HEAD, 204, 304): complete with its head
  if (account) finish_usage(s, x);
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
      arm_upstream(a.conn, x);
      auto [read_ec, n] = co_await a.conn.stream.async_read_some(
          a.conn.buffer.prepare(beast::read_size(a.conn.buffer, kReadMax)), net::awaited);
      ec = read_ec;
      if (ec) {
        a.parser.read_error(ec);
      } else {
        a.conn.buffer.commit(n);
        parse_buffered(a.conn, a.parser, ec);
      }
    }
    if (ec) co_return read_failure(a);
    if (a.parser.piece_count() > 0) x.body_started = true;
    for (size_t i = 0; i < a.parser.piece_count(); ++i) body.append(a.parser.piece(i));
    if (body.size() > config_.max_models_body) {
      s.close_after = true;
      co_await send_error(s, x, 502, "upstream model list too large", "upstream_error");
      co_return RelayResult::kComplete;
    }
  }
  engine_completed(x, a);
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
  OutBuffers& out = s.out_buffers;
  out.clear();
  out.add(s.out);
  out.add(body);
  x.head_sent = true;
  if (!out.send_now(s.client, ec) && !ec) co_await write_rest(s, x, ec);
  if (ec) co_return x.client_send_timed_out ? RelayResult::kClientTimeout : RelayResult::kClientGone;
  co_return RelayResult::kComplete;
}

Proxy::ErrorEnding Proxy::settle_relay(Session& s, Exchange& x, Attempt& a, RelayResult r) {
  const size_t u = a.engine.ordinal();
  const size_t ep = ep_index(x.endpoint);
  a.watch.upstream = nullptr;
  const int64_t now = clock_.now_ns();
  metrics_.request_duration.observe(static_cast<double>(now - x.start_ns) / 1e9);
  if (r == RelayResult::kComplete) x.end_ns = now;  // the exchange ends here (one clock read less)
  switch (r) {
    case RelayResult::kComplete:
      x.result = "complete";
      if (x.status < 500) fleet_.on_success(u);  // a relayed 5xx was counted as a failure at its head
      if (!x.counted) metrics_.count_request(x.endpoint, x.stream_kind, x.status);
      x.counted = true;
      return {};
    case RelayResult::kClientGone:
      x.result = "client_disconnect";
      metrics_.client_disconnects[ep].inc();
      metrics_.count_request(x.endpoint, x.stream_kind, 499);
      s.close_after = true;
      return {};
    case RelayResult::kClientTimeout:
      // The client stopped reading: its stream, engine slot and reservation are released.
      x.result = "client_timeout";
      metrics_.timeouts[ep][static_cast<size_t>(Timeout::kClientSend)].inc();
      metrics_.count_request(x.endpoint, x.stream_kind, 499);
      s.close_after = true;
      return {};
    case RelayResult::kUpstreamCut:
      x.result = "upstream_read_error";
      metrics_.upstream_errors[ep][static_cast<size_t>(UpstreamError::kReadError)].inc();
      fleet_.on_failure(u, upstream::Failure::kCut);
      return {502, "the engine closed the connection before the response was complete", "upstream_error"};
    case RelayResult::kUpstreamTimeout: {
      const Timeout why = x.body_started ? Timeout::kUpstreamIdle : Timeout::kFirstByte;
      x.result = "upstream_timeout";
      metrics_.timeouts[ep][static_cast<size_t>(why)].inc();
      fleet_.on_failure(u, upstream::Failure::kTimeout);
      return {504,
              why == Timeout::kUpstreamIdle ? "the engine sent nothing for RJ_UPSTREAM_IDLE_TIMEOUT_MS"
                                            : "the engine sent no response within RJ_UPSTREAM_FIRST_BYTE_TIMEOUT_MS",
              "upstream_timeout"};
    }
  }
  return {};
}

// Ends a response that cannot complete, counted with `status`, not 200. Before its head went out
// the client gets an ordinary JSON error (and the connection stays usable); after it, an SSE
// stream stopped between events gets an `error` event (with the `type` Anthropic's clients read
// and the `error` object OpenAI's read) and its last chunk, and the connection closes.
asio::awaitable<void> Proxy::end_with_error(Session& s, Exchange& x, unsigned status, std::string_view message,
                                            std::string_view type) {
  if (!x.head_sent) {
    co_await send_error(s, x, status, message, type);
    co_return;
  }
  s.close_after = true;
  if (!x.counted) metrics_.count_request(x.endpoint, x.stream_kind, status);
  x.counted = true;
  // (A stream framed with CRLF line ends counts as cut mid-event: it just closes.)
  const bool between_events = s.sse_tail[0] == '\n' && s.sse_tail[1] == '\n';
  if (!x.sse || !x.chunked || !between_events) co_return;  // the cut framing tells the client
  std::string event = "event: error\ndata: {\"type\":\"error\",";
  event += std::string_view(error_json(message, type, static_cast<int>(status))).substr(1);
  event += "\n\n";
  std::string frame;
  char size[20];
  frame.append(size, std::to_chars(size, size + sizeof size, event.size(), 16).ptr);
  frame += "\r\n";
  frame += event;
  frame += "\r\n0\r\n\r\n";
  OutBuffers& out = s.out_buffers;
  out.clear();
  out.add(frame);
  boost::system::error_code ec;
  if (!out.send_now(s.client, ec) && !ec) co_await write_rest(s, x, ec);
}

}  // namespace ramjet::request
