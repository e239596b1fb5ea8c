#include "app/admin.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include "request/ingress/endpoint.h"

namespace ramjet::app {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

asio::awaitable<void> serve_admin(asio::ip::tcp::socket socket, const observe::Registry& registry,
                                  const upstream::Fleet& fleet) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    boost::system::error_code ec;
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(64 * 1024);
    stream.expires_after(std::chrono::seconds(30));
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    auto& req = parser.get();
    std::string_view target = req.target();
    std::string_view path = target.substr(0, target.find('?'));
    http::response<http::string_body> res{http::status::ok, req.version()};
    if (req.method() == http::verb::get && path == "/metrics") {
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = registry.render();
    } else if (req.method() == http::verb::get && path == "/health") {
      res.result(fleet.healthy_count() > 0 ? http::status::ok : http::status::service_unavailable);
      res.set(http::field::content_type, "application/json");
      res.body() = fleet.health_json();
    } else {
      res.result(http::status::not_found);
      res.set(http::field::content_type, "application/json");
      res.body() = request::error_json("not found", "not_found_error", 404);
    }
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !res.keep_alive()) break;
  }
  boost::system::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace ramjet::app
