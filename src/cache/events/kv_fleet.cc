#include "cache/events/kv_fleet.h"

#include <array>
#include <string>

namespace ramjet::cache::events {

namespace {

using metrics::Family;
using metrics::MetricKind;

enum class F {
  kState, kGeneration, kTransitions, kBatches, kBadFrames, kDecodeErrors, kIndexErrors, kSkipped,
  kBlocksApplied, kIndexBlocks, kIndexResident, kIndexBytes, kCount
};

constexpr std::array<Family, static_cast<size_t>(F::kCount)> kFamilies = {{
    {"ramjet_kv_state", MetricKind::kGauge, "upstream,state",
     "1 for the engine's KV-event trust state: trusted (the exact index mirrors its cache), "
     "replaying (fetching missed batches), fenced (not used until a replay or a cache clear makes it "
     "whole). Engines without KV events have no series."},
    {"ramjet_kv_generation", MetricKind::kGauge, "upstream",
     "Times the engine's exact index was started again from empty (fence, restart, clear)."},
    {"ramjet_kv_fence_transitions_total", MetricKind::kCounter, "upstream,event",
     "Sequence-fence events: first_batch_trusted, full_replay, gap_replay, replay_done, replay_failed, "
     "gap_too_large, hold_overflow, restart, cleared, disconnect, index_error."},
    {"ramjet_kv_batches_total", MetricKind::kCounter, "upstream,source",
     "KV-event batches received: live (the SUB socket) or replay."},
    {"ramjet_kv_bad_frames_total", MetricKind::kCounter, "upstream",
     "Messages with the wrong frame count, topic or sequence width (ignored)."},
    {"ramjet_kv_decode_errors_total", MetricKind::kCounter, "upstream",
     "Batches the bounded MessagePack decoder refused (the engine's index is fenced)."},
    {"ramjet_kv_index_errors_total", MetricKind::kCounter, "upstream",
     "Batches the exact index could not follow: a conflicting block or a full index (fenced)."},
    {"ramjet_kv_events_skipped_total", MetricKind::kCounter, "upstream,reason",
     "Blocks of events that say nothing about the GPU prefix cache a request can hit, by reason: "
     "unsupported_medium, non_local, non_main_attention, unknown_kind, unknown_group, extra_keys, "
     "block_size_mismatch, shape, orphaned_parent, unknown_removal."},
    {"ramjet_kv_blocks_applied_total", MetricKind::kCounter, "upstream,op",
     "Blocks applied to the exact index: op stored or removed (one per copy)."},
    {"ramjet_kv_index_blocks", MetricKind::kGauge, "upstream",
     "Blocks in the engine's exact index (resident ones and those kept for a resident child)."},
    {"ramjet_kv_index_resident_blocks", MetricKind::kGauge, "upstream",
     "Blocks the engine reports resident in its GPU prefix cache."},
    {"ramjet_kv_index_bytes", MetricKind::kGauge, "upstream",
     "Bytes the engine's exact index reserved (RJ_KV_INDEX_MAX_BLOCKS; pages are touched as it fills)."},
}};

const Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }

constexpr std::array kModes = {FenceMode::kTrusted, FenceMode::kReplaying, FenceMode::kFenced};

}  // namespace

std::span<const metrics::Family> kv_families() { return kFamilies; }

KvFleet::KvFleet(std::vector<std::optional<SubscriberOptions>> sources, InventoryLimits limits) {
  for (auto& s : sources) engines_.push_back(s ? std::make_unique<Engine>(*s, limits) : nullptr);
}

KvFleet::~KvFleet() { stop(); }

void KvFleet::start() {
  for (auto& e : engines_) {
    if (e) e->subscriber.start();
  }
}

void KvFleet::stop() {
  for (auto& e : engines_) {  // every thread told first, so they end together
    if (e) e->subscriber.request_stop();
  }
  for (auto& e : engines_) {
    if (e) e->subscriber.stop();
  }
}

