// render::tokenizer_service (see tokenizer_service.h).
#include "render/tokenizer_service.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include "model/model_profile.h"
#include "net/client.h"
#include "render/session_cache.h"

namespace ramjet::render {

namespace asio = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::array kFamilies = {
    metrics::Family{"ramjet_tokenizer_info", metrics::MetricKind::kGauge, "mode,profile",
                    "1, labelled with RJ_TOKENIZER_MODE (off|remote-shadow|local-shadow|local) and "
                    "RJ_TOKENIZER_PROFILE."},
    metrics::Family{"ramjet_tokenizer_shadow_total", metrics::MetricKind::kCounter, "backend,endpoint,outcome",
                    "Shadow tokenizations by backend (remote: the engine's /tokenize; local: ramjet's "
                    "render + encode), endpoint (chat|completions) and outcome. Remote: success, "
                    "timeout, connect_error, http_error, response_too_large, decode_error. Local: "
                    "parity_match, parity_mismatch (local-shadow), success (local), unsupported_request, "
                    "decode_error, render_error, encode_error, remote_authority_unavailable, unattested."},
    metrics::Family{"ramjet_tokenizer_shadow_skipped_total", metrics::MetricKind::kCounter, "reason",
                    "Completed requests not tokenized: queue_full, outside_size_window "
                    "(RJ_TOKENIZER_MIN_BYTES..RJ_TOKENIZER_MAX_BYTES), unsupported_endpoint (no "
                    "messages array / no string prompt), multimodal (a non-text content part: the engine is not "
                    "asked to fetch its media again), stopping."},
    metrics::Family{"ramjet_tokenizer_shadow_queue_depth", metrics::MetricKind::kGauge, "",
                    "Requests waiting for a shadow tokenization worker."},
    metrics::Family{"ramjet_tokenizer_shadow_duration_seconds", metrics::MetricKind::kHistogram, "backend",
                    "Time of one remote /tokenize call or one local render + encode."},
    metrics::Family{"ramjet_tokenizer_shadow_tokens_total", metrics::MetricKind::kCounter, "backend",
                    "Prompt tokens produced by successful remote and local tokenizations."},
    metrics::Family{"ramjet_tokenizer_attested", metrics::MetricKind::kGauge, "upstream",
                    "1 while the engine's /v1/models (model id, root, max_model_len) and /version match "
                    "the manifest, so its requests are tokenized locally (local modes)."},
    metrics::Family{"ramjet_tokenizer_attestation_checks_total", metrics::MetricKind::kCounter, "upstream,outcome",
                    "Engine identity checks by outcome: match, models_fetch_error, models_decode, "
                    "model_missing, model_ambiguous, model_root_mismatch, model_context_mismatch, "
                    "version_fetch_error, version_decode, version_mismatch."},
    metrics::Family{"ramjet_tokenizer_session_cache_lookups_total", metrics::MetricKind::kCounter, "result",
                    "Local encodes by whether a cached conversation prefix was reused (hit) or not (miss)."},
    metrics::Family{"ramjet_tokenizer_session_cache_reused_bytes_total", metrics::MetricKind::kCounter, "",
                    "Prompt bytes whose token ids came from the session cache instead of being encoded."},
    metrics::Family{"ramjet_tokenizer_session_cache_evictions_total", metrics::MetricKind::kCounter, "",
                    "Cached prefixes dropped to stay within RJ_TOKENIZER_SESSION_CACHE_BYTES."},
    metrics::Family{"ramjet_tokenizer_session_cache_bytes", metrics::MetricKind::kGauge, "",
                    "Bytes held by the session cache (text, ids and index)."},
};
enum FamilyIndex {
  kInfo, kShadow, kSkipped, kQueue, kDuration, kTokens, kAttested, kChecks,
  kCacheLookups, kCacheReused, kCacheEvictions, kCacheBytes,
};

constexpr std::string_view kBackend[2] = {"remote", "local"};
constexpr std::string_view kEndpoint[2] = {"completions", "chat"};

bool remote_mode(TokenizerMode m) { return m == TokenizerMode::kRemoteShadow || m == TokenizerMode::kLocalShadow; }
bool local_mode(TokenizerMode m) { return m == TokenizerMode::kLocalShadow || m == TokenizerMode::kLocal; }

std::string known_profiles() {
  std::string s;
  for (const auto* p : model::PROFILES) s += (s.empty() ? "" : ", ") + std::string(p->label());
  return s;
}

ShadowOutcome from_failure(net::GetFailure f) {
  switch (f) {
    case net::GetFailure::kTimeout: return ShadowOutcome::kTimeout;
    case net::GetFailure::kConnect: return ShadowOutcome::kConnectError;
    case net::GetFailure::kTooLarge: return ShadowOutcome::kResponseTooLarge;
    case net::GetFailure::kProtocol: return ShadowOutcome::kHttpError;
    case net::GetFailure::kNone: break;
  }
  return ShadowOutcome::kSuccess;
}

}  // namespace

