#include "cache/events/kv_fleet.h"

#include <algorithm>
#include <array>
#include <string>

namespace ramjet::cache::events {

namespace {

using metrics::Family;
using metrics::MetricKind;

enum class F {
  kState, kGeneration, kTransitions, kBatches, kBadFrames, kDecodeErrors, kIndexErrors, kSkipped,
  kBlocksApplied, kTierBlocks, kIndexBlocks, kIndexResident, kIndexTierResident, kIndexBytes, kSource, kUntrusted, kCount
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
     "gap_too_large, hold_overflow, restart, cleared, disconnect, index_error, retry (a fenced "
     "engine's full replay tried again on a backoff: 1 s, doubling to 60 s)."},
    {"ramjet_kv_batches_total", MetricKind::kCounter, "upstream,source",
     "KV-event batches received: live (the SUB socket) or replay."},
    {"ramjet_kv_bad_frames_total", MetricKind::kCounter, "upstream",
     "Messages with the wrong frame count, topic or sequence width (ignored)."},
    {"ramjet_kv_decode_errors_total", MetricKind::kCounter, "upstream",
     "Batches the bounded MessagePack decoder refused (the engine's index is fenced)."},
    {"ramjet_kv_index_errors_total", MetricKind::kCounter, "upstream",
     "Batches the exact index could not follow: a conflicting block or a full index (fenced)."},
    {"ramjet_kv_events_skipped_total", MetricKind::kCounter, "upstream,reason",
     "Blocks of events that say nothing about the prefix a request can hit, by reason: "
     "unsupported_medium (a medium this build does not know; CPU and storage tiers in a "
     "companion's inventory, whose snapshots carry GPU copies only), non_local, non_main_attention, unknown_kind, unknown_group, extra_keys, "
     "block_size_mismatch (also an offload tier whose block spans several GPU blocks), shape, "
     "orphaned_parent, unknown_removal, other_rank (a batch of another data-parallel rank than the "
     "ordinal's), unknown_block (an offload tier's hash-only store of a block the index does not hold)."},
    {"ramjet_kv_blocks_applied_total", MetricKind::kCounter, "upstream,op",
     "Blocks applied to the exact index: op stored or removed (one per copy)."},
    {"ramjet_kv_tier_blocks_total", MetricKind::kCounter, "upstream,tier,op",
     "Blocks applied to the exact index by tier (gpu; cpu and disk: vLLM's offloading connector, "
     "medium CPU, STORAGE, FS or OBJ): op stored or removed (one per copy)."},
    {"ramjet_kv_index_blocks", MetricKind::kGauge, "upstream",
     "Blocks in the engine's exact index (resident ones and those kept for a resident child)."},
    {"ramjet_kv_index_resident_blocks", MetricKind::kGauge, "upstream",
     "Blocks the engine reports resident in its prefix cache, any tier."},
    {"ramjet_kv_index_tier_resident_blocks", MetricKind::kGauge, "upstream,tier",
     "Blocks the engine reports resident by tier: gpu (its prefix cache), cpu and disk (offload tiers)."},
    {"ramjet_kv_index_bytes", MetricKind::kGauge, "upstream",
     "Bytes the engine's exact index reserved (RJ_KV_INDEX_MAX_BLOCKS; pages are touched as it fills)."},
    {"ramjet_kv_inventory_source", MetricKind::kGauge, "upstream,source",
     "1 for where the engine's exact index comes from: events (its own KV events) or companion (a "
     "ramjet-companion's snapshot and tail, RJ_EXACT_INVENTORY=companion)."},
    {"ramjet_kv_untrusted_seconds", MetricKind::kGauge, "upstream",
     "Seconds since the engine's exact index was last trusted (since start when it never was; 0 "
     "while it is). Exact routing places that engine on its fingerprint estimate meanwhile; alert "
     "when it stays above a few minutes (an engine whose events cannot be read stays fenced until "
     "its cache clears)."},
}};

const Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }

constexpr std::array kModes = {FenceMode::kTrusted, FenceMode::kReplaying, FenceMode::kFenced};

}  // namespace

std::span<const metrics::Family> kv_families() { return kFamilies; }

KvFleet::KvFleet(std::vector<std::optional<SubscriberOptions>> sources, InventoryLimits limits,
                 std::vector<std::unique_ptr<InventorySource>> external)
    : external_(std::move(external)) {
  external_.resize(std::max(external_.size(), sources.size()));
  sources.resize(external_.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    engines_.push_back(sources[i] && !external_[i] ? std::make_unique<Engine>(*sources[i], limits) : nullptr);
  }
}

KvFleet::~KvFleet() { stop(); }

void KvFleet::start() {
  for (auto& e : engines_) {
    if (e) e->subscriber.start();
  }
  for (auto& x : external_) {
    if (x) x->start();
  }
}

