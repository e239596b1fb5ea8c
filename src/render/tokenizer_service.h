// render::tokenizer_service: RJ_TOKENIZER_MODE — local prompt tokenization checked against the
// engines, off the request path.
//
//   off            nothing (the profile name is still validated at startup).
//   remote-shadow  after a complete 200 chat/completions response, the request is queued
//                  (bounded, never blocking) and a worker asks the engine that served it for its
//                  token ids (POST /tokenize with the same rendering inputs); outcomes in metrics.
//   local-shadow   the same remote call, plus the local render + encode of the same payload;
//                  the two are compared (parity_match / parity_mismatch). The engine is the
//                  authority: nothing changes routing.
//   local          the local render + encode only (what exact routing will use), no remote call.
//
// Local tokens are produced only for an engine that is attested: its GET /v1/models (model id,
// root, max_model_len) and GET /version match the manifest, checked every RJ_PROBE_INTERVAL_MS.
// At startup every manifest golden is rendered and encoded and must reproduce the manifest's
// token count and digest, or ramjet does not start.
//
// The tokenize payload both sides render: render/tokenize_payload.h.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "config/config.h"
#include "metrics/histogram.h"
#include "metrics/metrics.h"
#include "render/manifest.h"
#include "render/prompt.h"
#include "render/tokenize_payload.h"

namespace ramjet::render {

class SessionCache;

enum class TokenizerMode : uint8_t { kOff, kRemoteShadow, kLocalShadow, kLocal };
std::optional<TokenizerMode> parse_tokenizer_mode(std::string_view s);
std::string_view to_string(TokenizerMode m);

struct TokenizerServiceConfig {
  TokenizerMode mode = TokenizerMode::kOff;
  std::string profile;  // a model::PROFILES label ("" only when off)
  std::string tokenizer_path, tokenizer_sha256;
  std::string template_path, template_sha256;
  std::string manifest_path, manifest_sha256;
  size_t min_bytes = 32768, max_bytes = 2u << 20;  // request body size window
  size_t workers = 1, queue_capacity = 8;
  std::chrono::milliseconds timeout{2000};          // one /tokenize, /v1/models or /version call
  std::chrono::milliseconds attest_interval{5000};
  size_t max_response_bytes = 16u << 20;
  size_t session_cache_bytes = 128u << 20;          // 0 = no session cache
  std::string bearer;                               // RJ_UPSTREAM_TOKEN
  std::vector<config::UpstreamUrl> upstreams;
};

TokenizerServiceConfig tokenizer_service_config(const config::Config& c);

enum class ShadowSkip : uint8_t { kQueueFull, kOutsideSizeWindow, kUnsupportedEndpoint, kStopping, kMultimodal };
inline constexpr size_t kShadowSkipCount = 5;
std::string_view to_string(ShadowSkip s);

class TokenizerService {
 public:
  // Checks the configuration (even when the mode is off: the profile must exist), loads the
  // tokenizer, template and manifest, and re-renders the manifest's goldens. Every problem goes
  // to `errors` (then nullptr). Off: returns a service that does nothing.
  static std::unique_ptr<TokenizerService> create(const TokenizerServiceConfig& config,
                                                  std::vector<std::string>& errors);
  ~TokenizerService();
  // A service with nothing loaded whose write_metrics shows `mode`'s series (docs/metrics.md
  // only: never start or offer to it).
  static std::unique_ptr<TokenizerService> unloaded_for_docs(TokenizerMode mode, size_t upstreams);

  TokenizerMode mode() const { return cfg_.mode; }
  bool enabled() const { return cfg_.mode != TokenizerMode::kOff; }

  // After a complete 200 response from `upstream` to an inference request (chat true:
  // /v1/chat/completions, else /v1/completions): queue a shadow tokenization. Never blocks or
  // throws; a full queue (jobs or bytes) skips it.
  void offer(size_t upstream, bool chat, std::string_view body) noexcept;

  // Starts the workers and (local modes) the attestation loop on `ctx`.
  void start(boost::asio::io_context& ctx);
  // Drops queued jobs, interrupts in-flight engine calls and ends the attestation loop; never
  // blocks (safe on an io thread, e.g. in the SIGTERM handler).
  void begin_stop();
  // begin_stop(), then joins the workers (each finishes at most the local render it is in).
  void stop();

  bool attested(size_t upstream) const;
  Attestation attestation(size_t upstream) const;
  const Manifest* manifest() const { return manifest_ ? &*manifest_ : nullptr; }

  void write_metrics(metrics::Exposition& out) const;

  // The local pipeline on one payload (the golden check, the workers and the tests).
  struct LocalResult {
    ShadowOutcome outcome = ShadowOutcome::kSuccess;
    std::vector<uint32_t> ids;
  };
  LocalResult render_local(const TokenizePayload& p) const;

 private:
  explicit TokenizerService(TokenizerServiceConfig cfg);
  struct Job {
    size_t upstream;
    bool chat;
    bool attested;  // the engine's attestation when it served the request
    std::string body;
  };
  void worker(size_t index);
  size_t max_queued_bytes() const;
  void set_attestation(size_t i, Attestation a);
  void process(Job& job, boost::asio::io_context& io);
  // The attestation loop's timer lives with the coroutine (shared), so it goes with the frame
  // when the io context is destroyed, never after it.
  struct AttestLoop {
    AttestLoop(boost::asio::io_context& ctx, size_t engines) : ctx(ctx), timer(ctx), busy(engines, 0) {}
    boost::asio::io_context& ctx;
    boost::asio::steady_timer timer;
    std::atomic<bool> stopped{false};
    std::vector<char> busy;  // a check in flight per engine (touched on ctx only)
  };
  boost::asio::awaitable<void> attest_loop(std::shared_ptr<AttestLoop> loop);
  boost::asio::awaitable<void> attest_one(std::shared_ptr<AttestLoop> loop, size_t i);

  TokenizerServiceConfig cfg_;
  const model::ModelProfile* profile_ = nullptr;
  std::shared_ptr<const PromptRenderer> renderer_;
  std::optional<Manifest> manifest_;
  std::unique_ptr<SessionCache> session_cache_;  // local modes, when sized

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  size_t queued_bytes_ = 0;
  bool stopping_ = false;
  std::atomic<bool> stop_requested_{false};  // stopping_, readable without mu_ (workers' calls)
  std::vector<std::thread> threads_;
  std::vector<boost::asio::io_context*> worker_io_;  // each worker's, while it runs (under mu_)

  std::shared_ptr<AttestLoop> attest_;

  // Metrics.
  std::vector<std::string> labels_;                          // upstream label: the ordinal
  std::vector<std::atomic<uint8_t>> attest_state_;           // Attestation per upstream
  std::vector<metrics::Counter> attest_checks_;              // [upstream][Attestation]
  metrics::Counter outcomes_[2][2][kShadowOutcomeCount];     // [backend remote/local][chat][outcome]
  metrics::Counter skipped_[kShadowSkipCount];
  metrics::Counter tokens_[2];
  metrics::Gauge queue_depth_;
  metrics::Histogram duration_[2];
};

// The families TokenizerService::write_metrics exports (docs/metrics.md).
std::span<const metrics::Family> tokenizer_families();

}  // namespace ramjet::render
