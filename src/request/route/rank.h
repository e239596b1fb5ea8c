// Private to request/route: the one ranking rule every policy ends with. Candidates are sorted
// by a policy's key (larger is better), and within each group of equal keys they are rotated by
// `rotation`, so tied engines take turns evenly wherever they sit in the fleet. (Rotating all
// ordinals instead gives a tied engine a share proportional to the gap before it: with engine 0
// fenced among four, engine 1 would get half the traffic.)
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "request/route/policy.h"

namespace ramjet::route {

// Returns whether the winner tied with another candidate (rotation chose it).
template <class KeyFn>
bool rank_with_rotation(Ranking& ranked, uint64_t rotation, KeyFn key) {
  std::sort(ranked.begin(), ranked.end(), [&](const CandidateTerms& a, const CandidateTerms& b) {
    const auto ka = key(a), kb = key(b);
    if (ka != kb) return ka > kb;
    return a.ordinal < b.ordinal;
  });
  const size_t n = ranked.size();
  for (size_t begin = 0; begin < n;) {
    size_t end = begin + 1;
    while (end < n && key(ranked[end]) == key(ranked[begin])) ++end;
    if (end - begin > 1) {
      std::rotate(ranked.begin() + static_cast<std::ptrdiff_t>(begin),
                  ranked.begin() + static_cast<std::ptrdiff_t>(begin + rotation % (end - begin)),
                  ranked.begin() + static_cast<std::ptrdiff_t>(end));
    }
    begin = end;
  }
  return n > 1 && key(ranked[0]) == key(ranked[1]);
}

// Several routers on the same engines (FleetSnapshot::routers > 1, RJ_PEERS). Replicas that
// receive requests at the same instant (a burst the front spreads over them) decide on the same
// view of the engines: none sees the others' choices, which reach it one peer interval later at
// best. Each taking its own best engine sends the whole burst to one engine while another idles
// — the herd that stale load information is known for (Mitzenmacher, "How useful is old
// information?", 2000). Instead each decision takes its place (FleetSnapshot::spread_place,
// distinct among the replicas: upstream::EngineLoadBoard::spread) in the sequence one router
// would place the burst in: the best engine first, then the best once that one carries the
// request's load (`step`: what the request adds to an engine's load, on the score's scale), and
// so on. Engines far apart stay apart; engines within a few requests' load of each other share
// the burst as one router would have spread it. (The prefix policy spreads only what load
// decided: a request its cache placed stays.) Equal engines are ordered alike in every replica:
// by `rest` (the policy's later keys, larger first), then by ordinal turned by `tie`, not by this
// router's own rotation. Only candidates of the winner's eligibility and failing state take part
// (the sort put them first), at most 64, and places past 255 count as 255 (a bound on the work:
// 256 x 64 comparisons). Returns whether the winner changed; it is moved to the front, the others
// keep their order (the dispatch fallbacks).
template <class ScoreFn, class StepFn, class RestFn>
bool spread_among_routers(Ranking& ranked, uint32_t routers, uint32_t place, uint32_t tie,
                          ScoreFn score, StepFn step, RestFn rest) {
  if (routers <= 1 || ranked.size() <= 1 || !ranked.front().eligible) return false;
  size_t m = 1;
  while (m < ranked.size() && ranked[m].eligible && ranked[m].failing == ranked.front().failing) ++m;
  if (m <= 1) return false;
  constexpr size_t kMaxCandidates = 64;  // fleets beyond it: the first 64 of the ranking take part
  m = std::min(m, kMaxCandidates);
  size_t span = 1;
  for (size_t i = 0; i < m; ++i) span = std::max(span, ranked[i].ordinal + 1);
  const size_t turn = tie % span;
  auto turned = [&](size_t i) { return (ranked[i].ordinal + span - turn) % span; };
  const uint64_t last = std::min<uint64_t>(place, 255);
  std::array<double, kMaxCandidates> adjusted;
  for (size_t i = 0; i < m; ++i) adjusted[i] = score(ranked[i]);
  auto better = [&](size_t i, size_t j) {  // candidate i before j at their adjusted scores
    if (adjusted[i] != adjusted[j]) return adjusted[i] > adjusted[j];
    const auto ri = rest(ranked[i]), rj = rest(ranked[j]);
    if (ri != rj) return ri > rj;
    return turned(i) < turned(j);
  };
  size_t pick = 0;
  for (uint64_t k = 0;; ++k) {
    pick = 0;
    for (size_t i = 1; i < m; ++i) {
      if (better(i, pick)) pick = i;
    }
    if (k == last) break;
    adjusted[pick] -= step(ranked[pick]);
  }
  if (pick == 0) return false;
  const bool tied = score(ranked[pick]) == score(ranked[0]) && rest(ranked[pick]) == rest(ranked[0]);
  std::rotate(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(pick),
              ranked.begin() + static_cast<std::ptrdiff_t>(pick + 1));
  return !tied;
}

}  // namespace ramjet::route
