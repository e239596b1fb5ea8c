// render::shadow_comparer (see shadow_comparer.h).
#include "render/service/shadow_comparer.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "model/model_profile.h"
#include "net/client.h"
#include "render/identity/engine_attestation.h"
#include "render/service/render_pool.h"

namespace ramjet::render {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::string_view kEndpoint[2] = {"completions", "chat"};

ShadowOutcome from_failure(net::GetFailure f) {
  switch (f) {
    case net::GetFailure::kTimeout:
      return ShadowOutcome::kTimeout;
    case net::GetFailure::kConnect:
    case net::GetFailure::kTls:
      return ShadowOutcome::kConnectError;
    case net::GetFailure::kTooLarge:
      return ShadowOutcome::kResponseTooLarge;
    case net::GetFailure::kProtocol:
      return ShadowOutcome::kHttpError;
    case net::GetFailure::kNone:
      break;
  }
  return ShadowOutcome::kSuccess;
}

}  // namespace

std::optional<TokenizerMode> parse_tokenizer_mode(std::string_view s) {
  if (s == "off") return TokenizerMode::kOff;
  if (s == "remote-shadow") return TokenizerMode::kRemoteShadow;
  if (s == "local-shadow") return TokenizerMode::kLocalShadow;
  if (s == "local") return TokenizerMode::kLocal;
  return std::nullopt;
}

std::string_view to_string(TokenizerMode m) {
  switch (m) {
    case TokenizerMode::kOff:
      return "off";
    case TokenizerMode::kRemoteShadow:
      return "remote-shadow";
    case TokenizerMode::kLocalShadow:
      return "local-shadow";
    case TokenizerMode::kLocal:
      return "local";
  }
  return "off";
}

std::string_view to_string(ShadowSkip s) {
  switch (s) {
    case ShadowSkip::kQueueFull:
      return "queue_full";
    case ShadowSkip::kOutsideSizeWindow:
      return "outside_size_window";
    case ShadowSkip::kUnsupportedEndpoint:
      return "unsupported_endpoint";
    case ShadowSkip::kStopping:
      return "stopping";
    case ShadowSkip::kMultimodal:
      return "multimodal";
  }
  return "unknown";
}

ShadowCounters::ShadowCounters()
    : duration{metrics::Histogram(metrics::exponential_buckets(0.0005, 2, 16)),
               metrics::Histogram(metrics::exponential_buckets(0.0005, 2, 16))} {}

ShadowComparer::ShadowComparer(ShadowConfig cfg, const model::ModelProfile* profile,
                               std::shared_ptr<const PromptRenderer> renderer, SessionCache* cache,
                               RenderPool& pool, const EngineAttestation& attestation, ShadowCounters& counters)
    : cfg_(std::move(cfg)),
      roster_(cfg_.roster, cfg_.upstreams),
      profile_(profile),
      renderer_(std::move(renderer)),
      cache_(cache),
      pool_(pool),
      attestation_(attestation),
      counters_(counters) {}

void ShadowComparer::offer(size_t upstream, bool chat, std::string_view body) noexcept {
  if (cfg_.mode == TokenizerMode::kOff || !profile_ || upstream >= roster_->capacity()) return;
  if (body.size() < cfg_.min_bytes || body.size() > cfg_.max_bytes) {
    counters_.skipped[static_cast<size_t>(ShadowSkip::kOutsideSizeWindow)].inc();
    return;
  }
  std::optional<PoolRefusal> refusal;
  try {
    // The copy is made before the pool's lock (a 2 MiB body must not hold up other offers).
    Job job{upstream, chat, attestation_.attested(upstream), std::string(body)};
    refusal = pool_.post(body.size(), RenderPool::kNoDeadline,
                         [this, job = std::move(job)]() mutable { run(job); });
  } catch (...) {  // out of memory for the copy: the shadow skips it, the request is unaffected
    refusal = PoolRefusal::kQueueFull;
  }
  if (!refusal) return;
  const ShadowSkip why =
      *refusal == PoolRefusal::kStopping ? ShadowSkip::kStopping : ShadowSkip::kQueueFull;
  counters_.skipped[static_cast<size_t>(why)].inc();
}

