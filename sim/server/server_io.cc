// sim/server/server_io (see server_io.h).
#include "sim/server/server_io.h"

#include <sys/socket.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>

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

std::string vllm_error(std::string_view message, std::string_view type, unsigned code, std::string_view param) {
  json::object e{{"message", message},
                 {"type", type},
                 {"param", param.empty() ? json::value(nullptr) : json::value(param)},
                 {"code", code}};
  return json::serialize(json::object{{"error", std::move(e)}});
}

std::string vllm_error(const AgentError& e) { return vllm_error(e.message, e.type, e.status, e.param); }

namespace {

// str(VLLMValidationError): the message, then "(parameter=…, value=…)".
AgentError validation_error(std::string message, std::string param, std::optional<std::string> value) {
  message += " (parameter=" + param + (value ? ", value=" + *value : std::string()) + ")";
  return AgentError{400, "BadRequestError", std::move(message), std::move(param)};
}

}  // namespace

std::optional<AgentError> check_output_cap(std::optional<int64_t> requested, std::string_view param,
                                           uint64_t max_model_len) {
  if (!requested || *requested <= 0 || static_cast<uint64_t>(*requested) <= max_model_len) return std::nullopt;
  const std::string v = std::to_string(*requested);
  return validation_error(std::string(param) + "=" + v + " cannot be greater than max_model_len=" +
                              std::to_string(max_model_len) + ". Please request fewer output tokens.",
                          std::string(param), v);
}

std::optional<AgentError> check_prompt_length(size_t prompt_len, bool from_text, uint64_t max_model_len) {
  if (prompt_len <= max_model_len) return std::nullopt;
  // The tokenizer stops at max_model_len + 1 tokens (get_encode_kwargs), so a text prompt is
  // reported as "at least" that many; token ids are counted as sent.
  const uint64_t count = from_text ? max_model_len + 1 : prompt_len;
  const std::string n = std::to_string(count);
  return validation_error("This model's maximum context length is " + std::to_string(max_model_len) +
                              " tokens. However, your prompt contains " +
                              (count == max_model_len + 1 ? "at least " : "") + n +
                              " input tokens, which exceeds this limit even without any output tokens. Please "
                              "reduce the length of the input prompt.",
                          "input_tokens", n);
}

Result<uint64_t, AgentError> output_budget(std::optional<int64_t> requested, uint64_t fallback, size_t prompt_len,
                                           uint64_t max_model_len) {
  const int64_t room = static_cast<int64_t>(max_model_len) - static_cast<int64_t>(prompt_len);
  const int64_t want = requested ? *requested : static_cast<int64_t>(std::min<uint64_t>(fallback, INT64_MAX));
  const int64_t budget = std::min(room, want);
  if (budget < 1) {
    const std::string v = std::to_string(budget);
    return validation_error("max_tokens must be at least 1, got " + v + ".", "max_tokens", v);
  }
  return static_cast<uint64_t>(budget);
}

AgentError pool_too_small(size_t prompt_len, uint64_t max_tokens, uint64_t pool_tokens) {
  return AgentError{400, "BadRequestError",
                    "This request needs " + std::to_string(prompt_len + max_tokens) +
                        " tokens of KV cache (prompt and output) but the simulated pool holds " +
                        std::to_string(pool_tokens) + " (vLLM refuses to start with a pool smaller than max_model_len).",
                    "max_tokens"};
}

std::string request_hex(uint64_t serial) {
  uint64_t z = serial + 0x9e3779b97f4a7c15ULL;  // SplitMix64: consecutive serials look unrelated
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(z));
  return buf;
}

std::string response_id(std::string_view prefix, std::string_view header, const json::object& body,
                        uint64_t serial) {
  if (!header.empty()) return std::string(prefix) + std::string(header);
  if (const json::value* r = find(body, "request_id"); r && r->is_string()) return std::string(prefix) + std::string(r->as_string());
  return std::string(prefix) + request_hex(serial);
}

std::string system_fingerprint(std::string_view version, std::string_view config) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a: any stable hash of the config will do
  for (unsigned char c : config) h = (h ^ c) * 1099511628211ull;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08llx", static_cast<unsigned long long>(h >> 32));
  return "vllm-" + std::string(version) + "-" + buf;
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