std::span<const metrics::Family> tokenizer_families() { return kFamilies; }

std::optional<TokenizerMode> parse_tokenizer_mode(std::string_view s) {
  if (s == "off") return TokenizerMode::kOff;
  if (s == "remote-shadow") return TokenizerMode::kRemoteShadow;
  if (s == "local-shadow") return TokenizerMode::kLocalShadow;
  if (s == "local") return TokenizerMode::kLocal;
  return std::nullopt;
}

std::string_view to_string(TokenizerMode m) {
  switch (m) {
    case TokenizerMode::kOff: return "off";
    case TokenizerMode::kRemoteShadow: return "remote-shadow";
    case TokenizerMode::kLocalShadow: return "local-shadow";
    case TokenizerMode::kLocal: return "local";
  }
  return "off";
}

std::string_view to_string(ShadowSkip s) {
  switch (s) {
    case ShadowSkip::kQueueFull: return "queue_full";
    case ShadowSkip::kOutsideSizeWindow: return "outside_size_window";
    case ShadowSkip::kUnsupportedEndpoint: return "unsupported_endpoint";
    case ShadowSkip::kStopping: return "stopping";
    case ShadowSkip::kMultimodal: return "multimodal";
  }
  return "unknown";
}

TokenizerServiceConfig tokenizer_service_config(const config::Config& c) {
  TokenizerServiceConfig t;
  t.mode = parse_tokenizer_mode(c.tokenizer_mode).value_or(TokenizerMode::kOff);
  t.profile = c.tokenizer_profile;
  t.tokenizer_path = c.tokenizer_path;
  t.tokenizer_sha256 = c.tokenizer_sha256;
  t.template_path = c.chat_template_path;
  t.template_sha256 = c.chat_template_sha256;
  t.manifest_path = c.tokenizer_manifest_path;
  t.manifest_sha256 = c.tokenizer_manifest_sha256;
  t.min_bytes = c.tokenizer_min_bytes;
  t.max_bytes = c.tokenizer_max_bytes;
  t.workers = c.tokenizer_workers;
  t.queue_capacity = c.tokenizer_queue_capacity;
  t.timeout = std::chrono::milliseconds(c.tokenizer_timeout_ms);
  t.attest_interval = std::chrono::milliseconds(c.probe_interval_ms);
  t.session_cache_bytes = c.tokenizer_session_cache_bytes;
  t.bearer = c.upstream_token;
  t.upstreams = c.upstreams;
  return t;
}

TokenizerService::TokenizerService(TokenizerServiceConfig cfg)
    : cfg_(std::move(cfg)),
      labels_(cfg_.upstreams.size()),
      attest_state_(cfg_.upstreams.size()),
      attest_checks_(cfg_.upstreams.size() * kAttestationCount),
      duration_{metrics::Histogram(metrics::exponential_buckets(0.0005, 2, 16)),
                metrics::Histogram(metrics::exponential_buckets(0.0005, 2, 16))} {
  for (size_t i = 0; i < labels_.size(); ++i) labels_[i] = std::to_string(i);  // opaque ordinals
  for (auto& s : attest_state_) s.store(static_cast<uint8_t>(Attestation::kUnchecked));
}

TokenizerService::~TokenizerService() { stop(); }

std::unique_ptr<TokenizerService> TokenizerService::unloaded_for_docs(TokenizerMode mode, size_t upstreams) {
  TokenizerServiceConfig c;
  c.mode = mode;
  c.profile = "qwen3";
  c.upstreams.resize(upstreams);
  return std::unique_ptr<TokenizerService>(new TokenizerService(std::move(c)));
}

