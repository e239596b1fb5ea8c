#include "upstream/membership.h"

#include <array>
#include <utility>

#include "common/log.h"

namespace ramjet::upstream {

namespace {

using metrics::Family;
using metrics::MetricKind;

constexpr std::array<Family, 4> kFamilies = {{
    {"ramjet_upstream_members", MetricKind::kGauge, "state",
     "Engines in the fleet by membership state: active (routed, probed) or leaving (no longer "
     "listed by RJ_UPSTREAM or its DNS name; its requests in flight finish, then its ordinal is "
     "freed)."},
    {"ramjet_upstream_membership_changes_total", MetricKind::kCounter, "change",
     "Membership changes: joined (a new engine took an ordinal; it starts fenced), leaving (no "
     "source lists it), rejoined (listed again before it left), vacated (its ordinal was freed), "
     "rejected (an address listed with no free ordinal: RJ_UPSTREAM_MAX engines are already "
     "listed; counted once while it stays listed and rejected)."},
    {"ramjet_upstream_rejected_addresses", MetricKind::kGauge, "",
     "Engine addresses listed now (RJ_UPSTREAM, its DNS names) that have no ordinal because "
     "RJ_UPSTREAM_MAX are in use: raise RJ_UPSTREAM_MAX, or list fewer. The log says when it changes."},
    {"ramjet_config_reloads_total", MetricKind::kCounter, "outcome",
     "SIGHUP configuration reloads (RJ_CONFIG_FILE): applied (the new engine list and weights are in "
     "use), invalid (a problem in the new configuration: the running one stays; the log says what)."},
}};

}  // namespace

std::span<const metrics::Family> membership_families() { return kFamilies; }

// One engine per address: a static entry and a DNS answer naming the same ip:port are one engine.
std::string Membership::key(const config::UpstreamUrl& u) {
  return (u.tls ? "https://" : "http://") + u.host + "|" + std::to_string(u.port) + "|" + u.base_path;
}

std::string Membership::key(const config::UpstreamUrl& u, std::optional<uint32_t> rank) {
  return rank ? key(u) + "|dp" + std::to_string(*rank) : key(u);
}

std::vector<Listed> ranks_of(const Listed& l) {
  if (l.dp_rank || l.dp_size <= 1) return {l};
  std::vector<Listed> out;
  for (uint32_t k = 0; k < l.dp_size; ++k) {
    Listed r = l;
    r.dp_rank = k;
    r.kv_live = config::offset_endpoint(l.kv_live, k);
    r.kv_replay = config::offset_endpoint(l.kv_replay, k);
    out.push_back(std::move(r));
  }
  return out;
}

Membership::Membership(net::Roster& roster, Fleet& fleet, size_t sources, const std::vector<Listed>& initial,
                       Hooks hooks)
    : roster_(roster),
      fleet_(fleet),
      sources_(sources),
      hooks_(std::move(hooks)),
      listed_(sources),
      last_key_(roster.capacity()),
      vacated_at_(roster.capacity(), 0) {
  for (size_t i = 0; i < initial.size() && i < roster.capacity(); ++i) {
    const std::string k = key(initial[i].url, initial[i].dp_rank);
    Entry& e = entries_[k];
    e.slot = i;
    e.sources.assign(sources_, false);
    e.sources[0] = true;
    e.listed = initial[i];
    last_key_[i] = k;                // a static engine that leaves and comes back gets it again
    vacated_at_[i] = ++vacate_seq_;  // used
  }
  if (!listed_.empty()) listed_[0] = initial;
}

bool Membership::place(const std::string& k, const Listed& l, size_t& slot) {
  const size_t n = roster_.capacity();
  size_t never = n, oldest = n, same = n;
  for (size_t i = 0; i < n; ++i) {
    if (roster_.listed(i)) continue;
    if (last_key_[i] == k) same = i;
    if (vacated_at_[i] == 0) {
      if (never == n) never = i;
    } else if (oldest == n || vacated_at_[i] < vacated_at_[oldest]) {
      oldest = i;
    }
  }
  slot = same != n ? same : never != n ? never : oldest;
  if (slot == n) return false;
  roster_.join(slot, l.url, l.dp_rank, l.engine, l.role);
  fleet_.join(slot);
  vacated_at_[slot] = ++vacate_seq_;  // used (a later vacate stamps it again)
  last_key_[slot] = k;
  return true;
}

void Membership::leave(const std::string&, Entry& e) {
  if (!roster_.active(e.slot)) return;
  roster_.leave(e.slot);
  fleet_.leave(e.slot);
  ++leaves_;
}

void Membership::update(size_t source, const std::vector<Listed>& listed) {
  if (source >= sources_) return;
  if (&listed != &listed_[source]) listed_[source] = listed;
  std::vector<Listed> engines;
  for (const Listed& l : listed) {
    if (l.dp_auto && !l.dp_rank) {  // as many ranks as the engine reported (one target until then)
      const auto it = discovered_.find(key(l.url));
      Listed sized = l;
      sized.dp_size = it != discovered_.end() ? it->second : 1;
      for (Listed& r : ranks_of(sized)) engines.push_back(std::move(r));
      continue;
    }
    for (Listed& r : ranks_of(l)) engines.push_back(std::move(r));
  }
  std::map<std::string, const Listed*> now;
  for (const Listed& l : engines) now.emplace(key(l.url, l.dp_rank), &l);
  for (auto& [k, e] : entries_) {
    if (!e.sources[source] || now.count(k)) continue;
    e.sources[source] = false;
    bool listed_now = false;
    for (bool b : e.sources) listed_now = listed_now || b;
    if (!listed_now) leave(k, e);
  }
  // New targets, by engine: an engine's new ranks join together or not at all.
  std::map<std::string, std::vector<std::pair<std::string, const Listed*>>> fresh;
  for (const auto& [k, l] : now) {
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      Entry& e = it->second;
      e.sources[source] = true;
      if (roster_.state(e.slot) == net::SlotState::kLeaving) {
        roster_.rejoin(e.slot);
        fleet_.rejoin(e.slot);
        ++rejoins_;
      }
      if (l->engine != e.listed.engine || l->role != e.listed.role) {
        e.listed.engine = l->engine;
        e.listed.role = l->role;
        roster_.set_engine(e.slot, l->engine, l->role);
      }
      if (l->profile != e.listed.profile || l->models != e.listed.models || l->kv_live != e.listed.kv_live ||
          l->kv_replay != e.listed.kv_replay) {
        e.listed.profile = l->profile;
        e.listed.models = l->models;
        e.listed.kv_live = l->kv_live;
        e.listed.kv_replay = l->kv_replay;
        if (hooks_.changed) hooks_.changed(e.slot, e.listed);
      }
      continue;
    }
    fresh[key(l->url)].emplace_back(k, l);
  }
  for (const auto& [engine, targets] : fresh) {
    const size_t vacant = roster_.capacity() - roster_.listed_count();
    for (const auto& [k, l] : targets) {
      size_t slot = 0;
      if (vacant < targets.size() || !place(k, *l, slot)) {
        auto [it, added] = rejected_by_.try_emplace(k, std::vector<bool>(sources_, false));
        if (added) ++rejected_;
        it->second[source] = true;
        continue;
      }
      rejected_by_.erase(k);  // listed again with room for it
      ++joins_;
      Entry& e = entries_[k];
      e.slot = slot;
      e.sources.assign(sources_, false);
      e.sources[source] = true;
      e.listed = *l;
      if (hooks_.joined) hooks_.joined(slot, *l);
    }
  }
  note_rejections(source, now);
  forget_unlisted_auto();
}

