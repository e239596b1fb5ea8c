// Private to request/stream: per-connection and per-request state shared by proxy.cc
// (connection loop) and forward.cc (dispatch and relay).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "net/client.h"
#include "net/http.h"
#include "request/ingress/endpoint.h"
#include "request/stream/metrics.h"
#include "request/route/reservation.h"
#include "request/stream/proxy.h"

namespace ramjet::request {

// The read deadline of one client connection. arm() and disarm() only store a time point: one
// timer per connection wakes up no later than the armed deadline (it is moved earlier only when
// a shorter deadline is armed, and re-armed lazily when it fires early), so a request costs no
// timer operation. When the deadline passes, the socket's pending operations are cancelled
// (the socket stays open, so the caller can still answer 408) and expired() turns true.
class ConnectionDeadline {
 public:
  explicit ConnectionDeadline(boost::asio::ip::tcp::socket& socket);
  ~ConnectionDeadline();
  ConnectionDeadline(const ConnectionDeadline&) = delete;
  ConnectionDeadline& operator=(const ConnectionDeadline&) = delete;

  void arm(std::chrono::milliseconds after);
  void disarm() { state_->deadline = Clock::time_point::max(); }
  // The armed deadline passed (reset by the next arm()).
  bool expired() const { return state_->expired; }

 private:
  using Clock = std::chrono::steady_clock;
  struct State {
    explicit State(boost::asio::ip::tcp::socket& s) : socket(&s), timer(s.get_executor()) {}
    boost::asio::ip::tcp::socket* socket;  // null once the connection is gone
    boost::asio::steady_timer timer;
    Clock::time_point deadline = Clock::time_point::max();
    Clock::time_point scheduled = Clock::time_point::max();  // when the pending wait ends
    uint64_t generation = 0;  // of the pending wait; older completions are ignored
    bool waiting = false;
    bool expired = false;
  };
  static void wait(const std::shared_ptr<State>& st, Clock::time_point at);
  std::shared_ptr<State> state_;
};

// A short list of buffers written with one gather write. send_now() writes what the socket
// takes without waiting (the sockets are non-blocking), so the usual case costs one sendmsg and
// no trip through the event loop; what is left, if anything, goes with asio::async_write(rest()).
class OutBuffers {
 public:
  static constexpr size_t kMax = 40;
  void clear() { count_ = first_ = 0; }
  void add(std::string_view s) {
    if (!s.empty()) bufs_[count_++] = boost::asio::const_buffer(s.data(), s.size());
  }
  bool empty() const { return first_ == count_; }
  // True when everything was written; false with ec clear when the socket is full.
  bool send_now(boost::asio::ip::tcp::socket& socket, boost::system::error_code& ec);
  std::span<const boost::asio::const_buffer> rest() const { return {bufs_.data() + first_, count_ - first_}; }

 private:
  std::array<boost::asio::const_buffer, kMax> bufs_;
  size_t count_ = 0;
  size_t first_ = 0;
};

// Watches the client socket while a request is forwarded: when the client closes (FIN or
// reset), it closes the current upstream connection at once so the engine stops working.
// One per connection (shared with the pending receive, which may complete after the session).
struct ClientWatch {
  boost::asio::ip::tcp::socket* client = nullptr;  // null once the connection is gone
  bool active = false;   // an exchange is being forwarded
  bool gone = false;     // the client went away during the active exchange
  bool waiting = false;  // the peek is pending on the client socket
  char peek = 0;
  net::UpstreamConnection* upstream = nullptr;  // current upstream connection, if any
};
// Starts watching for the current exchange (active, not gone); unwatch_client() ends it.
void watch_client(const std::shared_ptr<ClientWatch>& w);
void unwatch_client(ClientWatch& w);

struct Proxy::Session {
  explicit Session(boost::asio::ip::tcp::socket s);
  ~Session();
  boost::asio::ip::tcp::socket client;
  boost::beast::flat_buffer buffer;
  size_t thread = 0;
  bool close_after = false;  // the response was framed by closing the connection, or it broke
  ConnectionDeadline deadline;
  std::shared_ptr<ClientWatch> watch;
  // Reused by every request of the connection (their capacity is kept).
  net::RequestHead req;
  std::string body;
  net::ResponseHead res;
  std::string out;  // serialised heads
  // Intrusive list of the sessions idle on this io thread (waiting for their next request).
  Session* idle_prev = nullptr;
  Session* idle_next = nullptr;
  bool idle = false;
};

struct Proxy::Exchange {
  Endpoint endpoint = Endpoint::kOther;
  int64_t start_ns = 0;
  unsigned status = 0;
  StreamKind stream_kind = StreamKind::kUnknown;
  bool keep_alive = true;
  bool counted = false;  // ramjet_requests_total already counted this exchange
};

// One upstream attempt whose response headers have arrived.
struct Proxy::Attempt {
  net::UpstreamConnection& conn;
  net::ResponseParser& parser;
  upstream::Engine& engine;
  ClientWatch& watch;
  const PreparedRequest& prepared;
  route::LoadReservation& reservation;
};

}  // namespace ramjet::request
