// request/route/single_flight: a slot per leader (reused through a free list) holding its
// engine, expiry and up to max_blocks fingerprints; every registered fingerprint is a node of an
// intrusive doubly linked list headed in one flat hash map (fingerprint -> newest node), so two
// leaders sharing a fingerprint share a list and either can leave in O(1) per fingerprint.
// Leaders are also kept in lead order, which is expiry order (the clock is monotonic and the
// timeout constant), so purging expired leaders only ever looks at the oldest ones. Once the
// table has grown to its high-water mark, lead() and end() allocate nothing but map growth.
#include "request/route/single_flight.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

namespace ramjet::route {

class SingleFlight::Table {
 public:
  static constexpr uint32_t kNil = UINT32_MAX;

  Table(uint32_t capacity, uint32_t max_blocks) : capacity_(capacity), max_blocks_(max_blocks) {}

  // Leaders in the table, expired ones included until purged. 0 lets pending() skip the lock;
  // written only under the exclusive lock.
  std::atomic<uint32_t> live{0};
  std::atomic<uint64_t> leads{0};
  std::atomic<uint64_t> refused_full{0};
  std::atomic<uint64_t> expired{0};

  void pending(std::span<const uint64_t> chain, std::span<uint32_t> out, int64_t now) const {
    const size_t n = std::min<size_t>(chain.size(), max_blocks_);
    std::shared_lock lock(mu_);
    for (size_t i = 0; i < n; ++i) {
      const auto it = heads_.find(chain[i]);
      if (it == heads_.end()) return;
      bool advanced = false;
      for (uint32_t node = it->second; node != kNil; node = links_[node].next) {
        const Slot& s = slots_[node / max_blocks_];
        // out[e] == i: e held every earlier fingerprint (and not yet this one: a fingerprint
        // registered twice for e, by two leaders, counts once).
        if (s.expiry_ms > now && s.engine < out.size() && out[s.engine] == i) {
          out[s.engine] = static_cast<uint32_t>(i + 1);
          advanced = true;
        }
      }
      if (!advanced) return;  // no engine can extend its run past a position none of them holds
    }
  }