// What an address reported is forgotten once no source lists it with auto (a DNS address that
// comes back later, perhaps another engine, starts as one target again).
void Membership::forget_unlisted_auto() {
  for (auto* m : {&discovered_, &refused_}) {
    for (auto it = m->begin(); it != m->end();) it = auto_sources(it->first).empty() ? m->erase(it) : std::next(it);
  }
}

std::vector<size_t> Membership::auto_sources(const std::string& k) const {
  std::vector<size_t> out;
  for (size_t s = 0; s < listed_.size(); ++s) {
    for (const Listed& l : listed_[s]) {
      if (l.dp_auto && !l.dp_rank && key(l.url) == k) {
        out.push_back(s);
        break;
      }
    }
  }
  return out;
}

void Membership::discovered_ranks(const config::UpstreamUrl& url, uint32_t ranks) {
  if (ranks == 0 || ranks > 1024) return;
  const std::string k = key(url);
  const std::vector<size_t> sources = auto_sources(k);
  if (sources.empty()) return;
  const auto known = discovered_.find(k);
  const uint32_t was = known != discovered_.end() ? known->second : 1;
  if (was == ranks) return;
  // Its new targets must fit beside everything listed now (the ones they replace keep their
  // ordinals until vacated): else it stays as it is, and a later report tries again.
  size_t wanted = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    wanted += entries_.count(key(url, ranks > 1 ? std::optional<uint32_t>(r) : std::nullopt)) == 0;
  }
  if (wanted > roster_.capacity() - roster_.listed_count()) {
    if (std::exchange(refused_[k], ranks) != ranks) {
      spdlog::warn("upstream membership: an engine listed with RJ_UPSTREAM_DP_SIZE=auto reports {} data-parallel "
                   "ranks, but {} ordinals are not free (RJ_UPSTREAM_MAX={}): it stays at {} until they are",
                   ranks, wanted, roster_.capacity(), was);
    }
    return;
  }
  refused_.erase(k);
  discovered_[k] = ranks;
  spdlog::info("upstream membership: an engine listed with RJ_UPSTREAM_DP_SIZE=auto reports {} data-parallel "
               "ranks (was {})", ranks, was);
  for (size_t s : sources) update(s, listed_[s]);
}

