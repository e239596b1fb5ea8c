// loadgen/runner: drives one ladder (closed-loop concurrency steps, open-loop Poisson rates, or a
// timestamped trace replay) against a target or the oracle's engines, on --threads io threads,
// and aggregates each step. Owns timing, the progress line and sample collection; prompts come
// from workload.*, bytes on the wire from client.*, numbers from stats.*.
#pragma once

#include <vector>

#include "client.h"
#include "common/result.h"
#include "options.h"
#include "report.h"
#include "workload.h"

namespace ramjet::bench {

// Runs every step of the ladder described by `opt`. `targets` holds the one URL target, or the
// oracle's engines (opt.target == "oracle"). Fails only when the run could not start (no model).
Result<std::vector<StepReport>> run_ladder(const Options& opt, std::vector<Target> targets,
                                           Workload& workload);

}  // namespace ramjet::bench
