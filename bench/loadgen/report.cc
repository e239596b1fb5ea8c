#include "report.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace ramjet::bench {
namespace json = boost::json;
namespace {

json::value num(double v) { return std::isfinite(v) ? json::value(v) : json::value(nullptr); }

double get_num(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (!v) return kNaN;
  if (v->is_double()) return v->as_double();
  if (v->is_int64()) return static_cast<double>(v->as_int64());
  if (v->is_uint64()) return static_cast<double>(v->as_uint64());
  return kNaN;
}

uint64_t get_u64(const json::object& o, std::string_view key) {
  double d = get_num(o, key);
  return std::isfinite(d) && d > 0 ? static_cast<uint64_t>(d) : 0;
}

std::string get_str(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

json::object counts_to_json(const std::map<std::string, uint64_t>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

std::map<std::string, uint64_t> counts_from_json(const json::object& o, std::string_view key) {
  std::map<std::string, uint64_t> m;
  const json::value* v = o.if_contains(key);
  if (!v || !v->is_object()) return m;
  for (const auto& kv : v->as_object()) {
    double d = get_num(v->as_object(), kv.key());
    if (std::isfinite(d) && d >= 0) m[std::string(kv.key())] = static_cast<uint64_t>(d);
  }
  return m;
}

std::string md_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::string format_x(double x, std::string_view shape) {
  if (shape == "trace") return "trace";
  return format_number(x);
}

std::string counts_cell(const std::map<std::string, uint64_t>& m) {
  std::string s;
  for (const auto& [k, v] : m) {
    if (!s.empty()) s += ' ';
    s += md_escape(k) + ":" + std::to_string(v);
  }
  return s.empty() ? "-" : s;
}

std::string errors_cell(const StepReport& st) {
  if (st.errors == 0) return "0";
  std::string s = std::to_string(st.errors) + " (";
  bool first = true;
  for (const auto& [k, v] : st.error_reasons) {
    if (!first) s += ", ";
    first = false;
    s += md_escape(k) + " " + std::to_string(v);
  }
  return s + ")";
}

}  // namespace

bool has_goodput(const RunReport& r) {
  return std::any_of(r.steps.begin(), r.steps.end(), [](const StepReport& s) { return s.ttft_target_ms > 0; });
}

namespace {

const StepReport* step_at(const RunReport& r, double x) {
  for (const auto& s : r.steps)
    if (s.x == x) return &s;
  return nullptr;
}

}  // namespace

std::string_view x_name(std::string_view shape) {
  if (shape == "open") return "rate (req/s)";
  if (shape == "trace") return "trace";
  return "concurrency";
}

std::string format_number(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  const double a = std::fabs(v);
  if (a >= 100 || v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 10) std::snprintf(buf, sizeof buf, "%.1f", v);
  else std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

json::value to_json(const RunReport& run) {
  json::array steps;
  for (const StepReport& s : run.steps) {
    steps.push_back(json::object{
        {"x", s.x},
        {"ok", s.ok},
        {"errors", s.errors},
        {"error_reasons", counts_to_json(s.error_reasons)},
        {"elapsed_s", num(s.elapsed_s)},
        {"output_tokens", s.output_tokens},
        {"output_tok_s", num(s.output_tok_s)},
        {"req_s", num(s.req_s)},
        {"ttft_p50_ms", num(s.ttft_p50_ms)},
        {"ttft_p95_ms", num(s.ttft_p95_ms)},
        {"ttft_p99_ms", num(s.ttft_p99_ms)},
        {"tpot_p50_ms", num(s.tpot_p50_ms)},
        {"tpot_p95_ms", num(s.tpot_p95_ms)},
        {"latency_p50_ms", num(s.latency_p50_ms)},
        {"latency_p95_ms", num(s.latency_p95_ms)},
        {"prompt_tokens", s.prompt_tokens},
        {"cached_tokens", s.cached_tokens},
        {"cached_pct", num(s.cached_pct)},
        {"engines", counts_to_json(s.engines)},
    });
    if (s.ttft_target_ms > 0) {
      auto& so = steps.back().as_object();
      so["ttft_target_ms"] = s.ttft_target_ms;
      so["good"] = s.good;
      so["goodput_req_s"] = num(s.goodput_req_s);
      so["attainment_pct"] = num(s.attainment_pct);
    }
    if (!s.timeline.empty()) {
      json::array tl;
      for (const Window& w : s.timeline)
        tl.push_back(json::object{{"t_s", num(w.t_s)}, {"ok", w.ok}, {"errors", w.errors},
                                  {"cached_pct", num(w.cached_pct)}, {"ttft_p50_ms", num(w.ttft_p50_ms)},
                                  {"ttft_p95_ms", num(w.ttft_p95_ms)}});
      steps.back().as_object()["timeline"] = std::move(tl);
    }
  }
  return json::object{{"label", run.label},       {"target", run.target},
                      {"workload", run.workload}, {"shape", run.shape},
                      {"started_at", run.started_at}, {"steps", std::move(steps)}};
}

Result<RunReport> run_from_json(const json::value& v) {
  if (!v.is_object()) return Error{"bad_report", "a run must be a JSON object"};
  const auto& o = v.as_object();
  RunReport r;
  r.label = get_str(o, "label");
  r.target = get_str(o, "target");
  r.workload = get_str(o, "workload");
  r.shape = get_str(o, "shape");
  r.started_at = get_str(o, "started_at");
  if (r.shape != "closed" && r.shape != "open" && r.shape != "trace")
    return Error{"bad_report", "run shape must be closed, open or trace"};
  const json::value* steps = o.if_contains("steps");
  if (!steps || !steps->is_array()) return Error{"bad_report", "run has no steps array"};
  for (const auto& sv : steps->as_array()) {
    if (!sv.is_object()) return Error{"bad_report", "a step must be a JSON object"};
    const auto& so = sv.as_object();
    StepReport s;
    s.x = get_num(so, "x");
    if (!std::isfinite(s.x)) return Error{"bad_report", "a step has no numeric x"};
    s.ok = get_u64(so, "ok");
    s.errors = get_u64(so, "errors");
    s.error_reasons = counts_from_json(so, "error_reasons");
    s.elapsed_s = get_num(so, "elapsed_s");
    s.output_tokens = get_u64(so, "output_tokens");
    s.output_tok_s = get_num(so, "output_tok_s");
    s.req_s = get_num(so, "req_s");
    s.ttft_p50_ms = get_num(so, "ttft_p50_ms");
    s.ttft_p95_ms = get_num(so, "ttft_p95_ms");
    s.ttft_p99_ms = get_num(so, "ttft_p99_ms");
    s.tpot_p50_ms = get_num(so, "tpot_p50_ms");
    s.tpot_p95_ms = get_num(so, "tpot_p95_ms");
    s.latency_p50_ms = get_num(so, "latency_p50_ms");
    s.latency_p95_ms = get_num(so, "latency_p95_ms");
    s.prompt_tokens = get_u64(so, "prompt_tokens");
    s.cached_tokens = get_u64(so, "cached_tokens");
    s.cached_pct = get_num(so, "cached_pct");
    s.engines = counts_from_json(so, "engines");
    if (so.contains("ttft_target_ms")) {
      s.ttft_target_ms = get_num(so, "ttft_target_ms");
      s.good = get_u64(so, "good");
      s.goodput_req_s = get_num(so, "goodput_req_s");
      s.attainment_pct = get_num(so, "attainment_pct");
    }
    if (const json::value* tl = so.if_contains("timeline"); tl && tl->is_array()) {
      for (const auto& wv : tl->as_array()) {
        if (!wv.is_object()) return Error{"bad_report", "a timeline window must be a JSON object"};
        const auto& wo = wv.as_object();
        s.timeline.push_back(Window{get_num(wo, "t_s"), get_u64(wo, "ok"), get_u64(wo, "errors"),
                                    get_num(wo, "cached_pct"), get_num(wo, "ttft_p50_ms"), get_num(wo, "ttft_p95_ms")});
      }
    }
    r.steps.push_back(std::move(s));
  }
  return r;
}

std::string runs_to_json_text(const std::vector<RunReport>& runs) {
  json::array a;
  for (const auto& r : runs) a.push_back(to_json(r));
  return json::serialize(json::object{{"format", "ramjet-bench/1"}, {"runs", std::move(a)}}) + "\n";
}

Result<std::vector<RunReport>> runs_from_json_text(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return Error{"bad_report", "not JSON: " + ec.message()};
  const json::value* runs = v.is_object() ? v.as_object().if_contains("runs") : nullptr;
  if (!runs || !runs->is_array()) return Error{"bad_report", "no \"runs\" array"};
  std::vector<RunReport> out;
  for (const auto& rv : runs->as_array()) {
    auto r = run_from_json(rv);
    if (!r) return r.error();
    out.push_back(std::move(r.value()));
  }
  return out;
}

std::string render_markdown(const std::vector<RunReport>& runs) {
  std::string md;
  for (const RunReport& r : runs) {
    md += "### " + md_escape(r.label.empty() ? "run" : r.label) + "\n\n";
    md += "target `" + md_escape(r.target) + "` · workload `" + md_escape(r.workload) + "` · " +
          (r.shape == "open" ? "open loop (Poisson)" : r.shape == "trace" ? "trace replay" : "closed loop");
    if (!r.started_at.empty()) md += " · " + r.started_at;
    const bool goodput = has_goodput(r);
    md += "\n\n| " + std::string(x_name(r.shape)) +
          " | ok | errors | out tok/s | req/s | TTFT p50 ms | TTFT p95 ms | TTFT p99 ms |"
          " TPOT p50 ms | TPOT p95 ms | cached % |" +
          std::string(goodput ? " goodput req/s | TTFT met % |" : "") + " engines |\n";
    md += std::string("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|") + (goodput ? "---:|---:|" : "") + "---|\n";
    for (const StepReport& s : r.steps) {
      md += "| " + format_x(s.x, r.shape) + " | " + std::to_string(s.ok) + " | " + errors_cell(s) +
            " | " + format_number(s.output_tok_s) + " | " + format_number(s.req_s) + " | " +
            format_number(s.ttft_p50_ms) + " | " + format_number(s.ttft_p95_ms) + " | " +
            format_number(s.ttft_p99_ms) + " | " + format_number(s.tpot_p50_ms) + " | " +
            format_number(s.tpot_p95_ms) + " | " + format_number(s.cached_pct) + " | " +
            (goodput ? format_number(s.goodput_req_s) + " | " + format_number(s.attainment_pct) + " | " : "") +
            counts_cell(s.engines) + " |\n";
    }
    if (goodput && !r.steps.empty())
      md += "\ngoodput: requests whose first token came within " + format_number(r.steps.front().ttft_target_ms) +
            " ms, per second; TTFT met %: their share of every request sent (errors count as misses).\n";
    md += "\n";
    for (const StepReport& s : r.steps) {
      if (s.timeline.empty()) continue;
      md += "timeline of " + std::string(x_name(r.shape)) + " " + format_x(s.x, r.shape) +
            " (by completion time):\n\n| from s | ok | errors | cached % | TTFT p50 ms | TTFT p95 ms |\n"
            "|---:|---:|---:|---:|---:|---:|\n";
      for (const Window& w : s.timeline)
        md += "| " + format_number(w.t_s) + " | " + std::to_string(w.ok) + " | " + std::to_string(w.errors) + " | " +
              format_number(w.cached_pct) + " | " + format_number(w.ttft_p50_ms) + " | " +
              format_number(w.ttft_p95_ms) + " |\n";
      md += "\n";
    }
  }
  if (runs.size() < 2) return md;
  for (std::string_view shape : {"closed", "open", "trace"}) {
    std::vector<const RunReport*> group;
    for (const auto& r : runs)
      if (r.shape == shape) group.push_back(&r);
    if (group.size() < 2) continue;
    std::set<double> xs;
    for (const auto* r : group)
      for (const auto& s : r->steps) xs.insert(s.x);
    const bool goodput = std::any_of(group.begin(), group.end(), [](const RunReport* r) { return has_goodput(*r); });
    md += "### Comparison (" + std::string(x_name(shape)) + ")\n\n| " + std::string(x_name(shape));
    for (const auto* r : group) md += " | " + md_escape(r->label) + " out tok/s";
    for (const auto* r : group) md += " | " + md_escape(r->label) + " TTFT p95 ms";
    for (const auto* r : group) md += " | " + md_escape(r->label) + " cached %";
    if (goodput)
      for (const auto* r : group) md += " | " + md_escape(r->label) + " goodput req/s";
    md += " |\n|---:";
    for (size_t i = 0; i < group.size() * (goodput ? 4 : 3); ++i) md += "|---:";
    md += "|\n";
    for (double x : xs) {
      md += "| " + format_x(x, shape);
      const StepReport* base = step_at(*group[0], x);
      for (size_t i = 0; i < group.size(); ++i) {
        const StepReport* s = step_at(*group[i], x);
        md += " | " + (s ? format_number(s->output_tok_s) : "-");
        if (s && i > 0 && base && base->output_tok_s > 0) {
          char buf[32];
          std::snprintf(buf, sizeof buf, " (%.2f×)", s->output_tok_s / base->output_tok_s);
          md += buf;
        }
      }
      for (const auto* r : group) {
        const StepReport* s = step_at(*r, x);
        md += " | " + (s ? format_number(s->ttft_p95_ms) : "-");
      }
      for (const auto* r : group) {
        const StepReport* s = step_at(*r, x);
        md += " | " + (s ? format_number(s->cached_pct) : "-");
      }
      if (goodput)
        for (const auto* r : group) {
          const StepReport* s = step_at(*r, x);
          md += " | " + (s ? format_number(s->goodput_req_s) : "-");
        }
      md += " |\n";
    }
    md += "\n";
  }
  return md;
}

}  // namespace ramjet::bench
