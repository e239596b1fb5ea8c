// request/route/exact_overlap: the exact overlap source. For a request whose prompt tokens
// request/stream got (PreparedRequest::exact), every engine's trusted exact inventory
// (cache/events) is looked up; resident tokens become overlap blocks on the approximate index's
// scale (ceil(tokens * fingerprint blocks / prompt tokens)), so the policy's affinity, cap and
// load terms weigh them the same way. It answers only when every healthy engine's inventory is
// trusted; a healthy engine whose index is not (fenced, replaying, or its predictions withdrawn)
// is given the approximate index's estimate, which is on the same scale, so one fenced engine
// does not turn exact routing off for the fleet (it declines only when no healthy engine is
// trusted, and the approximate index answers). In shadow mode it computes the same and always
// declines (and declines at once when an engine is not trusted): the router records whether the
// approximate choice agreed.
//
// Speculative residency: when the router places a request that was looked up, the blocks of its
// prompt the chosen engine does not report yet are entered for that engine as provisional
// (cache/index/provisional.h, RJ_EXACT_PROVISIONAL_TTL_MS); a later lookup continues each engine's
// exact match through them. Resident tokens (note.tokens, the prediction the engine's usage
// checks) count only what the events confirmed; note.provisional counts the rest.
//
// Tiers: an engine's resident tokens include what its offload tiers hold after its GPU run
// (note.tiers splits them); the overlap credits each tier with its weight (TierWeights), while
// the prediction counts them all, as vLLM's cached_tokens does (route/prediction_check.h).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cache/events/kv_fleet.h"
#include "cache/index/provisional.h"
#include "common/clock.h"
#include "request/route/overlap.h"
#include "request/route/prediction_check.h"

namespace ramjet::upstream {
class Fleet;
class EngineCatalog;
}

namespace ramjet::route {

enum class ExactMode : uint8_t { kOff, kShadow, kOn };

// What a prompt token an engine holds is worth to the prefix score, by tier (RJ_KV_TIER_WEIGHT_*):
// a GPU token 1; a token the engine's offloading connector would load back from CPU or disk less.
struct TierWeights {
  double cpu = 0.8;
  double disk = 0.3;
  // The tokens, weighted (rounded down).
  uint64_t weigh(const cache::TierBlocks& tokens) const;
};

class ExactOverlap final : public OverlapSource {
 public:
  // `check` (optional) withdraws engines whose predictions keep missing.
  ExactOverlap(const cache::events::KvFleet& kv, const upstream::Fleet& fleet, ExactMode mode,
               const PredictionCheck* check = nullptr, cache::ProvisionalLimits provisional = {},
               const Clock& clock = SteadyClock::instance());
  // The engines' model lists (optional): an adapter request is looked up in the adapter's
  // namespace on every engine, even one whose events never named it.
  void set_catalog(const upstream::EngineCatalog* catalog) { catalog_ = catalog; }
  // The approximate source (optional): a healthy engine whose index is not trusted (fenced,
  // replaying, withdrawn) gets its estimate, on the same scale, while the others are placed on
  // their exact overlaps (ExactOutcome::kExactPartial). Without it, one such engine makes the
  // source decline for the whole fleet.
  void set_estimates(const OverlapSource* approx) { estimates_ = approx; }
  void set_tier_weights(TierWeights w) { weights_ = w; }
  std::string_view name() const override { return "exact"; }
  ExactMode mode() const { return mode_; }
  bool overlaps(const request::PreparedRequest& req, std::span<uint32_t> out, OverlapNote& note) const override;
  void served(size_t, const request::PreparedRequest&) override {}  // the engines' events teach it
  void placed(size_t engine, const request::PreparedRequest& req, uint32_t resident) override;
  // How many of `tokens` (a prompt's first tokens, in the namespace of `model` and `cache_salt`)
  // `engine`'s trusted inventory holds now (nullopt: no trusted inventory, or a read that kept
  // racing its writer). Any thread. The prediction check asks it after the response, when the
  // engine found more than was predicted (route/late_check.h).
  std::optional<uint32_t> resident_now(size_t engine, std::span<const uint32_t> tokens, std::string_view model,
                                       std::string_view cache_salt) const;
  // Whether `engine`'s index has held the blocks of tokens[from_tokens..] (a prompt's first
  // tokens) without a break since `stamp` (the prediction's lookup); false when one was removed
  // in between (even if stored again) or the index lost track of the engine; nullopt when the
  // read kept racing its writer. Any thread: the prediction check asks it of an over-prediction.
  std::optional<bool> held_since(size_t engine, std::span<const uint32_t> tokens, std::string_view model,
                                 std::string_view cache_salt, uint64_t from_tokens, const ExactStamp& stamp) const;
  // ramjet_exact_provisional_* (router.cc, in route_families(); outcomes are the router's own)
  void write_metrics(metrics::Exposition& x) const override;

  // Blocks on the approximate scale for `tokens` resident of a `prompt_tokens` prompt that has
  // `blocks` fingerprint blocks (rounded up: a hit of any size is worth something).
  static uint32_t units(uint64_t tokens, uint64_t prompt_tokens, uint64_t blocks);

 private:
  const cache::events::KvFleet& kv_;
  const upstream::Fleet& fleet_;
  ExactMode mode_;
  const PredictionCheck* check_;
  const Clock& clock_;
  const upstream::EngineCatalog* catalog_ = nullptr;
  const OverlapSource* estimates_ = nullptr;
  TierWeights weights_;
  cache::events::ExactRequest exact_request(const request::PreparedRequest& req) const;
  // This thread's last lookup (the router places a request right after looking it up).
  struct LastLookup {
    const request::PreparedRequest* req = nullptr;
    std::optional<cache::events::RequestChains> chains;
  };
  static thread_local LastLookup last_lookup_;
  std::vector<std::unique_ptr<cache::ProvisionalBlocks>> provisional_;  // per engine
  std::atomic<uint64_t> entered_{0};  // provisional blocks entered
  mutable std::atomic<uint64_t> used_{0};  // lookups a provisional block lengthened
};


}  // namespace ramjet::route
