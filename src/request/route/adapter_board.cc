#include "request/route/adapter_board.h"

#include <algorithm>

namespace ramjet::route {

AdapterBoard::AdapterBoard(size_t engines, int64_t max_age_ms)
    : engines_(engines),
      max_age_ms_(max_age_ms),
      entries_(std::make_unique<std::atomic<std::shared_ptr<const Entry>>[]>(engines)) {}

void AdapterBoard::record(size_t engine, uint32_t max_loras, std::vector<std::string> active, int64_t now_ms) {
  if (engine >= engines_) return;
  auto e = std::make_shared<Entry>();
  e->at_ms = now_ms;
  e->max_loras = max_loras;
  std::sort(active.begin(), active.end());
  active.erase(std::unique(active.begin(), active.end()), active.end());
  e->active = std::move(active);
  entries_[engine].store(std::move(e), std::memory_order_release);
}

void AdapterBoard::forget(size_t engine) {
  if (engine < engines_) entries_[engine].store(nullptr, std::memory_order_release);
}

AdapterSlot AdapterBoard::slot(size_t engine, std::string_view adapter, int64_t now_ms) const {
  if (adapter.empty() || engine >= engines_) return AdapterSlot::kNone;
  const std::shared_ptr<const Entry> e = entries_[engine].load(std::memory_order_acquire);
  if (!e || now_ms - e->at_ms > max_age_ms_) return AdapterSlot::kNone;
  if (std::binary_search(e->active.begin(), e->active.end(), adapter, std::less<>())) return AdapterSlot::kActive;
  return e->active.size() < e->max_loras ? AdapterSlot::kFree : AdapterSlot::kFull;
}

}  // namespace ramjet::route
