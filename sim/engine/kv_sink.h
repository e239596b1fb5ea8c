// sim/engine KV-event sink: where a simulated engine hands the KV events of each step (the block
// pool fills them as vLLM's does); sim/kv publishes them. The event types, block hashes and their
// wire encoding are the shared vocabulary of cache/kv, used here by their short names.
#pragma once

#include <vector>

#include "cache/kv/event.h"

namespace ramjet::sim {

using cache::kv::AllBlocksCleared;
using cache::kv::BlockHash;
using cache::kv::BlockRemoved;
using cache::kv::BlockStored;
using KvEvent = cache::kv::Event;

// Receives one batch per engine step, only when the step produced events (vLLM publishes
// nothing for empty steps). `ts` is wall-clock seconds (time.time()).
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual void publish(double ts, std::vector<KvEvent> events) = 0;
};

}  // namespace ramjet::sim