void KvFleet::stop() {
  for (auto& e : engines_) {  // every thread told first, so they end together
    if (e) e->subscriber.request_stop();
  }
  for (auto& x : external_) {
    if (x) x->request_stop();
  }
  for (auto& e : engines_) {
    if (e) e->subscriber.stop();
  }
  for (auto& x : external_) {
    if (x) x->stop();
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

void KvFleet::set_rank(size_t engine, std::optional<uint32_t> rank) {
  if (engine >= engines_.size() || !engines_[engine]) return;
  engines_[engine]->inventory.set_rank(rank);
}

bool KvFleet::enabled() const {
  for (size_t i = 0; i < engines_.size(); ++i) {
    if (has_events(i)) return true;
  }
  return false;
}

std::string_view KvFleet::inventory_label(size_t engine) const {
  if (external_[engine]) return external_[engine]->label();
  return engines_[engine] ? "events" : "none";
}

const Inventory* KvFleet::trusted(size_t engine) const {
  if (external_[engine]) return external_[engine]->trusted();
  const auto& e = engines_[engine];
  return e && e->subscriber.trusted() ? &e->inventory : nullptr;
}

FenceMode KvFleet::mode(size_t engine) const {
  if (external_[engine]) return external_[engine]->mode();
  return engines_[engine] ? engines_[engine]->subscriber.mode() : FenceMode::kFenced;
}

uint64_t KvFleet::generation(size_t engine) const {
  if (external_[engine]) return external_[engine]->generation();
  return engines_[engine] ? engines_[engine]->subscriber.generation() : 0;
}

std::optional<double> KvFleet::untrusted_seconds(size_t engine, int64_t now_ms) const {
  if (!has_events(engine)) return std::nullopt;
  const int64_t since = external_[engine] ? external_[engine]->untrusted().since_ms()
                                          : engines_[engine]->subscriber.untrusted().since_ms();
  return since == UntrustedSince::kTrusted ? 0.0 : static_cast<double>(std::max<int64_t>(0, now_ms - since)) / 1000.0;
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
  // Every engine with an inventory, subscribed or external.
  auto all = [&](F f, std::string_view key, size_t count, auto label, auto value) {
    x.family(fam(f));
    for (size_t i = 0; i < engines_.size(); ++i) {
      if (!has_events(i)) continue;
      for (size_t r = 0; r < count; ++r) {
        std::string labels = up(i);
        if (!key.empty()) labels += "," + std::string(key) + "=\"" + std::string(label(r)) + "\"";
        x.sample(fam(f).name, labels, value(i, r));
      }
    }
  };
  auto gauge = [&](F f, auto value) {  // of the inventory readers would get (0 when none)
    all(f, {}, 1, [](size_t) { return ""; }, [&](size_t i, size_t) -> uint64_t {
      const Inventory* inv = external_[i] ? external_[i]->current() : &engines_[i]->inventory;
      return inv ? value(*inv) : 0;
    });
  };
  all(F::kState, "state", kModes.size(), [](size_t r) { return label(kModes[r]); },
      [&](size_t i, size_t r) { return int64_t{mode(i) == kModes[r] ? 1 : 0}; });
  all(F::kGeneration, {}, 1, [](size_t) { return ""; }, [&](size_t i, size_t) { return generation(i); });
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
  x.family(fam(F::kTierBlocks));
  for (size_t i = 0; i < engines_.size(); ++i) {
    if (!engines_[i]) continue;
    const SubscriberStats& s = engines_[i]->subscriber.stats();
    for (size_t t = 0; t < kTiers; ++t) {
      const std::string tier = up(i) + ",tier=\"" + std::string(label(static_cast<Tier>(t))) + "\",op=";
      x.sample(fam(F::kTierBlocks).name, tier + "\"stored\"", s.tier_blocks_stored[t].load(std::memory_order_relaxed));
      x.sample(fam(F::kTierBlocks).name, tier + "\"removed\"", s.tier_blocks_removed[t].load(std::memory_order_relaxed));
    }
  }
  gauge(F::kIndexBlocks, [](const Inventory& inv) { return uint64_t{inv.shard().blocks()}; });
  gauge(F::kIndexResident, [](const Inventory& inv) { return uint64_t{inv.shard().resident_blocks()}; });
  all(F::kIndexTierResident, "tier", kTiers, [](size_t r) { return label(static_cast<Tier>(r)); },
      [&](size_t i, size_t r) -> uint64_t {
        const Inventory* inv = external_[i] ? external_[i]->current() : &engines_[i]->inventory;
        return inv ? uint64_t{inv->shard().resident_blocks(static_cast<Tier>(r))} : 0;
      });
  gauge(F::kIndexBytes, [](const Inventory& inv) { return uint64_t{inv.shard().table_bytes()}; });
  all(F::kSource, "source", 2, [](size_t r) { return r == 0 ? "events" : "companion"; },
      [&](size_t i, size_t r) { return int64_t{(inventory_label(i) == "events") == (r == 0) ? 1 : 0}; });
  const int64_t now = SteadyClock::instance().now_ms();
  all(F::kUntrusted, {}, 1, [](size_t) { return ""; },
      [&](size_t i, size_t) { return untrusted_seconds(i, now).value_or(0.0); });
}

}  // namespace ramjet::cache::events
