// tools/route_replay: reads a route journal (observe/journal.h, docs/journal.md) and recomputes
// every recorded decision with the real routing policy, as recorded (agreement check) and under
// other parameters (what-if). A journal record holds every input the policy saw, so the replay
// is exact; the engines' load_units are the reservations live when the decision was made and
// stay as recorded: a what-if for one decision at a time, not a re-simulation of the queue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "request/route/policy.h"

namespace ramjet::replay {

inline constexpr size_t kMaxLineBytes = size_t{1} << 20;

struct CandidateRecord {
  size_t rank = 0;
  // As journalled (the rows of request/route/terms.h; v9 added single_flight and profile, v10
  // failing; a record without them keeps the defaults).
  route::CandidateTerms terms;
};

struct StartRecord {
  int version = 0;
  uint64_t seq = 0;
  int64_t unix_ms = 0;
  request::Endpoint endpoint = request::Endpoint::kOther;
  std::string policy = "prefix";  // v8 records predate the field: prefix
  uint64_t request_bytes = 0;
  uint64_t total_blocks = 0;
  std::optional<size_t> chosen;
  std::string outcome;
  uint64_t rotation = 0;
  uint32_t routers = 1;       // v13: this replica and its fresh peers (1 before)
  uint32_t spread_place = 0;  // v13: its place among them
  uint32_t spread_tie = 0;    // v13: the turn of the order of equal engines
  route::RouteConfig config;  // fields a record lacks keep the defaults
  route::Profile wanted = route::Profile::kNone;
  bool cold = false;
  bool fail_open = false;
  std::vector<CandidateRecord> candidates;  // as recorded (rank order)
};

struct FinishRecord {
  uint64_t seq = 0;
  std::string result;
  std::optional<size_t> upstream;
  unsigned status = 0;
  std::optional<double> duration_ms, first_byte_ms, ttft_ms;
  std::optional<size_t> start;  // index into JournalData::starts of the start record it closes
};

struct ReadStats {
  uint64_t lines = 0;
  uint64_t starts = 0;
  uint64_t finishes = 0;
  uint64_t skipped = 0;      // not journal records (log lines, blank lines, other JSON)
  uint64_t malformed = 0;    // journal records that do not parse or lack a required field
  uint64_t too_long = 0;     // lines longer than the limit (not parsed)
  uint64_t unsupported = 0;  // journal records of a version other than 8 to 13
  uint64_t errors() const { return malformed + too_long + unsupported; }
};

struct JournalData {
  std::vector<StartRecord> starts;
  std::vector<FinishRecord> finishes;
  ReadStats stats;
};

enum class LineKind { kStart, kFinish, kSkipped, kMalformed, kUnsupported };

// Parses one line (without its '\n'). A journal record is a JSON object with "v" and "event"
// start|finish, optionally after the reference's "[route_journal] " prefix; anything else is
// kSkipped. Fills *start or *finish for the matching kind (either may be null).
LineKind parse_line(std::string_view line, StartRecord* start, FinishRecord* finish);

// Reads one journal stream, appending to `out`. A finish record is joined to the latest start
// record with its seq in the same stream (seq restarts at 1 with every process).
void read_journal(std::istream& in, JournalData& out, size_t max_line_bytes = kMaxLineBytes);

struct Overrides {
  std::optional<double> alpha = std::nullopt;
  std::optional<uint32_t> max_overlap_blocks = std::nullopt;
  std::optional<uint64_t> load_unit_bytes = std::nullopt;
  std::optional<uint32_t> max_load_units = std::nullopt;
  std::optional<bool> relative_credit = std::nullopt;  // RJ_ROUTE_CREDIT_BASIS=relative
  bool any() const { return alpha || max_overlap_blocks || load_unit_bytes || max_load_units || relative_credit; }
  std::string describe() const;  // "alpha=0 max_load_units=4", "" when none
};

route::RouteConfig config_for(const StartRecord& r, const Overrides& o);
route::FleetSnapshot snapshot_of(const StartRecord& r);  // candidates indexed by ordinal
// The decision the record's policy makes for the record's inputs; nullopt when the policy is
// unknown or the record has no candidates.
std::optional<route::Decision> recompute(const StartRecord& r, const Overrides& o);

struct Tally {
  std::map<size_t, uint64_t> share;          // upstream ordinal -> decisions
  std::map<std::string, uint64_t> outcomes;  // outcome label -> decisions
};

struct WhatIf {
  Overrides overrides;
  uint64_t changed = 0;  // decisions whose winner differs from the replay without overrides
  Tally after;
  // Sum of the load units each winner would reserve (request_load_units): the only effect of
  // --load-unit-bytes / --max-load-units on a single decision, whose live loads stay as recorded.
  uint64_t winner_units = 0;
};

struct UpstreamTiming {
  size_t upstream = 0;
  uint64_t finishes = 0;  // finish records naming this upstream
  uint64_t complete = 0;  // ... with result "complete" (the means are over these)
  std::optional<double> mean_duration_ms, mean_ttft_ms;
};

struct Report {
  ReadStats read;
  uint64_t replayed = 0;          // start records recomputed
  uint64_t not_replayable = 0;    // unknown policy, no candidates or no recorded choice
  uint64_t agree = 0;             // baseline winner == recorded chosen
  uint64_t outcome_mismatch = 0;  // baseline outcome label != recorded outcome
  std::vector<uint64_t> disagree_seqs;
  Tally before;                   // as recorded
  uint64_t winner_units = 0;      // WhatIf::winner_units of the replay without overrides
  std::optional<WhatIf> what_if;  // when overrides were given
  std::vector<WhatIf> sweep;      // one per --sweep-alpha value
  uint64_t joined_finishes = 0;
  std::vector<UpstreamTiming> timings;
  bool all_agree() const { return agree == replayed; }
};

Report build_report(const JournalData& data, const Overrides& overrides,
                    const std::vector<double>& sweep_alpha);
std::string format_text(const Report& r);
std::string format_json(const Report& r);

}  // namespace ramjet::replay
