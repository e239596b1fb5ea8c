#include "options.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <optional>
#include <string>

namespace ramjet::bench {
namespace {

using Problem = std::optional<std::string>;  // nullopt = fine

struct Opt {
  std::string_view name;     // without "--"
  std::string_view metavar;  // "" for a flag
  std::string_view fallback; // default, as shown in --help
  std::string_view doc;
  std::function<Problem(Options&, std::string_view)> set;
};

template <typename T>
Problem parse_int(std::string_view s, T min, T max, T& out) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || v < static_cast<uint64_t>(min) ||
      v > static_cast<uint64_t>(max))
    return "expects an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  out = static_cast<T>(v);
  return std::nullopt;
}

Problem parse_double(std::string_view s, double min, double max, double& out) {
  std::string tmp(s);
  char* end = nullptr;
  double v = std::strtod(tmp.c_str(), &end);
  if (tmp.empty() || end != tmp.c_str() + tmp.size() || !std::isfinite(v) || v < min || v > max) {
    char b[96];
    std::snprintf(b, sizeof b, "expects a number in [%g, %g]", min, max);
    return std::string(b);
  }
  out = v;
  return std::nullopt;
}

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> out;
  while (true) {
    size_t c = s.find(',');
    out.push_back(s.substr(0, c));
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return out;
}

std::function<Problem(Options&, std::string_view)> u32_field(uint32_t Options::*f, uint32_t min,
                                                             uint32_t max) {
  return [=](Options& o, std::string_view v) { return parse_int<uint32_t>(v, min, max, o.*f); };
}
std::function<Problem(Options&, std::string_view)> u64_field(uint64_t Options::*f, uint64_t min,
                                                             uint64_t max) {
  return [=](Options& o, std::string_view v) { return parse_int<uint64_t>(v, min, max, o.*f); };
}
std::function<Problem(Options&, std::string_view)> dbl_field(double Options::*f, double min,
                                                             double max) {
  return [=](Options& o, std::string_view v) { return parse_double(v, min, max, o.*f); };
}
std::function<Problem(Options&, std::string_view)> str_field(std::string Options::*f) {
  return [=](Options& o, std::string_view v) -> Problem {
    if (v.empty()) return "expects a non-empty value";
    o.*f = std::string(v);
    return std::nullopt;
  };
}
std::function<Problem(Options&, std::string_view)> flag(bool Options::*f, bool value) {
  return [=](Options& o, std::string_view) -> Problem {
    o.*f = value;
    return std::nullopt;
  };
}

