#include "net/client.h"

#include <sys/socket.h>
#include <time.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

#include <openssl/err.h>

#include "net/http.h"
#include "net/tls.h"

namespace ramjet::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// Closes a socket when the deadline passes, so whatever is pending on it fails at once; fired()
// tells a timeout from other failures. Disarmed on destruction.
class SocketTimeout {
 public:
  SocketTimeout(tcp::socket& socket, std::chrono::milliseconds after)
      : state_(std::make_shared<State>()), timer_(socket.get_executor()) {
    timer_.expires_after(after);
    timer_.async_wait([st = state_, &socket](boost::system::error_code ec) {
      if (ec || !st->armed) return;
      st->fired = true;
      boost::system::error_code ignored;
      socket.close(ignored);
    });
  }
  ~SocketTimeout() {
    state_->armed = false;
    timer_.cancel();
  }
  SocketTimeout(const SocketTimeout&) = delete;
  SocketTimeout& operator=(const SocketTimeout&) = delete;
  bool fired() const { return state_->fired; }

 private:
  struct State {
    bool armed = true;
    bool fired = false;
  };
  std::shared_ptr<State> state_;
  asio::steady_timer timer_;
};

// True when the peer has not closed the idle connection and sent nothing unexpected.
bool looks_open(UpstreamConnection& c) {
  char byte;
  ssize_t n = ::recv(c.stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return false;                                     // orderly close
  if (n > 0) return false;                                      // unsolicited bytes: unusable
  return errno == EAGAIN || errno == EWOULDBLOCK;               // nothing to read: still open
}

// The TLS handshake of a connection to an https:// engine, under the connect's deadline.
// Verification failures are typed and counted on the engine's TlsTarget, never logged with the
// certificate or the host.
asio::awaitable<bool> handshake(UpstreamConnection& conn, const config::UpstreamUrl& url,
                                const SocketTimeout& deadline, ConnectFailure& failure) {
  UpstreamTls& tls = UpstreamTls::instance();
  TlsTarget& target = tls.target(url.host, url.port);
  conn.stream.start_tls(tls.context());
  SSL* ssl = conn.stream.tls_layer().native_handle();
  if (!tls.prepare(ssl, url.server_name(), target)) {
    ERR_clear_error();
    target.count_failure(TlsFailure::kHandshake);
    failure = ConnectFailure::kTls;
    co_return false;
  }
  boost::system::error_code ec;
  co_await conn.stream.tls_layer().async_handshake(asio::ssl::stream_base::client,
                                                    asio::redirect_error(asio::use_awaitable, ec));
  if (!ec && deadline.fired()) ec = asio::error::timed_out;
  if (ec) {
    if (deadline.fired()) {
      failure = ConnectFailure::kTimeout;
    } else if (ec == asio::error::operation_aborted) {
      failure = ConnectFailure::kCancelled;
    } else {
      failure = ConnectFailure::kTls;
      target.count_failure(classify_tls_failure(ssl));
      target.forget();  // a session the engine no longer takes must not be offered again
    }
    ERR_clear_error();
    co_return false;
  }
  target.count_handshake(SSL_session_reused(ssl) == 1);
  co_return true;
}
}  // namespace

ConnectionPtr IdlePool::take(int64_t now_ms, uint64_t incarnation, bool ask) {
  while (!idle_.empty()) {
    ConnectionPtr c = std::move(idle_.back());
    idle_.pop_back();
    if (c->incarnation != incarnation || !c->stream.is_open()) continue;
    if ((ask || now_ms - c->idle_since_ms >= kIdleCheckAfterMs) && !looks_open(*c)) continue;
    c->reused = true;
    return c;
  }
  return nullptr;
}

void IdlePool::put(ConnectionPtr c, int64_t now_ms) {
  if (!c || idle_.size() >= max_idle_ || !c->stream.is_open() || c->buffer.size() != 0) return;
  c->idle_since_ms = now_ms;
  idle_.push_back(std::move(c));
}

PoolSet::PoolSet(size_t threads, size_t engines, size_t max_idle) {
  pools_.resize(threads);
  for (auto& row : pools_) {
    row.reserve(engines);
    for (size_t i = 0; i < engines; ++i) row.emplace_back(max_idle);
  }
}

asio::awaitable<ConnectionPtr> connect(const config::UpstreamUrl& url,
                                       std::chrono::milliseconds timeout, ConnectFailure& failure,
                                       UpstreamConnection** out) {
  auto ex = co_await asio::this_coro::executor;
  failure = ConnectFailure::kNone;
  auto conn = std::make_unique<UpstreamConnection>(ex);
  if (out) *out = conn.get();
  boost::system::error_code ec;
  tcp::socket& sock = conn->stream.socket();
  SocketTimeout deadline(sock, timeout);
  // IP literals skip the resolver (Asio resolves on a helper thread: a thread hop per connect).
  auto address = asio::ip::make_address(url.host, ec);
  if (!ec) {
    co_await sock.async_connect(tcp::endpoint(address, url.port), asio::redirect_error(asio::use_awaitable, ec));
  } else {
    ec = {};
    tcp::resolver resolver(ex);
    auto results = co_await resolver.async_resolve(url.host, std::to_string(url.port),
                                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec || results.empty()) {
      failure = deadline.fired() ? ConnectFailure::kTimeout : ConnectFailure::kConnect;
      co_return nullptr;
    }
    for (const auto& entry : results) {
      if (deadline.fired()) break;
      boost::system::error_code ignored;
      sock.close(ignored);
      co_await sock.async_connect(entry.endpoint(), asio::redirect_error(asio::use_awaitable, ec));
      if (!ec || ec == asio::error::operation_aborted) break;
    }
  }
  if (!ec && deadline.fired()) ec = asio::error::timed_out;
  if (ec) {
    failure = deadline.fired()                        ? ConnectFailure::kTimeout
              : ec == asio::error::operation_aborted ? ConnectFailure::kCancelled
                                                     : ConnectFailure::kConnect;
    co_return nullptr;
  }
  sock.set_option(tcp::no_delay(true), ec);
  // Asio registered the socket for writability to complete the connect, and would keep
  // EPOLLOUT for good: every ACK from the engine would then be an event to process. The
  // request path writes synchronously first, so re-register the connected socket for reads.
  const tcp::endpoint local = sock.local_endpoint(ec);
  if (!ec) {
    auto fd = sock.release(ec);
    if (!ec) sock.assign(local.protocol(), fd, ec);
    if (ec) {
      failure = ConnectFailure::kConnect;
      co_return nullptr;
    }
  }
  sock.non_blocking(true, ec);
  if (url.tls) {
    const bool ok = co_await handshake(*conn, url, deadline, failure);
    if (!ok) co_return nullptr;
  }
  co_return conn;
}

