// companion/server: the ramjet-companion process's core. It keeps one engine's digest inventory
// (cache/events Subscriber -> Inventory keyed by a DigestKey) and serves it to ramjet clients over
// Unix and TCP sockets: after an authentic hello, one Snapshot (captured with the client's tail
// queue registered in the same critical section, so no batch is lost or sent twice), CaughtUp,
// then every batch the inventory applies as an Event frame, CaughtUp heartbeats when idle, and a
// Disconnect when the client falls behind, the engine's state is reset, or the process stops.
// Threads and blocking sockets with poll deadlines: an accept thread and one thread per client.
// The frames and the snapshot codec are companion/frames and companion/snapshot; what a client
// does with them (fence, publish) is ramjet's (companion/client); the process's flags and
// signals are companion/main.cc.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "cache/events/inventory.h"
#include "cache/events/subscriber.h"
#include "cache/index/block_digest.h"
#include "companion/frames.h"
#include "companion/transport.h"
#include "metrics/metrics.h"

namespace ramjet::companion {

struct ServerOptions {
  std::vector<Endpoint> listen;  // at least one
  unsigned unix_mode = 0660;     // of the Unix socket files it creates
  SessionSecret secret{};        // the hello's and the frames' session secret
  std::shared_ptr<const cache::DigestKey> digest;  // required: the inventory's digest key
  std::vector<long> allowed_uids;  // Unix peers' effective UIDs; empty: this process's euid only
  std::chrono::milliseconds hello_timeout{2000};
  std::chrono::milliseconds heartbeat{500};         // CaughtUp after this long without a frame
  std::chrono::milliseconds wait_trusted{5000};     // a client waits this long for a trusted state
  std::chrono::milliseconds write_timeout{5000};    // one frame (a snapshot: per 8 MiB begun)
  size_t send_buffer_bytes = 64u << 20;  // a client's queued Event bytes beyond which it is slow
  size_t max_clients = 64;               // clients past their hello (waiting for a snapshot or tailing)
  size_t max_pending = 64;               // connections still before their hello (the oldest is dropped)
  std::chrono::milliseconds max_lag{10000};  // a client whose oldest queued event is older is slow
  size_t challenge_ledger = 65536;       // challenges remembered against replayed hellos
  FrameLimits frames{};
  cache::events::SubscriberOptions engine{};
  cache::events::InventoryLimits inventory{};
};

// Why a connection ended, or how far it got (label of ramjet_companion_connections_total{outcome}).
// accepted and served count progress; every connection then ends with exactly one other outcome.
enum class ServerOutcome : uint8_t {
  kAccepted,                  // given a thread
  kServed,                    // sent a snapshot
  kRefusedUid,                // a Unix peer whose UID is not allowed
  kRefusedBadHello,           // not an authentic hello (or closed before one)
  kRefusedHelloTimeout,
  kRefusedReplayedChallenge,  // a challenge already in the ledger
  kRefusedTooManyClients,     // beyond max_clients after its hello, or no thread could be made
  kEndedReset,                // the engine's state was reset (Disconnect kReset)
  kEndedSlowClient,           // its queue passed send_buffer_bytes (Disconnect kSlowClient)
  kEndedShutdown,             // the companion stopped (Disconnect kShutdown)
  kEndedWriteFailed,          // a write timed out or failed
  kEndedPeerClosed,           // the client closed (or sent bytes after its hello)
  kEndedNotTrusted,           // no trusted state within wait_trusted (Disconnect kReset)
  kEndedSnapshotTooLarge,     // the snapshot passed FrameLimits::max_snapshot_bytes (Disconnect kError)
  kCount_,
};
std::string_view label(ServerOutcome o);

// Counted by the server's threads, read by anyone (metrics, /health, tests).
struct ServerStats {
  std::array<std::atomic<uint64_t>, static_cast<size_t>(ServerOutcome::kCount_)> connections{};
  std::atomic<int64_t> clients{0};               // served connections now tailing
  std::atomic<uint64_t> events_forwarded{0};     // Event frames written
  std::atomic<uint64_t> snapshots{0};
  std::atomic<uint64_t> snapshot_bytes{0};       // the last snapshot's encoded size
  std::atomic<uint64_t> snapshot_blocks{0};      // the last snapshot's block records (not exported: ramjet's
                                                 // ramjet_companion_snapshot_blocks{upstream} is the client's)
  std::atomic<uint64_t> resets{0};               // companion generation bumps
  uint64_t count(ServerOutcome o) const { return connections[static_cast<size_t>(o)].load(std::memory_order_relaxed); }
};

class Server : public cache::events::SubscriberObserver {
 public:
  explicit Server(ServerOptions options);
  ~Server() override;  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds every endpoint, then starts the subscriber and the accept thread; an error names the
  // endpoint that failed (nothing keeps running then).
  std::optional<std::string> start();
  // Disconnect(kShutdown) to every client, joins every thread, stops the subscriber and removes
  // the Unix socket files it created. Idempotent.
  void stop();

