// sim/server/server_io (see server_io.h).
#include "sim/server/server_io.h"

#include <sys/socket.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <cerrno>
#include <chrono>

#include "sim/engine/tokenizer.h"  // filler_token

namespace ramjet::sim::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string vllm_error(std::string_view message, std::string_view type, unsigned code) {
  json::object e{{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}};
  return json::serialize(json::object{{"error", std::move(e)}});
}

std::string_view error_type(unsigned status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 404: return "NotFoundError";
    case 429: return "TooManyRequestsError";
    case 500: return "InternalServerError";
    case 503: return "ServiceUnavailableError";
    default: return "APIError";
  }
}

// Text of generated tokens [from, from + n).
std::string filler(uint32_t from, uint32_t n) {
  std::string s;
  for (uint32_t i = 0; i < n; ++i) s += filler_token(from + i);
  return s;
}

const json::value* find(const json::object& o, std::string_view k) {
  auto it = o.find(k);
  return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

uint64_t saturating_sum(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

asio::awaitable<bool> write_response(tcp::socket& socket, unsigned version, bool keep_alive, unsigned status,
                                     std::string body, std::string ctype) {
  http::response<http::string_body> res{static_cast<http::status>(status), version};
  res.set(http::field::server, "uvicorn");
  if (!ctype.empty()) res.set(http::field::content_type, ctype);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  boost::system::error_code ec;
  co_await http::async_write(socket, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec && keep_alive;
}

asio::awaitable<void> write_sse_chunk(tcp::socket& socket, std::string s, bool& failed) {
  if (failed) co_return;
  boost::system::error_code ec;
  co_await asio::async_write(socket, http::make_chunk(asio::buffer(s)), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) failed = true;
}

asio::awaitable<void> watch_disconnect(tcp::socket& sock, std::shared_ptr<bool> done,
                                       SimServer::Live* live, Engine* engine,
                                       std::shared_ptr<asio::cancellation_signal> cancel) {
  for (;;) {
    boost::system::error_code ec;
    co_await sock.async_wait(tcp::socket::wait_read,
                             asio::bind_cancellation_slot(cancel->slot(), asio::redirect_error(asio::use_awaitable, ec)));
    if (*done || ec == asio::error::operation_aborted) co_return;
    if (!ec) {
      char b;
      ssize_t n = ::recv(sock.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) co_return;
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    }
    live->client_gone = true;
    engine->abort(live->id);
    live->wake.cancel();
    co_return;
  }
}

}  // namespace ramjet::sim::detail
