#include "sim/engine/calibration.h"

#include <algorithm>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "sim/engine/timing.h"

namespace ramjet::sim {

namespace {

struct EngineRun {
  double tok_s = 0, ttft_sum = 0, step_sum = 0;
  uint64_t ttft_n = 0, steps = 0, preemptions = 0;
};

std::vector<uint32_t> unique_prompt(uint64_t id, uint32_t len) {
  std::vector<uint32_t> p(len);
  Rng rng(id * 0x9e3779b97f4a7c15ULL + 7);
  for (auto& t : p) t = 1000 + static_cast<uint32_t>(rng.next() % 150000);
  return p;
}

EngineRun run_one(const EngineConfig& config, const ClosedLoopSpec& spec, uint32_t clients,
                  uint64_t id_base) {
  EngineRun run;
  Engine engine(config, nullptr);
  uint64_t next_id = id_base;
  double now = 0;
  boost::unordered_flat_map<uint64_t, double> submitted;
  auto submit = [&](uint32_t max_tokens) {
    const uint64_t id = next_id++;
    engine.add_request(id, unique_prompt(id, spec.prompt_tokens), std::max<uint32_t>(max_tokens, 1));
    submitted[id] = now;
  };
  // Stagger the first wave (first request of client j asks for (j+1)/clients of the output) so
  // completions spread out as in a long-running benchmark instead of moving in lockstep.
  for (uint32_t j = 0; j < clients; ++j) {
    submit(static_cast<uint32_t>(uint64_t{spec.output_tokens} * (j + 1) / clients));
  }
  const uint64_t warm = uint64_t{spec.warmup_requests_per_client} * clients;
  const uint64_t total = warm + uint64_t{spec.measured_requests_per_client} * clients;
  uint64_t completed = 0, tokens = 0, tokens0 = 0;
  double t0 = 0;
  bool measuring = warm == 0;
  while (completed < total) {
    StepResult res = engine.step(now);
    if (res.outputs.empty() && res.duration_s == 0) break;  // nothing runnable (cannot happen)
    now += res.duration_s;
    if (measuring) {
      run.step_sum += res.duration_s;
      ++run.steps;
    }
    for (const RequestOutput& out : res.outputs) {
      tokens += out.new_tokens;
      if (out.prefill_done) {
        auto it = submitted.find(out.id);
        if (measuring && it != submitted.end()) {
          run.ttft_sum += now - it->second;
          ++run.ttft_n;
        }
      }
      if (out.finish != FinishReason::kNone) {
        submitted.erase(out.id);
        ++completed;
        if (!measuring && completed >= warm) {
          measuring = true;
          t0 = now;
          tokens0 = tokens;
        }
        submit(spec.output_tokens);  // closed loop: the client sends its next request
      }
    }
  }
  run.tok_s = now > t0 ? static_cast<double>(tokens - tokens0) / (now - t0) : 0;
  run.preemptions = engine.stats().preemptions;
  return run;
}

}  // namespace

ClosedLoopResult run_closed_loop(const EngineConfig& config, const ClosedLoopSpec& spec) {
  ClosedLoopResult res;
  const uint32_t engines = std::max<uint32_t>(spec.engines, 1);
  double ttft_sum = 0, step_sum = 0;
  uint64_t ttft_n = 0;
  for (uint32_t e = 0; e < engines; ++e) {
    const uint32_t clients = spec.concurrency / engines + (e < spec.concurrency % engines ? 1 : 0);
    if (clients == 0) continue;
    const EngineRun run = run_one(config, spec, clients, (uint64_t{e} + 1) << 40);
    res.output_tok_s += run.tok_s;
    ttft_sum += run.ttft_sum;
    ttft_n += run.ttft_n;
    step_sum += run.step_sum;
    res.steps += run.steps;
    res.preemptions += run.preemptions;
  }
  res.mean_ttft_s = ttft_n > 0 ? ttft_sum / static_cast<double>(ttft_n) : 0;
  res.mean_step_s = res.steps > 0 ? step_sum / static_cast<double>(res.steps) : 0;
  return res;
}

}  // namespace ramjet::sim
