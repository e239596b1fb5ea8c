#include "observe/decision_log.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>

#include "request/route/terms.h"

namespace ramjet::observe {
namespace {

// One candidate term's JSON value, by its member type (request/route/terms.h).
void append_term(std::string& out, bool v) { out += v ? "true" : "false"; }
void append_term(std::string& out, uint32_t v) { out += std::to_string(v); }
void append_term(std::string& out, size_t v) { out += std::to_string(v); }
void append_term(std::string& out, int64_t v) { out += std::to_string(v); }
void append_term(std::string& out, double v) { append_json_number(out, v); }
void append_term(std::string& out, route::Profile v) { append_json_string(out, route::profile_label(v)); }
void append_term(std::string& out, route::AdapterSlot v) { append_json_string(out, route::adapter_slot_label(v)); }

}  // namespace

DecisionLog::DecisionLog(size_t capacity, size_t engines)
    : slots_(std::max<size_t>(capacity, 1)), engines_(engines), routed_(new std::atomic<uint64_t>[engines ? engines : 1]) {
  for (size_t i = 0; i < (engines ? engines : 1); ++i) routed_[i].store(0, std::memory_order_relaxed);
  // A record's candidates keep their storage from slot to slot; reserved here (up to 16 engines'
  // worth), the first pass round the ring does not allocate them on the request path either
  // (exact routing's token vectors still grow once a slot).
  for (Slot& slot : slots_) slot.rec.candidates.reserve(std::min<size_t>(engines, 16));
}

void DecisionLog::push(const route::Routed& routed, std::string_view policy) {
  push(routed, policy,
       std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
           .count());
}

void DecisionLog::push(const route::Routed& routed, std::string_view policy, int64_t unix_ms) {
  const route::Decision& d = routed.decision;
  const route::RouteRequest& request = routed.request;
  std::optional<uint32_t> chosen;
  if (const route::CandidateTerms* first = d.first_dispatch()) chosen = static_cast<uint32_t>(first->ordinal);
  if (chosen && *chosen < engines_) routed_[*chosen].fetch_add(1, std::memory_order_relaxed);

  const uint64_t seq = next_.fetch_add(1, std::memory_order_acq_rel) + 1;
  Slot& slot = slots_[(seq - 1) % slots_.size()];
  std::lock_guard lock(slot.mu);
  // A writer a whole ring ahead already filled this slot with a newer record: keep that one.
  if (slot.rec.seq > seq) return;
  DecisionRecord& r = slot.rec;
  r.seq = seq;
  r.unix_ms = unix_ms;
  r.endpoint = request.endpoint;
  r.policy = policy;
  r.outcome = d.outcome;
  r.chosen = chosen;
  r.request_bytes = request.body_bytes;
  r.cold = routed.cold;
  r.fail_open = d.fail_open;
  r.candidates.assign(d.ranked.begin(), d.ranked.end());  // keeps its capacity from earlier records
  r.exact = routed.exact;
  r.exact_tokens.assign(routed.exact_tokens.begin(), routed.exact_tokens.end());
  r.exact_estimated.clear();
  for (const route::ExactStamp& s : routed.exact_stamps) r.exact_estimated.push_back(s.estimated ? 1 : 0);
  r.exact_block_size = routed.exact_block_size;
}

std::vector<DecisionRecord> DecisionLog::last(size_t n) const {
  std::vector<DecisionRecord> out;
  const uint64_t newest = next_.load(std::memory_order_acquire);
  n = std::min<uint64_t>({n, slots_.size(), newest});
  out.reserve(n);
  for (uint64_t seq = newest; seq > 0 && out.size() < n && newest - seq < slots_.size(); --seq) {
    const Slot& slot = slots_[(seq - 1) % slots_.size()];
    std::lock_guard lock(slot.mu);
    // 0: the ticket was taken but its writer has not filled the slot yet; a larger seq: the slot
    // was overwritten by a newer decision since `newest` was read. Either way, skip it.
    if (slot.rec.seq != seq) continue;
    out.push_back(slot.rec);
  }
  return out;
}

uint64_t DecisionLog::routed_to(size_t engine) const {
  return engine < engines_ ? routed_[engine].load(std::memory_order_relaxed) : 0;
}

void append_json_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(v));
    out.append(buf, p);
    return;
  }
  char buf[32];
  // Dashboard values need no more than 6 significant digits.
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);
  out.append(buf, p);
}

void append_decision_json(std::string& out, const DecisionRecord& r) {
  out += "{\"seq\":";
  out += std::to_string(r.seq);
  out += ",\"unix_ms\":";
  out += std::to_string(r.unix_ms);
  out += ",\"endpoint\":";
  append_json_string(out, request::endpoint_label(r.endpoint));
  out += ",\"policy\":";
  append_json_string(out, r.policy);
  out += ",\"outcome\":";
  append_json_string(out, route::outcome_label(r.outcome));
  out += ",\"chosen\":";
  out += r.chosen ? std::to_string(*r.chosen) : "null";
  out += ",\"request_bytes\":";
  out += std::to_string(r.request_bytes);
  out += r.cold ? ",\"cold\":true" : ",\"cold\":false";
  out += r.fail_open ? ",\"fail_open\":true" : ",\"fail_open\":false";
  out += ",\"exact\":";
  if (r.exact == route::ExactOutcome::kNone)
    out += "null";
  else
    append_json_string(out, route::label(r.exact));
  out += ",\"exact_block_size\":";
  out += r.exact_tokens.empty() ? std::string("null") : std::to_string(r.exact_block_size);
  out += ",\"candidates\":[";
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const route::CandidateTerms& c = r.candidates[i];
    if (i) out += ',';
    char sep = '{';
    route::for_each_term([&](const auto& row) {
      out += sep;
      sep = ',';
      append_json_string(out, row.api);
      out += ':';
      append_term(out, c.*row.member);
    });
    // Only when exact routing looked the prompt up in this engine's index: the key's absence says
    // it did not (or, exact_partial, that the engine's fingerprint estimate stood in).
    const bool estimated = c.ordinal < r.exact_estimated.size() && r.exact_estimated[c.ordinal] != 0;
    if (c.ordinal < r.exact_tokens.size() && !estimated) out += ",\"exact_tokens\":" + std::to_string(r.exact_tokens[c.ordinal]);
    out += '}';
  }
  out += "]}";
}

std::string DecisionLog::json(size_t n) const {
  std::vector<DecisionRecord> recs = last(n);
  std::string out = "{\"total\":" + std::to_string(total()) + ",\"capacity\":" + std::to_string(capacity());
  // The dashboard's candidate columns: every term with a short label, in table order.
  out += ",\"columns\":[";
  char sep = ' ';
  route::for_each_term([&](const auto& row) {
    if (row.dashboard.empty()) return;
    if (sep != ' ') out += sep;
    sep = ',';
    out += "{\"key\":";
    append_json_string(out, row.api);
    out += ",\"label\":";
    append_json_string(out, row.dashboard);
    out += '}';
  });
  out += "],\"decisions\":[";
  for (size_t i = 0; i < recs.size(); ++i) {
    if (i) out += ',';
    append_decision_json(out, recs[i]);
  }
  out += "]}";
  return out;
}

}  // namespace ramjet::observe