namespace {

// One request on a fresh connection (Connection: close), whole exchange under one deadline.
template <class Body>
asio::awaitable<SimpleResponse> simple_exchange(const config::UpstreamUrl& url,
                                                http::request<Body> req, std::string bearer,
                                                std::chrono::milliseconds timeout, size_t max_body,
                                                GetFailure& failure) {
  SimpleResponse out;
  ConnectFailure cf;
  auto conn = co_await connect(url, timeout, cf);
  if (!conn) {
    failure = cf == ConnectFailure::kTimeout ? GetFailure::kTimeout
              : cf == ConnectFailure::kTls   ? GetFailure::kTls
                                             : GetFailure::kConnect;
    co_return out;
  }
  req.set(http::field::host, url.host_header());
  req.set(http::field::user_agent, "ramjet");
  req.set(http::field::connection, "close");
  if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
  req.prepare_payload();
  boost::system::error_code ec;
  // The answer is read as the data plane reads an engine's (net::ResponseParser, held to Beast's
  // parser): an engine that trickles or garbles it gets the same reading on every path.
  ResponseHead head;
  ResponseParser parser(head);
  parser.body_limit(max_body);
  parser.eager(true);
  bool timed_out = false;
  {
    SocketTimeout deadline(conn->stream.socket(), timeout);
    co_await http::async_write(conn->stream, req, asio::redirect_error(asio::use_awaitable, ec));
    while (!ec) {
      if (conn->buffer.size() > 0) {
        conn->buffer.consume(parser.put_into(conn->buffer.data(), out.body, ec));
        if (ec == http::error::need_more) ec = {};
        if (ec || parser.is_done()) break;
      }
      const size_t n = co_await conn->stream.async_read_some(conn->buffer.prepare(16 * 1024),
                                                             asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        parser.read_error(ec);  // the end of stream ends a close-delimited answer
        break;
      }
      conn->buffer.commit(n);
    }
    timed_out = deadline.fired();
  }
  boost::system::error_code ignored;
  conn->stream.close(ignored);
  if (ec || timed_out) {
    failure = timed_out                         ? GetFailure::kTimeout
              : ec == http::error::body_limit   ? GetFailure::kTooLarge
                                                : GetFailure::kProtocol;
    if (!timed_out && conn->stream.tls_error(ec)) {
      // A TLS alert after the handshake: under TLS 1.3 a server that wants a client certificate
      // (mTLS) refuses it only once our first record arrives.
      failure = GetFailure::kTls;
      UpstreamTls::instance().target(url.host, url.port).count_failure(TlsFailure::kHandshake);
      ERR_clear_error();
    }
    out.body.clear();
    co_return out;
  }
  failure = GetFailure::kNone;
  out.status = head.status;
  co_return out;
}

}  // namespace

asio::awaitable<SimpleResponse> simple_get(const config::UpstreamUrl& url, std::string path,
                                           std::string bearer, std::chrono::milliseconds timeout,
                                           size_t max_body, GetFailure& failure) {
  http::request<http::empty_body> req{http::verb::get, url.base_path + path, 11};
  co_return co_await simple_exchange(url, std::move(req), std::move(bearer), timeout, max_body, failure);
}

asio::awaitable<SimpleResponse> simple_post(const config::UpstreamUrl& url, std::string path,
                                            std::string json_body, std::string bearer,
                                            std::chrono::milliseconds timeout, size_t max_body,
                                            GetFailure& failure, std::optional<uint32_t> dp_rank) {
  http::request<http::string_body> req{http::verb::post, url.base_path + path, 11};
  req.set(http::field::content_type, "application/json");
  if (dp_rank) req.set("X-Data-Parallel-Rank", std::to_string(*dp_rank));
  req.body() = std::move(json_body);
  co_return co_await simple_exchange(url, std::move(req), std::move(bearer), timeout, max_body, failure);
}

bool run_to_completion(asio::io_context& io, asio::awaitable<SimpleResponse> op, SimpleResponse& out,
                       GetFailure& failure, const std::atomic<bool>* abandon) {
  bool done = false;
  asio::co_spawn(io, std::move(op), [&](std::exception_ptr e, SimpleResponse r) {
    done = true;
    if (e) failure = GetFailure::kProtocol;
    else out = std::move(r);
  });
  io.restart();
  // A stop() from another thread before the restart above would be undone by it: the flag is
  // read after it (a stop() after the restart makes run() return at once).
  if (abandon && abandon->load(std::memory_order_acquire)) return false;
  io.run();
  return done;
}

}  // namespace ramjet::net
