#include "request/route/session_affinity.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace ramjet::route {
namespace {

const std::string kKey(32, 'k');

FleetSnapshot fleet(size_t n) {
  FleetSnapshot s;
  for (size_t i = 0; i < n; ++i) {
    CandidateState c;
    c.ordinal = i;
    s.candidates.push_back(c);
  }
  return s;
}

TEST(SessionPair, IsStablePerSessionAndKeyAndTheTwoOrdinalsDiffer) {
  for (int i = 0; i < 200; ++i) {
    const std::string s = "session-" + std::to_string(i);
    SessionPair a = session_pair(kKey, s, 4), b = session_pair(kKey, s, 4);
    EXPECT_EQ(a.primary, b.primary);
    ASSERT_TRUE(a.secondary && b.secondary);
    EXPECT_EQ(*a.secondary, *b.secondary);
    EXPECT_NE(a.primary, *a.secondary);
    EXPECT_LT(a.primary, 4u);
    EXPECT_LT(*a.secondary, 4u);
  }
  EXPECT_FALSE(session_pair(kKey, "s", 1).secondary);
  EXPECT_EQ(session_pair(kKey, "s", 1).primary, 0u);
}

TEST(SessionPair, SpreadsSessionsEvenlyAndAnotherKeyDrawsOtherPairs) {
  std::map<size_t, int> share;
  int differ = 0;
  const std::string other(32, 'o');
  for (int i = 0; i < 8000; ++i) {
    const std::string s = "s" + std::to_string(i);
    const size_t p = session_pair(kKey, s, 4).primary;
    ++share[p];
    differ += p != session_pair(other, s, 4).primary;
  }
  for (size_t e = 0; e < 4; ++e) EXPECT_NEAR(share[e], 2000, 200) << e;
  EXPECT_NEAR(differ, 6000, 300);  // independent keys: 3 in 4 primaries differ
}

TEST(SessionPair, AnEngineThatJoinsMovesOnlyTheSessionsThatRankItFirst) {
  int moved = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string s = "s" + std::to_string(i);
    const size_t before = session_pair(kKey, s, 4).primary, after = session_pair(kKey, s, 5).primary;
    if (before != after) {
      EXPECT_EQ(after, 4u);  // only to the new engine
      ++moved;
    }
  }
  EXPECT_NEAR(moved, 800, 120);  // about a fifth
}

TEST(SessionPrior, TheTargetIsThePrimaryOrTheSecondaryWhenThePrimaryIsNotEligible) {
  SessionAffinityConfig c{.mode = SessionAffinityMode::kOn, .key = kKey};
  FleetSnapshot f = fleet(3);
  SessionNote note;
  apply_session_prior(c, SessionPair{2, 0}, f, note);
  EXPECT_EQ(note.target, 2u);
  EXPECT_EQ(f.candidates[2].session_bonus, 4u);
  EXPECT_EQ(f.candidates[0].session_bonus, 0u);

  f = fleet(3);
  f.candidates[2].eligible = false;
  note = {};
  apply_session_prior(c, SessionPair{2, 0}, f, note);
  EXPECT_EQ(note.target, 0u);
  EXPECT_EQ(f.candidates[0].session_bonus, 4u);

  f = fleet(3);
  f.candidates[2].eligible = f.candidates[0].eligible = false;
  note = {};
  apply_session_prior(c, SessionPair{2, 0}, f, note);
  EXPECT_EQ(note.outcome, SessionOutcome::kUnavailable);
  EXPECT_FALSE(note.target);
  for (const CandidateState& s : f.candidates) EXPECT_EQ(s.session_bonus, 0u);
}

TEST(SessionPrior, ALoadedTargetEarnsNothingBeyondTheLoadDelta) {
  SessionAffinityConfig c{.mode = SessionAffinityMode::kOn, .key = kKey, .max_load_delta = 1};
  FleetSnapshot f = fleet(2);
  f.candidates[0].load_units = 1;  // within the delta of engine 1's 0
  SessionNote note;
  apply_session_prior(c, SessionPair{0, 1}, f, note);
  EXPECT_EQ(f.candidates[0].session_bonus, 4u);

  f = fleet(2);
  f.candidates[0].load_units = 1;
  f.candidates[0].foreign_load_units = 1;  // other routers' load counts too: 2 > 0 + 1
  note = {};
  apply_session_prior(c, SessionPair{0, 1}, f, note);
  EXPECT_EQ(note.outcome, SessionOutcome::kLoadGated);
  EXPECT_EQ(note.target, 0u);
  EXPECT_EQ(f.candidates[0].session_bonus, 0u);
}

TEST(PrefixLoadPolicy, TheSessionBonusDecidesOnlyWhereCacheAndLoadLeaveAChoice) {
  auto p = make_policy("prefix", RouteConfig{});
  RouteRequest req{request::Endpoint::kChat, 1000, Profile::kNone, 4};
  // Two idle cold engines: the session's target wins (4 - 0 > 0 - 0), every time.
  FleetSnapshot f = fleet(2);
  f.candidates[1].session_bonus = 4;
  for (uint64_t rot = 0; rot < 4; ++rot) EXPECT_EQ(p->decide(req, f, rot).ranked.front().ordinal, 1u);
  // The other engine holds 8 blocks of the prompt: cache wins.
  f.candidates[0].overlap = 8;
  EXPECT_EQ(p->decide(req, f, 0).ranked.front().ordinal, 0u);
  // The bonus never lifts affinity past the cap.
  RouteConfig capped;
  capped.max_overlap_blocks = 5;
  auto q = make_policy("prefix", capped);
  FleetSnapshot g = fleet(1);
  g.candidates[0].overlap = 3;
  g.candidates[0].session_bonus = 4;
  EXPECT_EQ(q->decide(req, g, 0).ranked.front().affinity, 5u);
}

}  // namespace
}  // namespace ramjet::route
