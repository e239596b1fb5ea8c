// cache/events/kv_fleet: the exact inventories of the whole fleet. One Inventory and one
// Subscriber per engine that publishes KV events (engines without are absent: they only ever have
// the approximate index), by the engine's ordinal, or, for an engine whose state comes from
// elsewhere (a ramjet-companion: companion/client), that engine's InventorySource; the trust state
// and inventory source per engine for /health, and the metrics. What the inventories are worth to a
// routing decision is route's.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cache/events/inventory.h"
#include "cache/events/subscriber.h"
#include "metrics/metrics.h"

namespace ramjet::cache::events {

// An engine's inventory kept by something other than the engine's own KV events. Its readers'
// side is the Subscriber's: trusted() is null unless the inventory mirrors the engine right now.
class InventorySource {
 public:
  virtual ~InventorySource() = default;
  virtual void start() = 0;
  virtual void request_stop() = 0;  // returns at once
  virtual void stop() = 0;          // and joins
  virtual const Inventory* trusted() const = 0;
  virtual FenceMode mode() const = 0;
  virtual uint64_t generation() const = 0;  // bumped whenever the inventory starts again from empty
  virtual const UntrustedSince& untrusted() const = 0;
  // The inventory readers would get (for the index gauges), trusted or not; null when none.
  virtual const Inventory* current() const = 0;
  virtual std::string_view label() const = 0;  // "companion": the inventory label in /health, metrics
};

class KvFleet {
 public:
  // sources[i]: engine i's subscription, or nullopt when it publishes none; a subscription with
  // an empty live endpoint waits for set_endpoints (discovery). external[i], when given, replaces
  // engine i's subscription.
  KvFleet(std::vector<std::optional<SubscriberOptions>> sources, InventoryLimits limits,
          std::vector<std::unique_ptr<InventorySource>> external = {});
  ~KvFleet();

  void start();
  void stop();
  // A discovered engine's endpoints (upstream/engine_catalog.h; any thread): its subscriber moves
  // to them (nullopt: none, fenced). Ignored for an engine made without a subscription.
  void set_endpoints(size_t engine, std::optional<SubscriberOptions> endpoints);
  // The data-parallel rank engine slot `engine` follows (Inventory::set_rank); nullopt: any.
  void set_rank(size_t engine, std::optional<uint32_t> rank);

  size_t size() const { return engines_.size(); }
  bool enabled() const;  // at least one engine publishes
  // Whether the engine has an exact inventory at all (its events, or an external source).
  bool has_events(size_t engine) const { return engines_[engine] != nullptr || external_[engine] != nullptr; }
  // "events" (its own KV events), the source's label ("companion"), or "none".
  std::string_view inventory_label(size_t engine) const;
  // The engine's inventory while it mirrors the engine's cache; nullptr otherwise (no events,
  // fenced, replaying).
  const Inventory* trusted(size_t engine) const;
  FenceMode mode(size_t engine) const;
  uint64_t generation(size_t engine) const;
  // How long the engine's exact inventory has not been trusted (0 while it is; nullopt for an
  // engine without one): /health kv_untrusted_seconds and ramjet_kv_untrusted_seconds.
  std::optional<double> untrusted_seconds(size_t engine, int64_t now_ms) const;

  void write_metrics(metrics::Exposition& x) const;

 private:
  struct Engine {
    Inventory inventory;
    Subscriber subscriber;
    Engine(const SubscriberOptions& o, const InventoryLimits& l) : inventory(l), subscriber(o, inventory) {}
  };
  // Engine i is either subscribed (engines_[i]) or external (external_[i]), or neither.
  std::vector<std::unique_ptr<InventorySource>> external_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

// The families KvFleet::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> kv_families();

}  // namespace ramjet::cache::events
