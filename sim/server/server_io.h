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
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "sim/engine/engine.h"
#include "sim/server/server.h"

namespace ramjet::sim {

// One data-parallel rank (a vLLM engine core): its scheduler and block pool (Engine), its
// KV-event publisher, its step loop's clock bookkeeping and counters, its engine-side faults.
struct SimServer::Rank {
  Rank(boost::asio::io_context& ctx, size_t index, int dp_rank, const EngineConfig& config, KvPublisher* publisher)
      : index(index), dp_rank(dp_rank), publisher(publisher), engine(config, publisher), idle_wake(ctx) {}
  size_t index;  // in SimServer::ranks_ (what X-Data-Parallel-Rank names)
  int dp_rank;   // its data-parallel rank (metrics' engine label, KV-event batches and port offset)
  KvPublisher* publisher;
  Engine engine;
  boost::asio::steady_timer idle_wake;  // the driver's sleep while idle or paused
  bool paused = false;  // /sim/fault {"pause":true}: takes requests, never steps, publishes no load
  bool asleep = false;  // POST /sleep: takes requests, never steps until POST /wake_up
  uint32_t slow_ms = 0;
  // Driver bookkeeping (virtual time vs wall time).
  double virtual_s = 0;
  double max_lag_s = 0;
  uint64_t late_steps = 0;
  uint64_t steps = 0;
  uint64_t success_by_reason[3] = {0, 0, 0};  // stop, length, abort
  void wake() { idle_wake.cancel(); }
};

// One request in flight: the driver appends engine outputs, the HTTP coroutine consumes them.
struct SimServer::Live {
  explicit Live(boost::asio::io_context& ctx) : wake(ctx) {}
  uint64_t id = 0;
  Rank* rank = nullptr;  // where it runs (set by submit)
  std::deque<RequestOutput> updates;
  boost::asio::steady_timer wake;
  bool client_gone = false;
  bool done = false;
  std::optional<boost::json::object> kv_answer;  // a finished prefill leg's kv_transfer_params
};

// A finished prefill leg's blocks, held for a pull (kv_serve.cc): the rank and engine request
// holding them, and the lease that frees them unpulled.
struct SimServer::Held {
  Held(boost::asio::io_context& ctx, Rank* rank, uint64_t id) : rank(rank), id(id), lease(ctx) {}
  Rank* rank;
  uint64_t id;
  boost::asio::steady_timer lease;
};

namespace detail {

double wall_now();
// vLLM's error JSON: {"error":{"message","type","param","code"}} (param null when empty).
std::string vllm_error(std::string_view message, std::string_view type, unsigned code, std::string_view param = {});
std::string vllm_error(const AgentError& e);

// vLLM 0.32's length checks (renderers/params.py TokenizeParams, api_utils.get_max_tokens,
// SamplingParams), in the order they run:
// - a requested output budget over max_model_len: 400 naming `param` (max_tokens,
//   max_completion_tokens, max_output_tokens);
// - a prompt over max_model_len: 400 param input_tokens ("at least max_model_len + 1" when the
//   prompt was tokenized from text: vLLM's tokenizer truncates there);
// - the budget: min(max_model_len - prompt, requested or `fallback`), at least 1 (else 400
//   param max_tokens). vLLM no longer refuses prompt + max_tokens > max_model_len: it clamps.
std::optional<AgentError> check_output_cap(std::optional<int64_t> requested, std::string_view param,
                                           uint64_t max_model_len);
std::optional<AgentError> check_prompt_length(size_t prompt_len, bool from_text, uint64_t max_model_len);
Result<uint64_t, AgentError> output_budget(std::optional<int64_t> requested, uint64_t fallback, size_t prompt_len,
                                           uint64_t max_model_len);
// The 400 for a request the simulator's pool can never hold (only when the pool is smaller
// than max_model_len, a configuration vLLM refuses at startup).
AgentError pool_too_small(size_t prompt_len, uint64_t max_tokens, uint64_t pool_tokens);
// A response id's random part as vLLM's random_uuid (16 hex digits), distinct per serial.
std::string request_hex(uint64_t serial);
// The id vLLM gives a chat/completions response: prefix + the X-Request-Id header, else the
// body's request_id, else request_hex(serial).
std::string response_id(std::string_view prefix, std::string_view header, const boost::json::object& body,
                        uint64_t serial);
// "vllm-<version>-<8 hex>", as vLLM's build_system_fingerprint (version, config hash).
std::string system_fingerprint(std::string_view version, std::string_view config);
std::string_view error_type(unsigned status);  // the vLLM error type of an injected status
std::string filler(uint32_t from, uint32_t n);  // text of generated tokens [from, from + n)
const boost::json::value* find(const boost::json::object& o, std::string_view k);  // null = absent

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
