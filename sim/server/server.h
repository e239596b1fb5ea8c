// sim/server: the simulator's HTTP face, as vLLM 0.32 serves it (docs/sim.md): OpenAI chat and
// completions (JSON and SSE, openai_reply.h), OpenAI Responses and Anthropic Messages
// (agent_convert.h, agent_reply.h), vLLM's request validation (validation.h), /v1/models, /health, /version, /tokenize, /metrics with vLLM's
// names, /reset_prefix_cache, /kv_event_sources, plus /sim/* admin (faults, resident-prefix
// oracle, stats). Drives one engine model per data-parallel rank on virtual time, placing
// requests as vLLM's DP client does (dp_balance.h); everything runs on one io thread.
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
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "metrics/metrics.h"
#include "sim/engine/engine.h"
#include "sim/kv/publisher.h"
#include "sim/server/agent_convert.h"
#include "sim/server/dp_balance.h"
#include "sim/server/kv_transfer.h"
#include "sim/server/options.h"
#include "sim/server/prompt.h"
#include "sim/server/sglang_dp.h"

namespace ramjet::sim {

class SimServer {
 public:
  // `prompter` tokenizes every prompt (the built-in tokenizer unless --tokenizer was loaded).
  // `publishers`: one per rank of options.local_ranks(), in that order (null: no KV events).
  SimServer(boost::asio::io_context& ctx, SimOptions options, std::vector<KvPublisher*> publishers,
            Prompter prompter = {});
  ~SimServer();

  void start();  // starts each rank's engine driver (and the DP coordinator with several ranks)
  // The port prefill answers name as remote_port (main: --kv-side-channel-port's listener, or
  // the HTTP port).
  void set_side_channel_port(uint16_t port) { side_channel_port_ = port; }
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);

  struct Live;
  struct Rank;
  // What a request's head says beyond its body: X-Request-Id (vLLM names chat, completions and
  // messages responses after it), X-Data-Parallel-Rank, and the API server its connection went to.
  struct Inbound {
    std::string request_id;
    std::optional<DpRankHeader> dp_rank;
    std::optional<std::string> dp_rank_value;  // the header as sent (--engine-kind sglang reads it)
    size_t api_server = 0;
  };