std::unique_ptr<TokenizerService> TokenizerService::create(const TokenizerServiceConfig& cfg,
                                                           std::vector<std::string>& errors) {
  std::unique_ptr<TokenizerService> s(new TokenizerService(cfg));
  const size_t before = errors.size();
  auto err = [&](std::string m) { errors.push_back(std::move(m)); };

  // The profile is checked even when off: a typo must not quietly disable attestation later.
  if (!cfg.profile.empty()) {
    s->profile_ = model::find_profile(cfg.profile);
    if (!s->profile_) err("RJ_TOKENIZER_PROFILE: unknown profile '" + cfg.profile + "' (known: " + known_profiles() + ")");
  } else if (cfg.mode != TokenizerMode::kOff) {
    err("RJ_TOKENIZER_PROFILE is required when RJ_TOKENIZER_MODE is " + std::string(to_string(cfg.mode)) +
        " (known: " + known_profiles() + ")");
  }
  auto pair = [&](const std::string& path, const std::string& sha, std::string_view path_name,
                  std::string_view sha_name) {
    if (path.empty() != sha.empty()) {
      err(std::string(path.empty() ? sha_name : path_name) + " is set without " +
          std::string(path.empty() ? path_name : sha_name) + ": a file and its SHA-256 pin go together");
    } else if (!sha.empty() && !is_sha256_hex(sha)) {
      err(std::string(sha_name) + ": 64 hex digits (the SHA-256 of the file)");
    }
  };
  pair(cfg.tokenizer_path, cfg.tokenizer_sha256, "RJ_TOKENIZER_PATH", "RJ_TOKENIZER_SHA256");
  pair(cfg.template_path, cfg.template_sha256, "RJ_CHAT_TEMPLATE_PATH", "RJ_CHAT_TEMPLATE_SHA256");
  pair(cfg.manifest_path, cfg.manifest_sha256, "RJ_TOKENIZER_MANIFEST_PATH", "RJ_TOKENIZER_MANIFEST_SHA256");
  if (cfg.min_bytes > cfg.max_bytes) err("RJ_TOKENIZER_MIN_BYTES is larger than RJ_TOKENIZER_MAX_BYTES");
  if (errors.size() != before || !local_mode(cfg.mode)) return errors.size() == before ? std::move(s) : nullptr;

  // Local modes: the renderer, pinned; the manifest, pinned; the goldens.
  const auto* profile = s->profile_;
  const bool hf = profile->formatter_source() == model::FormatterSource::kHfChatTemplate;
  if (cfg.tokenizer_path.empty()) err("RJ_TOKENIZER_PATH and RJ_TOKENIZER_SHA256 are required in local modes");
  if (cfg.manifest_path.empty())
    err("RJ_TOKENIZER_MANIFEST_PATH and RJ_TOKENIZER_MANIFEST_SHA256 are required in local modes");
  if (hf && cfg.template_path.empty())
    err("profile " + cfg.profile + " renders with an HF chat template: RJ_CHAT_TEMPLATE_PATH and "
        "RJ_CHAT_TEMPLATE_SHA256 are required");
  if (!hf && !cfg.template_path.empty())
    err("profile " + cfg.profile + " has a native formatter: RJ_CHAT_TEMPLATE_PATH must not be set");
  if (!hf && !native_formatter_known(profile->native_formatter()))
    err("profile " + cfg.profile + " needs the native formatter '" + std::string(profile->native_formatter()) +
        "', which this build does not have (it has: " + native_formatter_list() +
        "); use RJ_TOKENIZER_MODE=off or remote-shadow");
  if (errors.size() != before) return nullptr;

  PromptSources src;
  src.tokenizer_path = cfg.tokenizer_path;
  src.tokenizer_sha256 = cfg.tokenizer_sha256;
  src.template_path = cfg.template_path;
  src.template_sha256 = cfg.template_sha256;
  src.sibling_config = false;  // only pinned files shape the prompt
  if (!hf) src.native_formatter = std::string(profile->native_formatter());
  auto renderer = PromptRenderer::load(src);
  if (!renderer) {
    err("tokenizer: " + std::string(to_string(renderer.error().kind)) + " error: " + renderer.error().message);
    return nullptr;
  }
  s->renderer_ = std::move(renderer.value());
  if (cfg.session_cache_bytes > 0) {
    s->session_cache_ = std::make_unique<SessionCache>(SessionCacheLimits{.max_entries = 4096,
                                                                          .max_bytes = cfg.session_cache_bytes});
  }

  auto manifest_text = read_file(cfg.manifest_path, PromptErrc::kConfig, ManifestLimits{}.max_bytes);
  if (!manifest_text) {
    err("RJ_TOKENIZER_MANIFEST_PATH: " + manifest_text.error().message);
    return nullptr;
  }
  if (sha256_hex(*manifest_text) != lower_hex(cfg.manifest_sha256)) {
    err("RJ_TOKENIZER_MANIFEST_PATH: " + cfg.manifest_path + ": SHA-256 differs from RJ_TOKENIZER_MANIFEST_SHA256");
    return nullptr;
  }
  auto manifest = parse_manifest(*manifest_text);
  if (!manifest) {
    err("RJ_TOKENIZER_MANIFEST_PATH: " + manifest.error().message);
    return nullptr;
  }
  if (manifest->profile != cfg.profile)
    err("manifest renderer.profile is '" + manifest->profile + "', RJ_TOKENIZER_PROFILE is '" + cfg.profile + "'");
  if (manifest->tokenizer_sha256 != lower_hex(cfg.tokenizer_sha256))
    err("manifest tokenizer.sha256 differs from RJ_TOKENIZER_SHA256");
  if (hf && manifest->chat_template_sha256 != lower_hex(cfg.template_sha256))
    err("manifest chat_template.sha256 differs from RJ_CHAT_TEMPLATE_SHA256");
  if (!hf && !manifest->chat_template_sha256.empty())
    err("manifest chat_template: the profile has a native formatter (no template)");
  if (errors.size() != before) return nullptr;

  // Every golden, rendered and encoded as a live request would be.
  for (const ManifestGolden& g : manifest->goldens) {
    auto payload = build_tokenize_payload(*profile, g.chat, g.request);
    if (!payload) {
      err("manifest golden '" + g.id + "': not a " + (g.chat ? "chat" : "completions") + " request");
      continue;
    }
    LocalResult r = s->render_local(*payload);
    if (r.outcome != ShadowOutcome::kSuccess) {
      err("manifest golden '" + g.id + "': local " + std::string(to_string(r.outcome)));
    } else if (r.ids.size() != g.token_count) {
      err("manifest golden '" + g.id + "': rendered " + std::to_string(r.ids.size()) + " tokens, the manifest has " +
          std::to_string(g.token_count));
    } else if (token_ids_sha256(r.ids) != g.token_ids_sha256) {
      err("manifest golden '" + g.id + "': " + std::to_string(r.ids.size()) +
          " tokens, but the token ids differ from the manifest's digest");
    }
  }
  if (errors.size() != before) return nullptr;
  s->manifest_ = std::move(manifest.value());
  spdlog::info("tokenizer: mode={} profile={} {} manifest goldens reproduced", to_string(cfg.mode), cfg.profile,
               s->manifest_->goldens.size());
  return s;
}

