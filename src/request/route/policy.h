// request/route: routing policies behind one narrow interface. A policy is a pure function
// (RouteRequest, FleetSnapshot, rotation) -> Decision; it never performs I/O, reads the index or
// mutates load. route/router.h fills the snapshot (health, load, overlap, single-flight,
// profiles); dispatch (request/stream) reserves load with LoadReservation and walks
// Decision::dispatch_order().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "request/prepare/prepare.h"

namespace ramjet::upstream {
class Fleet;
}

namespace ramjet::route {

// The decode profile an engine declares (RJ_UPSTREAM_PROFILES): speculative (MTP) engines decode
// short outputs faster, standard engines long ones; kNone when the operator declared nothing.
enum class Profile : uint8_t { kNone, kMtp, kStandard };
std::string_view profile_label(Profile p);  // none|mtp|standard

// Where a LoRA adapter request stands on an engine (route/adapter_board.h, from the engine's
// vllm:lora_requests_info): kActive, the engine runs or queues requests of that adapter (its
// weights are loaded); kFree, it does not, but fewer adapters than its max_loras are active, so
// the adapter loads into a free slot; kFull, max_loras other adapters are active: vLLM schedules
// the request only when one of them has no running request left (and loads it then). kUnknown:
// the engine reports no adapter state (no LoRA gauge yet, a failed or stale scrape) while another
// candidate does: charged as a free slot (nothing says the adapter is loaded there). kNone: not an
// adapter request, or no candidate reports adapter state (no charge anywhere).
enum class AdapterSlot : uint8_t { kNone, kActive, kFree, kFull, kUnknown };
std::string_view adapter_slot_label(AdapterSlot a);  // none|active|free|full|unknown

struct CandidateState {
  size_t ordinal = 0;
  bool eligible = true;  // serving-eligible: healthy (later: ready, not drained)
  int64_t load_units = 0;  // this process's reservations there
  int64_t inflight = 0;
  // Leading request fingerprints this engine holds. The caller fills it from cache/index before
  // deciding (0 everywhere under RJ_AFFINITY=load); policies never read the index themselves.
  uint32_t overlap = 0;
  // Leading request fingerprints a concurrent leader with the same new prefix is prefilling on
  // this engine right now (route/single_flight.h); 0 unless the request is cold everywhere.
  uint32_t single_flight = 0;
  Profile profile = Profile::kNone;
  // Its last requests failed, recently (upstream::Fleet::failing()). A failed request releases
  // its load at once, so an engine that fails fast looks idle; policies that weigh load rank a
  // failing engine after every eligible one that is not (whatever its score: no fixed penalty
  // survives a loaded fleet), until it succeeds again or RJ_OUTLIER_PENALTY_MS pass, so it is
  // never preferred for failing.
  bool failing = false;
  // Load other routers put there, in load units (upstream/engine_load.h: the RJ_PEERS replicas'
  // own load there, plus what the engine reports beyond this process's and the peers' in-flight
  // requests — that share 0 when RJ_ROUTE_ENGINE_LOAD is off or the engine's reading is stale).
  // Policies that weigh load add it to load_units.
  int64_t foreign_load_units = 0;
  // Session affinity (route/session_affinity.h): extra affinity blocks the request's session
  // target earns (the prefix policy adds them to its affinity, capped); 0 elsewhere.
  uint32_t session_bonus = 0;
  // The request's LoRA adapter on this engine (kNone for a base-model request).
  AdapterSlot adapter = AdapterSlot::kNone;
  // RJ_ROUTE_DECODE_COST (route/decode_cost.h): the time the request's output would take to
  // decode here beyond the fastest candidate's, in blocks of prefill time (score units; 0 when
  // off or not learned yet). The prefix policy subtracts it from the score.
  double decode_charge = 0;
};

struct FleetSnapshot {
  std::vector<CandidateState> candidates;  // one per member (net/roster.h), in ordinal order
  // Several routers (RJ_PEERS): this replica plus its fresh peers, the routers that may be
  // placing a request at this very moment on the same view of the engines (1 = this one alone).
  uint32_t routers = 1;
  // This decision's place among those `routers` simultaneous ones, and the turn of the order
  // of equal engines every replica shares (spread_among_routers in route/rank.h; filled by
  // upstream::EngineLoadBoard::spread). Unused when routers is 1. The journal records them.
  uint32_t spread_place = 0;
  uint32_t spread_tie = 0;
  static FleetSnapshot of(const upstream::Fleet& fleet);
  // of(), into `out` (its storage reused: Router::decide keeps one a thread).
  static void fill(const upstream::Fleet& fleet, FleetSnapshot& out);
};

// What decided the winner (metric label): single|load|rr|overlap|profile|single_flight|spread|adapter|decode.
// spread: several routers share the engines and the winner is not the best-scored engine but this
// decision's place in what one router would do with all their simultaneous requests (rank.h).
// adapter: the winner is not the engine the other terms preferred: the adapter charge
// (adapter_charge) moved the request to an engine with its LoRA adapter active or a free slot.
// decode: the decode charges (CandidateState::decode_charge) moved it to an engine that decodes
// its output sooner than the one cache and load preferred.
enum class Outcome { kSingle, kLoad, kRoundRobin, kOverlap, kProfile, kSingleFlight, kSpread, kAdapter, kDecode, kCount };
std::string_view outcome_label(Outcome o);

struct CandidateTerms {
  size_t ordinal = 0;
  bool eligible = false;
  int64_t load_units = 0;
  uint32_t request_load_units = 1;  // what this request would reserve on this candidate
  int64_t foreign_load_units = 0;   // other routers' load there (CandidateState)
  uint32_t overlap = 0;             // raw leading blocks held (prefix policy)
  uint32_t single_flight = 0;       // leading blocks a concurrent leader prefills here
  uint32_t affinity = 0;            // max(min(overlap, cap), single_flight_affinity(...))
  bool failing = false;             // ranked after the eligible engines that are not (prefix, load)
  double score = 0;                 // affinity - alpha * total_load() (prefix policy)
  Profile profile = Profile::kNone;
  uint32_t session_bonus = 0;       // session-affinity blocks added to affinity (prefix policy)
  AdapterSlot adapter = AdapterSlot::kNone;  // the request's LoRA adapter there
  double decode_charge = 0;         // CandidateState::decode_charge, subtracted from the score
  int64_t total_load() const { return load_units + foreign_load_units; }
};

// A decision's candidates, best first: held inline for fleets of up to 8 engines (no allocation
// a request).
using Ranking = boost::container::small_vector<CandidateTerms, 8>;

struct Decision {
  Ranking ranked;  // every candidate, best first
  Outcome outcome = Outcome::kSingle;
  uint64_t rotation = 0;               // the tie-break counter value this decision used
  uint32_t routers = 1;                // FleetSnapshot::routers, as decided with
  uint32_t spread_place = 0;           // FleetSnapshot::spread_place, as decided with
  uint32_t spread_tie = 0;             // FleetSnapshot::spread_tie, as decided with
  bool rotated = false;                // the winner tied with another candidate: rotation chose
  bool fail_open = false;              // nothing eligible: dispatch to at most two candidates
  // The candidates dispatch may try, in order: eligible ones, or (fail-open) the first two.
  std::vector<CandidateTerms> dispatch_order() const;
  // dispatch_order()'s first candidate, without the copy (nullptr when there is none).
  const CandidateTerms* first_dispatch() const;
};

struct RouteConfig {
  uint64_t load_unit_bytes = 32768;  // RJ_ROUTE_LOAD_UNIT_BYTES
  uint32_t max_load_units = 8;       // RJ_ROUTE_MAX_LOAD_UNITS
  double alpha = 4.0;                // RJ_ROUTE_ALPHA: score units per reserved load unit
  uint32_t max_overlap_blocks = 32;  // RJ_ROUTE_MAX_OVERLAP_BLOCKS: affinity cap
  // RJ_ROUTE_CREDIT_BASIS=relative: a candidate's credit is measured down from the warmest
  // eligible candidate (relative_affinity()).
  bool relative_credit = false;
  uint64_t chunk_bytes = 2048;       // RJ_ROUTE_CHUNK_BYTES: bytes per fingerprint block
  uint64_t short_max_tokens = 256;   // RJ_PROFILE_SHORT_MAX_TOKENS: <= this prefers MTP engines
  uint32_t adapter_load_units = 2;   // RJ_ROUTE_ADAPTER_LOAD_UNITS: adapter_charge's unit
  bool decode_cost = false;          // RJ_ROUTE_DECODE_COST: the router fills decode charges
};

// The load units an engine is charged for a LoRA adapter request (prefix and load policies):
// none where the adapter is active (or nothing is known of any candidate), `units` where it must
// be loaded into a free slot (or its state is unknown), twice that where every slot is taken by
// other adapters (the request waits for one to drain, then evicts it). A score term, not a pin:
// enough load elsewhere still wins.
inline uint32_t adapter_charge(AdapterSlot a, uint32_t units) {
  switch (a) {
    case AdapterSlot::kFree:
    case AdapterSlot::kUnknown: return units;
    case AdapterSlot::kFull: return 2 * units;
    default: return 0;
  }
}

// A candidate's overlap credit under RJ_ROUTE_CREDIT_BASIS=relative: min(overlap, cap) as under
// absolute while `warmest` (the largest overlap among the eligible candidates) is within the cap;
// past it, every overlap is first lowered by what the warmest exceeds the cap by, so the warmest
// earns the cap and the others the cap less what they lack of its prefix (at least 0): a prefix
// every engine holds past the cap no longer flattens them all to the cap.
inline uint32_t relative_affinity(uint32_t overlap, uint32_t warmest, uint32_t cap) {
  const uint32_t shift = warmest > cap ? warmest - cap : 0;
  return std::min(cap, overlap > shift ? overlap - shift : 0);
}

// clamp(ceil(bytes / unit), 1, max)
uint32_t request_load_units(uint64_t uncached_bytes, const RouteConfig& c);


// What routing needs to know about a request (no payload): a journal record carries exactly
// this, so decisions can be recomputed offline (tools/route_replay).
struct RouteRequest {
  request::Endpoint endpoint = request::Endpoint::kOther;
  uint64_t body_bytes = 0;                // post-shim body length
  Profile wanted = Profile::kNone;        // preferred_profile()
  uint64_t total_blocks = 0;              // fingerprint blocks of the request's prompt
  static RouteRequest of(const request::PreparedRequest& req, const RouteConfig& c);
};

// What a request would reserve on a candidate holding `overlap` of its blocks: the load units of
// body_bytes - overlap * chunk_bytes (saturating at 0).
uint32_t request_load_units_with_overlap(uint64_t body_bytes, uint32_t overlap, const RouteConfig& c);

// The affinity a single-flight follower earns on its leader's engine: the cap scaled by the share
// of the follower's leading blocks (up to the cap) that the leader is prefilling there. A burst
// of identical new prefixes thus follows its leader until that engine falls behind by more than
// the cap (alpha * load > cap), while a request that merely shares a short preamble with a
// leader earns little.
uint32_t single_flight_affinity(uint32_t pending, uint64_t total_blocks, uint32_t cap);

// The decode profile a request prefers: kMtp for an output limit of 1..short_max_tokens,
// kStandard for a larger, unset or invalid (0) one, kNone for `other` endpoints.
Profile preferred_profile(const request::PreparedRequest& req, const RouteConfig& c);

class Policy {
 public:
  explicit Policy(const RouteConfig& config) : config_(config) {}
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Whether the policy reads CandidateState::overlap/single_flight (the caller skips filling
  // them, and fingerprinting, when it does not).
  virtual bool uses_prefix() const { return false; }
  // Pure: the same inputs give the same Decision. `rotation` breaks exact ties (a counter the
  // caller advances once per decision).
  virtual Decision decide(const RouteRequest& req, const FleetSnapshot& fleet, uint64_t rotation) const = 0;

  // Decides with this policy's rotation counter, which advances only when a decision was
  // settled by rotation: tied engines then take turns however many untied decisions come in
  // between (a counter advanced by every decision gave every cold prefix of a steady
  // 1-cold-in-4 workload the same engine of two). Concurrent decisions may share a value.
  // `counter`: a rotation of the caller's (a model's pool keeps its own: pools that share
  // engines and take turns with each other would otherwise see every other value of one counter
  // and always pick the same tied engine); null: the policy's own.
  Decision decide_next(const RouteRequest& req, const FleetSnapshot& fleet,
                       std::atomic<uint64_t>* counter = nullptr) {
    std::atomic<uint64_t>& c = counter != nullptr ? *counter : counter_;
    Decision d = decide(req, fleet, c.load(std::memory_order_relaxed));
    if (d.rotated) c.fetch_add(1, std::memory_order_relaxed);
    return d;
  }
  Decision decide(const request::PreparedRequest& req, const FleetSnapshot& fleet) {
    return decide_next(RouteRequest::of(req, config_), fleet);
  }
  const RouteConfig& config() const { return config_; }

 protected:
  RouteConfig config_;

 private:
  std::atomic<uint64_t> counter_{0};
};

// Known names: "prefix" (prefix affinity minus load, prefix_load.cc), "load" (least load, then
// rotation), "round_robin" (load-blind rotation).
// Returns nullptr for an unknown name.
std::unique_ptr<Policy> make_policy(std::string_view name, const RouteConfig& config);

}  // namespace ramjet::route
