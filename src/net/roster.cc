#include "net/roster.h"

namespace ramjet::net {

Roster::Roster(const std::vector<config::UpstreamUrl>& urls, size_t capacity,
               const std::vector<std::optional<uint32_t>>& ranks, const std::vector<config::EngineKind>& engines,
               const std::vector<config::EngineRole>& roles)
    : slots_(capacity < urls.size() ? urls.size() : capacity) {
  for (size_t i = 0; i < urls.size(); ++i) {
    join(i, urls[i], i < ranks.size() ? ranks[i] : std::nullopt,
         i < engines.size() ? engines[i] : config::EngineKind::kVllm, i < roles.size() ? roles[i] : config::EngineRole::kBoth);
  }
}

std::vector<size_t> Roster::siblings(size_t i) const {
  std::vector<size_t> out;
  const auto m = member(i);
  if (!m || !m->dp_rank) return out;
  for (size_t j = 0; j < slots_.size(); ++j) {
    if (j == i) continue;
    const auto o = member(j);
    if (o && o->dp_rank && o->url.host == m->url.host && o->url.port == m->url.port &&
        o->url.base_path == m->url.base_path && o->url.tls == m->url.tls) {
      out.push_back(j);
    }
  }
  return out;
}

size_t Roster::listed_count() const {
  size_t n = 0;
  for (size_t i = 0; i < slots_.size(); ++i) n += listed(i) ? 1 : 0;
  return n;
}

size_t Roster::active_count() const {
  size_t n = 0;
  for (size_t i = 0; i < slots_.size(); ++i) n += active(i) ? 1 : 0;
  return n;
}

uint64_t Roster::join(size_t i, config::UpstreamUrl url, std::optional<uint32_t> dp_rank, config::EngineKind engine,
                      config::EngineRole role) {
  const uint64_t inc = next_incarnation_++;
  slots_[i].member.store(std::make_shared<const Member>(Member{std::move(url), inc, dp_rank, engine, role}),
                         std::memory_order_release);
  slots_[i].state.store(SlotState::kActive, std::memory_order_release);
  return inc;
}

void Roster::set_engine(size_t i, config::EngineKind engine, config::EngineRole role) {
  const auto m = member(i);
  if (!m || (m->engine == engine && m->role == role)) return;
  Member next = *m;
  next.engine = engine;
  next.role = role;
  slots_[i].member.store(std::make_shared<const Member>(std::move(next)), std::memory_order_release);
}

void Roster::leave(size_t i) {
  if (active(i)) slots_[i].state.store(SlotState::kLeaving, std::memory_order_release);
}

void Roster::rejoin(size_t i) {
  if (state(i) == SlotState::kLeaving) slots_[i].state.store(SlotState::kActive, std::memory_order_release);
}

void Roster::vacate(size_t i) {
  slots_[i].state.store(SlotState::kVacant, std::memory_order_release);
  slots_[i].member.store(nullptr, std::memory_order_release);
}

}  // namespace ramjet::net
