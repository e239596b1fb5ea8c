// request/prepare: the only stage that parses the request JSON. Applies the compatibility
// shims and extracts request facts into an immutable PreparedRequest. Routing, streaming and
// usage accounting receive native types; they never re-parse the body.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "request/ingress/endpoint.h"
#include "request/prepare/canonical.h"

namespace ramjet::request {

struct PrepareLimits {
  uint32_t max_json_depth = 128;  // deeper bodies are treated as malformed (forwarded unchanged)
};

struct PrepareConfig {
  uint64_t max_tokens_strip = 100000;  // RJ_MAX_TOKENS_STRIP
  // RJ_SESSION_AFFINITY_USER_FIELD: read the body's `user` (OpenAI) or `metadata.user_id`
  // (Anthropic) as the request's session when it has no X-Session-ID.
  bool session_user_field = false;
  PrepareLimits limits;
  // Fingerprint inference requests from the same parse (the prefix policy needs them; the
  // others do not, and skip the cost).
  bool fingerprint = false;
  FingerprintConfig fingerprints;  // RJ_ROUTE_CHUNK_BYTES, RJ_ROUTE_MAX_PREFIX_BYTES
};

// What the shims did (for counters; never contains payload).
struct ShimReport {
  bool max_tokens_stripped = false;
  bool max_completion_tokens_stripped = false;
  uint32_t contents_flattened = 0;   // messages whose all-text parts array became a string
  bool reasoning_effort_dropped = false;
  bool any() const {
    return max_tokens_stripped || max_completion_tokens_stripped || contents_flattened > 0 ||
           reasoning_effort_dropped;
  }
};

// How a request's prompt tokens for exact routing were got (ramjet_exact_route_total's outcomes
// before any lookup).
enum class ExactTokens : uint8_t {
  kOff,         // exact routing is off
  kIneligible,  // not chat/completions, outside RJ_EXACT_ROUTE_MIN_BYTES..MAX, or not renderable
  kTokenized,   // `tokens` holds them
  kTimeout,     // no tokens within RJ_EXACT_ROUTE_TIMEOUT_MS (the engine's /tokenize, or the local render)
  kFailed,      // the engine refused, failed or answered something else; the local render failed
  kNoEngine,    // no healthy engine to ask
  kUnattested,  // RJ_EXACT_TOKENS=local: a healthy engine is not attested against the manifest
  kBusy,        // RJ_EXACT_TOKENS=local: the render pool's queue is full
};

// The request's canary cohort (RJ_EXACT_ROUTE_CANARY_BPS): only kAll and kTreatment are placed on
// exact overlaps; the others are computed and recorded as shadow decisions.
enum class ExactCohort : uint8_t { kAll, kTreatment, kControl, kNoSession };

struct ExactInput {
  ExactTokens status = ExactTokens::kOff;
  ExactCohort cohort = ExactCohort::kAll;
  std::vector<uint32_t> tokens;  // the prompt's token IDs as the engines render and tokenize it
  std::string model;             // the request's "model" (a LoRA adapter's name selects its namespace)
  std::string cache_salt;        // the request's "cache_salt" (its own namespace)
};

// The session a request names (session affinity, the exact canary): X-Session-ID when the head
// has exactly one of 1..256 bytes (request/stream reads it), else the body's user field when
// RJ_SESSION_AFFINITY_USER_FIELD is on. Never logged, journalled or exported.
enum class SessionSource : uint8_t { kNone, kHeader, kUser, kInvalid };
inline constexpr size_t kMaxSessionBytes = 256;
struct SessionId {
  SessionSource source = SessionSource::kNone;  // kInvalid: an X-Session-ID that breaks the rule (ignored)
  std::string value;
};

// The body's top-level "model" (inference endpoints): which model's engines may serve it
// (upstream/model_pools.h). kBad: not a string, empty, or over kMaxModelBytes (a 400).
enum class ModelField : uint8_t { kAbsent, kName, kBad };
inline constexpr size_t kMaxModelBytes = 1024;

// The memory a body's parse may hold: its json_tape (24 bytes a value), or, when the body must be
// rewritten or only Boost.JSON can read it, its Boost.JSON document and the parser's stack (up to
// ~2.7x the tape's a value). Up to kParseFreeBytes it takes without asking; past that, each
// growth is asked of a ParseMemory (request/stream holds it in RJ_MAX_BUFFERED_BYTES), up to
// kParseBytesPerBodyByte per body byte for the tape and three times that for Boost.JSON. A body
// that needs more (values denser than one per 3 bytes: a long array of one-digit numbers) is
// refused as too dense, whatever else it holds (even when it is not an object); one whose growth
// the ParseMemory refuses, as memory full. Token IDs as clients send them (`151644,`) take ~3.4
// bytes of tape a body byte. (The tape's copies of escaped strings it is asked to unescape take
// at most the body's size again: not counted here.)
inline constexpr uint64_t kParseFreeBytes = 2u << 20;
inline constexpr uint64_t kParseBytesPerBodyByte = 8;
class ParseMemory {
 public:
  // Whether the parse may hold `parse_bytes` in all (asked as it grows, never shrinking).
  virtual bool grow_to(uint64_t parse_bytes) = 0;

