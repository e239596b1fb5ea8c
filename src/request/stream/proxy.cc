// The client side of the data plane: connection loop, limits and timeouts, local answers.
#include "request/stream/proxy.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

#include <openssl/err.h>

#include "common/log.h"
#include "request/stream/session.h"

namespace ramjet::request {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// A request body buffer larger than this is not kept for the connection's next request.
constexpr size_t kKeepBodyCapacity = 1 << 20;
constexpr std::string_view kWwwAuthenticate = "WWW-Authenticate: Bearer";

}  // namespace

// --- OutBuffers ------------------------------------------------------------------------------

bool OutBuffers::send_now(net::Stream& stream, boost::system::error_code& ec) {
  ec = {};
  while (left_ != 0) {
    const size_t n = stream.write_some(std::span<const iovec>(iov_.data() + first_, count_ - first_), ec);
    if (ec) {
      if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
      return false;
    }
    consume(n);
  }
  return true;
}

std::span<const boost::asio::const_buffer> OutBuffers::rest() {
  for (size_t i = first_; i < count_; ++i) rest_[i] = boost::asio::const_buffer(iov_[i].iov_base, iov_[i].iov_len);
  return {rest_.data() + first_, count_ - first_};
}

void OutBuffers::consume(size_t n) {
  if (n >= left_) {  // all of it (the usual case)
    first_ = count_;
    left_ = 0;
    return;
  }
  left_ -= n;
  while (n > 0) {
    iovec& b = iov_[first_];
    if (n < b.iov_len) {
      b.iov_base = static_cast<char*>(b.iov_base) + n;
      b.iov_len -= n;
      break;
    }
    n -= b.iov_len;
    ++first_;
  }
}

// --- Session ---------------------------------------------------------------------------------

Proxy::Session::Session(tcp::socket s)
    : client(std::move(s)), deadline(client.socket()), watch(std::make_shared<ClientWatch>()) {
  watch->client = &client;
  watch->buffer = &buffer;
  watch->deadline = &deadline;
  boost::system::error_code ignored;
  client.socket().non_blocking(true, ignored);
}

Proxy::Session::~Session() {
  watch->client = nullptr;
  watch->buffer = nullptr;
  watch->deadline = nullptr;
  watch->active = false;
  watch->upstream = nullptr;
  watch->waiter.reset();
}

// --- Proxy -----------------------------------------------------------------------------------

Proxy::Proxy(ProxyConfig config, upstream::Fleet& fleet, route::Router& router, net::IoPool& io,
             net::PoolSet& pools, const Clock& clock, net::DrainGate& gate)
    : config_(std::move(config)),
      fleet_(fleet),
      router_(router),
      io_(io),
      pools_(pools),
      clock_(clock),
      gate_(gate),
      metrics_(fleet.size()),
      idle_(io.size(), nullptr),
      waiting_(io.size(), std::vector<Session*>(fleet.size(), nullptr)),
      budget_(config_.max_buffered_bytes) {
  config_.prepare.fingerprint = router_.uses_prefix();
  max_host_header_ = config_.max_engine_prefix_bytes;
  for (size_t i = 0; i < fleet.size(); ++i) {
    if (auto m = fleet.member(i)) {
      max_host_header_ = std::max(max_host_header_, m->url.host_header().size() + m->url.base_path.size());
    }
  }
  metrics_.budget = &budget_;
  metrics_observer_ = std::make_unique<ExchangeMetrics>(metrics_, clock_, router_.uses_prefix());
  add_observer(metrics_observer_.get());
  fleet_.set_fence_listener([this](size_t engine) { on_engine_fenced(engine); });
  fleet_.set_unresponsive_listener([this](size_t engine) { on_engine_unresponsive(engine); });
}

Proxy::~Proxy() {
  fleet_.set_fence_listener(nullptr);
  fleet_.set_unresponsive_listener(nullptr);
}

void Proxy::set_idle(Session& s, bool idle) {
  if (s.idle == idle) return;
  if (idle) {
    Session::push<&Session::idle_links>(idle_[s.thread], s);
  } else {
    Session::unlink<&Session::idle_links>(idle_[s.thread], s);
  }
  s.idle = idle;
}

