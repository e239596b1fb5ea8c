// upstream/engine_load: the load other routers put on the engines, as routing reads it
// (RJ_ROUTE_ENGINE_LOAD). N ramjet replicas in front of the same engines each see only their own
// reservations; every engine also reports what it is working on (vllm:num_requests_running and
// _waiting, read by the engine scrape, engine_stats.h). What an engine reports beyond this
// process's own in-flight requests to it is foreign: requests from other routers (or clients
// that bypass ramjet). The board turns that into load units on the reservations' scale and keeps
// the latest value per engine ordinal in lock-free atomics: the scraper writes it (one writer
// per engine at a time), routing reads it on the request path without a lock.
//
// It does not scrape (engine_scrape.cc does), does not know reservations (route/reservation.h,
// Engine::inflight() gives the count it subtracts) and never decides anything itself.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/clock.h"

namespace ramjet::upstream {

struct EngineLoadConfig {
  // RJ_ROUTE_ENGINE_LOAD: off = every engine's foreign load reads 0.
  bool enabled = true;
  // A reading older than this counts for nothing (about three scrape intervals: a missed scrape
  // or two is tolerated, an engine that stopped answering its /metrics is not trusted).
  int64_t stale_ms = 1500;
  // RJ_ROUTE_ENGINE_LOAD_WAITING_UNITS: load units a waiting (queued, not yet prefilled) foreign
  // request weighs; a running one weighs one unit, as a decoding reservation does after it
  // shrinks at the first token (RJ_ROUTE_PHASE_AWARE_LOAD).
  double waiting_units = 2.0;
};

// Foreign load units from one reading: the requests the engine reports beyond `own_inflight`
// (never negative), each weighing the reading's mix of running (1 unit) and waiting
// (`waiting_units`) requests, rounded to the nearest unit. Which of the engine's requests are
// this router's own is unknown, so the foreign ones are assumed to be running and waiting in the
// same proportion as all of them.
int64_t foreign_load_units(double running, double waiting, int64_t own_inflight, double waiting_units);

// What peer replicas report they put on each engine (upstream/peer_load.h: RJ_PEERS), as the
// board adds it in: fresh peers' load units, and their in-flight requests (which the engines'
// own counts include, so the scrape's foreign share leaves them out).
class PeerLoad {
 public:
  virtual ~PeerLoad() = default;
  virtual int64_t units(size_t engine, int64_t now_ms) const = 0;
  virtual int64_t inflight(size_t engine, int64_t now_ms) const = 0;
  // Peer replicas heard from within the stale time: routers deciding beside this one.
  virtual size_t fresh_peers(int64_t now_ms) const = 0;
  // This replica's lane among itself and its fresh peers: how many of them have a smaller sender
  // id (0..fresh_peers). Every replica sees the same ids, so the lanes are distinct.
  virtual uint32_t lane(int64_t now_ms) const = 0;
  // This replica's own in-flight requests (all engines) in the load it last sent the peers.
  virtual int64_t inflight_sent() const = 0;
};

// Where a decision stands among the routers deciding on the same view at once (route/rank.h,
// spread_among_routers): `routers` replicas, this decision takes `place` in the sequence one
// router would place them in, `tie` orders equal engines alike in every replica.
struct SpreadPlace {
  uint32_t routers = 1;
  uint32_t place = 0;
  uint32_t tie = 0;
};

class EngineLoadBoard {
 public:
  EngineLoadBoard(const Clock& clock, EngineLoadConfig config);
  ~EngineLoadBoard();
  EngineLoadBoard(const EngineLoadBoard&) = delete;
  EngineLoadBoard& operator=(const EngineLoadBoard&) = delete;

  const EngineLoadConfig& config() const { return config_; }
  // Whether routing reads the board: the engine scrape's share (config().enabled), peers, or both.
  bool enabled() const { return config_.enabled || peers_ != nullptr; }
  // Peer replicas' load (RJ_PEERS), added to every engine's foreign load. Set before serving.
  void set_peers(const PeerLoad* peers) { peers_ = peers; }
  bool has_peers() const { return peers_ != nullptr; }

