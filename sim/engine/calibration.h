// sim/engine calibration: a closed-loop load driver over virtual time, used to calibrate the
// presets against measured throughput (docs/sim.md) and by the timing-shape tests. c clients,
// each sending one request at a time (unique prompt of fixed length, fixed max_tokens), spread
// over `engines` independent engines (client j -> engine j % engines), as on a 2 x TP4 box.
#pragma once

#include <cstdint>

#include "sim/engine/engine.h"

namespace ramjet::sim {

struct ClosedLoopSpec {
  uint32_t concurrency = 1;
  uint32_t engines = 2;
  uint32_t prompt_tokens = 1000;
  uint32_t output_tokens = 256;
  uint32_t warmup_requests_per_client = 2;    // not measured
  uint32_t measured_requests_per_client = 8;
};

struct ClosedLoopResult {
  double output_tok_s = 0;       // all engines, over virtual time
  double mean_ttft_s = 0;        // measured requests
  double mean_step_s = 0;        // virtual step duration
  uint64_t steps = 0;
  uint64_t preemptions = 0;
};

ClosedLoopResult run_closed_loop(const EngineConfig& config, const ClosedLoopSpec& spec);

}  // namespace ramjet::sim
