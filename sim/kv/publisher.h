// sim/kv: publishes KV-event batches exactly as vLLM's ZmqEventPublisher does
// (docs/sim.md §8): PUB frames [topic, seq (8-byte big-endian), msgpack payload], seq
// from 0 per publisher instance; a ROUTER replay socket keeping the last buffer_steps batches,
// answering both reply layouts; DP-rank port offsets. The payload is cache/kv's encoding of the
// batch: array (vLLM < 0.26) or map layout, 64-bit int or bytes hashes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv/codec.h"
#include "sim/engine/kv_sink.h"

namespace ramjet::sim {

enum class ReplayLayout { kWithTopic, kLegacy };  // vLLM >= 0.26 [topic, seq, payload] | older [seq, payload]

struct PublisherConfig {
  bool enabled = false;                        // enable_kv_cache_events
  std::string publisher = "zmq";               // "zmq" | "null"
  std::string endpoint = "tcp://*:5557";       // PUB: binds if it contains '*' or '::' or is ipc/inproc, else connects
  std::string replay_endpoint;                 // ROUTER (bound) when set
  std::string topic;
  uint32_t buffer_steps = 10000;
  uint32_t hwm = 100000;
  uint32_t max_queue_size = 100000;            // batches waiting for the publisher thread
  int data_parallel_rank = 0;                  // offsets tcp ports by the rank
  // --kv-events-format array|map (the array layout is the last array_like release) and
  // --kv-events-hash u64|bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1|0): vLLM's defaults.
  cache::kv::EncodeOptions encoding{cache::kv::Layout::kMap, /*int_block_hashes=*/true, {}};
  ReplayLayout replay_layout = ReplayLayout::kWithTopic;
};

// Parses vLLM's --kv-events-config JSON (keys enable_kv_cache_events, publisher, endpoint,
// replay_endpoint, buffer_steps, hwm, max_queue_size, topic). Unknown keys are an error, as in
// vLLM's pydantic config. Returns an error message or "" (then only the keys present are
// overwritten in `out`, and publisher is derived from enable_kv_cache_events when absent or null).
std::string parse_kv_events_config(const std::string& json, PublisherConfig& out);

// tcp://host:PORT -> tcp://host:(PORT+rank); inproc://x -> inproc://x_dp{rank}; port 0 unchanged.
// Rank 0 or an empty endpoint: unchanged. Returns "" where vLLM raises ValueError (rank > 0 with
// ipc:// or another scheme, a non-numeric port, a shifted port above 65535).
std::string offset_endpoint_port(const std::string& endpoint, int rank);

// The payload of one batch as this publisher sends it: [ts, events, data_parallel_rank (None when
// negative)] encoded per config.encoding.
std::string encode_payload(const PublisherConfig& config, double ts, std::vector<KvEvent> events);

class KvPublisher final : public KvEventSink {
 public:
  explicit KvPublisher(PublisherConfig config);
  ~KvPublisher() override;

  // Binds/connects the sockets (endpoints offset by data_parallel_rank) and starts the publisher
  // thread. Returns "" or an error. A disabled or "null" publisher starts nothing and returns "".
  std::string start();
  // Publishes what is still queued, closes the sockets (linger 0) and joins the thread.
  void stop();

  // Thread-safe; never blocks the engine for long (bounded queue, like vLLM's max_queue_size).
  // A no-op unless started (and for a disabled/"null" publisher). When max_queue_size batches are
  // already waiting it blocks up to 100 ms for room (vLLM blocks indefinitely), then drops the
  // batch without consuming a sequence number and counts it in dropped_batches().
  void publish(double ts, std::vector<KvEvent> events) override;

  // Waits until every publish()/fault_*() call made before it has been applied by the publisher
  // thread (sent, buffered). False on timeout or when not running.
  bool flush(int timeout_ms = 5000);
  uint64_t dropped_batches() const;

  // Faults: drop the next n batches (sequence numbers consumed and kept in the replay buffer,
  // nothing sent live: a receiver sees a gap that replay can fill); skip n sequence numbers (a gap
  // replay cannot fill); restart (new publisher instance: seq back to 0, replay buffer emptied;
  // sockets and a pending drop count are kept). Faults are queued in order with publish() and are
  // never dropped; no-ops unless started.
  void fault_drop(uint32_t n);
  void fault_skip(uint32_t n);
  void fault_restart();
  // The next n batches go out (live and into the replay buffer) with a payload that is not
  // MessagePack, their sequence numbers consumed.
  void fault_garbage(uint32_t n);

  // Resolved endpoints after binding (port 0 -> the ephemeral port), for GET /kv_event_sources.
  std::string bound_endpoint() const;
  std::string bound_replay_endpoint() const;
  uint64_t next_sequence() const;  // the seq the next batch will get (as applied by the thread)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ramjet::sim