const std::vector<Opt>& table() {
  static const std::vector<Opt> t = {
      // target
      {"target", "URL|oracle", "(required)",
       "OpenAI-compatible base URL (ramjet, one engine, nginx; a trailing /v1 is fine), or "
       "`oracle`: route each request yourself to the engine with the most resident prefix tokens "
       "(asks every engine's POST /sim/resident; ties: fewest running+waiting, then round robin)",
       str_field(&Options::target)},
      {"engines", "URL,URL,...", "", "engine base URLs for --target oracle",
       [](Options& o, std::string_view v) -> Problem {
         o.engines.clear();
         for (auto e : split_commas(v))
           if (!e.empty()) o.engines.emplace_back(e);
         if (o.engines.empty()) return "expects a comma-separated list of URLs";
         return std::nullopt;
       }},
      {"model", "NAME", "first id of GET /v1/models", "model name sent in every request; a comma list: the k-th conversation sends the (k mod n)-th (LoRA adapters)",
       str_field(&Options::model)},
      // workload
      {"workload", "KIND", "shared-prefix", "shared-prefix | unique | trace",
       [](Options& o, std::string_view v) -> Problem {
         if (v != "shared-prefix" && v != "unique" && v != "trace")
           return "expects shared-prefix, unique or trace";
         o.workload = std::string(v);
         return std::nullopt;
       }},
      {"apps", "N", "4", "shared-prefix: apps, each with its own system prompt",
       u32_field(&Options::apps, 1, 100000)},
      {"prefix-kib", "K", "24", "shared-prefix: system prompt size in KiB (about 256 tokens/KiB)",
       dbl_field(&Options::prefix_kib, 0, 65536)},
      {"sessions", "S", "0", "shared-prefix: concurrent conversations (0 = the concurrency; open "
       "loop: as many as are in flight)", u32_field(&Options::sessions, 0, 10000000)},
      {"turns", "T", "4", "shared-prefix: turns per conversation", u32_field(&Options::turns, 1, 100000)},
      {"user-words", "W", "48", "shared-prefix: words (about tokens) per user message",
       u32_field(&Options::user_words, 0, 1000000)},
      {"prompt-kib", "K", "1", "unique: prompt size in KiB", dbl_field(&Options::prompt_kib, 0, 65536)},
      {"trace", "FILE", "", "trace: Mooncake-style JSONL (timestamp ms, input_length, output_length, "
       "hash_ids), replayed at its timestamps unless --concurrency or --rate is given",
       str_field(&Options::trace)},
      {"time-scale", "F", "1", "trace: multiply inter-arrival times by F (0.5 = twice as fast)",
       dbl_field(&Options::time_scale, 0, 1e6)},
      {"trace-block-tokens", "N", "512", "trace: tokens (words) per hash id block",
       u32_field(&Options::trace_block_tokens, 1, 1000000)},
      {"max-tokens", "N[,N...]", "128 (trace: output_length)",
       "max_tokens per request; a list picks per request, deterministically from --seed",
       [](Options& o, std::string_view v) -> Problem {
         auto r = parse_u32_list(v, 1, 10000000);
         if (!r) return r.error().message;
         o.max_tokens = r.value();
         o.max_tokens_set = true;
         return std::nullopt;
       }},
      {"ignore-eos", "", "off (trace: on)", "send \"ignore_eos\": true (output length = max_tokens)",
       [](Options& o, std::string_view) -> Problem {
         o.ignore_eos = o.ignore_eos_set = true;
         return std::nullopt;
       }},
      {"no-ignore-eos", "", "", "do not send ignore_eos (also for trace)",
       [](Options& o, std::string_view) -> Problem {
         o.ignore_eos = false;
         o.ignore_eos_set = true;
         return std::nullopt;
       }},
      {"seed", "N", "1", "seed of every prompt and pick (use another seed to avoid a warm cache "
       "from an earlier run)", u64_field(&Options::seed, 0, UINT64_MAX)},
      // load shape
      {"concurrency", "C[,C...]", "8 (or --sessions)", "closed loop: in-flight requests per ladder step",
       [](Options& o, std::string_view v) -> Problem {
         auto r = parse_u32_list(v, 1, 1000000);
         if (!r) return r.error().message;
         o.concurrency = r.value();
         return std::nullopt;
       }},
      {"rate", "R[,R...]", "", "open loop: Poisson arrivals per second, per ladder step",
       [](Options& o, std::string_view v) -> Problem {
         auto r = parse_double_list(v, 1e-6, 1e7);
         if (!r) return r.error().message;
         o.rate = r.value();
         return std::nullopt;
       }},
      {"duration", "S", "10 (unless --requests)", "seconds of issuing per step (in-flight requests "
       "then finish)", dbl_field(&Options::duration_s, 0, 1e7)},
      {"requests", "N", "", "requests per step (with --duration: whichever comes first)",
       u64_field(&Options::requests_per_step, 1, UINT64_MAX)},
      {"warmup", "S", "0", "seconds at the start of each step that are not measured",
       dbl_field(&Options::warmup_s, 0, 1e6)},
      {"ttft-target-ms", "MS", "0 (none)", "also report goodput: requests per second whose first token came "
       "within MS, and their share of every request sent (errors and refusals count as misses)",
       dbl_field(&Options::ttft_target_ms, 0, 1e9)},
      {"timeline", "S", "0 (none)", "also report each step in windows of S seconds by completion time "
       "(ok, errors, cached %, TTFT p50/p95): what changed during it", dbl_field(&Options::timeline_s, 0, 3600)},
      {"threads", "N", "1", "io threads", u32_field(&Options::threads, 1, 256)},
      {"no-stream", "", "", "non-streamed JSON responses (TTFT = full latency)",
       flag(&Options::stream, false)},
      {"timeout", "S", "600", "per-request deadline", dbl_field(&Options::timeout_s, 0.001, 1e6)},
      {"connect-timeout", "S", "5", "connect deadline", dbl_field(&Options::connect_timeout_s, 0.001, 3600)},
      {"max-inflight", "N", "10000", "open loop: arrivals beyond this many in flight are dropped "
       "(counted as error \"dropped\")", u32_field(&Options::max_inflight, 1, 10000000)},
      // output
      {"label", "NAME", "target host:port or oracle", "name of this run in reports",
       str_field(&Options::label)},
      {"out-json", "FILE", "", "write the run as JSON", str_field(&Options::out_json)},
      {"append", "", "", "append the run to --out-json's runs; MD/SVG then compare all runs",
       flag(&Options::append, true)},
      {"out-md", "FILE", "", "write a Markdown report", str_field(&Options::out_md)},
      {"out-svg", "FILE", "", "write an SVG plot (out tok/s and TTFT p95 per ladder step)",
       str_field(&Options::out_svg)},
      {"quiet", "", "", "no progress line on stderr", flag(&Options::quiet, true)},
      {"help", "", "", "this text", flag(&Options::help, true)},
      {"version", "", "", "print the version, commit, build type and compiler, and exit",
       flag(&Options::version, true)},
  };
  return t;
}

