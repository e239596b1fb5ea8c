// request/route/exact_overlap: the exact overlap source. For a request whose prompt tokens
// request/stream got (PreparedRequest::exact), every engine's trusted exact inventory
// (cache/events) is looked up; resident tokens become overlap blocks on the approximate index's
// scale (ceil(tokens * fingerprint blocks / prompt tokens)), so the policy's affinity, cap and
// load terms weigh them the same way. It answers only when every healthy engine's inventory is
// trusted (one fenced engine would be compared on another scale) and declines otherwise, so the
// approximate index answers instead. In shadow mode it computes the same and always declines:
// the router records whether the approximate choice agreed.
#pragma once

#include <atomic>
#include <string_view>

#include "cache/events/kv_fleet.h"
#include "request/route/overlap.h"
#include "request/route/prediction_check.h"

namespace ramjet::upstream {
class Fleet;
}

namespace ramjet::route {

enum class ExactMode : uint8_t { kOff, kShadow, kOn };

class ExactOverlap final : public OverlapSource {
 public:
  // `check` (optional) withdraws engines whose predictions keep missing.
  ExactOverlap(const cache::events::KvFleet& kv, const upstream::Fleet& fleet, ExactMode mode,
               const PredictionCheck* check = nullptr)
      : kv_(kv), fleet_(fleet), mode_(mode), check_(check) {}
  std::string_view name() const override { return "exact"; }
  ExactMode mode() const { return mode_; }
  bool overlaps(const request::PreparedRequest& req, std::span<uint32_t> out, OverlapNote& note) const override;
  void served(size_t, const request::PreparedRequest&) override {}  // the engines' events teach it
  void write_metrics(metrics::Exposition&) const override {}        // the router counts outcomes

  // Blocks on the approximate scale for `tokens` resident of a `prompt_tokens` prompt that has
  // `blocks` fingerprint blocks (rounded up: a hit of any size is worth something).
  static uint32_t units(uint64_t tokens, uint64_t prompt_tokens, uint64_t blocks);

 private:
  const cache::events::KvFleet& kv_;
  const upstream::Fleet& fleet_;
  ExactMode mode_;
  const PredictionCheck* check_;
};

}  // namespace ramjet::route
