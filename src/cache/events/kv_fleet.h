// cache/events/kv_fleet: the exact inventories of the whole fleet. One Inventory and one
// Subscriber per engine that publishes KV events (engines without are absent: they only ever have
// the approximate index), by the engine's ordinal; the trust state per engine for /health, and the
// metrics. What the inventories are worth to a routing decision is route's.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cache/events/inventory.h"
#include "cache/events/subscriber.h"
#include "metrics/metrics.h"

namespace ramjet::cache::events {

class KvFleet {
 public:
  // sources[i]: engine i's subscription, or nullopt when it publishes none; a subscription with
  // an empty live endpoint waits for set_endpoints (discovery).
  KvFleet(std::vector<std::optional<SubscriberOptions>> sources, InventoryLimits limits);
  ~KvFleet();

  void start();
  void stop();
  // A discovered engine's endpoints (upstream/engine_catalog.h; any thread): its subscriber moves
  // to them (nullopt: none, fenced). Ignored for an engine made without a subscription.
  void set_endpoints(size_t engine, std::optional<SubscriberOptions> endpoints);

  size_t size() const { return engines_.size(); }
  bool enabled() const;  // at least one engine publishes
  bool has_events(size_t engine) const { return engines_[engine] != nullptr; }
  // The engine's inventory while it mirrors the engine's cache; nullptr otherwise (no events,
  // fenced, replaying).
  const Inventory* trusted(size_t engine) const;
  FenceMode mode(size_t engine) const;
  uint64_t generation(size_t engine) const;

  void write_metrics(metrics::Exposition& x) const;

 private:
  struct Engine {
    Inventory inventory;
    Subscriber subscriber;
    Engine(const SubscriberOptions& o, const InventoryLimits& l) : inventory(l), subscriber(o, inventory) {}
  };
  std::vector<std::unique_ptr<Engine>> engines_;
};

// The families KvFleet::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> kv_families();

}  // namespace ramjet::cache::events
