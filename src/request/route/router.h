// request/route/router: everything a routing decision reads, in one place. It fills the fleet
// snapshot (health and live load from upstream/, overlaps from the first overlap source that can
// answer — route/overlap.h —, blocks a single-flight leader is prefilling, declared decode
// profiles), advances the rotation counter and asks the policy. It also passes on what a served
// request teaches: only a complete 200 response on an inference endpoint is observed into the
// sources (request/stream decides when).
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "metrics/metrics.h"
#include "request/prepare/prepare.h"
#include "request/route/adapter_board.h"
#include "request/route/decode_cost.h"
#include "request/route/overlap.h"
#include "request/route/policy.h"
#include "request/route/session_affinity.h"
#include "request/route/single_flight.h"

namespace ramjet::upstream {
class EngineLoadBoard;
class EngineSet;
class Fleet;
}

namespace ramjet::route {

// A decision plus what the router learned while making it.
// (Router::decide(..., out) writes every field into a reused Routed: a field added here must be
// written there too.)
struct Routed {
  RouteRequest request;  // what the policy was asked (the journal and decision log record it)
  Decision decision;
  // The request's prefix is new: no engine holds or is prefilling any of its blocks. The engine
  // it is dispatched to becomes the single-flight leader for it (lead()).
  bool cold = false;
  // Exact routing: how the exact source answered (kNone without one) and, when it looked the
  // prompt up, each engine's resident prompt tokens (the X-Ramjet-Route receipt's prediction).
  // exact_provisional: further tokens each engine is about to hold (speculative residency),
  // not part of the prediction the engine's usage checks.
  ExactOutcome exact = ExactOutcome::kNone;
  std::vector<uint32_t> exact_tokens;
  // exact_tokens by tier (GPU, then the engine's CPU and disk offload tiers)
  std::vector<cache::TierBlocks> exact_tiers;
  std::vector<uint32_t> exact_provisional;
  std::vector<ExactStamp> exact_stamps;
  uint32_t exact_block_size = 0;
  // Session affinity (RJ_SESSION_AFFINITY_MODE): what it did, or would have done in shadow.
  SessionNote session;
};

// The routing families Router::write_metrics exports (names, labels, help; docs/metrics.md).
std::span<const metrics::Family> route_families();

class Router {
 public:
  // `profiles` is empty or has one entry per engine. `sources` (asked in order) and
  // `single_flight` must outlive the router.
  Router(std::unique_ptr<Policy> policy, upstream::Fleet& fleet, std::vector<OverlapSource*> sources,
         SingleFlight& single_flight, std::vector<Profile> profiles);

  std::shared_ptr<const Policy> policy() const { return policy_.load(std::memory_order_acquire); }
  RouteConfig config() const { return policy()->config(); }
  // Whether requests need fingerprints (PrepareConfig::fingerprint): fixed for the process (a
  // reload may change a policy's weights, not its kind).
  bool uses_prefix() const { return uses_prefix_; }
  // A configuration reload's weights (RJ_ROUTE_ALPHA, ...): decisions made after this use `p`,
  // those in progress finish with the policy they started with. `p` is of the same kind.
  void set_policy(std::unique_ptr<Policy> p) { policy_.store(std::shared_ptr<Policy>(std::move(p)), std::memory_order_release); }
  Profile profile(size_t engine) const { return profiles_[engine].load(std::memory_order_relaxed); }
  // The decode profile of the engine now in slot `engine` (one that joined later; any thread).
  void set_profile(size_t engine, Profile p) { profiles_[engine].store(p, std::memory_order_relaxed); }

  // `pool`: the engines that serve the request's model (upstream/model_pools.h; null: every
  // engine). The others are not candidates at all, not even to fail open to or retry on.
  // `rotation`: the pool's own tie-break counter (null: the policy's).
  // `adapter`: the LoRA adapter the request's model names (empty: the base model); each
  // candidate's AdapterSlot comes from the adapter board (set_adapters).
  Routed decide(const request::PreparedRequest& req, const upstream::EngineSet* pool = nullptr,
                std::atomic<uint64_t>* rotation = nullptr, std::string_view adapter = {});
  // decide(), into `out` (every field written; its storage reused): the request path keeps one a
  // connection rather than moving a new one in each request.
  void decide(const request::PreparedRequest& req, const upstream::EngineSet* pool, std::atomic<uint64_t>* rotation,
              std::string_view adapter, Routed& out);

  // Registers a cold request's prefix as being prefilled on `engine` (an empty lease when the
  // request was not cold or single-flight is off). Keep the lease until the response ends.
  SingleFlight::Lease lead(size_t engine, const Routed& routed, const request::PreparedRequest& req);

  // A complete 200 response on an inference endpoint: `engine` now holds the request's prefix.
  void observe(size_t engine, const request::PreparedRequest& req);

  // The sources' series (ramjet_route_index_entries{upstream}), ramjet_route_single_flight_*
  // (no payload, ordinals).
  void write_metrics(metrics::Exposition& x) const;

  // Other routers' load on the engines (RJ_ROUTE_ENGINE_LOAD): each decision reads every
  // candidate's foreign load units from `board` (null: none). Set before serving; it must
  // outlive the router.
  void set_engine_load(const upstream::EngineLoadBoard* board) { engine_load_ = board; }
  // The engines' active LoRA adapters (route/adapter_board.h; null: adapter requests are placed
  // as base-model ones). Set before serving; it must outlive the router.
  void set_adapters(const AdapterBoard* board) { adapters_ = board; }
  // The engines' learned decode speeds (route/decode_cost.h): with RJ_ROUTE_DECODE_COST each
  // inference request's candidates are charged from it (null: never). Set before serving; it must
  // outlive the router.
  void set_decode_cost(const DecodeCost* cost) { decode_cost_ = cost; }
  // Session affinity as a score prior (route/session_affinity.h). Set before serving.
  void set_session_affinity(SessionAffinityConfig c) { session_ = std::move(c); }
  const SessionAffinityConfig& session_affinity() const { return session_; }

  SingleFlight& single_flight() { return single_flight_; }
  bool single_flight_enabled() const { return single_flight_.config().enabled; }

 private:
  std::atomic<std::shared_ptr<Policy>> policy_;
  bool uses_prefix_ = false;
  upstream::Fleet& fleet_;
  std::vector<OverlapSource*> sources_;
  SingleFlight& single_flight_;
  std::unique_ptr<std::atomic<Profile>[]> profiles_;  // per slot
  const upstream::EngineLoadBoard* engine_load_ = nullptr;
  const AdapterBoard* adapters_ = nullptr;
  const DecodeCost* decode_cost_ = nullptr;
  SessionAffinityConfig session_;
  // ramjet_session_affinity_total{endpoint,outcome}
  // (inference endpoints only: chat, completions, responses, messages — the Endpoint enum's first four)
  std::array<std::array<std::atomic<uint64_t>, static_cast<size_t>(SessionOutcome::kCount)>, 4> session_counts_{};
  // Decides with the session prior applied (on) or only recorded (shadow).
  Decision decide_with_session(const request::PreparedRequest& req, const RouteRequest& rr, FleetSnapshot& snap,
                               SessionNote& note, Policy& policy, std::atomic<uint64_t>* rotation);
  bool has_exact_ = false;  // a source named "exact" is among sources_
  std::array<std::atomic<uint64_t>, static_cast<size_t>(ExactOutcome::kCount)> exact_outcomes_{};
  std::array<std::atomic<uint64_t>, 4> canary_{};  // decisions per request::ExactCohort
};

}  // namespace ramjet::route
