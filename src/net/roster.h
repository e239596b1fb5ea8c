// net/roster: which engine sits behind each upstream ordinal, now. Ordinals are slots: a fixed
// number of them (RJ_UPSTREAM_MAX; the static RJ_UPSTREAM list fills the first), each vacant or
// held by one engine address. Engines discovered from DNS (upstream/membership.h) or brought by a
// configuration reload join a vacant slot and leave it again; every component that keeps
// per-engine state reads the slot here instead of a copy of the configuration, and compares the
// slot's incarnation with the one it saw last to know that a different engine now sits there.
//
// A slot is vacant (no member), active (routed, probed, scraped, subscribed) or leaving (removed
// from its source: no new requests; the ones in flight finish; then it is vacated). Reads are
// lock-free and may come from any thread; the writer is upstream::Membership on one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "config/config.h"

namespace ramjet::net {

struct Member {
  config::UpstreamUrl url;
  uint64_t incarnation = 0;  // unique per (slot, occupant): 1, 2, ... across the whole roster
  // The engine's data-parallel rank this slot targets (RJ_UPSTREAM_DP_SIZE): requests carry
  // X-Data-Parallel-Rank, the slot reads that rank's KV events and load. nullopt: the whole engine.
  std::optional<uint32_t> dp_rank{};
  // What the engine is (RJ_UPSTREAM_ENGINE): how a request names its rank (request/stream/rank_header.h, owned_body.h).
  config::EngineKind engine = config::EngineKind::kVllm;
  // Its part in prefill/decode disaggregation (RJ_UPSTREAM_ROLE).
  config::EngineRole role = config::EngineRole::kBoth;
};

enum class SlotState : uint8_t { kVacant, kActive, kLeaving };

class Roster {
 public:
  // `capacity` slots; the first urls.size() hold those engines (active, incarnations 1..n), with
  // their data-parallel ranks when `ranks` gives them (config::Config::upstream_ranks) and their
  // kinds when `engines` does.
  Roster(const std::vector<config::UpstreamUrl>& urls, size_t capacity,
         const std::vector<std::optional<uint32_t>>& ranks = {}, const std::vector<config::EngineKind>& engines = {},
         const std::vector<config::EngineRole>& roles = {});
  explicit Roster(const std::vector<config::UpstreamUrl>& urls) : Roster(urls, urls.size()) {}

  size_t capacity() const { return slots_.size(); }
  SlotState state(size_t i) const { return slots_[i].state.load(std::memory_order_acquire); }
  bool active(size_t i) const { return state(i) == SlotState::kActive; }
  bool listed(size_t i) const { return state(i) != SlotState::kVacant; }  // active or leaving
  // The slot's occupant (active or leaving), nullptr when vacant.
  std::shared_ptr<const Member> member(size_t i) const { return slots_[i].member.load(std::memory_order_acquire); }
  // 0 when vacant.
  uint64_t incarnation(size_t i) const {
    auto m = member(i);
    return m ? m->incarnation : 0;
  }
  size_t listed_count() const;
  // The other slots listed now with the same engine address (its other data-parallel ranks).
  std::vector<size_t> siblings(size_t i) const;
  size_t active_count() const;

  // The writer (one thread at a time). join() takes a vacant slot; leave() marks an active one
  // leaving; rejoin() makes a leaving one active again (the same engine came back before it was
  // vacated); vacate() empties a slot; set_engine() says the occupant is another kind of engine
  // or plays another part (a reload corrected RJ_UPSTREAM_ENGINE or RJ_UPSTREAM_ROLE): the same engine, incarnation and rank.
  uint64_t join(size_t i, config::UpstreamUrl url, std::optional<uint32_t> dp_rank = std::nullopt,
                config::EngineKind engine = config::EngineKind::kVllm, config::EngineRole role = config::EngineRole::kBoth);
  void set_engine(size_t i, config::EngineKind engine, config::EngineRole role = config::EngineRole::kBoth);
  void leave(size_t i);
  void rejoin(size_t i);
  void vacate(size_t i);

 private:
  struct Slot {
    std::atomic<SlotState> state{SlotState::kVacant};
    std::atomic<std::shared_ptr<const Member>> member;
  };
  std::vector<Slot> slots_;
  uint64_t next_incarnation_ = 1;
};

// A component's roster: the shared one when given, else a fixed one of its own made from `urls`
// (unit tests, the one-shot tools).
class RosterRef {
 public:
  RosterRef(const Roster* shared, const std::vector<config::UpstreamUrl>& urls)
      : own_(shared ? nullptr : std::make_unique<Roster>(urls)), roster_(shared ? shared : own_.get()) {}
  const Roster& operator*() const { return *roster_; }
  const Roster* operator->() const { return roster_; }

 private:
  std::unique_ptr<Roster> own_;
  const Roster* roster_;
};

}  // namespace ramjet::net
