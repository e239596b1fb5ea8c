// render::engine_attestation (see engine_attestation.h).
#include "render/identity/engine_attestation.h"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "net/client.h"
#include "render/prompt/prompt.h"
#include "render/identity/tokenize_payload.h"

namespace ramjet::render {

namespace asio = boost::asio;

EngineAttestation::EngineAttestation(AttestationConfig cfg)
    : cfg_(std::move(cfg)),
      roster_(cfg_.roster, cfg_.upstreams),
      attest_state_(roster_->capacity()),
      checks_(roster_->capacity() * kAttestationCount) {
  for (auto& s : attest_state_) s.store(static_cast<uint8_t>(Attestation::kUnchecked));
}

EngineAttestation::~EngineAttestation() {
  begin_stop();
}

void EngineAttestation::start(asio::io_context& ctx, const Manifest& manifest, std::vector<GoldenProbe> probes) {
  if (loop_) return;
  loop_ = std::make_shared<Loop>(ctx, manifest, std::move(probes), roster_->capacity());
  asio::co_spawn(ctx, loop(loop_), asio::detached);
}

void EngineAttestation::begin_stop() {
  if (std::shared_ptr<Loop> l = std::move(loop_)) {
    l->stopped = true;
    // The timer belongs to the context's thread: cancel it there.
    asio::post(l->ctx, [l] { l->timer.cancel(); });
  }
}

bool EngineAttestation::attested(size_t i) const {
  return attestation(i) == Attestation::kMatch;
}

Attestation EngineAttestation::attestation(size_t i) const {
  if (i >= attest_state_.size()) return Attestation::kUnchecked;
  return static_cast<Attestation>(attest_state_[i].load(std::memory_order_acquire));
}

uint64_t EngineAttestation::checks(size_t i, Attestation a) const {
  return checks_[i * kAttestationCount + static_cast<size_t>(a)].get();
}

asio::awaitable<void> EngineAttestation::loop(std::shared_ptr<Loop> l) {
  while (!l->stopped) {
    for (size_t i = 0; i < roster_->capacity(); ++i) {
      if (l->busy[i]) continue;
      // Another engine in the slot (or none) is unchecked until checked itself.
      const uint64_t now_in = roster_->active(i) ? roster_->incarnation(i) : 0;
      if (now_in != l->seen[i]) {
        l->seen[i] = now_in;
        l->proven[i].clear();
        l->refused[i].clear();
        attest_state_[i].store(static_cast<uint8_t>(Attestation::kUnchecked), std::memory_order_release);
      }
      if (now_in == 0 || (cfg_.skip && cfg_.skip(i))) continue;
      l->busy[i] = 1;
      asio::co_spawn(l->ctx, check_one(l, i), [this, l, i](std::exception_ptr e) {
        l->busy[i] = 0;
        if (e) set(i, Attestation::kModelsFetch);  // never left at a stale match
      });
    }
    l->timer.expires_after(cfg_.interval);
    boost::system::error_code ec;
    co_await l->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> EngineAttestation::check_one(std::shared_ptr<Loop> l, size_t i) {
  const std::shared_ptr<const net::Member> member = roster_->member(i);
  if (!member) co_return;
  const config::UpstreamUrl& url = member->url;
  net::GetFailure failure = net::GetFailure::kNone;
  auto models =
      co_await net::simple_get(url, "/v1/models", cfg_.bearer, cfg_.timeout, 1u << 20, failure);
  Attestation a;
  if (failure != net::GetFailure::kNone || models.status != 200) {
    a = Attestation::kModelsFetch;
  } else if (l->manifest.identity_pinned) {
    a = attest_models(l->manifest, models.body);
    if (a == Attestation::kMatch) {
      auto version =
          co_await net::simple_get(url, "/version", cfg_.bearer, cfg_.timeout, 64u << 10, failure);
      a = failure != net::GetFailure::kNone || version.status != 200
              ? Attestation::kVersionFetch
              : attest_version(l->manifest, version.body);
    }
  } else {
    auto version = co_await net::simple_get(url, "/version", cfg_.bearer, cfg_.timeout, 64u << 10, failure);
    if (failure != net::GetFailure::kNone || version.status != 200) {
      a = Attestation::kVersionFetch;
    } else if (auto identity = engine_identity(models.body, version.body); !identity) {
      a = identity.error();
    } else {
      a = co_await prove(l, url, i, identity.value());
    }
  }
  if (l->stopped || roster_->incarnation(i) != member->incarnation) co_return;  // it left meanwhile
  checks_[i * kAttestationCount + static_cast<size_t>(a)].inc();
  set(i, a);
}

asio::awaitable<Attestation> EngineAttestation::prove(std::shared_ptr<Loop> l, const config::UpstreamUrl& url,
                                                     size_t i, const std::string& identity) {
  if (!l->proven[i].empty() && l->proven[i] == identity) co_return Attestation::kMatch;
  const auto now = std::chrono::steady_clock::now();
  if (!l->refused[i].empty() && l->refused[i] == identity && now < l->retry_at[i]) co_return Attestation::kGoldenMismatch;
  // Another identity than the one proven (a restart behind the same address): not attested
  // while its goldens are asked for.
  if (!l->proven[i].empty()) set(i, Attestation::kUnchecked);
  size_t differ = 0;
  for (const GoldenProbe& g : l->probes) {
    net::GetFailure failure = net::GetFailure::kNone;
    auto r = co_await net::simple_post(url, "/tokenize", g.payload, cfg_.bearer, cfg_.timeout, 16u << 20, failure);
    if (l->stopped) co_return Attestation::kUnchecked;
    std::optional<std::vector<uint32_t>> ids;
    if (failure == net::GetFailure::kNone && r.status == 200) ids = decode_tokenize_response(r.body);
    if (!ids) co_return Attestation::kTokenizeFetch;  // asked again next interval
    if (ids->size() != g.token_count || token_ids_sha256(*ids) != g.token_ids_sha256) ++differ;
  }
  l->proven[i].clear();
  if (differ > 0) {
    l->refused[i] = identity;
    l->retry_at[i] = now + std::chrono::minutes(1);
    spdlog::warn("tokenizer: upstream {}: its /tokenize differs from ramjet's own tokens on {} of {} goldens: "
                 "a different tokenizer or chat template than RJ_MODEL_DIR{}'s; its requests are not tokenized "
                 "locally{} (asked again in a minute)",
                 i, differ, l->probes.size(), cfg_.name, cfg_.name.empty() ? "" : " by this folder");
    co_return Attestation::kGoldenMismatch;
  }
  l->refused[i].clear();
  l->proven[i] = identity;
  ++l->proofs;
  spdlog::info("tokenizer: upstream {}: its /tokenize reproduced all {} goldens{} (engines proven so far: {})", i,
               l->probes.size(), cfg_.name.empty() ? "" : " of RJ_MODEL_DIR" + cfg_.name, l->proofs);
  co_return Attestation::kMatch;
}

void EngineAttestation::set(size_t i, Attestation a) {
  const auto prev = static_cast<Attestation>(attest_state_[i].exchange(static_cast<uint8_t>(a)));
  if (prev == a) return;
  if (a == Attestation::kMatch)
    spdlog::info("tokenizer: upstream {} attested{}", i, cfg_.name.empty() ? "" : " by RJ_MODEL_DIR" + cfg_.name);
  else
    spdlog::warn("tokenizer: upstream {} not attested{}: {}", i, cfg_.name.empty() ? "" : " by RJ_MODEL_DIR" + cfg_.name,
                 to_string(a));
}

}  // namespace ramjet::render
