// request/route: the single-flight table. The approximate index (cache/index) learns a prefix
// only when a response completes, so while the first request with a NEW prefix (zero overlap on
// every engine) is still in prefill, identical requests arriving behind it see zero overlap
// everywhere too, get spread by load, and each pays the same cold prefill on a different engine.
// The table closes that window: the router makes such a request a *leader* (lead()), which
// registers its leading fingerprints as "being prefilled on engine e"; later requests ask
// pending() how many of their leading fingerprints are in flight on each engine and follow the
// leader there. Which request leads and how pending blocks weigh in the score is the router's
// decision, not this table's.
//
// Entries are bounded (capacity leaders x max_blocks fingerprints) and leave the table when the
// leader's Lease ends (its response completed: the index now holds the prefix) or, if it never
// does, timeout_ms after lead(). Fingerprints are chained hashes, so a fingerprint identifies its
// whole prefix and a chain position needs nothing else. Two leaders on different engines may
// register the same fingerprints (two requests decided at the same instant); both are kept and
// pending() answers per engine, so ending one leaves the other visible.
//
// Thread safety: any thread may call any method. pending() on an empty table is one relaxed
// atomic load (plus zeroing `out`); otherwise it takes a shared lock, lead() and Lease::end() an
// exclusive one, each held for O(max_blocks) hash operations. A Lease refers to its leader by
// (slot, id), never by pointer, so it may safely end after its entries were purged by expiry;
// it must not outlive the SingleFlight that issued it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/clock.h"

namespace ramjet::route {

struct SingleFlightConfig {
  bool enabled = true;
  uint32_t max_blocks = 32;    // leading fingerprints registered per leader (the affinity cap)
  uint32_t capacity = 1024;    // leaders tracked at once; a full table refuses new leaders (counted)
  int64_t timeout_ms = 60000;  // a leader's entries expire after this even if it never finishes
};

class SingleFlight {
 public:
  SingleFlight(size_t engines, SingleFlightConfig config, const Clock& clock);
  ~SingleFlight();
  SingleFlight(const SingleFlight&) = delete;
  SingleFlight& operator=(const SingleFlight&) = delete;

  size_t engines() const { return engines_; }
  const SingleFlightConfig& config() const { return config_; }

  // For each engine e, out[e] = the number of leading fingerprints of `chain` (chain[0],
  // chain[1], ... stopping at the first one not registered for e) that a live (unexpired) leader
  // registered on e; at most max_blocks. Writes out[0 .. min(out.size(), engines)) and zeroes any
  // rest; callers pass out.size() == engines().
  void pending(std::span<const uint64_t> chain, std::span<uint32_t> out) const;

  // One leader's registration. Movable, not copyable; the destructor (or end()) removes exactly
  // this leader's entries, and does nothing if they already expired or the lease is empty.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept;
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { end(); }

    void end();
    // True from a successful lead() until end()/destruction/move-from (expiry does not clear it).
    bool active() const { return owner_ != nullptr; }
    explicit operator bool() const { return active(); }
    size_t engine() const { return engine_; }
    uint32_t blocks() const { return blocks_; }  // fingerprints registered (<= max_blocks)

   private:
    friend class SingleFlight;
    Lease(SingleFlight* owner, uint32_t slot, uint64_t id, size_t engine, uint32_t blocks)
        : owner_(owner), slot_(slot), id_(id), engine_(engine), blocks_(blocks) {}

    SingleFlight* owner_ = nullptr;
    uint32_t slot_ = 0;
    uint64_t id_ = 0;
    size_t engine_ = 0;
    uint32_t blocks_ = 0;
  };

  // Registers the first max_blocks fingerprints of `chain` as being prefilled on `engine` by a
  // new leader (purging expired leaders first). Empty lease when disabled, `chain` is empty,
  // max_blocks is 0, or the table already holds `capacity` live leaders (counted in
  // refused_full). `engine` must be < engines().
  [[nodiscard]] Lease lead(size_t engine, std::span<const uint64_t> chain);

  // Live leaders (purges expired ones first).
  size_t leaders() const;

  struct Stats {
    uint64_t leads = 0;         // leases issued
    uint64_t refused_full = 0;  // lead() calls refused because the table was full
    uint64_t expired = 0;       // leaders removed by timeout rather than by their lease
  };
  Stats stats() const;

 private:
  class Table;
  void end(uint32_t slot, uint64_t id);

  const size_t engines_;
  const SingleFlightConfig config_;
  const Clock& clock_;
  std::unique_ptr<Table> table_;  // the lock, the entries, the live-leader count and the stats
};

}  // namespace ramjet::route
