// Private to request/stream: per-connection and per-request state shared by proxy.cc
// (connection loop), forward.cc (dispatch and retry) and relay.cc (the response).
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/beast/http/error.hpp>

#include <array>
#include <vector>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "net/block_pool.h"
#include "net/client.h"
#include "net/stream.h"
#include "net/deadline.h"
#include "net/http.h"
#include "request/ingress/endpoint.h"
#include "request/stream/owned_body.h"
#include "request/stream/metrics.h"
#include "request/stream/observer.h"
#include "request/route/reservation.h"
#include "request/route/single_flight.h"
#include "upstream/model_pools.h"
#include "upstream/outlier.h"
#include "request/stream/proxy.h"
#include "request/usage/usage.h"

namespace ramjet::request {

// A short list of buffers written with one gather write. send_now() writes what the socket
// takes without waiting (the sockets are non-blocking), so the usual case costs one sendmsg and
// no trip through the event loop; what is left, if anything, goes with asio::async_write(rest()).
// The buffers are kept as the system call takes them (iovec), with the bytes they hold.
class OutBuffers {
 public:
  static constexpr size_t kMax = 40;
  void clear() { count_ = first_ = left_ = 0; }
  void add(std::string_view s) {
    if (s.empty()) return;
    iov_[count_++] = {const_cast<char*>(s.data()), s.size()};
    left_ += s.size();
  }
  bool empty() const { return left_ == 0; }
  // True when everything was written; false with ec clear when the socket is full.
  bool send_now(net::Stream& stream, boost::system::error_code& ec);
  // What is left, for an asynchronous write: valid until the next change.
  std::span<const boost::asio::const_buffer> rest();
  // Drops the first n bytes of what is left (written elsewhere).
  void consume(size_t n);

