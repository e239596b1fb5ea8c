// request/stream/disagg_legs: the bodies of prefill/decode disaggregation's two legs, as vLLM's
// P/D proxies send them (docs/sim.md §8.4: toy_proxy_server.py, disagg_proxy_multiturn.py), and
// the transfer parameters read from the prefill engine's answer. Pure: the proxy gathers the
// client's bytes around these members (owned_body.h) and reads the answer (Proxy::prefill_leg).
//
// - The prefill leg is the client's request with ramjet's "kv_transfer_params" asking for remote
//   decode, "stream": false and one output token ("max_tokens": 1; chat also
//   "max_completion_tokens": 1; Responses "max_output_tokens": 1); the client's members of those
//   names, "stream_options" and "min_tokens" / "min_completion_tokens" are left out (a minimum
//   above one token would make the engine refuse the leg).
// - The decode leg is the client's request as sent, its own "kv_transfer_params" replaced by the
//   prefill answer's. A request served whole by an engine of a disaggregated fleet loses the
//   client's kv_transfer_params too: they name the host and port an engine pulls KV blocks from,
//   which only ramjet may say.
// With RJ_ADMISSION_ENGINE_PRIORITY both legs also carry the request's class as "priority".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "request/ingress/endpoint.h"

namespace ramjet::request {

// The client's members each leg leaves out; "priority" (last) only with ramjet's own priority.
inline constexpr std::string_view kPrefillLegMembers[] = {
    "kv_transfer_params", "stream",     "stream_options",        "max_tokens", "max_completion_tokens",
    "max_output_tokens",  "min_tokens", "min_completion_tokens", "priority"};
inline constexpr std::string_view kDecodeLegMembers[] = {"kv_transfer_params", "priority"};

inline std::span<const std::string_view> prefill_leg_names(bool priority) {
  return std::span<const std::string_view>(kPrefillLegMembers).first(std::size(kPrefillLegMembers) - (priority ? 0 : 1));
}
inline std::span<const std::string_view> decode_leg_names(bool priority) {
  return std::span<const std::string_view>(kDecodeLegMembers).first(std::size(kDecodeLegMembers) - (priority ? 0 : 1));
}

// ramjet's members of the prefill leg for endpoint `ep` (no leading or trailing comma).
std::string prefill_leg_members(Endpoint ep, std::optional<int64_t> priority);
// ramjet's members of the decode leg: "kv_transfer_params": `params` (compact JSON; "" for none,
// a request served whole) and the priority (none of either: "").
std::string decode_leg_members(std::string_view params, std::optional<int64_t> priority);

// The largest prefill answer read (one token, its usage and the parameters; more is a failed leg)
// and the largest parameters passed on.
inline constexpr size_t kMaxPrefillAnswerBytes = 1u << 20;
inline constexpr size_t kMaxTransferParamsBytes = 64u << 10;

enum class ParamsError : uint8_t {
  kNone,
  kNotJson,      // the answer is not one JSON object (or nests past 64 levels)
  kMissing,      // it has no kv_transfer_params, or null (vLLM: no connector, or a streamed leg)
  kNotObject,    // they are not an object
  kNotRemote,    // they do not offer the prefill for remote decode (do_remote_prefill is not true)
  kTooLarge,     // they are over kMaxTransferParamsBytes
};
std::string_view label(ParamsError e);

struct TransferParams {
  ParamsError error = ParamsError::kNone;
  std::string json;  // compact JSON of the object (error kNone)
  // The producer's own prefix hit (remote_prefill_cached_tokens), when it says.
  std::optional<uint64_t> cached_tokens;
};

// The top-level "kv_transfer_params" of a prefill engine's answer (a chat, completions, Responses or
// Messages response body of at most kMaxPrefillAnswerBytes).
TransferParams transfer_params(std::string_view answer);

}  // namespace ramjet::request
