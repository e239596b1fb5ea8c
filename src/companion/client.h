// companion/client: ramjet's side of one engine's ramjet-companion (issue 16). A thread of its own
// connects (blocking socket, deadlines), sends the hello, imports the companion's digest snapshot
// into a private inventory, follows the live tail (the engine's KV-event batches as the companion
// forwards them) and publishes the inventory to readers at the first CaughtUp; any failure
// unpublishes at once, counts an outcome and reconnects after a backoff. Codecs are
// companion/frames and companion/snapshot; what the inventory is worth to a decision is route's;
// which engines have a companion is the app's (RJ_EXACT_INVENTORY, RJ_COMPANION_*).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>

#include "cache/events/kv_fleet.h"
#include "cache/kv/codec.h"
#include "companion/frames.h"
#include "companion/snapshot.h"
#include "companion/transport.h"
#include "metrics/metrics.h"

namespace ramjet::companion {

// How a connection went (label of ramjet_companion_connections_total{outcome}). kSnapshot counts a
// snapshot imported (the connection goes on); every other value is why a connection ended.
enum class Outcome : uint8_t {
  kSnapshot,
  kConnectFailed,
  kTimeout,         // no frame within the read deadline (heartbeats come every 500 ms)
  kEof,             // the companion closed the connection (or reset it)
  kIoError,         // a socket error
  // The frame layer (FrameErrc) and the snapshot codec (SnapshotErrc) share these names:
  kTruncated,
  kBadMagic,
  kBadVersion,
  kOversized,
  kMalformed,       // also a frame out of place (an Event before the Snapshot, a second Snapshot)
  // FrameErrc only:
  kUnknownType,
  kWrongDirection,
  kBadMac,
  kGap,
  kGenerationChanged,
  // SnapshotErrc only:
  kBadChecksum,
  kLimit,
  kWrongChallenge,
  kWrongKey,
  kImport,
  // The tail:
  kDecodeError,     // an Event's batch the bounded KV-event decoder refused
  kIndexError,      // a batch the inventory could not follow (conflict, capacity)
  kOutOfOrder,      // an Event's vLLM sequence not above the last applied, or a CaughtUp below it
  kIdentityChanged, // an Identity frame naming another engine incarnation than the snapshot's
  // Disconnect frames, by reason:
  kDisconnectShutdown,
  kDisconnectReset,  // reconnects at once (no backoff), unless the connection before ended so too
  kDisconnectSlowClient,
  kDisconnectIdentityChanged,
  kDisconnectError,
  kCount_,
};
std::string_view label(Outcome o);
Outcome outcome_of(FrameErrc e);
Outcome outcome_of(SnapshotErrc e);
Outcome outcome_of(DisconnectReason r);

struct ClientOptions {
  size_t upstream = 0;  // the engine's ordinal (logs and metrics; never its host)
  Endpoint endpoint{};
  // The block-digest key (RJ_COMPANION_DIGEST_SECRET_FILE): both inventories are digest
  // inventories under it, and a snapshot under another key is refused.
  std::shared_ptr<const cache::DigestKey> digest{};
  cache::events::InventoryLimits inventory{};  // each of the two inventories (RJ_KV_INDEX_MAX_BLOCKS)
  cache::kv::DecodeLimits decode{};            // the Event batches (as the KV-event subscriber's)
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds first_frame_timeout{10000};  // the companion may wait 5 s for its engine
  std::chrono::milliseconds frame_timeout{3000};
  std::chrono::milliseconds backoff_min{250};  // doubling to backoff_max; reset by a snapshot
  std::chrono::milliseconds backoff_max{5000};
};

// Counted by the client thread, read by anyone (metrics, tests).
struct ClientStats {
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Outcome::kCount_)> connections{};
  std::atomic<uint64_t> events{0};                // Event batches applied
  std::atomic<uint64_t> snapshot_blocks{0};       // blocks of the last snapshot imported
  std::atomic<uint64_t> snapshot_import_us{0};    // how long its decode and import took
  std::atomic<int64_t> first_trust_ms{-1};        // start() to the first publication; -1 before
  uint64_t count(Outcome o) const { return connections[static_cast<size_t>(o)].load(std::memory_order_relaxed); }
};

class Client final : public cache::events::InventorySource {
 public:
  // `secret`: the session secret (RJ_COMPANION_SECRET_FILE); the client keeps a copy, wiped when
  // it goes.
  Client(ClientOptions options, const SessionSecret& secret);
  ~Client() override;  // stops the thread, wipes the secret
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void start() override;
  void request_stop() override;
  void stop() override;
  const cache::events::Inventory* trusted() const override { return published_.load(std::memory_order_acquire); }
  cache::events::FenceMode mode() const override { return mode_.load(std::memory_order_acquire); }
  const cache::events::UntrustedSince& untrusted() const override { return untrusted_; }
  uint64_t generation() const override { return generation_.load(std::memory_order_acquire); }
  const cache::events::Inventory* current() const override { return current_.load(std::memory_order_acquire); }
  std::string_view label() const override { return "companion"; }

  size_t upstream() const { return options_.upstream; }
  const ClientStats& stats() const { return stats_; }

 private:
  void run();
  // One connection, until it fails (or the client stops: kCount_); unpublishes before returning
  // and says whether the inventory was published.
  Outcome session(bool& was_trusted);
  void unpublish();
  bool sleep_for(std::chrono::milliseconds d);  // false once stopping

  ClientOptions options_;
  SessionSecret secret_{};
  SnapshotLimits snapshot_limits_{};
  FrameLimits frame_limits_{};
  // Two inventories, alternated: a snapshot is imported into the one not published last, so
  // readers still holding the other never see an import in progress.
  std::array<std::unique_ptr<cache::events::Inventory>, 2> inventories_;
  size_t published_index_ = 1;  // the client thread's: the last inventory published
  std::atomic<const cache::events::Inventory*> published_{nullptr};
  std::atomic<const cache::events::Inventory*> current_{nullptr};
  std::atomic<cache::events::FenceMode> mode_{cache::events::FenceMode::kFenced};
  cache::events::UntrustedSince untrusted_;
  void set_mode(cache::events::FenceMode m) {
    mode_.store(m, std::memory_order_release);
    untrusted_.note(m);
  }
  std::atomic<uint64_t> generation_{0};
  std::chrono::milliseconds backoff_{0};  // the client thread's
  std::chrono::steady_clock::time_point started_{};
  ClientStats stats_;
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  std::thread thread_;
};

// The families write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> companion_families();
// Every client's series (clients[i] may be null: that engine has no companion).
void write_metrics(metrics::Exposition& x, std::span<const Client* const> clients);

}  // namespace ramjet::companion
