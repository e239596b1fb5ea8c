// request/route/terms: the one table of a candidate's decision terms (CandidateTerms). Every place
// that writes or reads them — the route journal, its replay tool, the decision log and the
// dashboard's JSON, the per-decision metrics — walks this table, so a new term is one row here
// plus the code that computes and uses it.
//
// Each row names the member, its key in the journal (`journal`, a stable versioned schema:
// docs/journal.md) and in the decision log / dashboard JSON (`api`), the dashboard's short column
// label (empty: shown by name elsewhere in the row, or not at all), and whether a journal record
// without it is refused by the replay tool (fields present since journal v1). Rows are in the
// journal's key order (docs/journal.md; its `rank` follows `upstream`).
#pragma once

#include <cstdint>
#include <string_view>
#include <tuple>

#include "request/route/policy.h"

namespace ramjet::route {

template <typename T>
struct Term {
  T CandidateTerms::*member;
  std::string_view journal;
  std::string_view api;
  std::string_view dashboard = {};
  bool required = false;
};

inline constexpr auto kCandidateTerms = std::tuple{
    Term<size_t>{&CandidateTerms::ordinal, "upstream", "ordinal", {}, true},
    Term<uint32_t>{&CandidateTerms::overlap, "overlap_blocks", "overlap", "ov", true},
    Term<uint32_t>{&CandidateTerms::single_flight, "single_flight_blocks", "single_flight", "sf"},
    Term<uint32_t>{&CandidateTerms::session_bonus, "session_bonus_blocks", "session_bonus", "sess"},
    Term<uint32_t>{&CandidateTerms::affinity, "affinity_blocks", "affinity", "aff"},
    Term<int64_t>{&CandidateTerms::load_units, "load_units", "load_units", "load", true},
    Term<uint32_t>{&CandidateTerms::request_load_units, "request_load_units", "request_load_units", "req"},
    Term<int64_t>{&CandidateTerms::foreign_load_units, "foreign_load_units", "foreign_load_units", "fgn"},
    Term<bool>{&CandidateTerms::eligible, "healthy", "eligible", {}, true},
    Term<bool>{&CandidateTerms::failing, "failing", "failing"},
    Term<Profile>{&CandidateTerms::profile, "profile", "profile"},
    Term<AdapterSlot>{&CandidateTerms::adapter, "adapter", "adapter"},
    Term<double>{&CandidateTerms::decode_charge, "decode_charge_blocks", "decode_charge", "dec"},
    Term<double>{&CandidateTerms::score, "score", "score", "score"},
};

// Calls f(row) for every row, in table order (f is generic: rows differ in member type).
template <typename F>
constexpr void for_each_term(F&& f) {
  std::apply([&](const auto&... row) { (f(row), ...); }, kCandidateTerms);
}

// The state a policy reads, from recorded terms (the replay tool recomputes decisions from it).
inline CandidateState state_of(const CandidateTerms& t) {
  CandidateState s;
  s.ordinal = t.ordinal;
  s.eligible = t.eligible;
  s.load_units = t.load_units;
  s.foreign_load_units = t.foreign_load_units;
  s.session_bonus = t.session_bonus;
  s.overlap = t.overlap;
  s.single_flight = t.single_flight;
  s.profile = t.profile;
  s.failing = t.failing;
  s.adapter = t.adapter;
  s.decode_charge = t.decode_charge;
  return s;
}

}  // namespace ramjet::route