 private:
  std::array<iovec, kMax> iov_;
  std::array<boost::asio::const_buffer, kMax> rest_;
  size_t count_ = 0;
  size_t first_ = 0;
  size_t left_ = 0;  // bytes
};
// A relayed batch: head, chunk size line, the body pieces, CRLF, last chunk.
static_assert(OutBuffers::kMax >= net::ResponseParser::kMaxPieces + 4);

inline constexpr size_t kReadMax = 64 * 1024;  // bytes asked for by one socket read
inline constexpr std::string_view kRouteHeader = "X-Ramjet-Upstream";
// The answer when RJ_MAX_BUFFERED_BYTES is full (a declared length, a growing chunked body, or a
// body's parse that needs more).
inline constexpr std::string_view kBusyMessage = "too many request bytes in flight; retry shortly";
inline constexpr std::string_view kRetryAfter = "Retry-After: 1";
// The routing receipt (exact routing's outcome and prediction); an engine's own is dropped.
inline constexpr std::string_view kReceiptHeader = "X-Ramjet-Route";
// A two-leg request's prefill engine (prefill/decode disaggregation), beside X-Ramjet-Upstream.
inline constexpr std::string_view kPrefillHeader = "X-Ramjet-Prefill-Upstream";

// The engine closed (or reset) the connection: what a write or read error says when it stopped
// taking the request (it may still have answered it: 413, 400).
inline bool closed_early(const boost::system::error_code& ec) {
  namespace http = boost::beast::http;
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == boost::asio::error::eof ||
         ec == boost::asio::error::connection_reset || ec == boost::asio::error::broken_pipe ||
         ec == boost::asio::error::operation_aborted || ec == boost::asio::error::bad_descriptor;
}

// Parses what the connection's buffer holds, without I/O: the head, or body pieces (views into
// the buffer, valid until the next read) until the buffer is drained, the piece list is full or
// the message is complete.
void parse_buffered(net::UpstreamConnection& conn, net::ResponseParser& p, boost::system::error_code& ec);

// Reads from one client connection on behalf of both the connection loop and the exchange in
// flight. While a request is forwarded, a read is kept pending on the client socket: a FIN or
// reset marks the client gone and closes the current upstream connection at once (so the
// engine stops working); bytes (a pipelined request) mean the client is alive and are kept in
// the session's buffer. The same read, still pending when the exchange ends, is the connection
// loop's wait for the next request: one read per request serves both (Asio tries every read
// once before waiting, so a separate watch would cost a syscall more per request).
// Shared with the pending read's handler, which may run after the session is gone.
struct ClientWatch {
  net::Stream* client = nullptr;  // null once the connection is gone
  net::PooledBuffer* buffer = nullptr;  // the session's read buffer
  const net::Deadline* deadline = nullptr;  // the session's (its client socket's reads and writes)
  bool active = false;      // an exchange is being forwarded
  bool gone = false;        // the client went away during the active exchange
  bool reading = false;     // a read into *buffer is pending
  bool has_result = false;  // a read completed; `result` is for the connection loop
  boost::system::error_code result;
  net::UpstreamConnection* upstream = nullptr;  // current upstream connection, if any
  // The connection loop's coroutine, suspended until the read completes (awaited as Asio's
  // deferred operation: no coroutine frame of its own). Only emplace, move-construct and reset
  // it: Boost 1.81's any_completion_handler move-assignment wraps the handler in itself and
  // recurses when called.
  using Waiter = boost::asio::any_completion_handler<void()>;
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
  net::Stream client;
  // The request's bytes as read. Its storage is a pooled block (net/block_pool.h), taken when the
  // socket is readable and given back once a request is parsed: an idle plain connection holds
  // none (a TLS one holds one while it waits: its watch reads through the TLS layer at once).
  net::PooledBuffer buffer;
  size_t thread = 0;
  bool close_after = false;  // the response was framed by closing the connection, or it broke
  // RJ_API_KEYS_FILE: the current request presented a valid key (only then does
  // RJ_UPSTREAM_TOKEN go upstream: an exempt CORS preflight is forwarded without it).
  bool authenticated = false;
  std::string key_name;  // the accepted key's name (RJ_API_KEYS_FILE), "" without one
  net::Deadline deadline;  // the client socket: header/body reads, response writes
  std::shared_ptr<ClientWatch> watch;
  // Reused by every request of the connection (their capacity is kept).
  net::RequestHead req;
  std::string body;
  net::ResponseHead res;
  net::HeadBuffer out;  // serialised heads
  // Per-exchange state kept here rather than in coroutine frames (Asio recycles a frame's
  // memory only when it is under ~1 KB).
  PreparedRequest prep;
  // The body's members of the names ramjet owns for `owned_for` (owned_body.h: found when an
  // engine that gets an edited body is first tried, again when a retry needs other names), ramjet's
  // own member for the current attempt, and the edited body when it has too many pieces for one
  // gather write.
  std::optional<OwnedMembers> owned;
  BodyEdit owned_for = BodyEdit::kNone;
  std::string owned_member, owned_body;
  // The request's model pool (upstream/model_pools.h: pool.engines, null for any engine; its
  // rotation), and the snapshot that owns them.
  std::shared_ptr<const upstream::ModelPools> pools;
  upstream::ModelPools::Pick pool;
  // The LoRA adapter the request's model names (empty: a base model), for the router's adapter term.
  std::string_view adapter() const {
    return pool.model != nullptr && pool.model->adapter ? std::string_view(pool.model->id) : std::string_view();
  }
  // The waiting room's place (RJ_ADMISSION_*): held from admission until the engine's
  // reservation counts the request; the engines with room it may be placed on.
  Admission::Ticket admission;
  upstream::EngineSet room;
  // The request's priority class (Proxy::admission_class: the key's, or the allowed header's).
  AdmissionClass cls = AdmissionClass::kInteractive;
  // Counted in the admission's client shares (burst slots) from admission to the request's end:
  // its pool key and client ("" when not counted).
  std::string share_pool, share_client;
  // The current request's routing decision (forward.cc; here, not in the coroutine's frame: a
  // frame past ~1 KB is allocated from the heap each time, not reused).
  route::Routed routed;
  // Prefill/decode disaggregation (disagg.cc): the pool's engines that decode and that prefill, the
  // prefill leg's decision, its answer and the transfer parameters the decode leg carries ("":
  // none, the request is served whole).
  upstream::EngineSet decode_set, prefill_set;
  route::Routed prefill_routed;
  std::string leg_answer, kv_params;
  // The params went out in a decode leg: single use (the producer frees its blocks once a decode
  // engine pulled or refused them), so a retry of the decode leg is served whole.
  bool kv_params_sent = false;
  OutBuffers out_buffers;
  std::optional<net::ResponseParser> parser;
  std::optional<UsageAccumulator> usage;
  char chunk_size[24];
  char sse_tail[2] = {'\n', '\n'};  // the last two bytes an SSE response relayed
  // Links of an intrusive list of sessions on one io thread, its head kept by the proxy.
  struct Links {
    Session* prev = nullptr;
    Session* next = nullptr;
  };
  template <Links Session::*L>
  static void push(Session*& head, Session& s) {
    (s.*L).prev = nullptr;
    (s.*L).next = head;
    if (head) (head->*L).prev = &s;
    head = &s;
  }
  template <Links Session::*L>
  static void unlink(Session*& head, Session& s) {
    Links& l = s.*L;
    if (l.prev) {
      (l.prev->*L).next = l.next;
    } else {
      head = l.next;
    }
    if (l.next) (l.next->*L).prev = l.prev;
    l = Links{};
  }
  // The sessions idle on this io thread (waiting for their next request).
  Links idle_links;
  bool idle = false;
  // The sessions on this io thread waiting for engine `waiting`'s first byte
  // (Proxy::set_waiting); a fence of that engine sets engine_fenced and closes the connection.
  static constexpr size_t kNotWaiting = SIZE_MAX;
  size_t waiting = kNotWaiting;
  Links wait_links;
  bool engine_fenced = false;
  bool fence_moves = true;  // another engine could take it (else a fence leaves it waiting)
  // Past this, a health probe of the engine that fails (even one the fleet forgives an engine
  // that served moments ago) moves the request on: engine_unresponsive (Proxy::first_byte_budget).
  std::chrono::steady_clock::time_point unresponsive_after{};
  bool engine_unresponsive = false;
  BodyBudget::Lease body_lease;  // this request's share of RJ_MAX_BUFFERED_BYTES
};

// The first failure after a request was sent (dropped, garbled, or answered 502/503), held until
// the retry on another engine says whose fault it was.
struct SentFailure {
  size_t engine = 0;
  upstream::Failure failure = upstream::Failure::kDropped;
  Blame how = Blame::kDropped;  // what "the same way" compares
};

// What observers see (request/stream/observer.h) plus the dispatch and relay state.
struct Proxy::Exchange : ExchangeRecord {
  StreamKind stream_kind = StreamKind::kUnknown;
  bool keep_alive = true;
  bool counted = false;  // ramjet_requests_total already counted this exchange
  bool engine_done = false;  // `completed` fired for the current attempt
  // Dispatch.
  // Per dispatch candidate: the engine the decision saw in its slot (inline up to 8: no
  // allocation a request).
  boost::container::small_vector<uint64_t, 8> incarnations;
  std::optional<SentFailure> first_failure;  // retried once on another engine
  UpstreamError last_error = UpstreamError::kConnect;
  bool request_cut = false;  // the engine stopped taking the request before all of it was written
  std::chrono::steady_clock::time_point first_byte_deadline = std::chrono::steady_clock::time_point::max();
  // Relay.
  bool head_sent = false;      // the response head went out to the client
  bool body_started = false;   // a response body byte arrived from the engine
  bool sse = false;            // the response is an SSE stream
  bool chunked = false;        // the client response is chunked
  bool client_send_timed_out = false;
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