// A DNS name answering more addresses than RJ_UPSTREAM_MAX would otherwise log one line per
// rejected address per lookup (tens of thousands a minute): the count is logged when it changes.
void Membership::note_rejections(size_t source, const std::map<std::string, const Listed*>& now) {
  for (auto it = rejected_by_.begin(); it != rejected_by_.end();) {
    if (!now.count(it->first)) it->second[source] = false;
    bool listed = false;
    for (bool b : it->second) listed = listed || b;
    it = listed ? std::next(it) : rejected_by_.erase(it);
  }
  const uint64_t count = rejected_by_.size();
  const uint64_t before = rejected_now_.exchange(count, std::memory_order_relaxed);
  if (count == before) return;
  if (count == 0) {
    spdlog::info("upstream membership: every listed engine has an ordinal again");
  } else {
    spdlog::warn("upstream membership: {} listed engines get no ordinal (RJ_UPSTREAM_MAX={} are in use; was {})",
                 count, roster_.capacity(), before);
  }
}

void Membership::sweep() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    const size_t slot = it->second.slot;
    if (roster_.state(slot) != net::SlotState::kLeaving || fleet_.at(slot).inflight() != 0) {
      ++it;
      continue;
    }
    roster_.vacate(slot);
    fleet_.vacate(slot);
    vacated_at_[slot] = ++vacate_seq_;
    ++vacates_;
    it = entries_.erase(it);
    if (hooks_.vacated) hooks_.vacated(slot);
  }
}

void Membership::write_metrics(metrics::Exposition& x) const {
  const size_t active = roster_.active_count();
  const size_t listed = roster_.listed_count();
  const size_t leaving = listed > active ? listed - active : 0;  // two reads: a change in between
  x.family(kFamilies[0]);
  x.sample(kFamilies[0].name, "state=\"active\"", uint64_t{active});
  x.sample(kFamilies[0].name, "state=\"leaving\"", uint64_t{leaving});
  x.family(kFamilies[1]);
  x.sample(kFamilies[1].name, "change=\"joined\"", joins_.load(std::memory_order_relaxed));
  x.sample(kFamilies[1].name, "change=\"leaving\"", leaves_.load(std::memory_order_relaxed));
  x.sample(kFamilies[1].name, "change=\"rejoined\"", rejoins_.load(std::memory_order_relaxed));
  x.sample(kFamilies[1].name, "change=\"vacated\"", vacates_.load(std::memory_order_relaxed));
  x.sample(kFamilies[1].name, "change=\"rejected\"", rejected_.load(std::memory_order_relaxed));
  x.family(kFamilies[2]);
  x.sample(kFamilies[2].name, "", rejected_now_.load(std::memory_order_relaxed));
  x.family(kFamilies[3]);
  x.sample(kFamilies[3].name, "outcome=\"applied\"", reloads_applied_.load(std::memory_order_relaxed));
  x.sample(kFamilies[3].name, "outcome=\"invalid\"", reloads_invalid_.load(std::memory_order_relaxed));
}

}  // namespace ramjet::upstream