const Opt* find_opt(std::string_view name) {
  for (const Opt& o : table())
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace

std::string Options::shape() const {
  if (!rate.empty()) return "open";
  if (workload == "trace" && concurrency.empty()) return "trace";
  return "closed";
}

Result<std::vector<uint32_t>> parse_u32_list(std::string_view s, uint32_t min, uint32_t max) {
  std::vector<uint32_t> out;
  for (auto item : split_commas(s)) {
    uint32_t v = 0;
    if (auto p = parse_int<uint32_t>(item, min, max, v))
      return Error{"bad_option", "list item '" + std::string(item) + "' " + *p};
    out.push_back(v);
  }
  return out;
}

Result<std::vector<double>> parse_double_list(std::string_view s, double min, double max) {
  std::vector<double> out;
  for (auto item : split_commas(s)) {
    double v = 0;
    if (auto p = parse_double(item, min, max, v))
      return Error{"bad_option", "list item '" + std::string(item) + "' " + *p};
    out.push_back(v);
  }
  return out;
}

Result<Options> parse_options(const std::vector<std::string_view>& args) {
  Options o;
  std::vector<std::string> problems;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "-h") a = "--help";
    if (a.substr(0, 2) != "--") {
      problems.push_back("unexpected argument '" + std::string(a) + "'");
      continue;
    }
    a.remove_prefix(2);
    std::string_view value;
    bool has_value = false;
    if (size_t eq = a.find('='); eq != std::string_view::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    const Opt* opt = find_opt(a);
    if (!opt) {
      problems.push_back("unknown option --" + std::string(a));
      continue;
    }
    if (opt->metavar.empty()) {
      if (has_value) problems.push_back("--" + std::string(a) + " takes no value");
    } else if (!has_value) {
      if (i + 1 >= args.size()) {
        problems.push_back("--" + std::string(a) + " needs a value (" + std::string(opt->metavar) + ")");
        continue;
      }
      value = args[++i];
    }
    if (auto p = opt->set(o, value)) problems.push_back("--" + std::string(a) + ": " + *p);
  }
  if (o.help || o.version) return o;
  // cross-field checks
  if (o.target.empty()) problems.push_back("--target is required");
  if (o.target == "oracle" && o.engines.empty())
    problems.push_back("--target oracle needs --engines URL,URL,...");
  if (o.target != "oracle" && !o.engines.empty())
    problems.push_back("--engines is only used with --target oracle");
  if (!o.concurrency.empty() && !o.rate.empty())
    problems.push_back("--concurrency and --rate are exclusive (closed or open loop)");
  if (o.workload == "trace" && o.trace.empty()) problems.push_back("--workload trace needs --trace FILE");
  if (o.workload != "trace" && !o.trace.empty())
    problems.push_back("--trace needs --workload trace");
  if (o.append && o.out_json.empty()) problems.push_back("--append needs --out-json");
  if (o.duration_s > 0 && o.warmup_s >= o.duration_s)
    problems.push_back("--warmup must be shorter than --duration");
  if (o.workload == "trace" && !o.ignore_eos_set) o.ignore_eos = true;
  if (o.duration_s == 0 && o.requests_per_step == 0 && o.shape() != "trace") o.duration_s = 10;
  if (o.concurrency.empty() && o.rate.empty() && o.shape() == "closed")
    o.concurrency = {o.workload == "shared-prefix" && o.sessions ? o.sessions : 8};
  if (o.label.empty()) {
    if (o.target == "oracle") o.label = "oracle";
    else {
      std::string_view t = o.target;
      if (t.substr(0, 7) == "http://") t.remove_prefix(7);
      o.label = std::string(t.substr(0, t.find('/')));
    }
  }
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "\n") + p;
    return Error{"bad_options", msg};
  }
  return o;
}