TokenizerService::LocalResult TokenizerService::render_local(const TokenizePayload& p) const {
  LocalResult r;
  if (p.local_refusal) {
    r.outcome = *p.local_refusal;
    return r;
  }
  auto ids = render_payload(*renderer_, p, session_cache_.get());
  if (!ids) {
    const PromptErrc kind = ids.error().kind;
    r.outcome = kind == PromptErrc::kDecode   ? ShadowOutcome::kDecodeError
                : kind == PromptErrc::kEncode ? ShadowOutcome::kEncodeError
                                              : ShadowOutcome::kRenderError;
    return r;
  }
  r.ids = std::move(ids.value());
  return r;
}

void TokenizerService::offer(size_t upstream, bool chat, std::string_view body) noexcept {
  if (cfg_.mode == TokenizerMode::kOff || upstream >= cfg_.upstreams.size()) return;
  if (body.size() < cfg_.min_bytes || body.size() > cfg_.max_bytes) {
    skipped_[static_cast<size_t>(ShadowSkip::kOutsideSizeWindow)].inc();
    return;
  }
  try {
    // The copy is made before the lock (a 2 MiB body must not hold up other threads' offers).
    Job job{upstream, chat, attested(upstream), std::string(body)};
    {
      std::lock_guard lock(mu_);
      if (stopping_ || threads_.empty()) {
        skipped_[static_cast<size_t>(ShadowSkip::kStopping)].inc();
        return;
      }
      if (queue_.size() >= cfg_.queue_capacity || queued_bytes_ + body.size() > max_queued_bytes()) {
        skipped_[static_cast<size_t>(ShadowSkip::kQueueFull)].inc();
        return;
      }
      queued_bytes_ += job.body.size();
      queue_.push_back(std::move(job));
      queue_depth_.set(static_cast<int64_t>(queue_.size()));
    }
    cv_.notify_one();
  } catch (...) {  // out of memory for the copy: the shadow skips it, the request is unaffected
    skipped_[static_cast<size_t>(ShadowSkip::kQueueFull)].inc();
  }
}

