#include "replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <istream>
#include <set>
#include <unordered_map>

#include "request/route/terms.h"

namespace ramjet::replay {
namespace {

namespace json = boost::json;

std::optional<request::Endpoint> parse_endpoint(std::string_view s) {
  using request::Endpoint;
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses,
                     Endpoint::kMessages, Endpoint::kModels, Endpoint::kHealth, Endpoint::kOther}) {
    if (request::endpoint_label(e) == s) return e;
  }
  return std::nullopt;
}

std::optional<route::Profile> parse_profile(std::string_view s) {
  for (route::Profile p :
       {route::Profile::kNone, route::Profile::kMtp, route::Profile::kStandard}) {
    if (route::profile_label(p) == s) return p;
  }
  return std::nullopt;
}

const json::value* field(const json::object& o, std::string_view key) {
  return o.if_contains(key);
}

std::optional<uint64_t> as_u64(const json::value* v) {
  if (!v) return std::nullopt;
  if (v->is_uint64()) return v->get_uint64();
  if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
  return std::nullopt;
}

std::optional<int64_t> as_i64(const json::value* v) {
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64() && v->get_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v->get_uint64());
  return std::nullopt;
}

std::optional<uint32_t> as_u32(const json::value* v) {
  auto n = as_u64(v);
  if (!n || *n > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(*n);
}

std::optional<double> as_double(const json::value* v) {
  if (!v) return std::nullopt;
  if (v->is_double()) return v->get_double();
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  return std::nullopt;
}

std::optional<bool> as_bool(const json::value* v) {
  if (!v || !v->is_bool()) return std::nullopt;
  return v->get_bool();
}

std::optional<std::string_view> as_str(const json::value* v) {
  if (!v || !v->is_string()) return std::nullopt;
  return std::string_view(v->get_string());
}

// Boost.JSON 1.81 reads some doubles one ulp off (it has no precise mode before 1.83), and a
// one-ulp alpha can turn an exact score tie into an order. The journal writes alpha in its
// shortest round-trip form once per record at top level, so read that text exactly.
double exact_top_level_double(std::string_view line, std::string_view key, double parsed) {
  const std::string needle = "\"" + std::string(key) + "\":";
  const size_t at = line.find(needle);
  if (at == std::string_view::npos || line.find(needle, at + 1) != std::string_view::npos)
    return parsed;
  const char* begin = line.data() + at + needle.size();
  const char* end = line.data() + line.size();
  while (begin < end && *begin == ' ') ++begin;
  double exact = 0;
  auto r = std::from_chars(begin, end, exact);
  if (r.ec != std::errc() || std::abs(exact - parsed) > 1e-9 * std::max(1.0, std::abs(parsed)))
    return parsed;
  return exact;
}

// One journalled term into its member (request/route/terms.h): kInvalid refuses the record
// whatever the row says (a profile label this build does not know); kMissing (absent or of the
// wrong type) refuses it only for a required row, otherwise the default stays.
enum class Read { kOk, kMissing, kInvalid };
template <typename T, typename As>
Read read_as(const json::value* v, T& out, As as) {
  auto x = as(v);
  if (!x) return Read::kMissing;
  out = static_cast<T>(*x);
  return Read::kOk;
}
Read read_term(const json::value* v, bool& out) { return read_as(v, out, as_bool); }
Read read_term(const json::value* v, uint32_t& out) { return read_as(v, out, as_u32); }
Read read_term(const json::value* v, int64_t& out) { return read_as(v, out, as_i64); }
Read read_term(const json::value* v, double& out) { return read_as(v, out, as_double); }
Read read_term(const json::value* v, size_t& out) {  // an ordinal
  return read_as(v, out, [](const json::value* x) {
    auto n = as_u64(x);
    return n && *n <= (1u << 20) ? n : std::nullopt;
  });
}
Read read_term(const json::value* v, route::AdapterSlot& out) {
  if (!v) return Read::kMissing;
  auto s = as_str(v);
  if (!s) return Read::kMissing;
  for (route::AdapterSlot a :
       {route::AdapterSlot::kNone, route::AdapterSlot::kActive, route::AdapterSlot::kFree, route::AdapterSlot::kFull,
        route::AdapterSlot::kUnknown}) {
    if (route::adapter_slot_label(a) == *s) {
      out = a;
      return Read::kOk;
    }
  }
  return Read::kInvalid;
}
Read read_term(const json::value* v, route::Profile& out) {
  if (!v) return Read::kMissing;
  auto s = as_str(v);
  if (!s) return Read::kMissing;
  auto p = parse_profile(*s);
  if (!p) return Read::kInvalid;
  out = *p;
  return Read::kOk;
}

bool parse_candidate(const json::value& v, CandidateRecord& c) {
  if (!v.is_object()) return false;
  const json::object& o = v.as_object();
  bool ok = true;
  route::for_each_term([&](const auto& row) {
    const Read r = read_term(field(o, row.journal), c.terms.*row.member);
    if (r == Read::kInvalid || (r == Read::kMissing && row.required)) ok = false;
  });
  c.rank = static_cast<size_t>(as_u64(field(o, "rank")).value_or(0));
  return ok;
}

bool parse_start(std::string_view line, const json::object& o, int version, StartRecord& r) {
  r = StartRecord{};
  r.version = version;
  auto seq = as_u64(field(o, "seq"));
  auto rotation = as_u64(field(o, "rotation"));
  const json::value* cands = field(o, "candidates");
  if (!seq || !rotation || !cands || !cands->is_array()) return false;
  r.seq = *seq;
  r.rotation = *rotation;
  r.routers = std::max<uint32_t>(1, as_u32(field(o, "routers")).value_or(1));
  r.spread_place = as_u32(field(o, "spread_place")).value_or(0);
  r.spread_tie = as_u32(field(o, "spread_tie")).value_or(0);
  r.unix_ms = as_i64(field(o, "unix_ms")).value_or(0);
  if (auto e = as_str(field(o, "endpoint"))) {
    auto endpoint = parse_endpoint(*e);
    if (!endpoint) return false;
    r.endpoint = *endpoint;
  }
  if (auto p = as_str(field(o, "policy"))) r.policy = std::string(*p);
  r.request_bytes = as_u64(field(o, "request_bytes")).value_or(0);
  r.total_blocks = as_u64(field(o, "total_blocks")).value_or(0);
  if (auto c = as_u64(field(o, "chosen"))) r.chosen = static_cast<size_t>(*c);
  if (auto s = as_str(field(o, "outcome"))) r.outcome = std::string(*s);
  if (auto a = as_double(field(o, "alpha")))
    r.config.alpha = exact_top_level_double(line, "alpha", *a);
  if (auto n = as_u32(field(o, "max_affinity_blocks"))) r.config.max_overlap_blocks = *n;
  if (auto b = as_str(field(o, "credit_basis"))) r.config.relative_credit = *b == "relative";  // (v16; absolute before)
  if (auto n = as_u64(field(o, "chunk_bytes"))) r.config.chunk_bytes = *n;
  if (auto n = as_u64(field(o, "load_unit_bytes"))) r.config.load_unit_bytes = *n;
  if (auto n = as_u32(field(o, "max_load_units"))) r.config.max_load_units = *n;
  if (auto n = as_u64(field(o, "short_max_tokens"))) r.config.short_max_tokens = *n;
  // (v17; before it no candidate carried an adapter term, so the charge was never applied)
  if (auto n = as_u32(field(o, "adapter_load_units"))) r.config.adapter_load_units = *n;
  if (auto w = as_str(field(o, "wanted_profile"))) {
    auto p = parse_profile(*w);
    if (!p) return false;
    r.wanted = *p;
  }
  r.cold = as_bool(field(o, "cold")).value_or(false);
  r.fail_open = as_bool(field(o, "fail_open")).value_or(false);
  std::set<size_t> seen;
  for (const json::value& v : cands->get_array()) {
    CandidateRecord c;
    if (!parse_candidate(v, c) || !seen.insert(c.terms.ordinal).second) return false;
    r.candidates.push_back(c);
  }
  return true;
}

bool parse_finish(const json::object& o, FinishRecord& f) {
  f = FinishRecord{};
  auto seq = as_u64(field(o, "seq"));
  auto result = as_str(field(o, "result"));
  if (!seq || !result) return false;
  f.seq = *seq;
  f.result = std::string(*result);
  if (auto u = as_u64(field(o, "upstream"))) f.upstream = static_cast<size_t>(*u);
  f.status = static_cast<unsigned>(as_u32(field(o, "status")).value_or(0));
  f.duration_ms = as_double(field(o, "duration_ms"));
  f.first_byte_ms = as_double(field(o, "first_byte_ms"));
  f.ttft_ms = as_double(field(o, "ttft_ms"));
  return true;
}

std::string fmt_double(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

double mean(uint64_t sum, uint64_t n) {
  return n ? static_cast<double>(sum) / static_cast<double>(n) : 0.0;
}

double pct(uint64_t n, uint64_t d) {
  return d ? 100.0 * static_cast<double>(n) / static_cast<double>(d) : 0.0;
}

void count(Tally& t, size_t upstream, std::string_view outcome) {
  ++t.share[upstream];
  ++t.outcomes[std::string(outcome)];
}

}  // namespace

LineKind parse_line(std::string_view line, StartRecord* start, FinishRecord* finish) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  constexpr std::string_view kPrefix = "[route_journal]";
  if (line.starts_with(kPrefix)) {
    line.remove_prefix(kPrefix.size());
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  }
  if (!line.starts_with('{') || line.find("\"event\"") == std::string_view::npos)
    return LineKind::kSkipped;
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec || !v.is_object()) {
    const bool looks_like_record = line.find("\"event\":\"start\"") != std::string_view::npos ||
                                   line.find("\"event\":\"finish\"") != std::string_view::npos;
    return looks_like_record ? LineKind::kMalformed : LineKind::kSkipped;
  }
  const json::object& o = v.get_object();
  auto event = as_str(field(o, "event"));
  const json::value* version = field(o, "v");
  if (!event || !version || (*event != "start" && *event != "finish")) return LineKind::kSkipped;
  auto ver = as_u64(version);
  if (!ver) return LineKind::kMalformed;
  if (*ver < 8 || *ver > 18) return LineKind::kUnsupported;
  if (*event == "start") {
    StartRecord scratch;
    return parse_start(line, o, static_cast<int>(*ver), start ? *start : scratch)
               ? LineKind::kStart
               : LineKind::kMalformed;
  }
  FinishRecord scratch;
  return parse_finish(o, finish ? *finish : scratch) ? LineKind::kFinish : LineKind::kMalformed;
}

