// sim/server/kv_transfer: prefill/decode disaggregation at the simulator's edge (docs/sim.md
// §8.4) — a request's `kv_transfer_params` read as vLLM 0.32's NixlConnector (pull mode) reads
// them, the producer's answer in vLLM's exact shape, and the simulator's own side channel: a
// tiny HTTP client the consumer uses to "pull" from the producer (POST /sim/kv/pull, then
// /sim/kv/done, vLLM's NIXL READ and its completion notification). What the engine does with
// the legs (held blocks, the pull's wait, the cached blocks) is sim/engine's; the leases, the
// pulls' coroutines and the counters are SimServer's (kv_serve.cc).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "sim/engine/engine.h"
#include "sim/server/agent_convert.h"

namespace ramjet::sim {

// What a decode leg's params name: the producer's request and where to pull it from.
struct RemotePrefill {
  std::string engine_id;                // remote_engine_id
  std::string request_id;               // remote_request_id
  std::string host;                     // remote_host
  uint16_t port = 0;                    // remote_port
  std::vector<uint32_t> block_ids;      // remote_block_ids (group 0)
  std::optional<int64_t> cached_tokens; // remote_prefill_cached_tokens: the API reports it
};

struct KvParams {
  KvTransfer kind = KvTransfer::kNone;
  RemotePrefill remote;  // kind == kRemotePrefill
};

// Reads `kv_transfer_params` (the body validated it is an object or null; null/absent/{} = none).
// do_remote_decode → a prefill leg; do_remote_prefill → a decode leg, which needs
// remote_engine_id, remote_request_id, remote_host (strings), remote_port (an integer) and
// remote_block_ids (a non-empty list of block-id lists, or vLLM's older flat list). A decode leg
// missing them is a 400 here (vLLM 0.32 parks it for ever, or its engine core dies on the abort;
// docs/sim.md §8.4); so is a body asking for both legs at once.
Result<KvParams, AgentError> parse_kv_params(const boost::json::value* v);

// The producer's answer (NixlConnectorScheduler.request_finished, then the scheduler's
// remote_prefill_cached_tokens), keys in vLLM's order.
struct ProducerAnswer {
  std::vector<uint32_t> block_ids;
  std::string engine_id;
  std::string request_id;
  std::string host;
  uint16_t port = 0;
  uint32_t num_tokens = 0;     // remote_num_tokens: the request's computed tokens
  uint32_t cached_tokens = 0;  // remote_prefill_cached_tokens: the producer's own prefix hit
};
boost::json::object producer_params(const ProducerAnswer& a);

// vLLM's internal request id, which remote_request_id carries: the response id, then "-0" (the
// prompt's index) for completions, then "-" and 8 hex digits (InputProcessor's random suffix).
std::string internal_request_id(const std::string& response_id, bool completions, uint64_t serial);

// vLLM's default engine_id: str(uuid.uuid4()).
std::string random_engine_id();

// One HTTP/1.1 POST of a JSON body to host:port (the side channel), Connection: close. status
// -1: no answer (resolve, connect, I/O error or `timeout_s`).
struct SideReply {
  int status = -1;
  std::string body{};
};
boost::asio::awaitable<SideReply> side_post(boost::asio::any_io_executor ex, std::string host, uint16_t port,
                                            std::string path, std::string body, double timeout_s);

}  // namespace ramjet::sim
