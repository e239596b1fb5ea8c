// sim/server/kv_transfer (see kv_transfer.h).
#include "sim/server/kv_transfer.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include "sim/server/python_json.h"
#include "sim/server/server_io.h"

namespace ramjet::sim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

namespace {

AgentError bad(std::string what) {
  return AgentError{400, "BadRequestError", "kv_transfer_params: " + std::move(what), "kv_transfer_params"};
}

std::optional<uint32_t> block_id(const json::value& v) {
  if (v.is_int64() && v.as_int64() >= 0 && v.as_int64() <= UINT32_MAX) return static_cast<uint32_t>(v.as_int64());
  if (v.is_uint64() && v.as_uint64() <= UINT32_MAX) return static_cast<uint32_t>(v.as_uint64());
  return std::nullopt;
}

}  // namespace

Result<KvParams, AgentError> parse_kv_params(const json::value* v) {
  KvParams out;
  if (v == nullptr || v->is_null() || !v->is_object()) return out;  // (validation refused non-objects)
  const json::object& o = v->as_object();
  const bool decode = python_truthy(o.if_contains("do_remote_decode"));
  const bool prefill = python_truthy(o.if_contains("do_remote_prefill"));
  if (decode && prefill) return bad("do_remote_decode and do_remote_prefill are exclusive");
  if (decode) {
    out.kind = KvTransfer::kRemoteDecode;
    return out;
  }
  if (!prefill) return out;
  out.kind = KvTransfer::kRemotePrefill;
  RemotePrefill& r = out.remote;
  for (const char* k : {"remote_engine_id", "remote_request_id", "remote_host"}) {
    const json::value* s = o.if_contains(k);
    if (s == nullptr || !s->is_string() || s->as_string().empty()) return bad(std::string(k) + " must be a non-empty string");
  }
  r.engine_id = o.at("remote_engine_id").as_string();
  r.request_id = o.at("remote_request_id").as_string();
  r.host = o.at("remote_host").as_string();
  const json::value* port = o.if_contains("remote_port");
  const auto p = port ? block_id(*port) : std::nullopt;
  if (!p || *p == 0 || *p > 65535) return bad("remote_port must be a port number");
  r.port = static_cast<uint16_t>(*p);
  const json::value* ids = o.if_contains("remote_block_ids");
  if (ids == nullptr || !ids->is_array() || ids->as_array().empty()) {
    return bad("remote_block_ids must be a non-empty list");
  }
  // BlockIds: one list per KV cache group (vLLM 0.32); older releases sent one flat list.
  const json::array& a = ids->as_array();
  const json::array* group = a.front().is_array() ? &a.front().as_array() : &a;
  for (const auto& x : *group) {
    auto id = block_id(x);
    if (!id) return bad("remote_block_ids must hold block ids");
    r.block_ids.push_back(*id);
  }
  if (r.block_ids.empty()) return bad("remote_block_ids must be a non-empty list");
  // OutputProcessor reports the producer's prefix hit when it is an int (a bool is not).
  if (const json::value* c = o.if_contains("remote_prefill_cached_tokens"); c && c->is_int64()) {
    r.cached_tokens = c->as_int64();
  } else if (c && c->is_uint64()) {
    r.cached_tokens = static_cast<int64_t>(std::min<uint64_t>(c->as_uint64(), INT64_MAX));
  }
  return out;
}

json::object producer_params(const ProducerAnswer& a) {
  json::array ids;
  for (uint32_t b : a.block_ids) ids.push_back(b);
  return json::object{{"do_remote_prefill", true},
                      {"do_remote_decode", false},
                      {"remote_block_ids", json::array{std::move(ids)}},
                      {"remote_engine_id", a.engine_id},
                      {"remote_request_id", a.request_id},
                      {"remote_host", a.host},
                      {"remote_port", a.port},
                      {"tp_size", 1},
                      {"dcp_size", 1},
                      {"pp_size", 1},
                      {"remote_num_tokens", a.num_tokens},
                      {"remote_blocks_expiry_time", nullptr},
                      {"transfer_mode", "pull"},
                      {"remote_prefill_cached_tokens", a.cached_tokens}};
}

std::string internal_request_id(const std::string& response_id, bool completions, uint64_t serial) {
  return response_id + (completions ? "-0-" : "-") + detail::request_hex(serial).substr(8);
}

std::string random_engine_id() {
  // vLLM's KVTransferConfig: str(uuid.uuid4()).
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd());
  const uint64_t a = g(), b = g();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>((a >> 16) & 0xffff), static_cast<unsigned>(a & 0xfff),
                static_cast<unsigned>(0x8000 | ((b >> 48) & 0x3fff)), static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return buf;
}

asio::awaitable<SideReply> side_post(asio::any_io_executor ex, std::string host, uint16_t port, std::string path,
                                     std::string body, double timeout_s) {
  SideReply out;
  auto sock = std::make_shared<tcp::socket>(ex);
  // The deadline closes the socket, which ends whatever operation is pending.
  auto deadline = std::make_shared<asio::steady_timer>(ex);
  deadline->expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s)));
  deadline->async_wait([sock](boost::system::error_code ec) {
    if (!ec) {
      boost::system::error_code ignored;
      sock->close(ignored);
    }
  });
  tcp::resolver resolver(ex);
  auto [rec, results] = co_await resolver.async_resolve(host, std::to_string(port), asio::as_tuple(asio::use_awaitable));
  if (rec) {
    deadline->cancel();
    co_return out;
  }
  auto [cec, ep] = co_await asio::async_connect(*sock, results, asio::as_tuple(asio::use_awaitable));
  if (cec) {
    deadline->cancel();
    co_return out;
  }
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, host + ":" + std::to_string(port));
  req.set(http::field::content_type, "application/json");
  req.set(http::field::connection, "close");
  req.body() = std::move(body);
  req.prepare_payload();
  auto [wec, wn] = co_await http::async_write(*sock, req, asio::as_tuple(asio::use_awaitable));
  if (!wec) {
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    auto [rdec, rn] = co_await http::async_read(*sock, buf, res, asio::as_tuple(asio::use_awaitable));
    if (!rdec) {
      out.status = static_cast<int>(res.result_int());
      out.body = std::move(res.body());
    }
  }
  deadline->cancel();
  boost::system::error_code ignored;
  sock->close(ignored);
  co_return out;
}

}  // namespace ramjet::sim
