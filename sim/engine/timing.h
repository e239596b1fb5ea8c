// sim/engine timing: the step-duration equation of TimingModel (engine.h, docs/sim.md) and the
// seeded acceptance draws of speculative decoding. Pure functions plus a tiny PRNG; the
// scheduler decides what a step contains.
#pragma once

#include <cstdint>

#include "sim/engine/engine.h"

namespace ramjet::sim {

// What one step computes, as the timing model sees it.
struct StepShape {
  uint32_t seqs = 0;             // scheduled sequences
  uint64_t context_tokens = 0;   // sum over them of computed + scheduled tokens
  uint64_t prefill_tokens = 0;   // scheduled tokens of sequences still prefilling
  uint64_t draft_tokens = 0;     // draft tokens verified this step (all sequences)
  uint32_t max_drafts = 0;       // deepest draft of any sequence (sequential draft passes)
  uint64_t loaded_tokens = 0;    // prompt tokens loaded from the CPU offload tier this step
};

double step_duration(const TimingModel& t, const StepShape& s);

// SplitMix64: small, fast, deterministic for a seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t state_;
};

// Accepted draft positions out of `drafts`: position i is accepted with acceptance[i] (given the
// earlier ones were); the first rejection stops the run. Missing rates count as 0.
uint32_t sample_accepted(const TimingModel& t, uint32_t drafts, Rng& rng);

// Expected tokens per speculating step (1 + sum of unconditional acceptance), for docs and tests.
double expected_tokens_per_step(const TimingModel& t);

}  // namespace ramjet::sim