void read_journal(std::istream& in, JournalData& out, size_t max_line_bytes) {
  std::unordered_map<uint64_t, size_t> latest_start;  // seq -> index in out.starts, this stream
  std::string buf(max_line_bytes + 1, '\0');
  StartRecord start;
  FinishRecord finish;
  for (;;) {
    in.getline(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (in.fail() && !in.eof() && got + 1 >= buf.size()) {
      // The buffer filled before the newline: skip the rest of the line unparsed.
      in.clear();
      in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
      ++out.stats.lines;
      ++out.stats.too_long;
      continue;
    }
    if (got == 0 && (in.eof() || in.fail())) break;
    const bool ended_by_newline = !in.eof();
    const std::string_view line(buf.data(), ended_by_newline ? got - 1 : got);
    ++out.stats.lines;
    switch (parse_line(line, &start, &finish)) {
      case LineKind::kStart:
        ++out.stats.starts;
        latest_start[start.seq] = out.starts.size();
        out.starts.push_back(std::move(start));
        break;
      case LineKind::kFinish: {
        ++out.stats.finishes;
        auto it = latest_start.find(finish.seq);
        if (it != latest_start.end()) finish.start = it->second;
        out.finishes.push_back(std::move(finish));
        break;
      }
      case LineKind::kSkipped:
        ++out.stats.skipped;
        break;
      case LineKind::kMalformed:
        ++out.stats.malformed;
        break;
      case LineKind::kUnsupported:
        ++out.stats.unsupported;
        break;
    }
    if (!ended_by_newline) break;
  }
}

std::string Overrides::describe() const {
  std::string s;
  auto add = [&](std::string_view k, const std::string& v) {
    if (!s.empty()) s += ' ';
    s += k;
    s += '=';
    s += v;
  };
  if (alpha) add("alpha", fmt_double(*alpha));
  if (max_overlap_blocks) add("max_overlap_blocks", std::to_string(*max_overlap_blocks));
  if (load_unit_bytes) add("load_unit_bytes", std::to_string(*load_unit_bytes));
  if (max_load_units) add("max_load_units", std::to_string(*max_load_units));
  if (relative_credit) add("credit_basis", *relative_credit ? "relative" : "absolute");
  return s;
}

route::RouteConfig config_for(const StartRecord& r, const Overrides& o) {
  route::RouteConfig c = r.config;
  if (o.alpha) c.alpha = *o.alpha;
  if (o.max_overlap_blocks) c.max_overlap_blocks = *o.max_overlap_blocks;
  if (o.load_unit_bytes) c.load_unit_bytes = *o.load_unit_bytes;
  if (o.max_load_units) c.max_load_units = *o.max_load_units;
  if (o.relative_credit) c.relative_credit = *o.relative_credit;
  return c;
}

route::FleetSnapshot snapshot_of(const StartRecord& r) {
  route::FleetSnapshot s;
  s.candidates.reserve(r.candidates.size());
  for (const CandidateRecord& c : r.candidates) s.candidates.push_back(route::state_of(c.terms));
  s.routers = r.routers;
  s.spread_place = r.spread_place;
  s.spread_tie = r.spread_tie;
  std::sort(s.candidates.begin(), s.candidates.end(),
            [](const route::CandidateState& a, const route::CandidateState& b) {
              return a.ordinal < b.ordinal;
            });
  return s;
}

std::optional<route::Decision> recompute(const StartRecord& r, const Overrides& o) {
  if (r.candidates.empty()) return std::nullopt;
  auto policy = route::make_policy(r.policy, config_for(r, o));
  if (!policy) return std::nullopt;
  const route::RouteRequest req{r.endpoint, r.request_bytes, r.wanted, r.total_blocks};
  return policy->decide(req, snapshot_of(r), r.rotation);
}

Report build_report(const JournalData& data, const Overrides& overrides,
                    const std::vector<double>& sweep_alpha) {
  Report rep;
  rep.read = data.stats;
  if (overrides.any()) rep.what_if = WhatIf{overrides, 0, {}};
  for (double a : sweep_alpha) {
    Overrides o = overrides;
    o.alpha = a;
    rep.sweep.push_back(WhatIf{o, 0, {}});
  }
  for (const StartRecord& r : data.starts) {
    auto base = r.chosen ? recompute(r, Overrides{}) : std::nullopt;
    if (!base) {
      ++rep.not_replayable;
      continue;
    }
    ++rep.replayed;
    count(rep.before, *r.chosen, r.outcome);
    const size_t base_winner = base->ranked.front().ordinal;
    rep.winner_units += base->ranked.front().request_load_units;
    if (base_winner == *r.chosen) {
      ++rep.agree;
    } else {
      rep.disagree_seqs.push_back(r.seq);
    }
    if (route::outcome_label(base->outcome) != r.outcome) ++rep.outcome_mismatch;
    auto run = [&](WhatIf& w) {
      auto d = recompute(r, w.overrides);
      const size_t winner = d->ranked.front().ordinal;
      if (winner != base_winner) ++w.changed;
      w.winner_units += d->ranked.front().request_load_units;
      count(w.after, winner, route::outcome_label(d->outcome));
    };
    if (rep.what_if) run(*rep.what_if);
    for (WhatIf& w : rep.sweep) run(w);
  }

  struct Acc {
    uint64_t finishes = 0, complete = 0, with_duration = 0, with_ttft = 0;
    double duration = 0, ttft = 0;
  };
  std::map<size_t, Acc> acc;
  for (const FinishRecord& f : data.finishes) {
    if (f.start) ++rep.joined_finishes;
    if (!f.upstream) continue;
    Acc& a = acc[*f.upstream];
    ++a.finishes;
    if (f.result != "complete") continue;
    ++a.complete;
    if (f.duration_ms) {
      ++a.with_duration;
      a.duration += *f.duration_ms;
    }
    if (f.ttft_ms) {
      ++a.with_ttft;
      a.ttft += *f.ttft_ms;
    }
  }
  for (const auto& [upstream, a] : acc) {
    UpstreamTiming t;
    t.upstream = upstream;
    t.finishes = a.finishes;
    t.complete = a.complete;
    if (a.with_duration) t.mean_duration_ms = a.duration / static_cast<double>(a.with_duration);
    if (a.with_ttft) t.mean_ttft_ms = a.ttft / static_cast<double>(a.with_ttft);
    rep.timings.push_back(t);
  }
  return rep;
}

namespace {

constexpr std::string_view kNote =
    "load_units are the engines' reservations when each decision was made and are replayed as "
    "recorded: each row is a what-if for one decision at a time, not a re-simulation of the queue.";

std::set<size_t> upstreams_of(const Report& r) {
  std::set<size_t> s;
  for (const auto& [u, n] : r.before.share) s.insert(u);
  if (r.what_if)
    for (const auto& [u, n] : r.what_if->after.share) s.insert(u);
  for (const auto& w : r.sweep)
    for (const auto& [u, n] : w.after.share) s.insert(u);
  return s;
}

std::set<std::string> outcomes_of(const Report& r) {
  std::set<std::string> s;
  for (const auto& [o, n] : r.before.outcomes) s.insert(o);
  if (r.what_if)
    for (const auto& [o, n] : r.what_if->after.outcomes) s.insert(o);
  for (const auto& w : r.sweep)
    for (const auto& [o, n] : w.after.outcomes) s.insert(o);
  return s;
}

template <typename K>
uint64_t get(const std::map<K, uint64_t>& m, const K& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

json::object tally_json(const Tally& t) {
  json::object share, outcomes;
  for (const auto& [u, n] : t.share) share[std::to_string(u)] = n;
  for (const auto& [o, n] : t.outcomes) outcomes[o] = n;
  return json::object{{"share", std::move(share)}, {"outcomes", std::move(outcomes)}};
}

json::object what_if_json(const WhatIf& w, uint64_t replayed) {
  json::object overrides;
  if (w.overrides.alpha) overrides["alpha"] = *w.overrides.alpha;
  if (w.overrides.max_overlap_blocks)
    overrides["max_overlap_blocks"] = *w.overrides.max_overlap_blocks;
  if (w.overrides.load_unit_bytes) overrides["load_unit_bytes"] = *w.overrides.load_unit_bytes;
  if (w.overrides.max_load_units) overrides["max_load_units"] = *w.overrides.max_load_units;
  if (w.overrides.relative_credit) overrides["credit_basis"] = *w.overrides.relative_credit ? "relative" : "absolute";
  return json::object{{"overrides", std::move(overrides)},
                      {"changed", w.changed},
                      {"changed_pct", pct(w.changed, replayed)},
                      {"mean_winner_units", mean(w.winner_units, replayed)},
                      {"after", tally_json(w.after)}};
}

}  // namespace

std::string format_text(const Report& r) {
  std::string out;
  auto line = [&](std::string s) {
    out += s;
    out += '\n';
  };
  const ReadStats& s = r.read;
  line(fmt::format("read {} lines: {} start records, {} finish records, {} other lines skipped",
                   s.lines, s.starts, s.finishes, s.skipped));
  if (s.errors()) {
    line(fmt::format(
        "errors: {} malformed records, {} lines too long, {} records of an unsupported version",
        s.malformed, s.too_long, s.unsupported));
  }
  line(fmt::format(
      "replayed {} decisions ({} not replayable: unknown policy, no candidates or no choice)",
      r.replayed, r.not_replayable));
  line(fmt::format("agreement with the recorded choice (recorded parameters): {}/{} ({:.2f}%)",
                   r.agree, r.replayed, pct(r.agree, r.replayed)));
  if (!r.all_agree()) {
    std::string seqs;
    for (size_t i = 0; i < r.disagree_seqs.size() && i < 20; ++i)
      seqs += (i ? "," : "") + std::to_string(r.disagree_seqs[i]);
    if (r.disagree_seqs.size() > 20) seqs += ",...";
    line(fmt::format(
        "WARNING: {} decisions disagree with the journal (seq {}): this build's policy does not "
        "reproduce them (a journal from another version, or reference v8 records whose ties "
        "rotated "
        "over all ordinals?)",
        r.disagree_seqs.size(), seqs));
  }
  if (r.outcome_mismatch)
    line(fmt::format("note: {} recomputed outcome labels differ from the recorded ones",
                     r.outcome_mismatch));
  line(fmt::format("note: {}", kNote));

  const auto ups = upstreams_of(r);
  const auto outs = outcomes_of(r);
  if (r.what_if) {
    const WhatIf& w = *r.what_if;
    line("");
    line(fmt::format("what-if {}: {}/{} decisions change ({:.2f}%)", w.overrides.describe(),
                     w.changed, r.replayed, pct(w.changed, r.replayed)));
    line(fmt::format("  load units the winner reserves, mean: {:.2f} before, {:.2f} after",
                     mean(r.winner_units, r.replayed), mean(w.winner_units, r.replayed)));
    line(
        fmt::format("  {:<14} {:>10} {:>8} {:>10} {:>8}", "upstream", "before", "%", "after", "%"));
    for (size_t u : ups) {
      const uint64_t b = get(r.before.share, u), a = get(w.after.share, u);
      line(fmt::format("  {:<14} {:>10} {:>7.2f}% {:>10} {:>7.2f}%", u, b, pct(b, r.replayed), a,
                       pct(a, r.replayed)));
    }
    line(fmt::format("  {:<14} {:>10} {:>8} {:>10} {:>8}", "outcome", "before", "%", "after", "%"));
    for (const std::string& o : outs) {
      const uint64_t b = get(r.before.outcomes, o), a = get(w.after.outcomes, o);
      line(fmt::format("  {:<14} {:>10} {:>7.2f}% {:>10} {:>7.2f}%", o, b, pct(b, r.replayed), a,
                       pct(a, r.replayed)));
    }
  }
  if (!r.sweep.empty()) {
    line("");
    Overrides others = r.sweep.front().overrides;
    others.alpha.reset();
    line(others.any()
             ? fmt::format("sweep over alpha ({}; the rest as recorded):", others.describe())
             : std::string("sweep over alpha (the rest as recorded):"));
    std::vector<size_t> widths;
    std::string head = fmt::format("  {:>10} {:>8} {:>8} {:>6}", "alpha", "changed", "%", "units");
    for (size_t u : ups) head += fmt::format(" {:>7}", "u" + std::to_string(u) + "%");
    for (const std::string& o : outs) {
      widths.push_back(std::max<size_t>(6, o.size()));
      head += fmt::format(" {:>{}}", o, widths.back());
    }
    line(head);
    auto row = [&](std::string_view alpha, std::string changed, std::string changed_pct,
                   double units, const Tally& t) {
      std::string s =
          fmt::format("  {:>10} {:>8} {:>8} {:>6.2f}", alpha, changed, changed_pct, units);
      for (size_t u : ups) s += fmt::format(" {:>6.2f}%", pct(get(t.share, u), r.replayed));
      size_t i = 0;
      for (const std::string& o : outs)
        s += fmt::format(" {:>{}}", get(t.outcomes, o), widths[i++]);
      line(s);
    };
    row("recorded", "-", "-", mean(r.winner_units, r.replayed), r.before);
    for (const WhatIf& w : r.sweep) {
      row(fmt_double(*w.overrides.alpha), std::to_string(w.changed),
          fmt::format("{:.2f}%", pct(w.changed, r.replayed)), mean(w.winner_units, r.replayed),
          w.after);
    }
  }
  if (!r.timings.empty()) {
    line("");
    line(fmt::format(
        "finish records: {} ({} joined to a start record by seq); means over result=complete",
        s.finishes, r.joined_finishes));
    line(fmt::format("  {:<10} {:>10} {:>10} {:>18} {:>14}", "upstream", "finishes", "complete",
                     "mean duration ms", "mean ttft ms"));
    for (const UpstreamTiming& t : r.timings) {
      line(fmt::format("  {:<10} {:>10} {:>10} {:>18} {:>14}", t.upstream, t.finishes, t.complete,
                       t.mean_duration_ms ? fmt::format("{:.1f}", *t.mean_duration_ms) : "-",
                       t.mean_ttft_ms ? fmt::format("{:.1f}", *t.mean_ttft_ms) : "-"));
    }
  }
  return out;
}

std::string format_json(const Report& r) {
  const ReadStats& s = r.read;
  json::object o;
  o["read"] = json::object{{"lines", s.lines},
                           {"starts", s.starts},
                           {"finishes", s.finishes},
                           {"skipped", s.skipped},
                           {"malformed", s.malformed},
                           {"too_long", s.too_long},
                           {"unsupported", s.unsupported}};
  json::array disagree;
  for (size_t i = 0; i < r.disagree_seqs.size() && i < 1000; ++i)
    disagree.push_back(r.disagree_seqs[i]);
  o["baseline"] = json::object{{"replayed", r.replayed},
                               {"not_replayable", r.not_replayable},
                               {"agree", r.agree},
                               {"agree_pct", pct(r.agree, r.replayed)},
                               {"disagree_seqs", std::move(disagree)},
                               {"outcome_mismatch", r.outcome_mismatch},
                               {"mean_winner_units", mean(r.winner_units, r.replayed)},
                               {"recorded", tally_json(r.before)}};
  o["what_if"] =
      r.what_if ? json::value(what_if_json(*r.what_if, r.replayed)) : json::value(nullptr);
  json::array sweep;
  for (const WhatIf& w : r.sweep) sweep.push_back(what_if_json(w, r.replayed));
  o["sweep"] = std::move(sweep);
  json::array timings;
  for (const UpstreamTiming& t : r.timings) {
    timings.push_back(json::object{
        {"upstream", t.upstream},
        {"finishes", t.finishes},
        {"complete", t.complete},
        {"mean_duration_ms",
         t.mean_duration_ms ? json::value(*t.mean_duration_ms) : json::value(nullptr)},
        {"mean_ttft_ms", t.mean_ttft_ms ? json::value(*t.mean_ttft_ms) : json::value(nullptr)}});
  }
  o["finish"] = json::object{{"joined", r.joined_finishes}, {"per_upstream", std::move(timings)}};
  o["note"] = kNote;
  return json::serialize(o) + "\n";
}

}  // namespace ramjet::replay
