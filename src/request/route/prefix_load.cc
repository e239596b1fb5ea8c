// Prefix-load policy (RJ_AFFINITY=prefix, the default): each candidate scores
// min(overlap, cap) - alpha * (load_units + foreign_load_units + adapter_charge) - decode_charge,
// so a warm prefix cache attracts a request until the engine's live load outweighs it (a LoRA
// adapter request is charged where its adapter is not active: policy.h adapter_charge; with
// RJ_ROUTE_DECODE_COST, where its output would decode slower than on the fastest candidate:
// route/decode_cost.h). With RJ_ROUTE_CREDIT_BASIS=relative an overlap past the cap
// lowers every candidate's by its excess first (relative_affinity). Order: serving-eligible, not failing (CandidateState::failing:
// an engine that fails fast looks idle, so it ranks after the rest), score, raw overlap, decode-profile
// preference, rotation. Overlaps arrive in the snapshot (cache/index is read by the caller).
//
// Several routers (FleetSnapshot::routers > 1): when load decided, the winner is this decision's
// place in a simultaneous burst (spread_among_routers, route/rank.h; outcome `spread` when it
// moved).
//
// Single-flight: blocks a concurrent leader is prefilling on an engine count like blocks it
// holds (the cache will have them by the time this request's prefill reaches them), so
// identical cold prefixes follow their leader, and load still wins once the leader's engine
// falls behind by more than the affinity those blocks earn.
#include <algorithm>
#include <tuple>

#include "request/route/policy.h"
#include "request/route/rank.h"

namespace ramjet::route {
namespace {

// 0 = the profile the request prefers, 1 = no declared profile, 2 = the other profile.
int profile_rank(Profile engine, Profile wanted) {
  if (wanted == Profile::kNone) return 0;
  if (engine == wanted) return 0;
  return engine == Profile::kNone ? 1 : 2;
}

class PrefixLoadPolicy final : public Policy {
 public:
  explicit PrefixLoadPolicy(const RouteConfig& c) : Policy(c) {}
  std::string_view name() const override { return "prefix"; }
  bool uses_prefix() const override { return true; }

  Decision decide(const RouteRequest& req, const FleetSnapshot& fleet, uint64_t rotation) const override {
    Decision d;
    d.rotation = rotation;
    const size_t n = fleet.candidates.size();
    const Profile wanted = req.wanted;
    d.ranked.reserve(n);
    // Relative credit: measured from the warmest eligible candidate; the others, ranked after
    // them anyway (the fail-open order), from the warmest of all.
    uint32_t warmest_eligible = 0, warmest_all = 0;
    if (config_.relative_credit) {
      for (const CandidateState& c : fleet.candidates) {
        warmest_all = std::max(warmest_all, c.overlap);
        if (c.eligible) warmest_eligible = std::max(warmest_eligible, c.overlap);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const CandidateState& c = fleet.candidates[i];
      CandidateTerms t;
      t.ordinal = c.ordinal;
      t.eligible = c.eligible;
      t.load_units = c.load_units;
      t.foreign_load_units = c.foreign_load_units;
      t.overlap = c.overlap;
      t.single_flight = c.single_flight;
      const uint32_t cap = config_.max_overlap_blocks;
      const uint32_t credited = config_.relative_credit
                                    ? relative_affinity(c.overlap, c.eligible ? warmest_eligible : warmest_all, cap)
                                    : std::min(c.overlap, cap);
      t.affinity = std::max(credited, single_flight_affinity(c.single_flight, req.total_blocks, cap));
      // Session affinity's prior (route/session_affinity.h), within the same cap.
      t.session_bonus = c.session_bonus;
      t.affinity = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{t.affinity} + c.session_bonus, std::max(cap, t.affinity)));
      t.failing = c.failing;
      t.adapter = c.adapter;
      t.decode_charge = c.decode_charge;
      t.score = static_cast<double>(t.affinity) -
                config_.alpha * static_cast<double>(t.total_load() + adapter_charge(c.adapter, config_.adapter_load_units)) -
                c.decode_charge;
      t.profile = c.profile;
      // Blocks the leader is prefilling here will be cached when this request's prefill reaches
      // them: the follower reserves only what is left.
      t.request_load_units =
          request_load_units_with_overlap(req.body_bytes, std::max(c.overlap, c.single_flight), config_);
      d.ranked.push_back(t);
    }
    // Larger key = better. Exact double comparison is intended: equal terms give equal scores.
    auto key = [&](const CandidateTerms& t) {
      return std::make_tuple(t.eligible, !t.failing, t.score, std::max(t.overlap, t.single_flight),
                             -profile_rank(t.profile, wanted));
    };
    d.rotated = rank_with_rotation(d.ranked, rotation, key);
    d.fail_open = n > 0 && !d.ranked.front().eligible;
    d.outcome = outcome(d.ranked, wanted, config_.alpha, config_.adapter_load_units);
    d.routers = fleet.routers;
    d.spread_place = fleet.spread_place;
    d.spread_tie = fleet.spread_tie;
    const double alpha = config_.alpha;
    // Only what load decided: a request its cache (or a leader's prefill) placed goes there in
    // every replica's sequence, and the burst's other requests, mostly new prefixes, have no
    // reason to go there too.
    const bool load_decided = d.outcome == Outcome::kLoad || d.outcome == Outcome::kRoundRobin;
    if (load_decided && spread_among_routers(
            d.ranked, fleet.routers, fleet.spread_place, fleet.spread_tie,
            [](const CandidateTerms& t) { return t.score; },
            [alpha](const CandidateTerms& t) { return alpha * static_cast<double>(t.request_load_units); },
            [&](const CandidateTerms& t) {
              return std::make_pair(std::max(t.overlap, t.single_flight), -profile_rank(t.profile, wanted));
            })) {
      d.outcome = Outcome::kSpread;
    }
    return d;
  }

