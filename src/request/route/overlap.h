// request/route/overlap: where the router reads how much of a request's prefix each engine holds.
// Sources are asked in order and the first that can answer for a request gives every engine's
// overlap; the approximate index (fingerprints learned from completed responses) is the first
// source today and answers whenever the request has fingerprints. A source that cannot be
// trusted for a request (no tokens, an index behind its engine) declines and the next one answers.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "cache/index/approx_index.h"
#include "cache/index/exact_index.h"
#include "metrics/metrics.h"
#include "request/prepare/prepare.h"

namespace ramjet::route {

// How the exact source (exact_overlap.h) answered for one request: the label of
// ramjet_exact_route_total{outcome} and of the X-Ramjet-Route receipt.
enum class ExactOutcome : uint8_t {
  kNone,             // no exact source, or it was not asked (RJ_EXACT_ROUTE_MODE=off)
  kExact,            // exact overlaps placed the request
  kShadowAgree,      // shadow: the approximate choice is (one of) the engines holding the most
  kShadowWouldMove,  // shadow: another engine holds more of the prompt
  kUntrusted,        // an engine's index is fenced, replaying or missing: approximate
  kBusy,             // a lookup kept racing its index's writer: approximate
  kIneligible,       // not a request exact routing tokenizes (endpoint, size): approximate
  kTokenizeTimeout,  // the tokens (engine's /tokenize or local render) came too late: approximate
  kTokenizeFailed,   // it failed: approximate
  kNoEngine,         // no healthy engine to tokenize with: approximate
  kWithdrawn,        // a healthy engine's predictions kept missing (prediction_check.h): approximate
  kUnattested,       // RJ_EXACT_TOKENS=local and a healthy engine is not attested: approximate
  kTokenizeBusy,     // RJ_EXACT_TOKENS=local and the render pool was full: approximate
  // Exact overlaps for the engines whose index is trusted, the approximate index's estimate (on
  // the same scale) for the healthy ones whose index is not (fenced, replaying, withdrawn)
  kExactPartial,
  kCount,
};
std::string_view label(ExactOutcome o);
// Placed on exact overlaps (all engines', or the trusted ones' beside estimates).
inline bool placed_exactly(ExactOutcome o) { return o == ExactOutcome::kExact || o == ExactOutcome::kExactPartial; }

// Where one engine's exact prediction came from: the state of its index at the lookup (so the
// prediction check can ask later whether the engine's events removed predicted blocks since:
// route/late_check.h), or none (`estimated`: the approximate index's estimate stood in for an
// untrusted index, and nothing was predicted).
struct ExactStamp {
  uint64_t generation = 0;  // KvFleet::generation: the inventory started again from empty when it moved
  uint64_t revision = 0;    // the shard's revision() read before the lookup
  bool estimated = false;
};

// What a source may add to its answer (the router passes it to every source it asks).
struct OverlapNote {
  std::span<uint32_t> tokens;  // one per engine, zeroed: resident prompt tokens, when the source knows
  // One per engine, zeroed: further prompt tokens the engine is about to hold (speculative
  // residency: blocks of requests just placed there, not yet confirmed by its events).
  std::span<uint32_t> provisional;
  std::span<ExactStamp> stamps;  // one per engine, default: what each exact prediction was read from
  // One per engine, zeroed: `tokens` split by the tier the engine would serve them from (GPU prefix
  // cache, then its offload tiers: cache/index/exact_index.h), when the source knows.
  std::span<cache::TierBlocks> tiers;
  ExactOutcome exact = ExactOutcome::kNone;
  uint32_t block_size = 0;  // the block size resident tokens were counted in (the largest engine's)
  bool shadow = false;  // the source computed overlaps but declines to be used (it returned false)
};

class OverlapSource {
 public:
  virtual ~OverlapSource() = default;
  virtual std::string_view name() const = 0;
  // Fills out[engine] (zeroed by the caller, one entry per engine) with the leading blocks of
  // `req` that engine holds; false when this source cannot answer for `req`.
  virtual bool overlaps(const request::PreparedRequest& req, std::span<uint32_t> out, OverlapNote& note) const = 0;
  // A complete 200 response on an inference endpoint: `engine` now holds `req`'s prefix (sources
  // that learn from served traffic take it; sources fed by the engines ignore it).
  virtual void served(size_t engine, const request::PreparedRequest& req) = 0;
  // The router placed `req` on `engine` after this source looked it up (`resident` tokens there):
  // a source that can, notes what the engine is about to hold.
  virtual void placed(size_t /*engine*/, const request::PreparedRequest& /*req*/, uint32_t /*resident*/) {}
  virtual void write_metrics(metrics::Exposition& x) const = 0;
};

// The approximate index (cache/index/approx_index.h), keyed by the request's chain fingerprints.
class ApproxOverlap final : public OverlapSource {
 public:
  explicit ApproxOverlap(cache::ApproxIndex& index) : index_(index) {}
  std::string_view name() const override { return "approx"; }
  bool overlaps(const request::PreparedRequest& req, std::span<uint32_t> out, OverlapNote& note) const override;
  void served(size_t engine, const request::PreparedRequest& req) override;
  // ramjet_route_index_entries{upstream}, ramjet_route_index_horizon{upstream}
  void write_metrics(metrics::Exposition& x) const override;
  cache::ApproxIndex& index() { return index_; }

 private:
  cache::ApproxIndex& index_;
};

}  // namespace ramjet::route
