// Prefix-load policy (RJ_AFFINITY=prefix, the default): each candidate scores
// min(overlap, cap) - alpha * load_units, so a warm prefix cache attracts a request until the
// engine's live load outweighs it. Order: serving-eligible, score, raw overlap, decode-profile
// preference, rotation. Overlaps arrive in the snapshot (cache/index is read by the caller).
#include <algorithm>
#include <atomic>
#include <tuple>

#include "request/route/policy.h"

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
  explicit PrefixLoadPolicy(const RouteConfig& c) : config_(c) {}
  std::string_view name() const override { return "prefix"; }

  Decision decide(const request::PreparedRequest& req, const FleetSnapshot& fleet) override {
    Decision d;
    const size_t n = fleet.candidates.size();
    const uint64_t rotation = counter_.fetch_add(1, std::memory_order_relaxed);
    const Profile wanted = preferred_profile(req, config_);
    d.ranked.reserve(n);
    for (const CandidateState& c : fleet.candidates) {
      CandidateTerms t;
      t.ordinal = c.ordinal;
      t.eligible = c.eligible;
      t.load_units = c.load_units;
      t.overlap = c.overlap;
      t.affinity = std::min(c.overlap, config_.max_overlap_blocks);
      t.score = static_cast<double>(t.affinity) - config_.alpha * static_cast<double>(c.load_units);
      t.profile = c.profile;
      t.request_load_units = request_load_units_with_overlap(req.body.size(), c.overlap, config_);
      d.ranked.push_back(t);
    }
    // Larger key = better. Exact double comparison is intended: equal terms give equal scores.
    auto key = [&](const CandidateTerms& t) {
      return std::make_tuple(t.eligible, t.score, t.overlap, -profile_rank(t.profile, wanted));
    };
    std::sort(d.ranked.begin(), d.ranked.end(),
              [&](const CandidateTerms& a, const CandidateTerms& b) {
                const auto ka = key(a), kb = key(b);
                if (ka != kb) return ka > kb;
                return a.ordinal < b.ordinal;
              });
    // Rotation within each group of equal keys, so tied engines share traffic evenly wherever
    // they sit in the fleet. (The reference rotated all ordinals instead, which gives a tied
    // engine a share proportional to the gap before it: two adjacent warm engines among five
    // split 80/20.)
    for (size_t begin = 0; begin < n;) {
      size_t end = begin + 1;
      while (end < n && key(d.ranked[end]) == key(d.ranked[begin])) ++end;
      if (end - begin > 1) {
        std::rotate(
            d.ranked.begin() + static_cast<std::ptrdiff_t>(begin),
            d.ranked.begin() + static_cast<std::ptrdiff_t>(begin + rotation % (end - begin)),
            d.ranked.begin() + static_cast<std::ptrdiff_t>(end));
      }
      begin = end;
    }
    d.fail_open = n > 0 && !d.ranked.front().eligible;
    d.outcome = outcome(d.ranked, wanted);
    return d;
  }

 private:
  // Reference §2.5 (single, overlap, load, rr) plus `profile` when the decode-profile preference
  // separated the two best candidates that tied on everything before it. `load` considers only
  // candidates of the winner's eligibility: a fenced engine's score decided nothing.
  static Outcome outcome(const std::vector<CandidateTerms>& ranked, Profile wanted) {
    if (ranked.size() <= 1) return Outcome::kSingle;
    const CandidateTerms& w = ranked[0];
    const CandidateTerms& s = ranked[1];
    if (s.eligible == w.eligible && s.score == w.score && s.overlap == w.overlap &&
        profile_rank(s.profile, wanted) != profile_rank(w.profile, wanted)) {
      return Outcome::kProfile;
    }
    if (w.overlap > 0) return Outcome::kOverlap;
    const bool differs = std::any_of(ranked.begin(), ranked.end(), [&](const CandidateTerms& c) {
      return c.eligible == w.eligible && c.score != w.score;
    });
    return differs ? Outcome::kLoad : Outcome::kRoundRobin;
  }

  RouteConfig config_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

std::unique_ptr<Policy> make_prefix_load_policy(const RouteConfig& config) {
  return std::make_unique<PrefixLoadPolicy>(config);
}

}  // namespace ramjet::route
