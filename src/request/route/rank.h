// Private to request/route: the one ranking rule every policy ends with. Candidates are sorted
// by a policy's key (larger is better), and within each group of equal keys they are rotated by
// `rotation`, so tied engines take turns evenly wherever they sit in the fleet. (Rotating all
// ordinals instead gives a tied engine a share proportional to the gap before it: with engine 0
// fenced among four, engine 1 would get half the traffic.)
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "request/route/policy.h"

namespace ramjet::route {

// Returns whether the winner tied with another candidate (rotation chose it).
template <class KeyFn>
bool rank_with_rotation(std::vector<CandidateTerms>& ranked, uint64_t rotation, KeyFn key) {
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

}  // namespace ramjet::route