 private:
  // What decided the winner — single (one candidate), overlap, load or rr (rotation between exact
  // ties), as ramjet 0.4.0 labels them — plus `profile` when the decode-profile preference
  // separated the winner from a candidate that tied with it on everything before it (another
  // engine of the winner's own profile may tie too: that one rotation decides, the profile still
  // decided against the others), and `single_flight` when the winner was chosen for blocks its
  // leader is still prefilling. `load` considers only candidates of the winner's eligibility: a
  // fenced engine's score decided nothing.
  static Outcome outcome(const Ranking& ranked, Profile wanted, double alpha, uint32_t adapter_units) {
    if (ranked.size() <= 1) return Outcome::kSingle;
    const CandidateTerms& w = ranked[0];
    // `adapter` (`decode`) when a candidate of the winner's standing would have scored higher
    // without the adapter (decode) charges (computed as the score is: a charge of 0 gives the
    // score itself). A tie only the charges broke keeps its label: the winner is the one rotation
    // or the later keys would pick among equals, and several routers still spread it.
    auto moved_by = [&](bool adapter, bool decode) {
      auto without = [&](const CandidateTerms& c) {
        const uint32_t charge = adapter ? 0 : adapter_charge(c.adapter, adapter_units);
        return static_cast<double>(c.affinity) - alpha * static_cast<double>(c.total_load() + charge) -
               (decode ? 0.0 : c.decode_charge);
      };
      return std::any_of(ranked.begin() + 1, ranked.end(), [&](const CandidateTerms& c) {
        return c.eligible == w.eligible && c.failing == w.failing && without(c) > without(w);
      });
    };
    if (moved_by(true, false)) return Outcome::kAdapter;
    if (moved_by(false, true)) return Outcome::kDecode;
    const bool profile_decided = std::any_of(ranked.begin() + 1, ranked.end(), [&](const CandidateTerms& c) {
      return c.eligible == w.eligible && c.score == w.score &&
             std::max(c.overlap, c.single_flight) == std::max(w.overlap, w.single_flight) &&
             profile_rank(c.profile, wanted) != profile_rank(w.profile, wanted);
    });
    if (profile_decided) return Outcome::kProfile;
    if (w.single_flight > w.overlap) return Outcome::kSingleFlight;
    if (w.overlap > 0) return Outcome::kOverlap;
    const bool differs = std::any_of(ranked.begin(), ranked.end(), [&](const CandidateTerms& c) {
      return c.eligible == w.eligible && c.score != w.score;
    });
    return differs ? Outcome::kLoad : Outcome::kRoundRobin;
  }
};

}  // namespace

std::unique_ptr<Policy> make_prefix_load_policy(const RouteConfig& config) {
  return std::make_unique<PrefixLoadPolicy>(config);
}

}  // namespace ramjet::route