  // Writer (the engine scrape, right after an engine's /metrics was read): the engine reported
  // `running` and `waiting` requests while this process had `own_inflight` requests there (and
  // its fresh peers theirs: not foreign to the scrape's share, they count through the peers).
  // Ordinals up to kMaxEngines - 1 are kept (engines that join at runtime included).
  // `kv_usage`: its vllm:kv_cache_usage_perc (0..1), when it reported one.
  void record(size_t engine, double running, double waiting, int64_t own_inflight,
              std::optional<double> kv_usage = std::nullopt);
  // Writer (the engine scrape, just before it asks the engine's /metrics): this process's
  // in-flight requests there now. The engine counts its requests somewhere between this and
  // record(): one of ours that ends meanwhile is in its count but no longer in record()'s
  // `own_inflight`, and would read as a foreign request until the next scrape (a sequential
  // client's next request would see its engine as busy). record() takes the larger of the two.
  void fetching(size_t engine, int64_t own_inflight);
  // The engine's /metrics could not be read, or lacked the two series: no current reading.
  void forget(size_t engine);

  // Reader (routing): the foreign load units on `engine` at monotonic time `now_ms` (the
  // clock given at construction): the fresh peers' units plus the scrape's share (0 when off,
  // never read, forgotten or stale).
  int64_t foreign_units(size_t engine, int64_t now_ms) const;
  int64_t foreign_units(size_t engine) const { return foreign_units(engine, clock_.now_ms()); }
  // Reader (the waiting room, RJ_ADMISSION_ENGINE_MAX_WAITING): the requests the engine last
  // reported waiting, or nullopt when there is no fresh reading (never read, forgotten, stale).
  // Recorded whether or not RJ_ROUTE_ENGINE_LOAD is on.
  std::optional<int64_t> waiting(size_t engine, int64_t now_ms) const;
  // Reader (the waiting room, RJ_ADMISSION_ENGINE_MAX_KV_USAGE): the engine's last KV cache usage
  // (0..1), or nullopt when there is no fresh reading or it reported none.
  std::optional<double> kv_usage(size_t engine, int64_t now_ms) const;
  int64_t now_ms() const { return clock_.now_ms(); }
  // A decision's place among the routers deciding at once: itself and its fresh peers (routers 1
  // without RJ_PEERS: the engine scrape shows other routers' load, not how many they are).
  // Replica k of R (its lane) with j requests in flight that its peers have not heard of yet
  // (`own_inflight` now less what its last datagram carried) takes place k + j·(R − 1): a burst
  // the front spreads over the replicas lands as one router would have placed it (the replica's
  // own j earlier placements are already in its view, so its (j+1)-th request's place in one
  // router's sequence, k + j·R, is j fewer in its own). The wall clock turns the order of equal
  // engines once a second, alike in every replica.
  SpreadPlace spread(int64_t now_ms, int64_t own_inflight) const;

  static constexpr size_t kChunk = 64;
  static constexpr size_t kMaxEngines = kChunk * 1024;

 private:
  static constexpr int64_t kNever = INT64_MIN / 2;
  struct Slot {
    std::atomic<int64_t> units{0};
    std::atomic<int64_t> waiting{0};
    std::atomic<int64_t> kv_ppm{-1};  // KV cache usage in parts per million; -1: not reported
    std::atomic<int64_t> at_ms{kNever};  // when `units`, `waiting`, `kv_ppm` were read; kNever = no reading
    std::atomic<int64_t> own_at_fetch{-1};  // fetching()'s count for the scrape under way; -1: none
  };
  struct Chunk {
    std::array<Slot, kChunk> slots;
  };
  // The slot of `engine`, allocated on first write (nullptr for a reader when never written).
  Slot* slot(size_t engine, bool create);
  const Slot* slot(size_t engine) const;

  const Clock& clock_;
  EngineLoadConfig config_;
  const PeerLoad* peers_ = nullptr;
  std::array<std::atomic<Chunk*>, kMaxEngines / kChunk> chunks_{};
};

}  // namespace ramjet::upstream
