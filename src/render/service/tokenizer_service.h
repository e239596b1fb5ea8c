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
// token count and digest, or ramjet does not start. With RJ_MODEL_DIR the files come from the
// engines' model folder (digests taken at startup, the profile from config.json's model_type);
// without a manifest, built-in goldens rendered here are what each engine's /tokenize must
// reproduce to be attested (render/identity/engine_attestation.h).
//
// Several RJ_MODEL_DIR folders (engines serving several models): each folder is a model of its
// own — profile, renderer, goldens, session cache, attestation — sharing the render pool and the
// shadow's counters. An engine is attested by the folder whose goldens its /tokenize reproduces
// (once one has, the others stop asking it), and exact routing renders a request with the folder
// that attested the engines of its model's pool.
//
// The parts: render/service/render_pool.h (worker threads, bounded queue),
// render/identity/engine_attestation.h (the identity checks), render/service/shadow_comparer.h (the
// shadow jobs and their counters), render/identity/tokenize_payload.h (the payload both sides
// render). This façade checks and loads the configuration, owns the parts, starts and stops them,
// and writes their metrics.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "config/config.h"
#include "metrics/metrics.h"
#include "render/identity/engine_attestation.h"
#include "render/identity/manifest.h"
#include "render/prompt/prompt.h"
#include "render/service/render_pool.h"
#include "render/service/shadow_comparer.h"
#include "render/identity/tokenize_payload.h"

namespace ramjet::render {

class SessionCache;

struct TokenizerServiceConfig {
  TokenizerMode mode = TokenizerMode::kOff;
  std::string profile;  // a model::PROFILES label ("" when off, or picked from each model folder)
  // RJ_MODEL_DIR: one folder per model the engines serve; the files below are found (and pinned)
  // in each. Several: each engine is proven by the folder whose goldens its /tokenize reproduces.
  std::vector<std::string> model_dirs;
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
  const net::Roster* roster = nullptr;  // set by app: the engines by slot (else `upstreams`, fixed)
};

// A model folder (RJ_MODEL_DIR, `ramjet manifest --model-dir`) as `vllm serve` reads it: the
// tokenizer, tokenizer_config.json (special tokens), the chat template (chat_template.jinja, else
// chat_template.json, else tokenizer_config.json's: the order transformers reads them in; none for
// a native-formatter profile) and the profile — `profile` when given, else the one that claims
// config.json's model_type. An error says what is missing (no prefix; `profile_setting` says how
// the caller's user names a profile, e.g. "set RJ_TOKENIZER_PROFILE").
struct ModelFolder {
  std::string profile;
  std::string tokenizer_path, tokenizer_config_path, template_path;
};
Result<ModelFolder, std::string> read_model_folder(const std::string& dir, std::string_view profile,
                                                   std::string_view profile_setting);

// `exact_on`: exact routing runs (then RJ_EXACT_TOKENS=local turns mode off into local).
TokenizerServiceConfig tokenizer_service_config(const config::Config& c, bool exact_on);

class TokenizerService {
 public:
  // Checks the configuration (even when the mode is off: the profile must exist), loads each
  // model folder's tokenizer, template and manifest, and re-renders its goldens. Every problem goes
  // to `errors` (then nullptr). Off: returns a service that does nothing.
  static std::unique_ptr<TokenizerService> create(const TokenizerServiceConfig& config,
                                                  std::vector<std::string>& errors);
  ~TokenizerService();
  // A service with nothing loaded whose write_metrics shows `mode`'s series (docs/metrics.md
  // only: never start or offer to it).
  static std::unique_ptr<TokenizerService> unloaded_for_docs(TokenizerMode mode, size_t upstreams);

  TokenizerMode mode() const { return cfg_.mode; }
  bool enabled() const { return cfg_.mode != TokenizerMode::kOff; }
  // The models loaded: one per RJ_MODEL_DIR folder (one for the RJ_TOKENIZER_* files).
  size_t models() const { return models_.size(); }

  // After a complete 200 response from `upstream` to an inference request (chat true:
  // /v1/chat/completions, else /v1/completions): queue a shadow tokenization (by the model
  // folder that attested the engine, else the first). Never blocks or throws; a full queue (jobs
  // or bytes) skips it.
  void offer(size_t upstream, bool chat, std::string_view body) noexcept;

  // Starts the workers and (local modes) each model's attestation loop on `ctx`.
  void start(boost::asio::io_context& ctx);
  // Drops queued jobs, interrupts in-flight engine calls and ends the attestation loops; never
  // blocks (safe on an io thread, e.g. in the SIGTERM handler).
  void begin_stop();
  // begin_stop(), then joins the workers (each finishes at most the local render it is in).
  void stop();

  // Whether some model's renderer attested `upstream` (its requests can be tokenized locally).
  bool attested(size_t upstream) const { return attesting_model(upstream).has_value(); }
  // Which model (0-based, RJ_MODEL_DIR's order) attested `upstream`, or nullopt.
  std::optional<size_t> attesting_model(size_t upstream) const;
  // The attesting model's outcome for `upstream`, else the first model's.
  Attestation attestation(size_t upstream) const;
  const Manifest* manifest(size_t model = 0) const;

  void write_metrics(metrics::Exposition& out) const;

  // The local pipeline of `model` on one payload (the golden check and the tests; the shadow's
  // jobs run the same render_local).
  using LocalResult = LocalRender;
  LocalResult render_local(const TokenizePayload& p, size_t model = 0) const;

  // Exact routing's tokens (RJ_EXACT_TOKENS=local) by `model`'s renderer: a chat, completions,
  // Responses or Messages request body parsed (the last two turned into vLLM's chat request
  // first), rendered and encoded on the render pool (shared with the shadow jobs, the model's
  // session cache reused), delivered by `deadline` at the latest. The caller checks attestation
  // (attesting_model); `model` and `cache_salt` of the result are the namespace fields read on the
  // way. A refusal: queue full, deadline, stopping.
  using RoutingRender = RoutingTokens;  // render/identity/tokenize_payload.h: render_routing_body
  boost::asio::awaitable<Result<RoutingRender, PoolRefusal>> render_for_routing(size_t model, PromptApi api,
                                                                                std::string body,
                                                                                RenderPool::Clock::time_point deadline);
  // The parse + render + encode itself (what the pool job runs; the tests and the bench call it).
  RoutingRender render_routing(PromptApi api, std::string_view body, size_t model = 0) const;

 private:
  struct Model;  // one model folder's profile, renderer, goldens, session cache, attestation, shadow
  explicit TokenizerService(TokenizerServiceConfig cfg);
  // One model: `dir` (empty: the RJ_TOKENIZER_* files) loaded, checked and its goldens rendered;
  // nullptr with `errors` grown.
  std::unique_ptr<Model> load_model(std::string dir, size_t index, std::vector<std::string>& errors);
  void assemble(Model& m);  // its shadow comparer, once the profile and renderer are known

  TokenizerServiceConfig cfg_;
  RenderPool pool_;          // shared by the models
  ShadowCounters counters_;  // the shadow's, shared by the models
  std::vector<std::unique_ptr<Model>> models_;
};

// The families TokenizerService::write_metrics exports (docs/metrics.md).
std::span<const metrics::Family> tokenizer_families();

}  // namespace ramjet::render