void ShadowComparer::begin_stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  stop_requested_.store(true, std::memory_order_release);
  // An in-flight /tokenize call ends now instead of at its deadline.
  for (asio::io_context* io : calls_) io->stop();
}

void ShadowComparer::run(Job& job) noexcept {
  try {
    process(job);
  } catch (const std::exception& e) {  // e.g. out of memory rendering a huge body
    spdlog::warn("tokenizer shadow: job abandoned: {}", e.what());
  } catch (...) {
    spdlog::warn("tokenizer shadow: job abandoned");
  }
}

std::optional<std::vector<uint32_t>> ShadowComparer::ask_engine(const Job& job,
                                                                const TokenizePayload& payload,
                                                                bool& interrupted) {
  asio::io_context io;  // this call's own context, stopped by begin_stop()
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      interrupted = true;
      return std::nullopt;
    }
    calls_.push_back(&io);
  }
  struct Unregister {
    ShadowComparer& c;
    asio::io_context* io;
    ~Unregister() {
      std::lock_guard lock(c.mu_);
      std::erase(c.calls_, io);
    }
  } unregister{*this, &io};

  const auto t0 = Clock::now();
  net::GetFailure failure = net::GetFailure::kNone;
  net::SimpleResponse res;
  const std::shared_ptr<const net::Member> engine = roster_->member(job.upstream);
  if (!engine) return std::nullopt;  // it left since (nothing to compare with)
  const bool completed = net::run_to_completion(
      io,
      net::simple_post(engine->url, "/tokenize", payload.json, cfg_.bearer,
                       cfg_.timeout, cfg_.max_response_bytes, failure),
      res, failure, &stop_requested_);
  if (!completed) {  // begin_stop() interrupted the call: nothing to count
    interrupted = true;
    return std::nullopt;
  }
  std::optional<std::vector<uint32_t>> remote;
  ShadowOutcome o = from_failure(failure);
  if (o == ShadowOutcome::kSuccess && res.status != 200) o = ShadowOutcome::kHttpError;
  if (o == ShadowOutcome::kSuccess) {
    remote = decode_tokenize_response(res.body);
    if (!remote) o = ShadowOutcome::kDecodeError;
  }
  counters_.duration[0].observe(std::chrono::duration<double>(Clock::now() - t0).count());
  counters_.outcomes[0][job.chat ? 1 : 0][static_cast<size_t>(o)].inc();
  if (remote) counters_.tokens[0].inc(remote->size());
  return remote;
}

void ShadowComparer::process(Job& job) {
  auto payload = build_tokenize_payload(*profile_, job.chat, job.body);
  if (!payload) {
    counters_.skipped[static_cast<size_t>(ShadowSkip::kUnsupportedEndpoint)].inc();
    return;
  }
  if (payload->multimodal) {
    // The engine would fetch the images again to count their tokens; neither side is asked.
    counters_.skipped[static_cast<size_t>(ShadowSkip::kMultimodal)].inc();
    return;
  }
  const size_t ep = job.chat ? 1 : 0;
  std::optional<std::vector<uint32_t>> remote;
  if (remote_mode(cfg_.mode)) {
    bool interrupted = false;
    remote = ask_engine(job, *payload, interrupted);
    if (interrupted) return;
  }
  if (!local_mode(cfg_.mode) || !renderer_) return;
  ShadowOutcome o;
  // Attested when it served the request and still now (an engine restarted with another model
  // in between gets no local tokens for it).
  if (!job.attested || !attestation_.attested(job.upstream)) {
    o = ShadowOutcome::kUnattested;
  } else {
    const auto t0 = Clock::now();
    LocalRender r = render_local(*renderer_, *payload, cache_);
    counters_.duration[1].observe(std::chrono::duration<double>(Clock::now() - t0).count());
    o = r.outcome;
    if (o == ShadowOutcome::kSuccess) {
      counters_.tokens[1].inc(r.ids.size());
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
          spdlog::warn(
              "tokenizer shadow: parity mismatch upstream={} endpoint={} local_tokens={} "
              "remote_tokens={} first_difference={}",
              job.upstream, kEndpoint[ep], r.ids.size(), remote->size(), k);
        }
      }
    }
  }
  counters_.outcomes[1][ep][static_cast<size_t>(o)].inc();
}

}  // namespace ramjet::render
