// sim/kv internals shared by the publisher, its tests and the kv_event_dump tool.
// Not part of the simulator's public contract (publisher.h is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "sim/kv/publisher.h"

namespace ramjet::sim::kv_internal {

// The process-wide ZMQ context every publisher uses (like pyzmq's zmq.Context.instance()), so an
// inproc:// endpoint is reachable from other sockets of the same process. Never destroyed.
zmq::context_t& zmq_context();

// Whether vLLM binds (true) or connects (false) its PUB socket for this endpoint.
bool pub_binds(const std::string& endpoint);

}  // namespace ramjet::sim::kv_internal
