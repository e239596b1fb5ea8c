// sim/server: the simulator's HTTP face, as vLLM 0.32 serves it (docs/sim.md): OpenAI chat and
// completions (JSON and SSE, openai_reply.h), OpenAI Responses and Anthropic Messages
// (agent_convert.h, agent_reply.h), vLLM's request validation (validation.h), /v1/models, /health, /version, /tokenize, /metrics with vLLM's
// names, /reset_prefix_cache, /kv_event_sources, plus /sim/* admin (faults, resident-prefix
// oracle, stats). Drives the engine model on virtual time; everything runs on one io thread.
// Prompts are tokenized by sim/server/prompt.h (built-in or real tokenizer).
//
// Its HTTP code is its own on purpose (not src/net): the simulator is the independent peer that
// ramjet is tested against, and one shared stack would let a bug agree with itself.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <memory>
#include <random>
#include <string>
#include <unordered_map>

#include "metrics/metrics.h"
#include "sim/engine/engine.h"
#include "sim/kv/publisher.h"
#include "sim/server/agent_convert.h"
#include "sim/server/options.h"
#include "sim/server/prompt.h"

namespace ramjet::sim {

class SimServer {
 public:
  // `prompter` tokenizes every prompt (the built-in tokenizer unless --tokenizer was loaded).
  SimServer(boost::asio::io_context& ctx, SimOptions options, KvPublisher* publisher, Prompter prompter = {});
  ~SimServer();

  void start();  // starts the engine driver
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);

  struct Live;

 private:
  boost::asio::awaitable<void> drive();
  // POST /v1/responses and /v1/messages: convert to chat, render with prompter_, run the engine,
  // answer in the API's shape. Returns whether the connection stays open.
  boost::asio::awaitable<bool> serve_agent(boost::asio::ip::tcp::socket& socket, unsigned version, bool keep_alive,
                                           const std::string& body, AgentApi api, std::string request_id);
  // POST /v1/chat/completions (chat) and /v1/completions (openai_serve.cc). `request_id`: the
  // X-Request-Id header (vLLM names the response after it), or "".
  boost::asio::awaitable<bool> serve_openai(boost::asio::ip::tcp::socket& socket, unsigned version, bool keep_alive,
                                            const std::string& body, bool chat, std::string request_id);
  // Tokens the pool can ever hold for one request (the engine refuses more).
  uint64_t engine_pool_tokens() const;
  // POST /sim/render?api=chat|responses|messages: the converted chat messages and prompt token
  // ids of a body, without generating (a differential test compares them with ramjet's).
  std::string render_debug(std::string_view api, const std::string& body, unsigned& status) const;
  std::string handle_admin(const std::string& path, const std::string& body, unsigned& status);
  // The namespace a request's blocks are cached in: its adapter (when `model` names one of
  // --lora-modules) and its cache_salt.
  CacheNamespace namespace_of(const std::string& model, const std::string& cache_salt) const;
  std::string metrics_text() const;
  void write_dcgm(metrics::Exposition& x, const EngineStats& st) const;
  void wake_driver();
  // POST /tokenize: the body's token ids or a 400 message, computed on frontend_ (vLLM tokenizes
  // in its API server process, beside the engine core: a tokenize call never stalls a step).
  struct Tokenized {
    std::vector<uint32_t> tokens;
    std::string error;
  };
  boost::asio::awaitable<Tokenized> tokenize(std::string body) const;

  boost::asio::io_context& ctx_;
  std::unique_ptr<boost::asio::thread_pool> frontend_;  // one thread
  SimOptions opt_;
  KvPublisher* publisher_;
  Prompter prompter_;
  Engine engine_;
  boost::asio::steady_timer idle_wake_;
  std::unordered_map<uint64_t, Live*> live_;
  uint64_t next_id_ = 1;
  std::mt19937_64 rng_;
  // Driver bookkeeping (virtual time vs wall time).
  double virtual_s_ = 0;
  double max_lag_s_ = 0;
  uint64_t late_steps_ = 0;
  uint64_t steps_ = 0;
  uint64_t success_by_reason_[3] = {0, 0, 0};  // stop, length, abort
  uint64_t cancelled_ = 0;  // requests aborted because their client went away (/sim/stats)
  uint64_t id_salt_ = 0;    // makes Responses/Messages ids differ between processes (vLLM: uuid4)
  bool hang_ = false;
  bool paused_ = false;  // /sim/fault {"pause":true}: the engine takes no step (requests queue)
  uint32_t slow_ms_ = 0;
  double error_rate_ = 0;
  unsigned error_status_ = 503;
  bool health_fail_ = false;
  uint64_t drop_header_bytes_ = 0;
  uint32_t stall_after_tokens_ = 0;
  uint32_t tokenize_delay_ms_ = 0;  // /sim/fault {"tokenize_delay_ms": N}: POST /tokenize answers N ms late
  bool garbage_ = false;
  std::string fingerprint_;  // system_fingerprint: "vllm-<--engine-version>-<hash of the config>"
  std::string disabled_thinking_effort_;  // Prompter::disabled_thinking_effort(), probed once
};

}  // namespace ramjet::sim
