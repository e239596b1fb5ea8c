// request/route/adapter_board: which LoRA adapters each engine has active, for the adapter term
// of the prefix and load policies (policy.h adapter_charge). Fed from the engine scrape (every
// RJ_ENGINE_SCRAPE_INTERVAL_MS): vLLM's vllm:lora_requests_info names the adapters with running
// and waiting requests and its max_loras (upstream::LoraSample). Read by every decision for a
// LoRA adapter request, on the io threads; written by the scrape's thread. A reading older than
// `max_age` (an engine that stopped answering its /metrics) says nothing (AdapterSlot::kNone).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "request/route/policy.h"

namespace ramjet::route {

class AdapterBoard {
 public:
  AdapterBoard(size_t engines, int64_t max_age_ms);

  // The engine's adapter state at monotonic `now_ms`: `max_loras` slots, `active` the adapters
  // with running or waiting requests (any order, duplicates ignored).
  void record(size_t engine, uint32_t max_loras, std::vector<std::string> active, int64_t now_ms);
  // The engine reports no adapter state (no LoRA, a failed scrape, a new member in its slot).
  void forget(size_t engine);

  // Where `adapter` stands on `engine` (kNone: unknown, stale or no adapter asked).
  AdapterSlot slot(size_t engine, std::string_view adapter, int64_t now_ms) const;

  size_t engines() const { return engines_; }

 private:
  struct Entry {
    int64_t at_ms = 0;
    uint32_t max_loras = 0;
    std::vector<std::string> active;  // sorted, unique
  };
  size_t engines_;
  int64_t max_age_ms_;
  std::unique_ptr<std::atomic<std::shared_ptr<const Entry>>[]> entries_;
};

}  // namespace ramjet::route
