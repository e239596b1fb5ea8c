#include "trace.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>

namespace ramjet::bench {
namespace json = boost::json;
namespace {

bool as_number(const json::value* v, double& out) {
  if (!v) return false;
  if (v->is_double()) out = v->as_double();
  else if (v->is_int64()) out = static_cast<double>(v->as_int64());
  else if (v->is_uint64()) out = static_cast<double>(v->as_uint64());
  else return false;
  return std::isfinite(out);
}

bool as_count(const json::value* v, uint64_t max, uint64_t& out) {
  double d = 0;
  if (!as_number(v, d) || d < 0 || d != std::floor(d) || d > static_cast<double>(max)) return false;
  out = static_cast<uint64_t>(d);
  return true;
}

}  // namespace

Result<std::vector<TraceEntry>> parse_trace(std::string_view text, const TraceLimits& limits) {
  std::vector<TraceEntry> out;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty()) continue;
    auto bad = [&](std::string_view what) {
      return Error{"bad_trace", "line " + std::to_string(line_no) + ": " + std::string(what)};
    };
    if (out.size() >= limits.max_entries) return bad("too many entries");
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    if (ec) return bad("not JSON");
    if (!v.is_object()) return bad("not a JSON object");
    const auto& o = v.as_object();
    TraceEntry e;
    uint64_t n = 0;
    if (!as_number(o.if_contains("timestamp"), e.timestamp_ms) || e.timestamp_ms < 0)
      return bad("timestamp must be a number >= 0 (ms)");
    if (!as_count(o.if_contains("input_length"), limits.max_input_length, n))
      return bad("input_length must be an integer within limits");
    e.input_length = static_cast<uint32_t>(n);
    if (!as_count(o.if_contains("output_length"), limits.max_output_length, n))
      return bad("output_length must be an integer within limits");
    e.output_length = static_cast<uint32_t>(n);
    if (const json::value* h = o.if_contains("hash_ids")) {
      if (!h->is_array()) return bad("hash_ids must be an array");
      if (h->as_array().size() > limits.max_hash_ids) return bad("too many hash_ids");
      e.hash_ids.reserve(h->as_array().size());
      for (const auto& id : h->as_array()) {
        uint64_t x = 0;
        if (id.is_uint64()) x = id.as_uint64();
        else if (id.is_int64() && id.as_int64() >= 0) x = static_cast<uint64_t>(id.as_int64());
        else return bad("hash_ids must be non-negative integers");
        e.hash_ids.push_back(x);
      }
    }
    out.push_back(std::move(e));
  }
  std::stable_sort(out.begin(), out.end(), [](const TraceEntry& a, const TraceEntry& b) {
    return a.timestamp_ms < b.timestamp_ms;
  });
  return out;
}

}  // namespace ramjet::bench