  // The endpoints as bound (a TCP port 0 replaced by the one the kernel chose).
  const std::vector<Endpoint>& bound() const { return bound_; }
  const ServerStats& stats() const { return stats_; }
  const cache::events::SubscriberStats& engine_stats() const { return subscriber_.stats(); }
  cache::events::FenceMode mode() const { return subscriber_.mode(); }
  uint64_t engine_generation() const { return subscriber_.generation(); }
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Blocks in the inventory (resident, or kept for a resident block below), as ramjet_kv_index_blocks.
  size_t index_blocks() const { return inventory_.shard().blocks(); }
  // The inventory's whole state between two batches (tests, diagnostics).
  void export_state(cache::events::InventoryState& out);

  // ramjet_companion_* (docs: families()).
  static std::span<const metrics::Family> families();
  void write_metrics(metrics::Exposition& x) const;
  // {"status":"ok"|"fenced","kv_state":..,"clients":N,"blocks":N}; "ok" while trusted.
  std::string health_json() const;

  // ---- SubscriberObserver (the subscriber thread, under mutex()) ----
  std::mutex& mutex() override { return mu_; }
  void applied(uint64_t seq, std::string payload) override;
  void state(cache::events::FenceMode mode, uint64_t generation) override;

 private:
  struct Client;
  struct Connection;

  void accept_loop();
  void serve(int fd, bool unix_peer, const std::shared_ptr<Client>& client);
  // The tail until the connection ends; `say`: a Disconnect may follow (not in a frame's middle).
  // The first CaughtUp goes out only once everything queued since the snapshot was written, so a
  // client publishes a state no older than the companion's at that moment.
  ServerOutcome tail(int fd, Client& client, FrameSealer& sealer, std::optional<uint64_t> last_sent, bool& say);
  void log_refusal(ServerOutcome o);  // at most one line per second (a flood is counted, not logged)
  void reap(bool all);
  bool remember(const Challenge& c);  // false: seen before
  void reset_clients();               // under mu_
  void unregister(const Client& client);
  void end(ServerOutcome o);

  ServerOptions options_;
  ServerStats stats_;
  std::string boot_id_;  // 16 hex digits, random per process: the incarnation's first part

  // ---- under mu_ (the observer lock: the subscriber thread holds it around every change) ----
  std::mutex mu_;
  std::condition_variable trusted_cv_;  // state() became trusted, or stop()
  cache::events::FenceMode sub_mode_ = cache::events::FenceMode::kFenced;
  uint64_t sub_generation_ = 0;
  std::optional<uint64_t> last_seq_;              // the last applied vLLM sequence of this generation
  std::optional<uint64_t> applied_since_state_;  // applied() since the last state()
  std::vector<std::shared_ptr<Client>> tails_;    // clients whose snapshot is at the current basis
  std::atomic<uint64_t> generation_{1};           // the companion's (written under mu_)

  cache::events::Inventory inventory_;
  cache::events::Subscriber subscriber_;

  // The challenge ledger.
  std::mutex ledger_mu_;
  std::unordered_set<std::string> seen_;
  std::deque<std::string> seen_order_;

  // Listeners and connection threads.
  struct Listener {
    int fd = -1;
    bool unix_socket = false;
    std::string path;  // kUnix: the file to remove at stop (if it is still ours)
    uint64_t dev = 0, ino = 0;
  };
  std::vector<Listener> listeners_;
  std::vector<Endpoint> bound_;
  std::atomic<bool> stop_{false};
  bool started_ = false;
  bool stopped_ = false;
  std::thread accept_thread_;
  std::mutex conns_mu_;
  std::list<Connection> conns_;
};

}  // namespace ramjet::companion