 protected:
  ~ParseMemory() = default;
};
enum class ParseRefusal : uint8_t {
  kNone,
  kTooDense,  // the parse needed more than kParseBytesPerBodyByte per body byte
  kMemory,    // the ParseMemory refused a growth
};

struct PreparedRequest {
  Endpoint endpoint = Endpoint::kOther;
  // Not kNone: the body was not read (nothing else here is set but `endpoint`; `body` may be
  // empty); the request must be refused.
  ParseRefusal parse_refused = ParseRefusal::kNone;
  std::string body;              // bytes to forward: the original bytes unless a shim changed something
  bool rewritten = false;        // body was re-serialised because a shim changed it
  bool json_object = false;      // body parsed as a JSON object
  bool malformed_json = false;   // inference endpoint whose body is not a JSON object (forwarded unchanged)
  std::optional<bool> stream;    // top-level "stream" when it is a boolean
  // Requested output limit after shims: chat max_completion_tokens then max_tokens; completions
  // and messages max_tokens; responses max_output_tokens. nullopt when absent/null/invalid.
  std::optional<uint64_t> max_output_tokens;
  ModelField model_field = ModelField::kAbsent;
  std::string model;             // the "model" string when model_field is kName
  // The top-level "cache_salt" (a non-empty string; else empty): vLLM keeps
  // a salted prompt's blocks apart from every other request's, and so do the fingerprints
  // (namespace_fingerprints).
  std::string cache_salt;
  ShimReport shims;
  // Chain fingerprints of the post-shim canonical prompt (empty unless config.fingerprint and an
  // inference endpoint); a body that is not a JSON object is fingerprinted raw.
  Fingerprints fingerprints;
  // Exact routing (RJ_EXACT_ROUTE_MODE): request/stream fills this before the decision, route's
  // exact overlap source reads it. Empty unless the mode is on or shadow.
  ExactInput exact;
  // The request's session (above). prepare() fills kUser from the body; request/stream applies
  // the header before routing.
  SessionId session;
};

// Shims (chat and completions only), exactly as the reference:
//  1. drop max_tokens / max_completion_tokens whose value is a number >= max_tokens_strip;
//  2. in each message, a content array whose parts are all {"type":"text","text":<string>}
//     becomes the concatenated string; any non-text part (image_url, video_url, unknown)
//     leaves that content untouched;
//  3. drop reasoning_effort when it is not one of none|minimal|low|medium|high|xhigh|max.
// An unchanged body is forwarded byte for byte. Other endpoints are never modified.
// `memory`: what a parse past kParseFreeBytes asks (nullptr: no one; only the ratio bounds it).
// `chain_storage`: a vector whose storage the fingerprint chain may take (a connection's previous
// request's: a request then allocates nothing for its chain); its contents are dropped.
PreparedRequest prepare(Endpoint endpoint, std::string body, const PrepareConfig& config,
                        ParseMemory* memory = nullptr, std::vector<uint64_t> chain_storage = {});

// GET /v1/models rewrite: in every object of data[] (recursively), each integer field named
// max_model_len / context_length / max_context_length whose value is > margin is reduced by
// margin. Returns the new body, or nullopt when nothing changed or the body is not JSON.
std::optional<std::string> rewrite_models_context(std::string_view body, uint64_t margin);

namespace detail {

// How many prepare() calls on this thread the fast path (common/json_tape) answered (the
// differential test and the benchmark show that both paths ran).
uint64_t fast_path_count();

}  // namespace detail

}  // namespace ramjet::request