void Proxy::begin_drain() {
  draining_ = true;
  for (size_t t = 0; t < io_.size(); ++t) {
    asio::post(io_.at(t), [this, t] {
      for (Session* s = idle_[t]; s != nullptr; s = s->idle_links.next) {
        boost::system::error_code ignored;
        s->client.socket().cancel(ignored);
      }
    });
  }
}

namespace {

// A bare JSON response for requests rejected before they were fully read; always closes.
asio::awaitable<void> reject_json(net::Stream& client, net::HeadBuffer& out, net::Deadline& deadline,
                                  unsigned status, std::string_view body, std::string_view extra_field = {}) {
  out.clear();
  net::append_status_line(out, 11, status, "");
  net::append_field(out, "Content-Type", "application/json");
  net::append_field(out, "Connection", "close");
  if (!extra_field.empty()) {
    out.append(extra_field);
    out.append("\r\n");
  }
  out.append("Content-Length: ");
  net::append_decimal(out, body.size());
  out.append("\r\n\r\n");
  out.append(body);
  deadline.arm(std::chrono::seconds(5));
  co_await asio::async_write(client, asio::buffer(out.data(), out.size()), net::awaited);
  deadline.disarm();
}

// The same with an OpenAI-style error body.
asio::awaitable<void> reject(net::Stream& client, net::HeadBuffer& out, net::Deadline& deadline,
                             unsigned status, std::string_view message, std::string_view type,
                             std::string_view extra_field = {}) {
  const std::string body = error_json(message, type, static_cast<int>(status));
  co_await reject_json(client, out, deadline, status, body, extra_field);
}

// RJ_API_KEYS_FILE: whether a request must present a key. ramjet's own GET /health (liveness
// probes) and CORS preflights (browsers never send credentials with them) need none.
bool needs_key(const net::RequestHead& req, Endpoint endpoint) {
  if (endpoint == Endpoint::kHealth) return false;
  return !(req.method == http::verb::options && !req.fields.get(http::field::access_control_request_method).empty());
}

// After a 401 the connection closes with the request's body unread. Closing a socket with unread
// bytes sends a reset, which can destroy the 401 before the client read it (an SDK would then
// retry a connection error): stop sending, then read and drop what the client still sends, for
// a bounded while (nginx's lingering close), so the close is a FIN.
asio::awaitable<void> linger(net::Stream& client, net::PooledBuffer& sink, net::Deadline& deadline) {
  boost::system::error_code ec;
  client.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  deadline.arm(std::chrono::seconds(2));
  for (size_t dropped = 0; dropped < (size_t{4} << 20);) {
    sink.clear();
    const auto [read_ec, n] = co_await client.async_read_some(sink.prepare(kReadMax), net::awaited);
    if (read_ec) break;
    dropped += n;
  }
  deadline.disarm();
}

// The first x-api-key value (Anthropic SDKs), or "".
std::string_view x_api_key(const net::HeadFields& fields) { return fields.find("x-api-key").value_or(""); }

bool is_quiet_close(const boost::system::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::operation_aborted;
}

}  // namespace

