#include "sim/engine/timing.h"

namespace ramjet::sim {

double step_duration(const TimingModel& t, const StepShape& s) {
  if (s.seqs == 0) return 0.0;
  double d = t.step_base + t.per_seq * s.seqs + t.per_kv_token * static_cast<double>(s.context_tokens) +
             t.per_prefill_token * static_cast<double>(s.prefill_tokens);
  d += t.load_per_token() * static_cast<double>(s.loaded_tokens);
  if (s.draft_tokens > 0) {
    d += t.spec_overhead_per_draft * static_cast<double>(s.draft_tokens) +
         t.spec_step_overhead_per_draft * s.max_drafts;
  }
  return d;
}

uint32_t sample_accepted(const TimingModel& t, uint32_t drafts, Rng& rng) {
  uint32_t accepted = 0;
  while (accepted < drafts) {
    const double p = accepted < t.acceptance.size() ? t.acceptance[accepted] : 0.0;
    if (rng.uniform() >= p) break;
    ++accepted;
  }
  return accepted;
}

double expected_tokens_per_step(const TimingModel& t) {
  double e = 1.0, p = 1.0;
  for (uint32_t i = 0; i < t.speculative_tokens; ++i) {
    p *= i < t.acceptance.size() ? t.acceptance[i] : 0.0;
    e += p;
  }
  return e;
}

}  // namespace ramjet::sim