Result<CompareOptions> parse_compare(const std::vector<std::string_view>& args) {
  CompareOptions c;
  std::vector<std::string> problems;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "--out-md" || a == "--out-svg") {
      if (i + 1 >= args.size()) {
        problems.push_back(std::string(a) + " needs a file");
        continue;
      }
      (a == "--out-md" ? c.out_md : c.out_svg) = std::string(args[++i]);
    } else if (a.substr(0, 2) == "--") {
      problems.push_back("unknown compare option " + std::string(a));
    } else {
      c.inputs.emplace_back(a);
    }
  }
  if (c.inputs.empty()) problems.push_back("compare needs at least one JSON file");
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "\n") + p;
    return Error{"bad_options", msg};
  }
  return c;
}

std::string help_text() {
  std::string h =
      "ramjet-bench: workload generator for OpenAI-compatible chat endpoints (ramjet, vLLM,\n"
      "ramjet-sim, nginx). Streams SSE, measures TTFT/TPOT/throughput per ladder step.\n\n"
      "usage:\n"
      "  ramjet-bench --target URL [options]\n"
      "  ramjet-bench --target oracle --engines URL,URL,... [options]\n"
      "  ramjet-bench compare A.json [B.json ...] [--out-md FILE] [--out-svg FILE]\n\n"
      "examples:\n"
      "  ramjet-bench --target http://127.0.0.1:8000 --workload shared-prefix --apps 4 \\\n"
      "      --prefix-kib 24 --turns 4 --concurrency 8,32,64 --duration 30 --label ramjet \\\n"
      "      --out-json r.json --append --out-md r.md --out-svg r.svg\n"
      "  ramjet-bench --target oracle --engines http://127.0.0.1:8101,http://127.0.0.1:8102 \\\n"
      "      --concurrency 8,32 --duration 30 --out-json r.json --append\n"
      "  ramjet-bench --target http://127.0.0.1:8000 --workload unique --prompt-kib 4 \\\n"
      "      --max-tokens 128,1024 --rate 2,4,8 --duration 60\n"
      "  ramjet-bench --target http://127.0.0.1:8000 --workload trace --trace t.jsonl --time-scale 0.5\n\n"
      "options:\n";
  for (const Opt& o : table()) {
    std::string left = "  --" + std::string(o.name);
    if (!o.metavar.empty()) left += " " + std::string(o.metavar);
    if (left.size() < 30) left.resize(30, ' ');
    else left += "\n" + std::string(30, ' ');
    std::string doc(o.doc);
    if (!o.fallback.empty()) doc += " [default: " + std::string(o.fallback) + "]";
    // Word-wrap the description at 100 columns, continuation lines indented under it.
    size_t col = 30;
    std::string_view rest = doc;
    bool first = true;
    while (!rest.empty()) {
      size_t sp = rest.find(' ');
      std::string_view word = rest.substr(0, sp);
      rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
      if (!first && col + 1 + word.size() > 100) {
        left += "\n" + std::string(30, ' ');
        col = 30;
      } else if (!first) {
        left += ' ';
        ++col;
      }
      left += word;
      col += word.size();
      first = false;
    }
    h += left + "\n";
  }
  h +=
      "\nmetrics: TTFT = time from sending the request (a new connection's connect included; the\n"
      "oracle's queries not) to the first chunk with non-empty content;\n"
      "TPOT = (last token time - first token time) / (output tokens - 1); output tokens from the\n"
      "usage chunk (stream_options.include_usage), else the number of content chunks; cached % =\n"
      "sum cached_tokens / sum prompt_tokens. A step's elapsed time runs until its last request\n"
      "finished. The per-engine split comes from X-Ramjet-Upstream (\"direct\" when absent).\n";
  return h;
}

}  // namespace ramjet::bench
