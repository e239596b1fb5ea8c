// sim_engine_calibrate: prints the calibration table of docs/sim.md (simulated box throughput
// of the presets vs the measured numbers). Usage: sim_engine_calibrate [requests_per_client]
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "sim/engine/calibration.h"

namespace {

using ramjet::sim::ClosedLoopSpec;
using ramjet::sim::EngineConfig;

uint32_t g_requests = 8;

double run(const std::string& name, uint32_t c, uint32_t out) {
  std::optional<EngineConfig> cfg = ramjet::sim::preset(name);
  if (!cfg) std::abort();
  ClosedLoopSpec spec;
  spec.concurrency = c;
  spec.output_tokens = out;
  spec.measured_requests_per_client = g_requests;
  return ramjet::sim::run_closed_loop(*cfg, spec).output_tok_s;
}

std::string pct(double a, double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * (a / b - 1.0));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_requests = static_cast<uint32_t>(std::atoi(argv[1]));
  struct Cell {
    uint32_t c, out;
    const char* std_measured;
    const char* mtp_measured;
    const char* mtp3_measured;
  };
  const Cell cells[] = {
      {1, 256, "77", "121 (+55%)", "+79.1%"},  {8, 256, "", "+112%", "+35.0%"},
      {16, 256, "", "", "+27.0%"},             {32, 256, "", "+31%", "+7.5%"},
      {64, 256, "", "+22%", ""},               {128, 256, "", "+7%", ""},
      {256, 256, "7,890.9", "-12.5%", ""},     {32, 512, "1,844.1", "", "1,759.2 (-4.6%)"},
  };
  std::printf("Qwen3.8-27B, 2 engines, prompt 1000 tokens, closed loop (box tok/s)\n\n");
  std::printf("| c | max_tokens | standard sim | standard measured | MTP sim | MTP vs std sim | "
              "MTP measured | MTP3 sim | MTP3 vs std sim | MTP3 measured |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Cell& cell : cells) {
    const double s = run("qwen3.8-27b-tp4", cell.c, cell.out);
    const double m = run("qwen3.8-27b-tp4-mtp", cell.c, cell.out);
    const double m3 = run("qwen3.8-27b-tp4-mtp3", cell.c, cell.out);
    std::printf("| %u | %u | %.1f | %s | %.1f | %s | %s | %.1f | %s | %s |\n", cell.c, cell.out, s,
                cell.std_measured, m, pct(m, s).c_str(), cell.mtp_measured, m3,
                pct(m3, s).c_str(), cell.mtp3_measured);
  }
  std::printf("\nDeepSeek-V4-Flash, 2 engines, prompt 1000 tokens, max_tokens 256 (box tok/s)\n\n");
  std::printf("| c | sim | measured |\n|---|---|---|\n");
  const struct {
    uint32_t c;
    const char* measured;
  } ds[] = {{1, "245.1"}, {8, ""}, {24, "1,891.2 (best)"}, {48, ""}, {64, ""}};
  for (const auto& d : ds) {
    std::printf("| %u | %.1f | %s |\n", d.c, run("deepseek-v4-flash-tp4", d.c, 256), d.measured);
  }
  std::printf("\ntiny: ");
  for (uint32_t c : {1u, 64u, 512u}) std::printf("c%u %.0f tok/s  ", c, run("tiny", c, 256));
  std::printf("\n");
  return 0;
}
