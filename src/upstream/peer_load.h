// upstream/peer_load: several ramjet replicas share their load on the engines directly (RJ_PEERS),
// as Dynamo's router replicas sync their active sequences and llm-d shares replica load deltas —
// without a coordinator.
//
// Each replica sends every RJ_PEER_INTERVAL_MS one UDP datagram to each peer: its own in-flight
// requests and reserved load units per engine (absolute values, not deltas: a lost, duplicated
// or reordered datagram costs nothing; an engine it has nothing on is left out, which reads as
// zero; a replica that stops says so with a last empty datagram, and one that dies is forgotten
// once its last state is older than the stale time). A receiving replica adds its fresh peers' load units to an
// engine's foreign load (upstream/engine_load.h), so a burst split by a round-robin front is seen
// whole by every replica within one interval instead of one engine scrape (RJ_ENGINE_SCRAPE_
// INTERVAL_MS) later; the scrape then counts only what neither this replica nor its peers put
// there (clients going around ramjet).
//
// Engines are named between replicas by a keyed hash of their URL (HMAC-SHA256 under the shared
// secret, first 8 bytes), so replicas whose ordinals differ (DNS discovery, a reload) agree, and
// no host leaves the process. Every datagram carries HMAC-SHA256 over its bytes under the same
// secret (RJ_PEER_SECRET_FILE): a datagram that is malformed, forged, replayed (sequence not
// above the sender's last) or out of time (its send time more than 10 s from ours) is counted
// and dropped; its bytes are never logged.
//
// Wire format (little-endian), at most kMaxDatagram bytes:
//   "RJPL" | version u8 (1) | 3 zero bytes | sender u64 (random per process) | seq u64 |
//   sent_unix_ms u64 | n u32 (<= kMaxPeerEntries) | n x { engine key u64, inflight u32, units u32 } |
//   HMAC-SHA256 (32 bytes) over everything before it
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/clock.h"
#include "config/config.h"
#include "metrics/metrics.h"
#include "upstream/engine_load.h"
#include "upstream/peer_codec.h"

namespace ramjet::upstream {

class Fleet;

// The peers' load per engine ordinal, as routing reads it. One writer (the PeerSync thread)
// keeps each sender's last values and publishes per-engine sums over the fresh senders, after
// every accepted message and every interval (refresh()); readers on the request path load one
// atomic per engine. A sender whose state is older than `stale_ms` counts for nothing; its slot
// is kept (with its last sequence, so its old datagrams stay refused) until it has been quiet for
// `retain_ms` (at least the senders' clock window), then a new sender may take it. Sums the
// writer has not refreshed for `stale_ms` (its thread stalled) read as nothing.
class PeerLoadBoard final : public PeerLoad {
 public:
  static constexpr size_t kMaxPeers = 64;
  PeerLoadBoard(size_t engines, int64_t stale_ms, const Clock& clock, int64_t retain_ms = 15'000);

  // Writer: a verified message from `sender` (keys already mapped to ordinals: `by_ordinal[i]`
  // is the sender's entry for engine i, or zero). kReplayed when seq is not above the sender's
  // last; kNoRoom when every slot holds a sender heard from within `retain_ms`.
  PeerOutcome apply(uint64_t sender, uint64_t seq, std::span<const PeerEntry> by_ordinal);
  // Writer: publishes the sums again (senders that went stale drop out).
  void refresh(int64_t now_ms);

  // Readers (any thread): the fresh peers' sums on engine `i`.
  int64_t units(size_t i, int64_t now_ms) const override;
  int64_t inflight(size_t i, int64_t now_ms) const override;
  size_t fresh_peers(int64_t now_ms) const override;
  uint32_t lane(int64_t now_ms) const override;
  int64_t inflight_sent() const override { return inflight_sent_.load(std::memory_order_relaxed); }
  // The sender id this replica's datagrams carry (its lane compares the peers' with it). Set
  // before the first message is applied.
  void set_self(uint64_t sender) { self_.store(sender, std::memory_order_relaxed); }
  // Writer: this replica's load just went out to the peers, with `inflight` requests in flight.
  void load_sent(int64_t inflight) { inflight_sent_.store(inflight, std::memory_order_relaxed); }
  const Clock& clock() const { return clock_; }

 private:
  struct Slot {  // writer only
    uint64_t sender = 0;
    int64_t at_ms = 0;
    uint64_t last_seq = 0;
    std::unique_ptr<uint32_t[]> inflight, units;
  };
  bool current(int64_t now_ms) const;
  size_t engines_;
  int64_t stale_ms_, retain_ms_;
  const Clock& clock_;
  std::array<Slot, kMaxPeers> slots_;
  std::unique_ptr<std::atomic<int64_t>[]> sum_inflight_, sum_units_;
  std::atomic<size_t> fresh_{0};
  std::atomic<uint32_t> lane_{0};     // fresh senders with an id below self_
  std::atomic<int64_t> inflight_sent_{0};  // this replica's in-flight requests in its last datagram
  std::atomic<uint64_t> self_{0};
  std::atomic<int64_t> sums_at_{INT64_MIN / 2};
};

struct PeerSyncConfig {
  std::string listen;                // RJ_PEER_LISTEN host:port (UDP)
  std::vector<std::string> peers;    // RJ_PEERS host:port each: every address a name resolves to
                                     // (a headless Service: all replicas); this replica's own is skipped
  PeerSecret secret{};               // RJ_PEER_SECRET_FILE
  int64_t interval_ms = 50;          // RJ_PEER_INTERVAL_MS
};

// The UDP loop: binds `listen`, receives into the board, and sends this replica's load from the
// fleet to every peer each interval (peers' names resolved again every 10 s). Runs on a thread of
// its own (a slow name lookup never holds a request); stop() (or the destructor) joins it.
class PeerSync {
 public:
  PeerSync(PeerSyncConfig config, const Fleet& fleet, PeerLoadBoard& board);
  ~PeerSync();
  PeerSync(const PeerSync&) = delete;
  PeerSync& operator=(const PeerSync&) = delete;
  // Binds the socket (an error stops startup: the caller logs it) and starts the thread.
  std::optional<std::string> start();
  void stop();
  // The port bound (after start; RJ_PEER_LISTEN may say 0).
  uint16_t port() const { return port_.load(std::memory_order_relaxed); }
  void write_metrics(metrics::Exposition& x) const;

 private:
  struct Impl;
  PeerSyncConfig config_;
  const Fleet& fleet_;
  PeerLoadBoard& board_;
  boost::asio::io_context ctx_;
  std::shared_ptr<Impl> impl_;
  std::thread thread_;
  std::atomic<uint16_t> port_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(PeerOutcome::kCount)> received_{};
  std::atomic<uint64_t> sent_{0}, send_errors_{0}, entries_matched_{0}, entries_unknown_{0};
};

// The families PeerSync::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> peer_sync_families();

}  // namespace ramjet::upstream
