/*
 * ramjet-bench: the workload generator for ramjet and anything OpenAI-compatible.
 *
 *   ramjet-bench --target http://127.0.0.1:8000 --workload shared-prefix --apps 4 --prefix-kib 24 \
 *       --turns 4 --concurrency 8,32,64 --duration 30 --label ramjet \
 *       --out-json runs.json --append --out-md runs.md --out-svg runs.svg
 *   ramjet-bench --target oracle --engines http://127.0.0.1:8101,http://127.0.0.1:8102 \
 *       --concurrency 8,32,64 --duration 30 --label oracle --out-json runs.json --append
 *   ramjet-bench --target http://127.0.0.1:8000 --workload unique --prompt-kib 4 \
 *       --max-tokens 128,1024 --rate 2,4,8 --duration 60
 *   ramjet-bench --target http://127.0.0.1:8000 --workload trace --trace mooncake.jsonl --time-scale 0.5
 *   ramjet-bench compare a.json b.json --out-md cmp.md --out-svg cmp.svg
 *
 * Workloads: shared-prefix (N apps with their own system prompt, multi-turn sessions whose prompt
 * grows turn by turn), unique (fresh prompts), trace (Mooncake JSONL; shared blocks follow
 * hash_ids). Load: closed loop per --concurrency step or open-loop Poisson per --rate step.
 * `--target oracle` routes by itself to the engine holding the longest prefix (ramjet-sim's
 * /sim/resident): the upper bound for a prefix-aware router. See --help for every option.
 *
 * This file only wires things: options.* (CLI table), workload.* (prompts), runner.* (load and
 * timing), client.* + http1.* (HTTP), sse.* (stream accounting), stats.* and report.* (output).
 */

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/build_info.h"
#include "options.h"
#include "report.h"
#include "runner.h"
#include "trace.h"
#include "workload.h"

namespace {

using namespace ramjet::bench;

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

// Writes through a temporary file and a rename, so a reader never sees half a report.
bool write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out << text;
    if (!out.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

int fail(const std::string& msg, int code = 2) {
  std::fprintf(stderr, "ramjet-bench: %s\n", msg.c_str());
  return code;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

int write_outputs(const std::vector<RunReport>& runs, const std::string& md_path,
                  const std::string& svg_path) {
  const std::string md = render_markdown(runs);
  std::fwrite(md.data(), 1, md.size(), stdout);
  if (!md_path.empty() && !write_file(md_path, md)) return fail("cannot write " + md_path, 1);
  if (!svg_path.empty() && !write_file(svg_path, render_svg(runs)))
    return fail("cannot write " + svg_path, 1);
  return 0;
}

int compare_main(const std::vector<std::string_view>& args) {
  auto c = parse_compare(args);
  if (!c) return fail(c.error().message + "\n(see ramjet-bench --help)");
  std::vector<RunReport> runs;
  for (const auto& path : c->inputs) {
    std::string text;
    if (!read_file(path, text)) return fail("cannot read " + path);
    auto r = runs_from_json_text(text);
    if (!r) return fail(path + ": " + r.error().message);
    for (auto& run : r.value()) runs.push_back(std::move(run));
  }
  return write_outputs(runs, c->out_md, c->out_svg);
}

std::unique_ptr<Workload> make_workload(const Options& o, std::string& error) {
  MaxTokens mt(o.max_tokens, o.seed);
  if (o.workload == "unique") return std::make_unique<UniqueWorkload>(o.prompt_kib, mt, o.seed);
  if (o.workload == "trace") {
    std::string text;
    if (!read_file(o.trace, text)) {
      error = "cannot read trace " + o.trace;
      return nullptr;
    }
    auto entries = parse_trace(text);
    if (!entries) {
      error = o.trace + ": " + entries.error().message;
      return nullptr;
    }
    if (entries->empty()) {
      error = o.trace + ": no requests";
      return nullptr;
    }
    TraceParams p;
    p.block_tokens = o.trace_block_tokens;
    p.time_scale = o.time_scale;
    p.override_max_tokens = o.max_tokens_set;
    p.max_tokens = mt;
    p.seed = o.seed;
    std::string name = o.trace.substr(o.trace.find_last_of('/') + 1);
    return std::make_unique<TraceWorkload>(std::move(entries.value()), p, name);
  }
  SharedPrefixParams p;
  p.apps = o.apps;
  p.prefix_kib = o.prefix_kib;
  p.sessions = o.sessions;
  p.turns = o.turns;
  p.user_words = o.user_words;
  p.max_tokens = mt;
  p.seed = o.seed;
  return std::make_unique<SharedPrefixWorkload>(p);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "compare") return compare_main({args.begin() + 1, args.end()});
  auto parsed = parse_options(args);
  if (!parsed) return fail(parsed.error().message + "\n(see ramjet-bench --help)");
  const Options& o = parsed.value();
  if (o.help) {
    std::fputs(help_text().c_str(), stdout);
    return 0;
  }
  if (o.version) {
    std::puts(ramjet::version_line("ramjet-bench").c_str());
    return 0;
  }

  std::vector<std::string> urls = o.target == "oracle" ? o.engines : std::vector<std::string>{o.target};
  std::vector<Target> targets;
  for (const auto& u : urls) {
    auto url = parse_url(u);
    if (!url) return fail(u + ": " + url.error().message);
    auto t = resolve_target(url.value());
    if (!t) return fail(t.error().message);
    targets.push_back(std::move(t.value()));
  }
  std::string error;
  auto workload = make_workload(o, error);
  if (!workload) return fail(error);

  RunReport run;
  run.label = o.label;
  run.workload = workload->describe() + (o.stream ? "" : " no-stream");
  run.shape = o.shape();
  run.started_at = utc_now();
  if (o.target == "oracle") {
    run.target = "oracle:";
    for (size_t i = 0; i < targets.size(); ++i)
      run.target += (i ? "," : "") + targets[i].url.display();
  } else {
    run.target = targets[0].url.display();
  }

  auto steps = run_ladder(o, std::move(targets), *workload);
  if (!steps) return fail(steps.error().message, 1);
  run.steps = std::move(steps.value());

  std::vector<RunReport> runs;
  if (!o.out_json.empty()) {
    std::string text;
    if (o.append && read_file(o.out_json, text)) {
      auto old = runs_from_json_text(text);
      if (!old) return fail(o.out_json + ": cannot append: " + old.error().message, 1);
      runs = std::move(old.value());
    }
    runs.push_back(run);
    if (!write_file(o.out_json, runs_to_json_text(runs))) return fail("cannot write " + o.out_json, 1);
  } else {
    runs.push_back(run);
  }
  int rc = write_outputs(runs, o.out_md, o.out_svg);
  if (rc != 0) return rc;
  uint64_t ok = 0;
  for (const auto& s : run.steps) ok += s.ok;
  return ok > 0 ? 0 : 1;
}
