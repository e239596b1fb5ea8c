// sim/kv internals shared by the publisher, its tests and the kv_event_dump tool.
// Not part of the simulator's public contract (publisher.h is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "sim/kv/publisher.h"

namespace ramjet::sim::kv_internal {

// The published 64-bit hash: the last 8 bytes of the digest read big-endian (same as
// external_u64() in sim/engine; kept private so sim/kv does not depend on its definition).
uint64_t low64(const Digest& d);

// Older vLLM array layouts. BlockStored grew 6 (v0.9) -> 7 (+medium) -> 8 (+lora_name) ->
// 9 (+extra_keys) -> 10 (+group_idx) -> 12 (+kv_cache_spec_kind, +sliding_window);
// BlockRemoved 2 -> 3 (+medium) -> 4 (+group_idx). ≤≈v0.9 had no data_parallel_rank in the batch.
// The public encode_batch() array format is the last one: {12, 4, true}.
struct ArrayLayout {
  int stored_fields = 12;   // 6..12, tag included
  int removed_fields = 4;   // 2..4, tag included
  bool with_dp_rank = true;
};

std::string encode_batch_ex(double ts, const std::vector<KvEvent>& events, int data_parallel_rank,
                            KvEventsFormat format, BlockHashType hash_type,
                            const ArrayLayout& layout);

// The process-wide ZMQ context every publisher uses (like pyzmq's zmq.Context.instance()), so an
// inproc:// endpoint is reachable from other sockets of the same process. Never destroyed.
zmq::context_t& zmq_context();

// Whether vLLM binds (true) or connects (false) its PUB socket for this endpoint.
bool pub_binds(const std::string& endpoint);

}  // namespace ramjet::sim::kv_internal