void KvFleet::set_endpoints(size_t engine, std::optional<SubscriberOptions> endpoints) {
  if (engine >= engines_.size() || !engines_[engine]) return;
  if (endpoints) {
    engines_[engine]->subscriber.set_endpoints(endpoints->live_endpoint, endpoints->replay_endpoint, endpoints->topic);
  } else {
    engines_[engine]->subscriber.set_endpoints({}, {}, {});
  }
}

bool KvFleet::enabled() const {
  for (const auto& e : engines_) {
    if (e) return true;
  }
  return false;
}

const Inventory* KvFleet::trusted(size_t engine) const {
  const auto& e = engines_[engine];
  return e && e->subscriber.trusted() ? &e->inventory : nullptr;
}

FenceMode KvFleet::mode(size_t engine) const {
  return engines_[engine] ? engines_[engine]->subscriber.mode() : FenceMode::kFenced;
}

uint64_t KvFleet::generation(size_t engine) const {
  return engines_[engine] ? engines_[engine]->subscriber.generation() : 0;
}

void KvFleet::write_metrics(metrics::Exposition& x) const {
  auto up = [](size_t i) { return "upstream=\"" + std::to_string(i) + "\""; };
  auto each = [&](F f, auto value) {
    x.family(fam(f));
    for (size_t i = 0; i < engines_.size(); ++i) {
      if (engines_[i]) x.sample(fam(f).name, up(i), value(*engines_[i]));
    }
  };
  auto by = [&](F f, std::string_view key, size_t count, auto label, auto value) {
    x.family(fam(f));
    for (size_t i = 0; i < engines_.size(); ++i) {
      if (!engines_[i]) continue;
      for (size_t r = 0; r < count; ++r) {
        x.sample(fam(f).name, up(i) + "," + std::string(key) + "=\"" + std::string(label(r)) + "\"",
                 value(*engines_[i], r));
      }
    }
  };
  by(F::kState, "state", kModes.size(), [](size_t r) { return label(kModes[r]); },
     [](const Engine& e, size_t r) { return int64_t{e.subscriber.mode() == kModes[r] ? 1 : 0}; });
  each(F::kGeneration, [](const Engine& e) { return e.subscriber.generation(); });
  // Every event but kNone.
  by(F::kTransitions, "event", static_cast<size_t>(FenceEvent::kCount_) - 1,
     [](size_t r) { return label(static_cast<FenceEvent>(r + 1)); },
     [](const Engine& e, size_t r) { return e.subscriber.stats().transitions[r + 1].load(std::memory_order_relaxed); });
  by(F::kBatches, "source", 2, [](size_t r) { return r == 0 ? "live" : "replay"; },
     [](const Engine& e, size_t r) {
       return (r == 0 ? e.subscriber.stats().batches : e.subscriber.stats().replayed).load(std::memory_order_relaxed);
     });
  each(F::kBadFrames, [](const Engine& e) { return e.subscriber.stats().bad_frames.load(std::memory_order_relaxed); });
  each(F::kDecodeErrors, [](const Engine& e) { return e.subscriber.stats().decode_errors.load(std::memory_order_relaxed); });
  each(F::kIndexErrors, [](const Engine& e) { return e.subscriber.stats().index_errors.load(std::memory_order_relaxed); });
  by(F::kSkipped, "reason", static_cast<size_t>(Skip::kCount_), [](size_t r) { return label(static_cast<Skip>(r)); },
     [](const Engine& e, size_t r) { return e.inventory.skipped(static_cast<Skip>(r)); });
  by(F::kBlocksApplied, "op", 2, [](size_t r) { return r == 0 ? "stored" : "removed"; },
     [](const Engine& e, size_t r) {
       return (r == 0 ? e.subscriber.stats().blocks_stored : e.subscriber.stats().blocks_removed).load(std::memory_order_relaxed);
     });
  each(F::kIndexBlocks, [](const Engine& e) { return uint64_t{e.inventory.shard().blocks()}; });
  each(F::kIndexResident, [](const Engine& e) { return uint64_t{e.inventory.shard().resident_blocks()}; });
  each(F::kIndexBytes, [](const Engine& e) { return uint64_t{e.inventory.shard().table_bytes()}; });
}

}  // namespace ramjet::cache::events