size_t TokenizerService::max_queued_bytes() const { return std::max<size_t>(64u << 20, cfg_.max_bytes); }

void TokenizerService::start(asio::io_context& ctx) {
  if (cfg_.mode == TokenizerMode::kOff) return;
  {
    std::lock_guard lock(mu_);
    const size_t n = std::max<size_t>(1, cfg_.workers);
    worker_io_.resize(n);
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this, i] { worker(i); });
  }
  if (manifest_) {
    attest_ = std::make_shared<AttestLoop>(ctx, cfg_.upstreams.size());
    asio::co_spawn(ctx, attest_loop(attest_), asio::detached);
  }
}

void TokenizerService::begin_stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    stop_requested_.store(true, std::memory_order_release);
    queue_.clear();
    queued_bytes_ = 0;
    queue_depth_.set(0);
    // An in-flight /tokenize call ends now instead of at its deadline.
    for (asio::io_context* io : worker_io_)
      if (io) io->stop();
  }
  cv_.notify_all();
  if (std::shared_ptr<AttestLoop> loop = std::move(attest_)) {
    loop->stopped = true;
    // The timer belongs to the context's thread: cancel it there.
    asio::post(loop->ctx, [loop] { loop->timer.cancel(); });
  }
}

void TokenizerService::stop() {
  begin_stop();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();  // at most one local render each after begin_stop()
}

void TokenizerService::worker(size_t index) {
  asio::io_context io;  // this worker's remote calls
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    worker_io_[index] = &io;
  }
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      job = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= job.body.size();
      queue_depth_.set(static_cast<int64_t>(queue_.size()));
    }
    try {
      process(job, io);
    } catch (const std::exception& e) {  // e.g. out of memory rendering a huge body
      spdlog::warn("tokenizer shadow: job abandoned: {}", e.what());
    }
  }
  std::lock_guard lock(mu_);
  worker_io_[index] = nullptr;
}

void TokenizerService::process(Job& job, asio::io_context& io) {
  auto payload = build_tokenize_payload(*profile_, job.chat, job.body);
  if (!payload) {
    skipped_[static_cast<size_t>(ShadowSkip::kUnsupportedEndpoint)].inc();
    return;
  }
  if (payload->multimodal) {
    // The engine would fetch the images again to count their tokens; neither side is asked.
    skipped_[static_cast<size_t>(ShadowSkip::kMultimodal)].inc();
    return;
  }
  const size_t ep = job.chat ? 1 : 0;
  std::optional<std::vector<uint32_t>> remote;
  if (remote_mode(cfg_.mode)) {
    const auto t0 = Clock::now();
    net::GetFailure failure = net::GetFailure::kNone;
    net::SimpleResponse res;
    const bool completed = net::run_to_completion(
        io,
        net::simple_post(cfg_.upstreams[job.upstream], "/tokenize", payload->json, cfg_.bearer, cfg_.timeout,
                         cfg_.max_response_bytes, failure),
        res, failure, &stop_requested_);
    if (!completed) return;  // begin_stop() interrupted the call: nothing to count
    ShadowOutcome o = from_failure(failure);
    if (o == ShadowOutcome::kSuccess && res.status != 200) o = ShadowOutcome::kHttpError;
    if (o == ShadowOutcome::kSuccess) {
      remote = decode_tokenize_response(res.body);
      if (!remote) o = ShadowOutcome::kDecodeError;
    }
    duration_[0].observe(std::chrono::duration<double>(Clock::now() - t0).count());
    outcomes_[0][ep][static_cast<size_t>(o)].inc();
    if (remote) tokens_[0].inc(remote->size());
  }
  if (!local_mode(cfg_.mode)) return;
  ShadowOutcome o;
  // Attested when it served the request and still now (an engine restarted with another model
  // in between gets no local tokens for it).
  if (!job.attested || !attested(job.upstream)) {
    o = ShadowOutcome::kUnattested;
  } else {
    const auto t0 = Clock::now();
    LocalResult r = render_local(*payload);
    duration_[1].observe(std::chrono::duration<double>(Clock::now() - t0).count());
    o = r.outcome;
    if (o == ShadowOutcome::kSuccess) {
      tokens_[1].inc(r.ids.size());
      if (cfg_.mode == TokenizerMode::kLocalShadow) {
        if (!remote) {
          o = ShadowOutcome::kRemoteUnavailable;
        } else if (*remote == r.ids) {
          o = ShadowOutcome::kParityMatch;
        } else {
          o = ShadowOutcome::kParityMismatch;
          size_t k = 0;
          while (k < remote->size() && k < r.ids.size() && (*remote)[k] == r.ids[k]) ++k;
          // Counts and an index only: no token ids, no request bytes.
          spdlog::warn("tokenizer shadow: parity mismatch upstream={} endpoint={} local_tokens={} "
                       "remote_tokens={} first_difference={}",
                       labels_[job.upstream], kEndpoint[ep], r.ids.size(), remote->size(), k);
        }
      }
    }
  }
  outcomes_[1][ep][static_cast<size_t>(o)].inc();
}

