#include "upstream/engine_load.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace ramjet::upstream {

int64_t foreign_load_units(double running, double waiting, int64_t own_inflight, double waiting_units) {
  if (!std::isfinite(running) || running < 0) running = 0;
  if (!std::isfinite(waiting) || waiting < 0) waiting = 0;
  const double reported = running + waiting;
  const double foreign = reported - static_cast<double>(own_inflight > 0 ? own_inflight : 0);
  if (foreign <= 0 || reported <= 0) return 0;
  const double weight = (running + waiting_units * waiting) / reported;  // units per request
  const double units = std::round(foreign * weight);
  return units >= 1e12 ? int64_t{1'000'000'000'000} : static_cast<int64_t>(units);
}

EngineLoadBoard::EngineLoadBoard(const Clock& clock, EngineLoadConfig config) : clock_(clock), config_(config) {}

EngineLoadBoard::~EngineLoadBoard() {
  for (auto& c : chunks_) delete c.load(std::memory_order_acquire);
}

EngineLoadBoard::Slot* EngineLoadBoard::slot(size_t engine, bool create) {
  if (engine >= kMaxEngines) return nullptr;
  std::atomic<Chunk*>& at = chunks_[engine / kChunk];
  Chunk* c = at.load(std::memory_order_acquire);
  if (c == nullptr && create) {
    auto fresh = std::make_unique<Chunk>();
    if (at.compare_exchange_strong(c, fresh.get(), std::memory_order_acq_rel, std::memory_order_acquire)) {
      c = fresh.release();
    }  // else another writer won: c is its chunk, ours is freed
  }
  return c ? &c->slots[engine % kChunk] : nullptr;
}

const EngineLoadBoard::Slot* EngineLoadBoard::slot(size_t engine) const {
  if (engine >= kMaxEngines) return nullptr;
  const Chunk* c = chunks_[engine / kChunk].load(std::memory_order_acquire);
  return c ? &c->slots[engine % kChunk] : nullptr;
}

void EngineLoadBoard::record(size_t engine, double running, double waiting, int64_t own_inflight,
                             std::optional<double> kv_usage) {
  Slot* s = slot(engine, true);
  if (s == nullptr) return;
  own_inflight = std::max(own_inflight, s->own_at_fetch.exchange(-1, std::memory_order_relaxed));
  const int64_t peers = peers_ != nullptr ? peers_->inflight(engine, clock_.now_ms()) : 0;
  s->units.store(foreign_load_units(running, waiting, own_inflight + peers, config_.waiting_units),
                 std::memory_order_relaxed);
  s->waiting.store(std::llround(std::clamp(waiting, 0.0, 1e12)), std::memory_order_relaxed);
  s->kv_ppm.store(kv_usage && std::isfinite(*kv_usage) ? std::llround(std::clamp(*kv_usage, 0.0, 1.0) * 1e6) : -1,
                  std::memory_order_relaxed);
  s->at_ms.store(clock_.now_ms(), std::memory_order_release);
}

void EngineLoadBoard::fetching(size_t engine, int64_t own_inflight) {
  if (Slot* s = slot(engine, true)) s->own_at_fetch.store(std::max<int64_t>(own_inflight, 0), std::memory_order_relaxed);
}

void EngineLoadBoard::forget(size_t engine) {
  if (Slot* s = slot(engine, false)) {
    s->own_at_fetch.store(-1, std::memory_order_relaxed);  // a failed scrape's note is no later reading's
    s->at_ms.store(kNever, std::memory_order_release);
  }
}

SpreadPlace EngineLoadBoard::spread(int64_t now_ms, int64_t own_inflight) const {
  SpreadPlace s;
  if (peers_ == nullptr) return s;
  s.routers = 1 + static_cast<uint32_t>(std::min<size_t>(peers_->fresh_peers(now_ms), 1024));
  if (s.routers == 1) return s;
  constexpr int64_t kMaxUnseen = 64;  // beyond it the peers are not hearing this replica anyway
  const auto unseen = static_cast<uint64_t>(std::clamp<int64_t>(own_inflight - peers_->inflight_sent(), 0, kMaxUnseen));
  const uint64_t lane = std::min<uint64_t>(peers_->lane(now_ms), s.routers - 1);
  s.place = static_cast<uint32_t>(lane + unseen * (s.routers - 1));
  const auto unix_s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  s.tie = static_cast<uint32_t>(std::max<int64_t>(unix_s.count(), 0));
  return s;
}

int64_t EngineLoadBoard::foreign_units(size_t engine, int64_t now_ms) const {
  const int64_t peers = peers_ != nullptr ? peers_->units(engine, now_ms) : 0;
  if (!config_.enabled) return peers;
  const Slot* s = slot(engine);
  if (s == nullptr) return peers;
  const int64_t at = s->at_ms.load(std::memory_order_acquire);
  if (at == kNever || now_ms - at > config_.stale_ms) return peers;
  return peers + s->units.load(std::memory_order_relaxed);
}

}  // namespace ramjet::upstream

namespace ramjet::upstream {

std::optional<int64_t> EngineLoadBoard::waiting(size_t engine, int64_t now_ms) const {
  const Slot* s = slot(engine);
  if (s == nullptr) return std::nullopt;
  const int64_t at = s->at_ms.load(std::memory_order_acquire);
  if (at == kNever || now_ms - at > config_.stale_ms) return std::nullopt;
  return s->waiting.load(std::memory_order_relaxed);
}

std::optional<double> EngineLoadBoard::kv_usage(size_t engine, int64_t now_ms) const {
  const Slot* s = slot(engine);
  if (s == nullptr) return std::nullopt;
  const int64_t at = s->at_ms.load(std::memory_order_acquire);
  if (at == kNever || now_ms - at > config_.stale_ms) return std::nullopt;
  const int64_t ppm = s->kv_ppm.load(std::memory_order_relaxed);
  if (ppm < 0) return std::nullopt;
  return static_cast<double>(ppm) / 1e6;
}

}  // namespace ramjet::upstream