asio::awaitable<void> Proxy::serve(tcp::socket socket) {
  net::DrainGate::Hold hold = gate_.enter();
  if (!hold) co_return;  // shutting down: the socket closes with this frame
  Session s(std::move(socket));
  s.thread = net::IoPool::current_index();
  if (s.thread >= io_.size()) s.thread = 0;
  if (config_.tls != nullptr) {
    // HTTPS: the handshake is part of reading the first request's head (its timeout covers a
    // client that connects and says nothing). A failed one is counted and closed without a word.
    s.client.start_tls(config_.tls->current());
    boost::system::error_code ec;
    s.deadline.arm(config_.header_timeout);
    co_await s.client.tls_layer().async_handshake(asio::ssl::stream_base::server,
                                                  asio::redirect_error(asio::use_awaitable, ec));
    s.deadline.disarm();
    if (ec) {
      config_.tls->count_handshake_failure(net::ServerTls::Listener::kApi);
      ERR_clear_error();
      co_return;
    }
  }
  struct NotIdle {
    Proxy& p;
    Session& s;
    ~NotIdle() { p.set_idle(s, false); }
  } not_idle{*this, s};

  // Reads more bytes from the client into s.buffer. End of stream is reported as Beast did:
  // end_of_stream before any byte of the message, else whatever put_eof() says.
  auto read_more = [&s](net::RequestParser& parser, boost::system::error_code& ec) -> asio::awaitable<void> {
    auto [read_ec, n] =
        co_await s.client.async_read_some(s.buffer.prepare(net::read_room(s.buffer, kReadMax)), net::awaited);
    ec = read_ec;
    if (ec == asio::error::eof) {
      parser.read_error(ec);
      if (!ec) ec = http::error::end_of_stream;  // a request cannot end with the connection: closed
      co_return;
    }
    if (!ec) s.buffer.commit(n);
  };

  try {
    bool first = true;
    ClientWatch& w = *s.watch;
    for (;;) {
      boost::system::error_code ec;
      if (w.has_result) {  // the client read finished while the last exchange was forwarded
        w.has_result = false;
        if (w.result) break;  // closed or reset (its bytes, if any, are in s.buffer)
      }
      if (s.buffer.size() == 0) {
        // Wait for the next request; an idle keep-alive connection closes quietly.
        if (draining_) break;
        set_idle(s, true);
        s.deadline.arm(first ? config_.header_timeout : config_.keepalive_timeout);
        // The read may already be pending (started while the last exchange was forwarded).
        start_client_read(s.watch);
        if (!w.has_result) {
          co_await asio::async_initiate<const asio::deferred_t&, void()>(
              [&w](auto handler) { w.waiter.emplace(std::move(handler)); }, asio::deferred);
        }
        set_idle(s, false);
        w.has_result = false;
        if (w.result) break;
      }
      first = false;

      net::RequestParser parser(s.req, s.body);
      parser.header_limit(config_.max_header_bytes);
      parser.body_limit(config_.max_body_bytes);
      bool expired = false;
      {
        // The parser reads the head once it is whole, within RJ_MAX_HEADER_BYTES.
        s.deadline.arm(config_.header_timeout);
        for (;;) {
          if (s.buffer.size() > 0) {
            size_t used = parser.put(s.buffer.data(), ec);
            s.buffer.consume(used);
            if (ec == http::error::need_more) ec = {};
            if (ec || parser.is_header_done()) break;
          }
          if (s.deadline.expired()) {
            ec = asio::error::operation_aborted;
            break;
          }
          co_await read_more(parser, ec);
          if (ec) break;
        }
        expired = s.deadline.expired();
      }
      if (ec) {
        s.deadline.disarm();
        if (ec == http::error::body_limit) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBodyTooLarge)].inc();
          co_await reject(s.client, s.out, s.deadline, 413, "request body too large", "invalid_request_error");
        } else if (expired) {
          metrics_.rejections[static_cast<size_t>(Rejection::kHeaderTimeout)].inc();
          co_await reject(s.client, s.out, s.deadline, 408, "request header timeout", "timeout_error");
        } else if (ec == http::error::header_limit) {
          metrics_.rejections[static_cast<size_t>(Rejection::kHeaderTooLarge)].inc();
          co_await reject(s.client, s.out, s.deadline, 431, "request header fields too large", "invalid_request_error");
        } else if (!is_quiet_close(ec)) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBadRequest)].inc();
          co_await reject(s.client, s.out, s.deadline, 400, "malformed HTTP request", "invalid_request_error");
        }
        break;
      }
      // Classified once; the key is checked before anything else is read, parsed or routed. A
      // refused request's connection closes (its body, if any, is never read).
      const Endpoint endpoint = classify(s.req.method_string, s.req.target, config_.served);
      s.authenticated = false;
      s.key_name.clear();
      if (config_.api_keys != nullptr && needs_key(s.req, endpoint)) {
        const ApiKeys::Outcome auth = config_.api_keys->check(s.req.fields.get(http::field::authorization),
                                                              x_api_key(s.req.fields), &s.key_name);
        s.authenticated = auth == ApiKeys::Outcome::kAccepted;
        if (auth != ApiKeys::Outcome::kAccepted) {
          s.deadline.disarm();
          const std::string_view body = ApiKeys::error_body(auth);
          co_await reject_json(s.client, s.out, s.deadline, 401, body, kWwwAuthenticate);
          co_await linger(s.client, s.buffer, s.deadline);
          break;
        }
      }
      if (parser.content_length() && *parser.content_length() > config_.max_body_bytes) {
        s.deadline.disarm();
        metrics_.rejections[static_cast<size_t>(Rejection::kBodyTooLarge)].inc();
        co_await reject(s.client, s.out, s.deadline, 413, "request body too large", "invalid_request_error");
        break;
      }
      // The body's bytes come out of RJ_MAX_BUFFERED_BYTES before they are read (a chunked one
      // as it grows): past it, 503 and Retry-After rather than more memory. An inference body is
      // counted twice: preparing it parses it into a document about as large.
      const uint64_t weight = is_inference(endpoint) ? 2 : 1;
      if (parser.content_length() && !s.body_lease.grow_to(budget_, weight * *parser.content_length())) {
        s.deadline.disarm();
        metrics_.rejections[static_cast<size_t>(Rejection::kBufferFull)].inc();
        co_await reject(s.client, s.out, s.deadline, 503, kBusyMessage, "server_busy", kRetryAfter);
        break;
      }
      if (beast::iequals(s.req.fields.get(http::field::expect), "100-continue")) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        ec = std::get<0>(co_await asio::async_write(s.client, asio::buffer(kContinue.data(), kContinue.size()), net::awaited));
        if (ec) break;
      }
      if (!parser.is_done()) {
        s.deadline.arm(config_.body_timeout);
        parser.eager(true);
        for (;;) {
          if (s.buffer.size() > 0) {
            size_t used = parser.put(s.buffer.data(), ec);
            s.buffer.consume(used);
            if (ec == http::error::need_more) ec = {};
            if (!ec && weight * s.body.size() > s.body_lease.bytes() &&
                !s.body_lease.grow_to(budget_, weight * (s.body.size() + kReadMax))) {
              ec = http::error::buffer_overflow;  // a chunked body outgrew the budget
            }
            if (ec || parser.is_done()) break;
          }
          if (s.deadline.expired()) {
            ec = asio::error::operation_aborted;
            break;
          }
          co_await read_more(parser, ec);
          if (ec) break;
        }
        expired = s.deadline.expired();
      }
      s.deadline.disarm();
      if (ec) {
        if (ec == http::error::body_limit) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBodyTooLarge)].inc();
          co_await reject(s.client, s.out, s.deadline, 413, "request body too large", "invalid_request_error");
        } else if (ec == http::error::buffer_overflow) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBufferFull)].inc();
          co_await reject(s.client, s.out, s.deadline, 503, kBusyMessage, "server_busy", kRetryAfter);
        } else if (expired) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBodyTimeout)].inc();
          co_await reject(s.client, s.out, s.deadline, 408, "request body timeout", "timeout_error");
        } else if (!is_quiet_close(ec)) {
          metrics_.rejections[static_cast<size_t>(Rejection::kBadRequest)].inc();
          co_await reject(s.client, s.out, s.deadline, 400, "malformed HTTP request body", "invalid_request_error");
        }
        break;
      }

      // The request is parsed: its block goes back to the pool unless a pipelined request's bytes
      // follow (the watch takes one again when the socket is readable).
      net::release_if_empty(s.buffer);
      Exchange x;
      x.keep_alive = parser.keep_alive();
      x.endpoint = endpoint;
      x.start_ns = clock_.now_ns();
      if (x.endpoint == Endpoint::kHealth) {
        unsigned status = fleet_.healthy_count() > 0 ? 200 : 503;
        co_await send_local(s, x, status, "application/json", fleet_.health_json());
      } else if (x.endpoint == Endpoint::kUnknown) {
        co_await answer_unserved(s, x);
      } else {
        co_await forward(s, x);
      }
      // The body is gone; so is its share of the budget, and a large buffer with it.
      s.body_lease.release();
      if (s.body.capacity() > kKeepBodyCapacity) std::string().swap(s.body);
      if (!x.keep_alive || s.close_after || draining_) break;
    }
  } catch (const std::exception& e) {
    spdlog::error("connection handler failed: {}", log::json_escape(e.what()));
  }
  boost::system::error_code ignored;
  s.client.socket().shutdown(tcp::socket::shutdown_send, ignored);
  s.client.close(ignored);
  // A read the client watch left pending (the exchange ended, then the loop did) completes,
  // aborted by the close, before the session goes: under TLS its completion still runs inside
  // the TLS stream, which must outlive it.
  if (s.watch->reading) {
    ClientWatch& w = *s.watch;
    co_await asio::async_initiate<const asio::deferred_t&, void()>(
        [&w](auto handler) { w.waiter.emplace(std::move(handler)); }, asio::deferred);
  }
}

