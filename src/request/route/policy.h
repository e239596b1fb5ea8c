// request/route: routing policies behind one narrow interface. A policy is a pure function
// (PreparedRequest, FleetSnapshot) -> Decision; it never performs I/O or mutates load.
// Dispatch (request/stream) reserves load with LoadReservation and walks Decision::order.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "request/prepare/prepare.h"

namespace ramjet::upstream {
class Fleet;
}

namespace ramjet::route {

// The decode profile an engine declares (RJ_UPSTREAM_PROFILES): speculative (MTP) engines decode
// short outputs faster, standard engines long ones; kNone when the operator declared nothing.
enum class Profile : uint8_t { kNone, kMtp, kStandard };
std::string_view profile_label(Profile p);  // none|mtp|standard

struct CandidateState {
  size_t ordinal = 0;
  bool eligible = true;  // serving-eligible: healthy (later: ready, not drained)
  int64_t load_units = 0;
  int64_t inflight = 0;
  // Leading request fingerprints this engine holds. The caller fills it from cache/index before
  // deciding (0 everywhere under RJ_AFFINITY=load); policies never read the index themselves.
  uint32_t overlap = 0;
  Profile profile = Profile::kNone;
};

struct FleetSnapshot {
  std::vector<CandidateState> candidates;  // indexed by ordinal
  static FleetSnapshot of(const upstream::Fleet& fleet);
};

// What decided the winner (metric label): single|load|rr|overlap|profile.
enum class Outcome { kSingle, kLoad, kRoundRobin, kOverlap, kProfile };
std::string_view outcome_label(Outcome o);

struct CandidateTerms {
  size_t ordinal = 0;
  bool eligible = false;
  int64_t load_units = 0;
  uint32_t request_load_units = 1;  // what this request would reserve on this candidate
  uint32_t overlap = 0;             // raw leading blocks held (prefix policy)
  uint32_t affinity = 0;            // min(overlap, max_overlap_blocks)
  double score = 0;                 // affinity - alpha * load_units (prefix policy)
  Profile profile = Profile::kNone;
};

struct Decision {
  std::vector<CandidateTerms> ranked;  // every candidate, best first
  Outcome outcome = Outcome::kSingle;
  bool fail_open = false;              // nothing eligible: dispatch to at most two candidates
  // The candidates dispatch may try, in order: eligible ones, or (fail-open) the first two.
  std::vector<CandidateTerms> dispatch_order() const;
};

struct RouteConfig {
  uint64_t load_unit_bytes = 32768;  // RJ_ROUTE_LOAD_UNIT_BYTES
  uint32_t max_load_units = 8;       // RJ_ROUTE_MAX_LOAD_UNITS
  double alpha = 4.0;                // RJ_ROUTE_ALPHA: score units per reserved load unit
  uint32_t max_overlap_blocks = 32;  // RJ_ROUTE_MAX_OVERLAP_BLOCKS: affinity cap
  uint64_t chunk_bytes = 2048;       // RJ_ROUTE_CHUNK_BYTES: bytes per fingerprint block
  uint64_t short_max_tokens = 256;   // RJ_PROFILE_SHORT_MAX_TOKENS: <= this prefers MTP engines
};

// clamp(ceil(bytes / unit), 1, max)
uint32_t request_load_units(uint64_t uncached_bytes, const RouteConfig& c);

// What a request would reserve on a candidate holding `overlap` of its blocks: the load units of
// body_bytes - overlap * chunk_bytes (saturating at 0).
uint32_t request_load_units_with_overlap(uint64_t body_bytes, uint32_t overlap, const RouteConfig& c);

// The decode profile a request prefers: kMtp for an output limit of 1..short_max_tokens,
// kStandard for a larger, unset or invalid (0) one, kNone for `other` endpoints.
Profile preferred_profile(const request::PreparedRequest& req, const RouteConfig& c);

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual Decision decide(const request::PreparedRequest& req, const FleetSnapshot& fleet) = 0;
};

// Known names: "prefix" (prefix affinity minus load, prefix_load.cc), "load" (least load, then
// rotation), "round_robin" (load-blind rotation).
// Returns nullptr for an unknown name.
std::unique_ptr<Policy> make_policy(std::string_view name, const RouteConfig& config);

}  // namespace ramjet::route
