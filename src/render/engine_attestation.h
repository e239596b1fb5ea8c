// render::engine_attestation: whether each engine serves the model a manifest describes. Every
// interval, each engine's GET /v1/models (model id, root, max_model_len) and GET /version are
// checked against the manifest (render/manifest.h: attest_models, attest_version); an engine is
// attested while its last check matched. The checks run as coroutines on one io context, each
// engine on its own (a hung engine delays only its own next check).
// Not here: what attestation gates (local tokens: render/shadow_comparer.h), the metric text
// (render/tokenizer_service.cc writes these counters).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "config/config.h"
#include "net/roster.h"
#include "metrics/metrics.h"
#include "render/manifest.h"

namespace ramjet::render {

struct AttestationConfig {
  std::vector<config::UpstreamUrl> upstreams;  // a fixed fleet (when `roster` is not set)
  const net::Roster* roster = nullptr;         // the engines by slot, changing at runtime
  std::string bearer;                        // RJ_UPSTREAM_TOKEN
  std::chrono::milliseconds timeout{2000};   // one /v1/models or /version call
  std::chrono::milliseconds interval{5000};  // RJ_PROBE_INTERVAL_MS
};

class EngineAttestation {
 public:
  explicit EngineAttestation(AttestationConfig cfg);
  ~EngineAttestation();

  // Starts the check loop on `ctx` against `manifest` (which outlives the loop).
  void start(boost::asio::io_context& ctx, const Manifest& manifest);
  // Ends the loop: no further checks, a check in flight is not counted. Never blocks.
  void begin_stop();

  size_t engines() const { return attest_state_.size(); }
  bool attested(size_t upstream) const;
  Attestation attestation(size_t upstream) const;  // kUnchecked for an unknown engine
  // Checks of `upstream` with `outcome` so far (the attestation_checks metric).
  uint64_t checks(size_t upstream, Attestation outcome) const;

 private:
  // The loop's timer lives with the coroutine (shared), so it goes with the frame when the io
  // context is destroyed, never after it.
  struct Loop {
    Loop(boost::asio::io_context& ctx, const Manifest& manifest, size_t engines)
        : ctx(ctx), manifest(manifest), timer(ctx), busy(engines, 0) {}
    boost::asio::io_context& ctx;
    const Manifest& manifest;
    boost::asio::steady_timer timer;
    std::atomic<bool> stopped{false};
    std::vector<char> busy;  // a check in flight per engine (touched on ctx only)
    std::vector<uint64_t> seen = std::vector<uint64_t>(busy.size(), 0);  // the engine checked, per slot (ctx only)
  };
  boost::asio::awaitable<void> loop(std::shared_ptr<Loop> loop);
  boost::asio::awaitable<void> check_one(std::shared_ptr<Loop> loop, size_t i);
  void set(size_t i, Attestation a);

  AttestationConfig cfg_;
  net::RosterRef roster_;
  std::shared_ptr<Loop> loop_;
  std::vector<std::atomic<uint8_t>> attest_state_;  // Attestation per upstream
  std::vector<metrics::Counter> checks_;            // [upstream][Attestation]
};

}  // namespace ramjet::render
