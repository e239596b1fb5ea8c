// Private to request/stream: per-connection and per-request state shared by proxy.cc
// (connection loop) and forward.cc (dispatch and relay).
#pragma once

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <memory>

#include "net/client.h"
#include "request/ingress/endpoint.h"
#include "request/stream/metrics.h"
#include "request/route/reservation.h"
#include "request/stream/proxy.h"

namespace ramjet::request {

struct Proxy::Session {
  explicit Session(boost::asio::ip::tcp::socket s) : client(std::move(s)) { buffer.reserve(16 * 1024); }
  boost::asio::ip::tcp::socket client;
  boost::beast::flat_buffer buffer;
  size_t thread = 0;
  bool close_after = false;  // the response was framed by closing the connection, or it broke
};

struct Proxy::Exchange {
  boost::beast::http::request<boost::beast::http::string_body> req;
  Endpoint endpoint = Endpoint::kOther;
  int64_t start_ns = 0;
  unsigned status = 0;
  StreamKind stream_kind = StreamKind::kUnknown;
  bool keep_alive = true;
  bool counted = false;  // ramjet_requests_total already counted this exchange
};

// Watches the client socket while a request is forwarded: when the client closes (FIN or
// reset), it closes the current upstream connection at once so the engine stops working.
struct ClientWatch {
  bool done = false;  // the exchange finished; the watcher must not touch the socket again
  bool gone = false;  // the client went away
  net::UpstreamConnection* upstream = nullptr;  // current upstream connection, if any
  boost::asio::cancellation_signal cancel;
};

// One upstream attempt whose response headers have arrived.
struct Proxy::Attempt {
  net::UpstreamConnection& conn;
  boost::beast::http::response_parser<boost::beast::http::buffer_body>& parser;
  upstream::Engine& engine;
  ClientWatch& watch;
  const PreparedRequest& prepared;
  route::LoadReservation& reservation;
};

// Cancels a socket's pending operations (without closing it) when the deadline passes, so the
// caller can still answer 408. Disarmed on destruction.
class Deadline {
 public:
  Deadline(boost::asio::ip::tcp::socket& socket, std::chrono::milliseconds after);
  ~Deadline();
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  bool expired() const { return state_->expired; }

 private:
  struct State {
    bool armed = true;
    bool expired = false;
  };
  std::shared_ptr<State> state_;
  boost::asio::steady_timer timer_;
};

}  // namespace ramjet::request