bool TokenizerService::attested(size_t i) const { return attestation(i) == Attestation::kMatch; }

Attestation TokenizerService::attestation(size_t i) const {
  if (i >= attest_state_.size()) return Attestation::kUnchecked;
  return static_cast<Attestation>(attest_state_[i].load(std::memory_order_acquire));
}

asio::awaitable<void> TokenizerService::attest_loop(std::shared_ptr<AttestLoop> loop) {
  while (!loop->stopped) {
    // Each engine on its own: a hung engine delays only its own next check.
    for (size_t i = 0; i < cfg_.upstreams.size(); ++i) {
      if (loop->busy[i]) continue;
      loop->busy[i] = 1;
      asio::co_spawn(loop->ctx, attest_one(loop, i), [this, loop, i](std::exception_ptr e) {
        loop->busy[i] = 0;
        if (e) set_attestation(i, Attestation::kModelsFetch);  // never left at a stale match
      });
    }
    loop->timer.expires_after(cfg_.attest_interval);
    boost::system::error_code ec;
    co_await loop->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> TokenizerService::attest_one(std::shared_ptr<AttestLoop> loop, size_t i) {
  const auto& url = cfg_.upstreams[i];
  net::GetFailure failure = net::GetFailure::kNone;
  auto models = co_await net::simple_get(url, "/v1/models", cfg_.bearer, cfg_.timeout, 1u << 20, failure);
  Attestation a;
  if (failure != net::GetFailure::kNone || models.status != 200) {
    a = Attestation::kModelsFetch;
  } else {
    a = attest_models(*manifest_, models.body);
    if (a == Attestation::kMatch) {
      auto version = co_await net::simple_get(url, "/version", cfg_.bearer, cfg_.timeout, 64u << 10, failure);
      a = failure != net::GetFailure::kNone || version.status != 200 ? Attestation::kVersionFetch
                                                                     : attest_version(*manifest_, version.body);
    }
  }
  if (loop->stopped) co_return;
  attest_checks_[i * kAttestationCount + static_cast<size_t>(a)].inc();
  set_attestation(i, a);
}

void TokenizerService::set_attestation(size_t i, Attestation a) {
  const auto prev = static_cast<Attestation>(attest_state_[i].exchange(static_cast<uint8_t>(a)));
  if (prev == a) return;
  if (a == Attestation::kMatch) spdlog::info("tokenizer: upstream {} attested", labels_[i]);
  else spdlog::warn("tokenizer: upstream {} not attested: {}", labels_[i], to_string(a));
}

void TokenizerService::write_metrics(metrics::Exposition& out) const {
  const auto& F = kFamilies;
  out.family(F[kInfo]);
  out.sample(F[kInfo].name,
             "mode=\"" + std::string(to_string(cfg_.mode)) + "\",profile=\"" + cfg_.profile + "\"", uint64_t{1});
  if (cfg_.mode == TokenizerMode::kOff) return;
  out.family(F[kShadow]);
  for (size_t b = 0; b < 2; ++b) {
    if (b == 0 && !remote_mode(cfg_.mode)) continue;
    if (b == 1 && !local_mode(cfg_.mode)) continue;
    for (size_t ep = 0; ep < 2; ++ep) {
      for (size_t o = 0; o < kShadowOutcomeCount; ++o) {
        const auto outcome = static_cast<ShadowOutcome>(o);
        const bool local_only = outcome == ShadowOutcome::kParityMatch || outcome == ShadowOutcome::kParityMismatch ||
                                outcome == ShadowOutcome::kUnsupported || outcome == ShadowOutcome::kRenderError ||
                                outcome == ShadowOutcome::kEncodeError || outcome == ShadowOutcome::kRemoteUnavailable ||
                                outcome == ShadowOutcome::kUnattested;
        const bool remote_only = outcome == ShadowOutcome::kTimeout || outcome == ShadowOutcome::kConnectError ||
                                 outcome == ShadowOutcome::kHttpError || outcome == ShadowOutcome::kResponseTooLarge;
        if ((b == 0 && local_only) || (b == 1 && remote_only)) continue;
        if (b == 1 && cfg_.mode == TokenizerMode::kLocal &&
            (outcome == ShadowOutcome::kParityMatch || outcome == ShadowOutcome::kParityMismatch ||
             outcome == ShadowOutcome::kRemoteUnavailable))
          continue;
        if (b == 1 && cfg_.mode == TokenizerMode::kLocalShadow && outcome == ShadowOutcome::kSuccess) continue;
        out.sample(F[kShadow].name,
                   "backend=\"" + std::string(kBackend[b]) + "\",endpoint=\"" + std::string(kEndpoint[ep]) +
                       "\",outcome=\"" + std::string(to_string(outcome)) + "\"",
                   outcomes_[b][ep][o].get());
      }
    }
  }
  out.family(F[kSkipped]);
  for (size_t i = 0; i < kShadowSkipCount; ++i)
    out.sample(F[kSkipped].name, "reason=\"" + std::string(to_string(static_cast<ShadowSkip>(i))) + "\"",
               skipped_[i].get());
  out.family(F[kQueue]);
  out.sample(F[kQueue].name, "", queue_depth_.get());
  out.family(F[kDuration]);
  for (size_t b = 0; b < 2; ++b)
    if ((b == 0 && remote_mode(cfg_.mode)) || (b == 1 && local_mode(cfg_.mode)))
      duration_[b].write(out, F[kDuration].name, "backend=\"" + std::string(kBackend[b]) + "\"");
  out.family(F[kTokens]);
  for (size_t b = 0; b < 2; ++b)
    if ((b == 0 && remote_mode(cfg_.mode)) || (b == 1 && local_mode(cfg_.mode)))
      out.sample(F[kTokens].name, "backend=\"" + std::string(kBackend[b]) + "\"", tokens_[b].get());
  if (!local_mode(cfg_.mode)) return;
  out.family(F[kAttested]);
  for (size_t i = 0; i < cfg_.upstreams.size(); ++i)
    out.sample(F[kAttested].name, "upstream=\"" + labels_[i] + "\"", uint64_t{attested(i) ? 1u : 0u});
  out.family(F[kChecks]);
  for (size_t i = 0; i < cfg_.upstreams.size(); ++i)
    for (size_t a = 0; a < kAttestationCount; ++a) {
      if (static_cast<Attestation>(a) == Attestation::kUnchecked) continue;
      out.sample(F[kChecks].name,
                 "upstream=\"" + labels_[i] + "\",outcome=\"" +
                     std::string(to_string(static_cast<Attestation>(a))) + "\"",
                 attest_checks_[i * kAttestationCount + a].get());
    }
  const SessionCacheStats cs = session_cache_ ? session_cache_->stats() : SessionCacheStats{};
  out.family(F[kCacheLookups]);
  out.sample(F[kCacheLookups].name, "result=\"hit\"", cs.hits);
  out.sample(F[kCacheLookups].name, "result=\"miss\"", cs.misses);
  out.family(F[kCacheReused]);
  out.sample(F[kCacheReused].name, "", cs.reused_bytes);
  out.family(F[kCacheEvictions]);
  out.sample(F[kCacheEvictions].name, "", cs.evictions);
  out.family(F[kCacheBytes]);
  out.sample(F[kCacheBytes].name, "", cs.bytes);
}

}  // namespace ramjet::render
