// sim/server/server_io: what server.cc and agent_serve.cc share to answer HTTP: the request in
// flight (SimServer::Live, fed by the engine driver), response and SSE-chunk writers, the
// disconnect watch that aborts the engine request, and small JSON/text helpers. Internal to
// sim/server.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>

#include "sim/engine/engine.h"
#include "sim/server/server.h"

namespace ramjet::sim {

// One request in flight: the driver appends engine outputs, the HTTP coroutine consumes them.
struct SimServer::Live {
  explicit Live(boost::asio::io_context& ctx) : wake(ctx) {}
  uint64_t id = 0;
  std::deque<RequestOutput> updates;
  boost::asio::steady_timer wake;
  bool client_gone = false;
  bool done = false;
};

namespace detail {

double wall_now();
// vLLM's error JSON: {"error":{"message","type","param":null,"code"}}.
std::string vllm_error(std::string_view message, std::string_view type, unsigned code);
std::string_view error_type(unsigned status);  // the vLLM error type of an injected status
std::string filler(uint32_t from, uint32_t n);  // text of generated tokens [from, from + n)
const boost::json::value* find(const boost::json::object& o, std::string_view k);  // null = absent
uint64_t saturating_sum(uint64_t a, uint64_t b);

// One whole response; returns whether the connection stays open.
boost::asio::awaitable<bool> write_response(boost::asio::ip::tcp::socket& socket, unsigned version, bool keep_alive,
                                            unsigned status, std::string body, std::string ctype);
// One SSE chunk (chunked encoding); sets `failed` on a write error and writes nothing after one.
boost::asio::awaitable<void> write_sse_chunk(boost::asio::ip::tcp::socket& socket, std::string s, bool& failed);
// Until `done` or a cancel: when the client closes, marks the request gone, aborts it in the
// engine and wakes its coroutine.
boost::asio::awaitable<void> watch_disconnect(boost::asio::ip::tcp::socket& sock, std::shared_ptr<bool> done,
                                              SimServer::Live* live, Engine* engine,
                                              std::shared_ptr<boost::asio::cancellation_signal> cancel);

}  // namespace detail
}  // namespace ramjet::sim