asio::awaitable<void> Proxy::send_local(Session& s, Exchange& x, unsigned status,
                                        std::string_view content_type, std::string_view body,
                                        std::string_view extra_field) {
  const bool head = s.req.method == http::verb::head;
  s.out.clear();
  net::append_status_line(s.out, s.req.version, status, "");
  net::append_field(s.out, "Content-Type", content_type);
  if (!extra_field.empty()) {
    s.out.append(extra_field);
    s.out.append("\r\n");
  }
  net::append_connection(s.out, s.req.version, x.keep_alive && !draining_ && !s.close_after);
  s.out.append("Content-Length: ");
  net::append_decimal(s.out, head ? 0 : body.size());
  s.out.append("\r\n\r\n");
  if (!head) s.out.append(body);
  // ramjet's own answers on the API's endpoints count with the bytes it relays.
  if (!head && (is_inference(x.endpoint) || x.endpoint == Endpoint::kModels)) metrics_.response_body_bytes.inc(body.size());
  x.status = status;
  if (!x.counted) metrics_.count_request(x.endpoint, x.stream_kind, status);
  x.counted = true;
  boost::system::error_code ec;
  OutBuffers& out = s.out_buffers;
  out.clear();
  out.add(s.out);
  if (!out.send_now(s.client, ec) && !ec) co_await write_rest(s, x, ec);
  x.head_sent = true;
  if (ec) s.close_after = true;
}

