// ramjet-route-replay: recomputes the decisions of a route journal (docs/journal.md).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "common/build_info.h"
#include "replay.h"

int main(int argc, char** argv) {
  using namespace ramjet::replay;
  CLI::App app{
      "Recomputes every routing decision of a ramjet route journal (RJ_ROUTE_JOURNAL) with the "
      "real "
      "policy: checks agreement with the recorded choice, and shows what other parameters would "
      "have chosen.",
      "ramjet-route-replay"};
  std::vector<std::string> files;
  Overrides o;
  double alpha = 0;
  uint32_t max_overlap_blocks = 0, max_load_units = 0;
  uint64_t load_unit_bytes = 0;
  std::vector<double> sweep;
  bool as_json = false, strict = false;
  size_t max_line_bytes = kMaxLineBytes;
  app.add_option("journal", files, "journal files (JSONL; '-' = stdin); other lines are skipped")
      ->required();
  auto* a = app.add_option("--alpha", alpha, "what-if RJ_ROUTE_ALPHA");
  auto* mob = app.add_option("--max-overlap-blocks", max_overlap_blocks,
                             "what-if RJ_ROUTE_MAX_OVERLAP_BLOCKS");
  auto* lub =
      app.add_option("--load-unit-bytes", load_unit_bytes, "what-if RJ_ROUTE_LOAD_UNIT_BYTES")
          ->check(CLI::Range(uint64_t{1}, UINT64_MAX));
  auto* mlu = app.add_option("--max-load-units", max_load_units, "what-if RJ_ROUTE_MAX_LOAD_UNITS")
                  ->check(CLI::Range(uint32_t{1}, UINT32_MAX));
  std::string basis;
  auto* cb = app.add_option("--credit-basis", basis, "what-if RJ_ROUTE_CREDIT_BASIS")
                 ->check(CLI::IsMember({"absolute", "relative"}));
  app.add_option("--sweep-alpha", sweep, "one what-if row per alpha, e.g. 0,1,2,4,8")
      ->delimiter(',');
  app.add_flag("--json", as_json, "machine-readable output");
  app.add_flag("--strict", strict, "exit 3 when a replayed decision disagrees with the journal");
  app.add_option("--max-line-bytes", max_line_bytes,
                 "longer lines are counted as errors and skipped")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  app.set_version_flag("--version", ramjet::version_line("ramjet-route-replay"),
                       "print the version, commit, build type and compiler, and exit");
  CLI11_PARSE(app, argc, argv);
  if (*a) {
    if (!std::isfinite(alpha)) {
      std::fprintf(stderr, "--alpha must be a finite number\n");
      return 1;
    }
    o.alpha = alpha;
  }
  for (double s : sweep) {
    if (!std::isfinite(s)) {
      std::fprintf(stderr, "--sweep-alpha values must be finite numbers\n");
      return 1;
    }
  }
  if (*mob) o.max_overlap_blocks = max_overlap_blocks;
  if (*lub) o.load_unit_bytes = load_unit_bytes;
  if (*mlu) o.max_load_units = max_load_units;
  if (*cb) o.relative_credit = basis == "relative";

  JournalData data;
  for (const std::string& f : files) {
    if (f == "-") {
      read_journal(std::cin, data, max_line_bytes);
      continue;
    }
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "ramjet-route-replay: cannot open %s\n", f.c_str());
      return 1;
    }
    read_journal(in, data, max_line_bytes);
    if (in.bad()) {
      std::fprintf(stderr, "ramjet-route-replay: read error in %s\n", f.c_str());
      return 1;
    }
  }
  const Report report = build_report(data, o, sweep);
  const std::string out = as_json ? format_json(report) : format_text(report);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!report.all_agree() && !as_json) {
    std::fprintf(stderr, "ramjet-route-replay: %zu decisions disagree with the journal\n",
                 report.disagree_seqs.size());
  }
  return strict && !report.all_agree() ? 3 : 0;
}
