// net/listener: one acceptor that hands each accepted socket to the next io thread.
// The handler coroutine owns the connection from then on.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <functional>
#include <memory>
#include <string>

#include "common/result.h"
#include "net/io_pool.h"

namespace ramjet::net {

using ConnectionHandler = std::function<boost::asio::awaitable<void>(boost::asio::ip::tcp::socket)>;

class Listener {
 public:
  // Binds and listens immediately (so the bound port is known); accepting starts with start().
  static Result<std::unique_ptr<Listener>> bind(IoPool& pool, const std::string& host,
                                                uint16_t port, ConnectionHandler handler);
  Listener(IoPool& pool, boost::asio::ip::tcp::acceptor acceptor, ConnectionHandler handler);

  boost::asio::ip::tcp::endpoint local_endpoint() const;
  void start();
  void close();  // stop accepting (thread-safe: posted to the acceptor's thread)

 private:
  boost::asio::awaitable<void> accept_loop();
  IoPool& pool_;
  boost::asio::ip::tcp::acceptor acceptor_;
  ConnectionHandler handler_;
};

}  // namespace ramjet::net
