// Private to request/stream: per-connection and per-request state shared by proxy.cc
// (connection loop) and forward.cc (dispatch and relay).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "net/client.h"
#include "net/http.h"
#include "request/ingress/endpoint.h"
#include "request/stream/metrics.h"
#include "request/route/reservation.h"
#include "request/stream/proxy.h"
#include "request/usage/usage.h"

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
// A relayed batch: head, chunk size line, the body pieces, CRLF, last chunk.
static_assert(OutBuffers::kMax >= net::ResponseParser::kMaxPieces + 4);

// Reads from one client connection on behalf of both the connection loop and the exchange in
// flight. While a request is forwarded, a read is kept pending on the client socket: a FIN or
// reset marks the client gone and closes the current upstream connection at once (so the
// engine stops working); bytes (a pipelined request) mean the client is alive and are kept in
// the session's buffer. The same read, still pending when the exchange ends, is the connection
// loop's wait for the next request: one read per request serves both (Asio tries every read
// once before waiting, so a separate watch would cost a syscall more per request).
// Shared with the pending read's handler, which may run after the session is gone.
struct ClientWatch {
  boost::asio::ip::tcp::socket* client = nullptr;  // null once the connection is gone
  boost::beast::flat_buffer* buffer = nullptr;     // the session's read buffer
  bool active = false;      // an exchange is being forwarded
  bool gone = false;        // the client went away during the active exchange
  bool reading = false;     // a read into *buffer is pending
  bool has_result = false;  // a read completed; `result` is for the connection loop
  boost::system::error_code result;
  net::UpstreamConnection* upstream = nullptr;  // current upstream connection, if any
  // The connection loop's coroutine, suspended until the read completes.
  using Waiter = boost::asio::async_result<boost::asio::use_awaitable_t<>, void()>::handler_type;
  std::optional<Waiter> waiter;
};
// Starts the read unless one is pending or its result is waiting.
void start_client_read(const std::shared_ptr<ClientWatch>& w);
// Starts watching for the current exchange (active, not gone); unwatch_client() ends it and
// leaves the read pending for the connection loop.
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
  net::HeadBuffer out;  // serialised heads
  // Per-exchange state kept here rather than in coroutine frames (Asio recycles a frame's
  // memory only when it is under ~1 KB).
  PreparedRequest prep;
  OutBuffers out_buffers;
  std::optional<net::ResponseParser> parser;
  std::optional<UsageAccumulator> usage;
  char chunk_size[24];
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
  // What the journal's finish record reports (kept here, not in the forward() frame).
  int64_t head_ns = 0;         // the upstream response head arrived
  int64_t first_token_ns = 0;  // the first generated token was relayed (inference, 200)
  uint64_t response_bytes = 0;
  bool accounted = false;      // s.usage belongs to this exchange
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