 private:
  boost::asio::awaitable<void> drive(Rank& rank);
  // Engine outputs to the requests waiting for them (and the DP clients' counts).
  void deliver(Rank& rank, const std::vector<RequestOutput>& outputs);
  // vLLM's sleep mode (sleep_serve.cc): POST /sleep?level=1|2, POST /wake_up, GET /is_sleeping.
  struct Answer {
    unsigned status = 200;
    std::string body;
    std::string ctype;
  };
  boost::asio::awaitable<Answer> sleep_mode(std::string path, std::string target, boost::beast::http::verb method);
  void write_sleep_state(metrics::Exposition& x, const std::vector<std::string>& labels) const;
  // The DP coordinator's loop: the ranks' load snapshots to every API-server client.
  boost::asio::awaitable<void> coordinate();
  // The rank a request runs on: the header's (an index into ranks_, as vLLM's engine list; an
  // index outside it is vLLM's 400, returned as its message) or the API server's pick.
  Result<Rank*, std::string> place(const Inbound& in);
  // --engine-kind sglang: the rank the request names where the route reads it (`body`: null when
  // the route reads no body field), else the controller's round robin; the error is the message
  // of SGLang's 400.
  Result<Rank*, std::string> place_sglang(const Inbound& in, const boost::json::object* body, SglangRankSources reads);
  // Queues a request on `rank` (false: the pool can never hold it). Registers it for the driver.
  bool submit(Rank& rank, const Inbound& in, Live& live, std::vector<uint32_t> prompt, uint32_t max_tokens,
              const CacheNamespace& ns, KvTransfer kv = KvTransfer::kNone);
  // The HTTP side is done with it; `abort`: its client went away, so the engine drops it.
  void retire(Live& live, bool abort);
  void publish_counts(Rank& rank);
  Rank* rank_named(const boost::json::object& o, std::string& error);  // admin "rank": a DP rank number
  // 404 for a model that is neither a served name nor an adapter, as vLLM's _check_model.
  std::optional<AgentError> unknown_model(const std::string& model, const CacheNamespace& ns) const;
  // POST /v1/responses and /v1/messages: convert to chat, render with prompter_, run the engine,
  // answer in the API's shape. Returns whether the connection stays open.
  boost::asio::awaitable<bool> serve_agent(boost::asio::ip::tcp::socket& socket, unsigned version, bool keep_alive,
                                           const std::string& body, AgentApi api, Inbound in);
  // POST /v1/chat/completions (chat) and /v1/completions (openai_serve.cc).
  boost::asio::awaitable<bool> serve_openai(boost::asio::ip::tcp::socket& socket, unsigned version, bool keep_alive,
                                            const std::string& body, bool chat, Inbound in);
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
  // vllm:lora_requests_info's label sets with the time each was last seen (vLLM keeps them all).
  mutable std::mutex lora_mu_;
  mutable std::map<std::string, double> lora_series_;
  // Prefill/decode disaggregation (kv_serve.cc; docs/sim.md §8.4).
  struct Held;
  // A prefill leg finished holding its blocks: its lease starts, its Live gets the answer's params.
  void hold(Rank& rank, const RequestOutput& out);
  void arm_lease(const std::string& name, Held& held);        // its expiry frees the blocks
  void release_lease(const std::string& name, bool expired);  // frees the held blocks of `name`
  // A queued decode leg's heartbeats to its producer, until its pull starts.
  boost::asio::awaitable<void> heartbeats(uint64_t id, Rank* rank);
  void start_pull(Rank& rank, const KvLoad& load);            // a decode leg was admitted
  boost::asio::awaitable<void> pull(Rank* rank, KvLoad load, RemotePrefill remote);
  void notify_done(const RemotePrefill& remote);  // tells the producer to free (fire and forget)
  // POST /sim/kv/pull, /sim/kv/done and /sim/kv/heartbeat: the side channel a consumer calls.
  std::string side_channel(const std::string& path, const std::string& body, unsigned& status);
  void write_kv_metrics(metrics::Exposition& x, const std::vector<std::string>& labels) const;
  boost::json::object kv_stats() const;
  void write_dcgm(metrics::Exposition& x, const Rank& rank, size_t index) const;
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
  Prompter prompter_;
  std::vector<std::unique_ptr<Rank>> ranks_;  // options.local_ranks(), in rank order
  // Data-parallel placement (dp_balance.h): one coordinator, one client per API server.
  DpCoordinator coordinator_;
  std::vector<DpClient> api_servers_;
  boost::asio::steady_timer coordinator_wake_;
  std::chrono::steady_clock::time_point started_;
  size_t next_api_server_ = 0;  // connections go to the API servers in turn
  std::unordered_map<uint64_t, size_t> placed_;  // engine request id -> the API server that placed it
  std::unordered_map<uint64_t, Live*> live_;
  uint64_t next_id_ = 1;
  std::mt19937_64 rng_;
  uint64_t cancelled_ = 0;  // requests aborted because their client went away (/sim/stats)
  uint64_t pins_by_header_ = 0, pins_by_body_ = 0;  // requests pinned to a rank, by what named it (/sim/stats)
  RoundRobin round_robin_;  // --engine-kind sglang
  uint64_t id_salt_ = 0;    // makes Responses/Messages ids differ between processes (vLLM: uuid4)
  bool hang_ = false;
  double error_rate_ = 0;
  unsigned error_status_ = 503;
  bool health_fail_ = false;
  uint64_t drop_header_bytes_ = 0;
  uint32_t stall_after_tokens_ = 0;
  uint32_t tokenize_delay_ms_ = 0;  // /sim/fault {"tokenize_delay_ms": N}: POST /tokenize answers N ms late
  bool garbage_ = false;
  uint32_t sleep_level_ = 0;  // 0 awake; 1 or 2 after POST /sleep (every rank sleeps together)
  bool wake_hang_ = false;    // /sim/fault {"wake_hang": true}: POST /wake_up never answers, stays asleep
  uint64_t sleeps_ = 0, wakes_ = 0;  // /sim/stats
  uint16_t side_channel_port_ = 0;
  std::string kv_engine_id_;  // --kv-engine-id, else a uuid4 of this process
  std::unordered_map<uint64_t, std::string> kv_names_;      // prefill legs running: engine id -> remote_request_id
  std::unordered_map<uint64_t, RemotePrefill> kv_pending_;  // decode legs not pulled yet
  std::unordered_map<std::string, std::unique_ptr<Held>> held_;  // remote_request_id -> blocks held, lease
  struct KvCounters {
    uint64_t pulls_served = 0, sends_done = 0, expired = 0, after_expiry = 0, heartbeats = 0;  // producer
    uint64_t loads_ok = 0, loads_failed = 0, loads_stale = 0, failed_notifications = 0;  // consumer side
    std::vector<uint64_t> xfer_buckets = std::vector<uint64_t>(13, 0);  // vllm:nixl_xfer_time_seconds (+Inf last)
    double xfer_sum = 0;
    uint64_t xfer_count = 0;
  } kv_;
  std::string fingerprint_;  // system_fingerprint: "vllm-<--engine-version>-<hash of the config>"
  std::string disabled_thinking_effort_;  // Prompter::disabled_thinking_effort(), probed once
};

}  // namespace ramjet::sim