asio::awaitable<void> Proxy::send_error(Session& s, Exchange& x, unsigned status,
                                        std::string_view message, std::string_view type,
                                        std::string_view extra_field) {
  // Each API's own error shape: Anthropic's for /v1/messages, OpenAI's (as vLLM writes it) else.
  const std::string body = x.endpoint == Endpoint::kMessages ? anthropic_error_json(message, static_cast<int>(status))
                                                             : error_json(message, type, static_cast<int>(status));
  co_await send_local(s, x, status, "application/json", body, extra_field);
}

// A path the API port does not serve: 405 with Allow when the path is served with other
// methods, else 404. An engine's admin and debug endpoints land here.
asio::awaitable<void> Proxy::answer_unserved(Session& s, Exchange& x) {
  const std::string_view allow = allowed_methods(s.req.target, config_.served);
  if (allow.empty()) {
    metrics_.rejections[static_cast<size_t>(Rejection::kUnknownPath)].inc();
    co_await send_error(s, x, 404,
                        "unknown path: this server serves /v1/chat/completions, /v1/completions, /v1/responses, "
                        "/v1/messages, /v1/models and /health",
                        "invalid_request_error");
    co_return;
  }
  metrics_.rejections[static_cast<size_t>(Rejection::kMethodNotAllowed)].inc();
  const std::string field = "Allow: " + std::string(allow);
  co_await send_error(s, x, 405, "method not allowed for this path", "invalid_request_error", field);
}

}  // namespace ramjet::request
