// upstream/membership: which engines are in the fleet, changing at runtime. Sources list engines
// (source 0: the static RJ_UPSTREAM list, replaced by a configuration reload; sources 1..: the
// RJ_UPSTREAM_DNS names, each re-resolved on an interval by upstream/dns.h); Membership turns
// their lists into slots of the roster (net/roster.h):
//   - a new engine joins a vacant slot: the one it held before if that is still free (an engine
//     that comes back keeps its ordinal), else a never-used one, else the one vacated longest
//     ago — an ordinal is never reused while the engine that left it still has requests or
//     series; it starts fenced and must pass the probes and the readiness gate;
//   - an engine no source lists any more leaves: no new requests; the ones in flight finish;
//     then its slot is vacated and the owner frees what it kept for it (index, KV subscriber,
//     pooled connections are dropped by incarnation);
//   - an engine listed again before it was vacated simply stays.
// All calls on one thread (the app's io.at(0)); the roster is read lock-free by everyone else.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/config.h"
#include "metrics/metrics.h"
#include "net/roster.h"
#include "upstream/fleet.h"

namespace ramjet::upstream {

struct Listed {
  config::UpstreamUrl url;
  std::string profile{};  // RJ_UPSTREAM_PROFILES item for its source ("" = none)
  std::string models{};   // RJ_UPSTREAM_MODELS item for its source ("" = its own /v1/models)
  // Its source's RJ_KV_EVENT_LIVE/REPLAY_ENDPOINTS items ("" or "-": none; "discover"; an
  // endpoint, "tcp://*:port" meaning the engine's own address).
  std::string kv_live{}, kv_replay{};
  // Data parallel (RJ_UPSTREAM_DP_SIZE): an engine listed with dp_size N > 1 and no rank stands for
  // its N ranks; update() lists them as N engines (ranks 0..N-1, the same address, KV-endpoint
  // items offset by the rank as vLLM offsets its publishers' ports) that join together (all, or
  // none while fewer ordinals are free) and leave together.
  uint32_t dp_size = 1;
  std::optional<uint32_t> dp_rank{};
  // RJ_UPSTREAM_DP_SIZE=auto: dp_size is what the engine reports (Membership::discovered_ranks).
  bool dp_auto = false;
  config::EngineKind engine = config::EngineKind::kVllm;  // RJ_UPSTREAM_ENGINE item for its source
  config::EngineRole role = config::EngineRole::kBoth;    // RJ_UPSTREAM_ROLE item for its source
};

// `l` as its ranks (itself when it has a rank or dp_size <= 1).
std::vector<Listed> ranks_of(const Listed& l);

// The families Membership::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> membership_families();

class Membership {
 public:
  struct Hooks {
    std::function<void(size_t slot, const Listed&)> joined{};   // after the roster and fleet took it
    // A listed engine's profile, models or KV items changed (its kind and role change in the roster alone).
    std::function<void(size_t slot, const Listed&)> changed{};
    std::function<void(size_t slot)> vacated{};                 // after the slot was emptied
  };
  // `sources`: how many sources there are (1 + DNS names). The roster's occupied slots are the
  // static list's engines (source 0), as made from RJ_UPSTREAM.
  // `initial`: source 0's engines, already in slots 0.. of the roster (made from RJ_UPSTREAM).
  Membership(net::Roster& roster, Fleet& fleet, size_t sources, const std::vector<Listed>& initial, Hooks hooks);

  // Source `source` now lists exactly `engines` (duplicates count once; ranks_of each).
  void update(size_t source, const std::vector<Listed>& engines);
  // Vacates leaving slots with nothing in flight; call on an interval.
  void sweep();
  // The engine at `url` reports `ranks` data-parallel ranks (its /metrics: the engine scrape).
  // Where a source lists it with RJ_UPSTREAM_DP_SIZE=auto, it is listed again with that many
  // targets (its ranks join together, the single target or the old ranks leave); otherwise, or
  // when the count did not change, nothing happens.
  void discovered_ranks(const config::UpstreamUrl& url, uint32_t ranks);

  // Addresses ever rejected (each counted once while it stays rejected), and rejected now.
  uint64_t rejected() const { return rejected_.load(std::memory_order_relaxed); }
  uint64_t rejected_now() const { return rejected_now_.load(std::memory_order_relaxed); }
  // A configuration reload (RJ_CONFIG_FILE on SIGHUP) was applied, or refused as invalid.
  void count_reload(bool applied) { (applied ? reloads_applied_ : reloads_invalid_).fetch_add(1, std::memory_order_relaxed); }
  void write_metrics(metrics::Exposition& x) const;

 private:
  struct Entry {
    size_t slot = 0;
    std::vector<bool> sources;  // which sources list it
    Listed listed;              // as its source last listed it
  };
  static std::string key(const config::UpstreamUrl& u);                   // the engine
  static std::string key(const config::UpstreamUrl& u, std::optional<uint32_t> rank);  // one target
  bool place(const std::string& k, const Listed& l, size_t& slot);
  void leave(const std::string& k, Entry& e);

  net::Roster& roster_;
  Fleet& fleet_;
  size_t sources_;
  Hooks hooks_;
  std::map<std::string, Entry> entries_;   // listed engines (active or leaving), by address
  // Listed addresses that got no ordinal, by address: which sources list them. A source that
  // lists them again is not a new rejection (no counter, no log line): only changes are.
  std::map<std::string, std::vector<bool>> rejected_by_;
  void note_rejections(size_t source, const std::map<std::string, const Listed*>& now);
  std::vector<std::vector<Listed>> listed_;  // per source: what it listed last
  std::map<std::string, uint32_t> discovered_;  // per engine (key(url)): the ranks it reports
  std::map<std::string, uint32_t> refused_;     // per engine: a report that did not fit (logged once)
  void forget_unlisted_auto();
  std::vector<size_t> auto_sources(const std::string& k) const;  // the sources listing engine k with auto
  std::vector<std::string> last_key_;      // per slot: the address that held it last
  std::vector<uint64_t> vacated_at_;       // per slot: order of vacating (0 = never used)
  uint64_t vacate_seq_ = 0;
  // Read by the metrics listener's thread.
  std::atomic<uint64_t> joins_{0}, leaves_{0}, rejoins_{0}, vacates_{0}, rejected_{0}, rejected_now_{0};
  std::atomic<uint64_t> reloads_applied_{0}, reloads_invalid_{0};
};

}  // namespace ramjet::upstream
