// render::shadow_comparer: the tokenizer shadow (RJ_TOKENIZER_MODE remote-shadow, local-shadow,
// local). After a complete 200 chat/completions response the body is offered here; a job on the
// render pool builds the tokenize payload (render/identity/tokenize_payload.h), asks the engine
// that served it for its token ids (POST /tokenize, the shadow modes), renders + encodes it locally
// for an attested engine (the local modes) and, in local-shadow, compares the two. Outcomes go to
// counters only: nothing changes routing, and the request never waits for any of it.
// Not here: the threads and the queue bound (render/service/render_pool.h), engine identity
// (render/identity/engine_attestation.h), configuration checks, loading and the metric text
// (render/service/tokenizer_service.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "config/config.h"
#include "net/roster.h"
#include "metrics/histogram.h"
#include "metrics/metrics.h"
#include "render/identity/tokenize_payload.h"

namespace ramjet::model {
class ModelProfile;
}

namespace ramjet::render {

class EngineAttestation;
class PromptRenderer;
class RenderPool;
class SessionCache;

enum class TokenizerMode : uint8_t { kOff, kRemoteShadow, kLocalShadow, kLocal };
std::optional<TokenizerMode> parse_tokenizer_mode(std::string_view s);
std::string_view to_string(TokenizerMode m);
// Whether the mode asks the engines' /tokenize (remote) / renders locally (local).
inline bool remote_mode(TokenizerMode m) {
  return m == TokenizerMode::kRemoteShadow || m == TokenizerMode::kLocalShadow;
}
inline bool local_mode(TokenizerMode m) {
  return m == TokenizerMode::kLocalShadow || m == TokenizerMode::kLocal;
}

// Why a completed request was not tokenized (metric labels).
enum class ShadowSkip : uint8_t {
  kQueueFull,
  kOutsideSizeWindow,
  kUnsupportedEndpoint,
  kStopping,
  kMultimodal
};
inline constexpr size_t kShadowSkipCount = 5;
std::string_view to_string(ShadowSkip s);

struct ShadowConfig {
  TokenizerMode mode = TokenizerMode::kOff;
  size_t min_bytes = 32768, max_bytes = 2u << 20;  // request body size window
  std::chrono::milliseconds timeout{2000};         // one /tokenize call
  size_t max_response_bytes = 16u << 20;
  std::string bearer;  // RJ_UPSTREAM_TOKEN
  std::vector<config::UpstreamUrl> upstreams;  // a fixed fleet (when `roster` is not set)
  const net::Roster* roster = nullptr;         // the engines by slot, changing at runtime
};

// What the shadow counted (read by TokenizerService::write_metrics).
struct ShadowCounters {
  ShadowCounters();
  metrics::Counter outcomes[2][2][kShadowOutcomeCount];  // [backend remote/local][chat][outcome]
  metrics::Counter skipped[kShadowSkipCount];
  metrics::Counter tokens[2];      // [backend]
  metrics::Histogram duration[2];  // [backend]
};

class ShadowComparer {
 public:
  // `profile` builds the payloads (nullptr: nothing is offered); `renderer` (local modes) with
  // `cache` (optional) renders them. The pool, the attestation and the counters (shared by the
  // comparers of several model folders) outlive the comparer.
  ShadowComparer(ShadowConfig cfg, const model::ModelProfile* profile,
                 std::shared_ptr<const PromptRenderer> renderer, SessionCache* cache,
                 RenderPool& pool, const EngineAttestation& attestation, ShadowCounters& counters);

  // After a complete 200 response from `upstream` (chat: /v1/chat/completions, else
  // /v1/completions): queue a shadow job on the pool. Never blocks or throws; a full pool queue
  // (jobs or bytes) or a stopped pool skips it.
  void offer(size_t upstream, bool chat, std::string_view body) noexcept;
  // Interrupts in-flight /tokenize calls (not counted) and refuses later ones; never blocks.
  void begin_stop();

  const ShadowCounters& counters() const { return counters_; }

 private:
  struct Job {
    size_t upstream;
    bool chat;
    bool attested;  // the engine's attestation when it served the request
    std::string body;
  };
  void run(Job& job) noexcept;
  void process(Job& job);
  // The engine's ids for `payload`, or nullopt (counted); `interrupted` when begin_stop() ended
  // the call (then nothing is counted).
  std::optional<std::vector<uint32_t>> ask_engine(const Job& job, const TokenizePayload& payload,
                                                  bool& interrupted);

  ShadowConfig cfg_;
  net::RosterRef roster_;
  const model::ModelProfile* profile_;
  std::shared_ptr<const PromptRenderer> renderer_;
  SessionCache* cache_;
  RenderPool& pool_;
  const EngineAttestation& attestation_;
  ShadowCounters& counters_;

  std::mutex mu_;
  bool stopping_ = false;                        // under mu_
  std::atomic<bool> stop_requested_{false};      // stopping_, readable without mu_
  std::vector<boost::asio::io_context*> calls_;  // the io context of each /tokenize in flight
};

}  // namespace ramjet::render
