#include "net/listener.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <utility>

#include "common/fd.h"
#include "common/log.h"

namespace ramjet::net {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

Result<std::unique_ptr<Listener>> Listener::bind(IoPool& pool, const std::string& host,
                                                 uint16_t port, ConnectionHandler handler) {
  boost::system::error_code ec;
  tcp::resolver resolver(pool.at(0));
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty()) return Error{"resolve", "cannot resolve listen address: " + ec.message()};
  tcp::endpoint ep = results.begin()->endpoint();
  tcp::acceptor acceptor(pool.at(0));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Error{"bind", "cannot listen on port " + std::to_string(port) + ": " + ec.message()};
  return std::make_unique<Listener>(pool, std::move(acceptor), std::move(handler));
}

Listener::Listener(IoPool& pool, tcp::acceptor acceptor, ConnectionHandler handler)
    : pool_(pool), acceptor_(std::move(acceptor)), handler_(std::move(handler)) {}

tcp::endpoint Listener::local_endpoint() const {
  boost::system::error_code ec;
  return acceptor_.local_endpoint(ec);
}

void Listener::start() { asio::co_spawn(acceptor_.get_executor(), accept_loop(), asio::detached); }

void Listener::close() {
  asio::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
  });
}

asio::awaitable<void> Listener::accept_loop() {
  asio::execution_context* const own = &asio::query(acceptor_.get_executor(), asio::execution::context);
  boost::system::error_code ec;
  const tcp::endpoint bound = acceptor_.local_endpoint(ec);
  if (ec) {
    spdlog::error("listener: no local endpoint: {}", ec.message());
    co_return;
  }
  const tcp protocol = bound.protocol();
  for (;;) {
    tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      // EMFILE and friends: back off briefly instead of spinning.
      spdlog::warn("accept failed: {}", ec.message());
      asio::steady_timer t(acceptor_.get_executor(), std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    auto& ctx = pool_.next();
    if (static_cast<asio::execution_context*>(&ctx) == own) {
      asio::co_spawn(ctx, handler_(std::move(socket)), asio::detached);
      continue;
    }
    // Each io context's reactor is touched only from its own thread (IoPool's concurrency hint
    // leaves its per-socket state unlocked): the connection is registered on its thread, not here.
    // An accepted connection's descriptor on its way to its thread: closed if it never gets
    // there (a posted hand-off destroyed unrun when the io contexts go).
    UniqueFd fd{socket.release(ec)};
    if (ec) continue;
    asio::post(ctx, [&ctx, protocol, fd = std::move(fd), handler = handler_]() mutable {
      boost::system::error_code ec;
      tcp::socket s(ctx);
      s.assign(protocol, fd.get(), ec);
      if (ec) return;  // fd closes it
      fd.release();
      asio::co_spawn(ctx, handler(std::move(s)), asio::detached);
    });
  }
}

}  // namespace ramjet::net