  // Returns (slot, id, blocks); id 0 when refused because full.
  struct Led {
    uint32_t slot = 0;
    uint64_t id = 0;
    uint32_t blocks = 0;
  };
  Led lead(uint32_t engine, std::span<const uint64_t> chain, const Clock& clock, int64_t timeout) {
    std::unique_lock lock(mu_);
    // Read the clock under the lock so lead order is expiry order across threads.
    const int64_t now = clock.now_ms();
    purge(now);
    if (live.load(std::memory_order_relaxed) >= capacity_) {
      refused_full.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
    const uint32_t slot = allocate();
    Slot& s = slots_[slot];
    s.id = ++next_id_;
    s.engine = engine;
    s.expiry_ms = now + timeout;
    s.blocks = static_cast<uint32_t>(std::min<size_t>(chain.size(), max_blocks_));
    for (uint32_t k = 0; k < s.blocks; ++k) {
      const uint32_t node = slot * max_blocks_ + k;
      fingerprints_[node] = chain[k];
      auto [it, inserted] = heads_.try_emplace(chain[k], node);
      links_[node] = Link{kNil, inserted ? kNil : it->second};
      if (!inserted) {
        links_[it->second].prev = node;
        it->second = node;
      }
    }
    // Append to the lead-order list.
    s.prev = tail_;
    s.next = kNil;
    (tail_ != kNil ? slots_[tail_].next : head_) = slot;
    tail_ = slot;
    live.fetch_add(1, std::memory_order_relaxed);
    leads.fetch_add(1, std::memory_order_relaxed);
    return {slot, s.id, s.blocks};
  }

  void end(uint32_t slot, uint64_t id, int64_t now) {
    std::unique_lock lock(mu_);
    purge(now);
    if (slot < slots_.size() && slots_[slot].id == id) remove(slot);
  }

  size_t leaders(int64_t now) {
    std::unique_lock lock(mu_);
    purge(now);
    return live.load(std::memory_order_relaxed);
  }

 private:
  struct Slot {
    uint64_t id = 0;  // 0: free
    int64_t expiry_ms = 0;
    uint32_t engine = 0;
    uint32_t blocks = 0;
    uint32_t prev = kNil;  // lead order (older)
    uint32_t next = kNil;  // lead order (newer), or the free list
  };
  struct Link {
    uint32_t prev;  // towards the list head (newer registration of the same fingerprint)
    uint32_t next;
  };

  uint32_t allocate() {
    if (free_ != kNil) {
      const uint32_t slot = free_;
      free_ = slots_[slot].next;
      return slot;
    }
    const auto slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
    fingerprints_.resize(fingerprints_.size() + max_blocks_);
    links_.resize(links_.size() + max_blocks_);
    return slot;
  }

  void purge(int64_t now) {
    while (head_ != kNil && slots_[head_].expiry_ms <= now) {
      remove(head_);
      expired.fetch_add(1, std::memory_order_relaxed);
    }
  }

  void remove(uint32_t slot) {
    Slot& s = slots_[slot];
    for (uint32_t k = 0; k < s.blocks; ++k) {
      const uint32_t node = slot * max_blocks_ + k;
      const Link l = links_[node];
      if (l.prev != kNil) {
        links_[l.prev].next = l.next;
      } else if (l.next == kNil) {
        heads_.erase(fingerprints_[node]);
      } else {
        heads_.find(fingerprints_[node])->second = l.next;
      }
      if (l.next != kNil) links_[l.next].prev = l.prev;
    }
    (s.prev != kNil ? slots_[s.prev].next : head_) = s.next;
    (s.next != kNil ? slots_[s.next].prev : tail_) = s.prev;
    s = Slot{};
    s.next = free_;
    free_ = slot;
    live.fetch_sub(1, std::memory_order_relaxed);
  }

  const uint32_t capacity_;
  const uint32_t max_blocks_;
  mutable std::shared_mutex mu_;
  boost::unordered_flat_map<uint64_t, uint32_t> heads_;  // fingerprint -> newest node
  std::vector<Slot> slots_;
  std::vector<uint64_t> fingerprints_;  // node = slot * max_blocks + k
  std::vector<Link> links_;             // same indexing
  uint32_t head_ = kNil;                // oldest leader
  uint32_t tail_ = kNil;                // newest leader
  uint32_t free_ = kNil;
  uint64_t next_id_ = 0;
};

namespace {

// Node indices are uint32 (slot * max_blocks + k, with kNil reserved): keep the product in range.
uint32_t effective_capacity(const SingleFlightConfig& c) {
  if (c.max_blocks == 0) return c.capacity;
  return std::min<uint32_t>(c.capacity, (UINT32_MAX - 1) / c.max_blocks);
}

}  // namespace

SingleFlight::SingleFlight(size_t engines, SingleFlightConfig config, const Clock& clock)
    : engines_(engines),
      config_(config),
      clock_(clock),
      table_(std::make_unique<Table>(effective_capacity(config), std::max<uint32_t>(config.max_blocks, 1))) {}

SingleFlight::~SingleFlight() = default;

void SingleFlight::pending(std::span<const uint64_t> chain, std::span<uint32_t> out) const {
  std::fill(out.begin(), out.end(), 0u);
  // A leader committed on another thread an instant ago may be missed here; that is the same as
  // this request having arrived an instant earlier.
  if (table_->live.load(std::memory_order_relaxed) == 0 || chain.empty()) return;
  table_->pending(chain, out.first(std::min(out.size(), engines_)), clock_.now_ms());
}

SingleFlight::Lease SingleFlight::lead(size_t engine, std::span<const uint64_t> chain) {
  // Engine ordinals come from the fleet this table was built for: anything else is a bug.
  if (engine >= engines_) std::abort();
  if (!config_.enabled || chain.empty() || config_.max_blocks == 0) return {};
  const Table::Led led =
      table_->lead(static_cast<uint32_t>(engine), chain, clock_, config_.timeout_ms);
  if (led.id == 0) return {};
  return Lease(this, led.slot, led.id, engine, led.blocks);
}

void SingleFlight::end(uint32_t slot, uint64_t id) {
  table_->end(slot, id, clock_.now_ms());
}

size_t SingleFlight::leaders() const {
  return table_->leaders(clock_.now_ms());
}

SingleFlight::Stats SingleFlight::stats() const {
  return Stats{.leads = table_->leads.load(std::memory_order_relaxed),
               .refused_full = table_->refused_full.load(std::memory_order_relaxed),
               .expired = table_->expired.load(std::memory_order_relaxed)};
}

SingleFlight::Lease::Lease(Lease&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      slot_(o.slot_),
      id_(o.id_),
      engine_(o.engine_),
      blocks_(std::exchange(o.blocks_, 0)) {}

SingleFlight::Lease& SingleFlight::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    end();
    owner_ = std::exchange(o.owner_, nullptr);
    slot_ = o.slot_;
    id_ = o.id_;
    engine_ = o.engine_;
    blocks_ = std::exchange(o.blocks_, 0);
  }
  return *this;
}

void SingleFlight::Lease::end() {
  if (owner_ != nullptr) std::exchange(owner_, nullptr)->end(slot_, id_);
  blocks_ = 0;
}

}  // namespace ramjet::route
