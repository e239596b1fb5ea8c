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

struct CandidateState {
  size_t ordinal = 0;
  bool eligible = true;  // serving-eligible: healthy (later: ready, not drained)
  int64_t load_units = 0;
  int64_t inflight = 0;
};

struct FleetSnapshot {
  std::vector<CandidateState> candidates;  // indexed by ordinal
  static FleetSnapshot of(const upstream::Fleet& fleet);
};

enum class Outcome { kSingle, kLoad, kRoundRobin };
std::string_view outcome_label(Outcome o);

struct CandidateTerms {
  size_t ordinal = 0;
  bool eligible = false;
  int64_t load_units = 0;
  uint32_t request_load_units = 1;  // what this request would reserve on this candidate
};

struct Decision {
  std::vector<CandidateTerms> ranked;  // every candidate, best first
  Outcome outcome = Outcome::kSingle;
  bool fail_open = false;              // nothing eligible: dispatch to at most two candidates
  // The candidates dispatch may try, in order: eligible ones, or (fail-open) the first two.
  std::vector<CandidateTerms> dispatch_order() const;
};

struct RouteConfig {
  uint64_t load_unit_bytes = 32768;
  uint32_t max_load_units = 8;
};

// clamp(ceil(bytes / unit), 1, max)
uint32_t request_load_units(uint64_t uncached_bytes, const RouteConfig& c);

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual Decision decide(const request::PreparedRequest& req, const FleetSnapshot& fleet) = 0;
};

// Known names: "load" (least load, then rotation), "round_robin" (load-blind rotation).
// Returns nullptr for an unknown name.
std::unique_ptr<Policy> make_policy(std::string_view name, const RouteConfig& config);

}  // namespace ramjet::route
