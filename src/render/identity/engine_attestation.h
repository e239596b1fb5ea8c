// render::engine_attestation: whether each engine serves the model a manifest describes. Every
// interval, each engine's GET /v1/models (model id, root, max_model_len) and GET /version are
// checked against the manifest (render/identity/manifest.h: attest_models, attest_version); an
// engine is attested while its last check matched. The checks run as coroutines on one io context,
// each engine on its own (a hung engine delays only its own next check).
// Without a pinned identity (RJ_MODEL_DIR and no manifest: Manifest::identity_pinned false), an
// engine is attested when its own POST /tokenize reproduces every golden's token ids. Each engine
// is proven itself (two engines of one identity may still serve different templates: vLLM's
// --chat-template shows in neither /v1/models nor /version), under the identity it had then
// (render::engine_identity: its cards and version): while that stays, it stays attested; another
// identity (a restart with another --max-model-len or version) is proven again, not refused. A
// failed proof is asked again after a minute, not every interval.
// Not here: what attestation gates (local tokens: render/service/shadow_comparer.h), the metric
// text (render/service/tokenizer_service.cc writes these counters).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "config/config.h"
#include "net/roster.h"
#include "metrics/metrics.h"
#include "render/identity/manifest.h"

namespace ramjet::render {

// One golden as an engine is asked for it: the /tokenize body and the tokens ramjet expects.
struct GoldenProbe {
  std::string id;
  std::string payload;  // POST /tokenize body
  uint64_t token_count = 0;
  std::string token_ids_sha256;
};

struct AttestationConfig {
  std::vector<config::UpstreamUrl> upstreams;  // a fixed fleet (when `roster` is not set)
  const net::Roster* roster = nullptr;         // the engines by slot, changing at runtime
  std::string bearer;                        // RJ_UPSTREAM_TOKEN
  std::chrono::milliseconds timeout{2000};   // one /v1/models or /version call
  std::chrono::milliseconds interval{5000};  // RJ_PROBE_INTERVAL_MS
  // An engine not to check now (another model folder's renderer attested it: its goldens are not
  // this one's); its state here stays as last checked. Empty: every engine is checked.
  std::function<bool(size_t)> skip;
  // Which RJ_MODEL_DIR folder this is, in log lines ("" for one).
  std::string name;
};

class EngineAttestation {
 public:
  explicit EngineAttestation(AttestationConfig cfg);
  ~EngineAttestation();

  // Starts the check loop on `ctx` against `manifest` (which outlives the loop); `probes`: the
  // manifest's goldens as /tokenize calls (used when it pins no identity).
  void start(boost::asio::io_context& ctx, const Manifest& manifest, std::vector<GoldenProbe> probes = {});
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
    Loop(boost::asio::io_context& ctx, const Manifest& manifest, std::vector<GoldenProbe> probes, size_t engines)
        : ctx(ctx), manifest(manifest), probes(std::move(probes)), timer(ctx), busy(engines, 0) {}
    boost::asio::io_context& ctx;
    const Manifest& manifest;
    const std::vector<GoldenProbe> probes;
    boost::asio::steady_timer timer;
    std::atomic<bool> stopped{false};
    std::vector<char> busy;  // a check in flight per engine (touched on ctx only)
    std::vector<uint64_t> seen = std::vector<uint64_t>(busy.size(), 0);  // the engine checked, per slot (ctx only)
    // (After `busy`: sized by it.) Per engine slot (ctx only): the identity its goldens were proven under, or the one they
    // were refused under and when to ask again. Cleared when another engine takes the slot.
    std::vector<std::string> proven = std::vector<std::string>(busy.size());
    std::vector<std::string> refused = std::vector<std::string>(busy.size());
    std::vector<std::chrono::steady_clock::time_point> retry_at =
        std::vector<std::chrono::steady_clock::time_point>(busy.size());
    size_t proofs = 0;  // engines proven so far (the log line)
  };
  boost::asio::awaitable<void> loop(std::shared_ptr<Loop> loop);
  boost::asio::awaitable<void> check_one(std::shared_ptr<Loop> loop, size_t i);
  // The golden proof of engine `i` under `identity` (no pinned identity).
  boost::asio::awaitable<Attestation> prove(std::shared_ptr<Loop> loop, const config::UpstreamUrl& url, size_t i,
                                            const std::string& identity);
  void set(size_t i, Attestation a);

  AttestationConfig cfg_;
  net::RosterRef roster_;
  std::shared_ptr<Loop> loop_;
  std::vector<std::atomic<uint8_t>> attest_state_;  // Attestation per upstream
  std::vector<metrics::Counter> checks_;            // [upstream][Attestation]
};

}  // namespace ramjet::render
