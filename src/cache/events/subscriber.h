// cache/events/subscriber: one engine's KV-event transport. A thread of its own holds a ZeroMQ SUB
// socket on the engine's live endpoint (frames: topic, sequence as 8 bytes big-endian, MessagePack
// payload), a socket monitor (a disconnect fences at once, even though ZeroMQ reconnects by
// itself with backoff), and, while the fence asks for one, a DEALER on the replay endpoint
// (request ["", from as 8 bytes big-endian]; replies [seq, payload] before vLLM 0.26 and
// [topic, seq, payload] since, ended by the all-0xff sequence or an empty last frame; one deadline
// for the whole replay). Every batch goes through the SequenceFence; the Inventory only sees the
// batches the fence lets through, in order. Readers ask trusted() before they use the inventory.
#pragma once

#include <array>
#include <atomic>
#include <optional>
#include <mutex>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "cache/events/fence.h"
#include "common/clock.h"
#include "cache/events/inventory.h"
#include "cache/kv/codec.h"

namespace ramjet::cache::events {

struct SubscriberOptions {
  std::string live_endpoint;    // e.g. tcp://10.0.0.5:5557 (connected to)
  std::string replay_endpoint;  // empty: no replay (every gap fences)
  std::string topic;            // vLLM's kv_events_config.topic ("" by default)
  std::chrono::milliseconds replay_timeout{5000};        // the whole replay, connect included
  std::chrono::milliseconds reconnect_min{250};          // ZeroMQ's reconnect backoff
  std::chrono::milliseconds reconnect_max{10000};
  FenceLimits fence;
  kv::DecodeLimits decode;
};

// Since when an inventory has not been trusted (SteadyClock ms), for /health and the alert metric
// (ramjet_kv_untrusted_seconds): noted by its writer at every trust state it publishes.
class UntrustedSince {
 public:
  static constexpr int64_t kTrusted = -1;
  UntrustedSince() : since_(SteadyClock::instance().now_ms()) {}  // untrusted from the start
  void note(FenceMode mode) {
    if (mode == FenceMode::kTrusted) since_.store(kTrusted, std::memory_order_relaxed);
    else if (since_.load(std::memory_order_relaxed) == kTrusted) since_.store(SteadyClock::instance().now_ms(), std::memory_order_relaxed);
  }
  int64_t since_ms() const { return since_.load(std::memory_order_relaxed); }  // kTrusted while trusted

 private:
  std::atomic<int64_t> since_;
};

// Counted by the subscriber thread, read by anyone (metrics, /health).
struct SubscriberStats {
  std::atomic<uint64_t> batches{0};          // live batches received with a valid envelope
  std::atomic<uint64_t> replayed{0};         // batches received by replay
  std::atomic<uint64_t> bad_frames{0};       // a message with the wrong frame count, topic or sequence width
  std::atomic<uint64_t> decode_errors{0};    // a payload the decoder refused (the batch is lost: fenced)
  std::atomic<uint64_t> index_errors{0};     // a batch the index could not follow (fenced)
  std::array<std::atomic<uint64_t>, static_cast<size_t>(FenceEvent::kCount_)> transitions{};
  std::atomic<uint64_t> blocks_stored{0};
  std::atomic<uint64_t> blocks_removed{0};
  // The same by tier (ExactShard's Tier: gpu, cpu, disk)
  std::array<std::atomic<uint64_t>, kTiers> tier_blocks_stored{};
  std::array<std::atomic<uint64_t>, kTiers> tier_blocks_removed{};
  std::atomic<bool> connected{false};
};

// Watches one subscriber's inventory change (the companion: its clients' tail and snapshots). Its
// calls come from the subscriber thread while it holds mutex(), which it also holds around every
// change to the inventory, so whoever takes mutex() sees the inventory between two batches, and
// every batch applied after that arrives through applied().
class SubscriberObserver {
 public:
  virtual ~SubscriberObserver() = default;
  virtual std::mutex& mutex() = 0;
  // A batch the inventory applied (after any clear the fence asked for), with its vLLM sequence
  // and its payload bytes as the engine published them (the subscriber's copy, handed over).
  virtual void applied(uint64_t seq, std::string payload) = 0;
  // The trust state as published to readers (repeated values are possible). A generation other
  // than the last one means the inventory was started again from empty.
  virtual void state(FenceMode mode, uint64_t generation) = 0;
};

class Subscriber {
 public:
  // `observer` (may be null) outlives the subscriber.
  Subscriber(SubscriberOptions options, Inventory& inventory, SubscriberObserver* observer = nullptr);
  ~Subscriber();  // stops the thread
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  void start();
  void stop();          // request_stop() and join
  void request_stop();  // returns at once; the thread ends within its 100 ms poll
  // New endpoints and topic (any thread, returns at once): the thread drops its sockets and the
  // index within its 100 ms poll and subscribes again. An empty live endpoint: none (fenced,
  // waiting). A subscriber made with an empty live endpoint waits for this (discovery).
  void set_endpoints(std::string live, std::string replay, std::string topic);

  // Whether the inventory mirrors the engine's cache right now (any thread).
  bool trusted() const { return mode() == FenceMode::kTrusted; }
  FenceMode mode() const { return mode_.load(std::memory_order_acquire); }
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  const UntrustedSince& untrusted() const { return untrusted_; }
  const SubscriberStats& stats() const { return stats_; }

 private:
  struct Loop;
  void run();

  bool take_pending();  // the subscriber thread: new endpoints into options_, when set_endpoints left some

  SubscriberOptions options_;  // the subscriber thread's (set_endpoints hands new ones over via pending_)
  const SubscriberOptions base_;  // as made: set_endpoints changes only endpoints and topic
  uint64_t generation_offset_ = 0;  // generations of earlier endpoints (subscriber thread)
  std::mutex pending_mu_;
  std::optional<SubscriberOptions> pending_;
  std::atomic<bool> reconfigure_{false};
  Inventory& inventory_;
  SubscriberObserver* observer_;
  SubscriberStats stats_;
  std::atomic<FenceMode> mode_{FenceMode::kFenced};
  std::atomic<uint64_t> generation_{0};
  UntrustedSince untrusted_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ramjet::cache::events
