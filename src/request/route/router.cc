#include "request/route/router.h"

#include <algorithm>
#include <array>

#include "common/clock.h"
#include "request/route/exact_overlap.h"
#include "upstream/engine_load.h"
#include "upstream/fleet.h"
#include "upstream/model_pools.h"

namespace ramjet::route {

Router::Router(std::unique_ptr<Policy> policy, upstream::Fleet& fleet, std::vector<OverlapSource*> sources,
               SingleFlight& single_flight, std::vector<Profile> profiles)
    : policy_(std::shared_ptr<Policy>(std::move(policy))),
      uses_prefix_(policy_.load()->uses_prefix()),
      fleet_(fleet),
      sources_(std::move(sources)),
      single_flight_(single_flight),
      profiles_(std::make_unique<std::atomic<Profile>[]>(fleet_.size())) {
  for (size_t i = 0; i < fleet_.size(); ++i) profiles_[i].store(i < profiles.size() ? profiles[i] : Profile::kNone);
  for (const OverlapSource* s : sources_) has_exact_ = has_exact_ || s->name() == "exact";
}

Routed Router::decide(const request::PreparedRequest& req, const upstream::EngineSet* pool,
                      std::atomic<uint64_t>* rotation, std::string_view adapter) {
  Routed r;
  decide(req, pool, rotation, adapter, r);
  return r;
}

void Router::decide(const request::PreparedRequest& req, const upstream::EngineSet* pool,
                    std::atomic<uint64_t>* rotation, std::string_view adapter, Routed& r) {
  const std::shared_ptr<Policy> policy = policy_.load(std::memory_order_acquire);
  thread_local FleetSnapshot snap;  // (its candidates' storage kept between decisions)
  FleetSnapshot::fill(fleet_, snap);
  if (pool != nullptr) std::erase_if(snap.candidates, [pool](const CandidateState& c) { return !pool->has(c.ordinal); });
  for (CandidateState& c : snap.candidates) c.profile = profile(c.ordinal);
  if (!adapter.empty() && adapters_ != nullptr) [[unlikely]] {
    const int64_t now = SteadyClock::instance().now_ms();
    bool known = false;
    for (CandidateState& c : snap.candidates) {
      c.adapter = adapters_->slot(c.ordinal, adapter, now);
      known = known || c.adapter != AdapterSlot::kNone;
    }
    if (known) {  // an engine that says nothing is not assumed to hold the adapter
      for (CandidateState& c : snap.candidates) {
        if (c.adapter == AdapterSlot::kNone) c.adapter = AdapterSlot::kUnknown;
      }
    }
  }
  if (engine_load_ != nullptr && engine_load_->enabled()) {
    const int64_t now = engine_load_->now_ms();
    int64_t own_inflight = 0;
    for (CandidateState& c : snap.candidates) {
      c.foreign_load_units = engine_load_->foreign_units(c.ordinal, now);
      own_inflight += c.inflight;
    }
    if (engine_load_->has_peers()) {  // one router alone has no place in a burst to take
      const upstream::SpreadPlace spread = engine_load_->spread(now, own_inflight);
      snap.routers = spread.routers;
      snap.spread_place = spread.place;
      snap.spread_tie = spread.tie;
    }
  }
  const std::vector<uint64_t>& chain = req.fingerprints.chain;
  bool warm = false;
  // One decision's overlaps and resident tokens, per engine (vectors of this thread's, reused).
  thread_local std::vector<uint32_t> overlap;
  thread_local std::vector<uint32_t> tokens;
  thread_local std::vector<uint32_t> provisional;
  thread_local std::vector<ExactStamp> stamps;
  thread_local std::vector<cache::TierBlocks> tiers;
  OverlapNote note;
  if (uses_prefix_ && !chain.empty()) {
    // By ordinal (slot), whether or not the slot holds a member now.
    overlap.assign(fleet_.size(), 0);
    if (has_exact_) {  // only an exact source fills resident tokens
      tokens.assign(fleet_.size(), 0);
      provisional.assign(fleet_.size(), 0);
      stamps.assign(fleet_.size(), ExactStamp{});
      tiers.assign(fleet_.size(), cache::TierBlocks{});
      note.tiers = tiers;
      note.tokens = tokens;
      note.provisional = provisional;
      note.stamps = stamps;
    }
    for (const OverlapSource* source : sources_) {
      if (source->overlaps(req, overlap, note)) break;
      std::fill(overlap.begin(), overlap.end(), 0);
    }
    for (CandidateState& c : snap.candidates) {
      c.overlap = overlap[c.ordinal];
      warm = warm || c.overlap > 0;
    }
    if (!warm) {
      // Cold everywhere in the index: is a concurrent leader prefilling the same prefix?
      std::vector<uint32_t> pending(fleet_.size(), 0);
      single_flight_.pending(chain, pending);
      for (CandidateState& c : snap.candidates) {
        c.single_flight = pending[c.ordinal];
        warm = warm || c.single_flight > 0;
      }
    }
  }
  if (decode_cost_ != nullptr && uses_prefix_ && policy->config().decode_cost && request::is_inference(req.endpoint)) {
    decode_cost_->charges(snap.candidates, req.max_output_tokens, policy->config().chunk_bytes,
                          policy->config().max_overlap_blocks);
  }
  // Every field of r is written below (r may hold the connection's previous decision).
  r.request = RouteRequest::of(req, policy->config());
  r.session = SessionNote{};
  if (session_.mode == SessionAffinityMode::kOff || !request::is_inference(req.endpoint) ||
      static_cast<size_t>(req.endpoint) >= session_counts_.size()) {
    r.decision = policy->decide_next(r.request, snap, rotation);
  } else {
    r.decision = decide_with_session(req, r.request, snap, r.session, *policy, rotation);
    session_counts_[static_cast<size_t>(req.endpoint)][static_cast<size_t>(r.session.outcome)].fetch_add(
        1, std::memory_order_relaxed);
  }
  r.cold = uses_prefix_ && !chain.empty() && !warm;
  r.exact = note.exact;
  const CandidateTerms* chosen = r.decision.first_dispatch();
  if (note.shadow) {
    // Shadow: would the exact overlaps have placed it elsewhere? Agree when the chosen engine
    // holds (or is about to hold) as much of the prompt as any eligible one.
    uint32_t best = 0;
    for (const CandidateTerms& c : r.decision.ranked) {
      if (c.eligible) best = std::max(best, tokens[c.ordinal] + provisional[c.ordinal]);
    }
    const bool agree = chosen && tokens[chosen->ordinal] + provisional[chosen->ordinal] >= best;
    r.exact = agree ? ExactOutcome::kShadowAgree : ExactOutcome::kShadowWouldMove;
  }
  if (note.shadow || placed_exactly(note.exact)) {
    r.exact_tokens = tokens;
    r.exact_tiers = tiers;
    r.exact_provisional = provisional;
    r.exact_stamps = stamps;
    r.exact_block_size = note.block_size;
    if (chosen) {  // speculative residency: what the chosen engine is about to hold
      for (OverlapSource* source : sources_) source->placed(chosen->ordinal, req, tokens[chosen->ordinal]);
    }
  } else {
    r.exact_tokens.clear();
    r.exact_tiers.clear();
    r.exact_provisional.clear();
    r.exact_stamps.clear();
    r.exact_block_size = 0;
  }
  if (r.exact != ExactOutcome::kNone) {
    exact_outcomes_[static_cast<size_t>(r.exact)].fetch_add(1, std::memory_order_relaxed);
    if (req.exact.status == request::ExactTokens::kTokenized) {
      canary_[static_cast<size_t>(req.exact.cohort)].fetch_add(1, std::memory_order_relaxed);
    }
  }
}

Decision Router::decide_with_session(const request::PreparedRequest& req, const RouteRequest& rr, FleetSnapshot& snap,
                                     SessionNote& note, Policy& policy, std::atomic<uint64_t>* rotation) {
  note.enabled = true;
  const request::SessionId& session = req.session;
  if (session.source == request::SessionSource::kInvalid) note.outcome = SessionOutcome::kInvalid;
  if (session.source != request::SessionSource::kHeader && session.source != request::SessionSource::kUser) {
    if (session.source == request::SessionSource::kNone) note.outcome = SessionOutcome::kNoSession;
    return policy.decide_next(rr, snap, rotation);
  }
  FleetSnapshot prior = snap;
  std::vector<size_t> ordinals;
  ordinals.reserve(snap.candidates.size());
  for (const CandidateState& c : snap.candidates) ordinals.push_back(c.ordinal);
  if (ordinals.empty()) return policy.decide_next(rr, snap, rotation);
  apply_session_prior(session_, session_pair(session_.key, session.value, ordinals), prior, note);
  const bool bonus = note.target && std::any_of(prior.candidates.begin(), prior.candidates.end(), [&](const CandidateState& c) {
                       return c.ordinal == *note.target && c.session_bonus != 0;
                     });
  if (!bonus) return policy.decide_next(rr, snap, rotation);
  // The same rotation for both: whether the bonus moved the winner is the only difference.
  const bool on = session_.mode == SessionAffinityMode::kOn;
  Decision used = policy.decide_next(rr, on ? prior : snap, rotation);
  const Decision other = policy.decide(rr, on ? snap : prior, used.rotation);
  const CandidateTerms* with = on ? used.first_dispatch() : other.first_dispatch();
  const CandidateTerms* without = on ? other.first_dispatch() : used.first_dispatch();
  note.outcome = with && without && with->ordinal != without->ordinal ? SessionOutcome::kMoved : SessionOutcome::kAgree;
  return used;
}

SingleFlight::Lease Router::lead(size_t engine, const Routed& routed, const request::PreparedRequest& req) {
  if (!routed.cold) return {};
  return single_flight_.lead(engine, req.fingerprints.chain);
}

void Router::observe(size_t engine, const request::PreparedRequest& req) {
  if (!uses_prefix_ || req.fingerprints.chain.empty()) return;
  for (OverlapSource* source : sources_) source->served(engine, req);
}

bool ApproxOverlap::overlaps(const request::PreparedRequest& req, std::span<uint32_t> out, OverlapNote&) const {
  const std::vector<uint64_t>& chain = req.fingerprints.chain;
  if (chain.empty()) return false;
  for (size_t i = 0; i < out.size(); ++i) out[i] = index_.overlap(i, chain);
  return true;
}

void ApproxOverlap::served(size_t engine, const request::PreparedRequest& req) {
  index_.observe(engine, req.fingerprints.chain);
}

}  // namespace ramjet::route

namespace ramjet::route {

namespace {

enum class F {
  kProvisionalBlocks, kProvisionalHits, kIndexEntries, kIndexHorizon, kLeaders, kLeads, kRefused, kExpired, kExactOutcomes, kCanary,
  kForeignLoad, kSession
};
constexpr std::array<metrics::Family, 12> kFamilies = {{
    // ExactOverlap's (asked before the approximate index, so written first)
    {"ramjet_exact_provisional_blocks_total", metrics::MetricKind::kCounter, "",
     "Blocks entered as provisional (speculative residency): blocks of a placed request's prompt "
     "the chosen engine did not report yet, counted as held there for RJ_EXACT_PROVISIONAL_TTL_MS "
     "or until its events confirm them."},
    {"ramjet_exact_provisional_hits_total", metrics::MetricKind::kCounter, "",
     "Exact lookups in which provisional blocks lengthened an engine's match (a request that "
     "arrived before the engine's events for its prefix)."},
    {"ramjet_route_index_entries", metrics::MetricKind::kGauge, "upstream",
     "Prefix fingerprints in the approximate index per upstream ordinal."},
    {"ramjet_route_index_horizon", metrics::MetricKind::kGauge, "upstream",
     "RJ_ROUTE_HORIZON=auto: the engine's eviction horizon in fingerprints (its KV pool in prompt "
     "chunks); a fingerprint older than this by the new chunks sent there since earns no credit. "
     "Only engines with a horizon."},
    {"ramjet_route_single_flight_leaders", metrics::MetricKind::kGauge, "",
     "New prefixes being prefilled by a single-flight leader."},
    {"ramjet_route_single_flight_leads_total", metrics::MetricKind::kCounter, "",
     "Cold requests registered as single-flight leaders."},
    {"ramjet_route_single_flight_refused_total", metrics::MetricKind::kCounter, "",
     "Cold requests not registered because the single-flight table was full."},
    {"ramjet_route_single_flight_expired_total", metrics::MetricKind::kCounter, "",
     "Single-flight leaders that expired before their response ended."},
    {"ramjet_exact_route_total", metrics::MetricKind::kCounter, "outcome",
     "Routing decisions by how exact routing answered (RJ_EXACT_ROUTE_MODE on or shadow): exact "
     "(placed on exact overlaps), exact_partial (exact overlaps for the healthy engines whose index "
     "is trusted, the approximate index's estimate on the same scale for the others: fenced, "
     "replaying or withdrawn), shadow_agree / shadow_would_move (shadow: the approximate choice "
     "held the most of the prompt, or not), untrusted (no healthy engine's index is trusted; in "
     "shadow, one is not), busy (a lookup raced its writer), ineligible (endpoint or size), "
     "tokenize_timeout, tokenize_failed, no_engine, withdrawn (every trusted healthy engine's "
     "predictions kept missing; in shadow, one's did), unattested (RJ_EXACT_TOKENS=local and a "
     "healthy engine is not attested), tokenize_busy (the local render pool was full); all but "
     "exact, exact_partial and shadow_* were placed on the approximate index."},
    {"ramjet_exact_route_canary_total", metrics::MetricKind::kCounter, "cohort",
     "Tokenized requests by canary cohort (RJ_EXACT_ROUTE_CANARY_BPS over a keyed hash of "
     "X-Session-ID): all (10000 bps), treatment (placed exactly), control and no_session (computed "
     "and recorded as shadow decisions only)."},
    {"ramjet_upstream_foreign_load_units", metrics::MetricKind::kGauge, "upstream",
     "Load units other routers put on the engine as routing reads it now: the fresh RJ_PEERS "
     "replicas' own load units there, plus (RJ_ROUTE_ENGINE_LOAD) the engine's reported running "
     "and waiting requests beyond this process's and its peers' in-flight requests there, waiting "
     "ones weighted by RJ_ROUTE_ENGINE_LOAD_WAITING_UNITS (that share is 0 while the engine's last "
     "/metrics reading is older than three scrape intervals or failed)."},
    {"ramjet_session_affinity_total", metrics::MetricKind::kCounter, "endpoint,outcome",
     "Routing decisions by what session affinity did (RJ_SESSION_AFFINITY_MODE on; in shadow what it "
     "would have done): no_session, invalid (X-Session-ID empty, over 256 bytes or repeated: "
     "ignored), unavailable (neither the session's primary nor its secondary engine eligible), "
     "load_gated (the target's load over RJ_SESSION_AFFINITY_MAX_LOAD_DELTA above the least "
     "loaded), agree (the bonus applied; cache and load chose the same winner), moved (the bonus "
     "changed the winner)."},
}};
const metrics::Family& fam(F f) { return kFamilies[static_cast<size_t>(f)]; }

}  // namespace

std::span<const metrics::Family> route_families() { return kFamilies; }

void ApproxOverlap::write_metrics(metrics::Exposition& x) const {
  x.family(fam(F::kIndexEntries));
  for (size_t i = 0; i < index_.engines(); ++i) {
    x.sample(fam(F::kIndexEntries).name, "upstream=\"" + std::to_string(i) + "\"",
             static_cast<int64_t>(index_.entries(i)));
  }
  x.family(fam(F::kIndexHorizon));
  for (size_t i = 0; i < index_.engines(); ++i) {
    if (const uint64_t h = index_.horizon(i); h != 0)
      x.sample(fam(F::kIndexHorizon).name, "upstream=\"" + std::to_string(i) + "\"", static_cast<int64_t>(h));
  }
}

void ExactOverlap::write_metrics(metrics::Exposition& x) const {
  x.family(fam(F::kProvisionalBlocks));
  x.sample(fam(F::kProvisionalBlocks).name, "", entered_.load(std::memory_order_relaxed));
  x.family(fam(F::kProvisionalHits));
  x.sample(fam(F::kProvisionalHits).name, "", used_.load(std::memory_order_relaxed));
}

void Router::write_metrics(metrics::Exposition& x) const {
  for (const OverlapSource* source : sources_) source->write_metrics(x);
  const SingleFlight::Stats st = single_flight_.stats();
  auto one = [&](F f, int64_t v) {
    x.family(fam(f));
    x.sample(fam(f).name, "", v);
  };
  one(F::kLeaders, static_cast<int64_t>(single_flight_.leaders()));
  one(F::kLeads, static_cast<int64_t>(st.leads));
  one(F::kRefused, static_cast<int64_t>(st.refused_full));
  one(F::kExpired, static_cast<int64_t>(st.expired));
  if (has_exact_) {
    x.family(fam(F::kExactOutcomes));
    for (size_t o = 1; o < exact_outcomes_.size(); ++o) {
      x.sample(fam(F::kExactOutcomes).name, "outcome=\"" + std::string(label(static_cast<ExactOutcome>(o))) + "\"",
               exact_outcomes_[o].load(std::memory_order_relaxed));
    }
    static constexpr std::array<std::string_view, 4> kCohorts = {"all", "treatment", "control", "no_session"};
    x.family(fam(F::kCanary));
    for (size_t c = 0; c < kCohorts.size(); ++c) {
      x.sample(fam(F::kCanary).name, "cohort=\"" + std::string(kCohorts[c]) + "\"", canary_[c].load(std::memory_order_relaxed));
    }
  }
  if (engine_load_ != nullptr && engine_load_->enabled()) {
    x.family(fam(F::kForeignLoad));
    const int64_t now = engine_load_->now_ms();
    for (size_t i = 0; i < fleet_.size(); ++i) {
      x.sample(fam(F::kForeignLoad).name, "upstream=\"" + std::to_string(i) + "\"", engine_load_->foreign_units(i, now));
    }
  }
  if (session_.mode != SessionAffinityMode::kOff) {
    x.family(fam(F::kSession));
    for (size_t e = 0; e < session_counts_.size(); ++e) {
      for (size_t o = 0; o < static_cast<size_t>(SessionOutcome::kCount); ++o) {
        x.sample(fam(F::kSession).name,
                 "endpoint=\"" + std::string(request::endpoint_label(static_cast<request::Endpoint>(e))) +
                     "\",outcome=\"" + std::string(session_outcome_label(static_cast<SessionOutcome>(o))) + "\"",
                 session_counts_[e][o].load(std::memory_order_relaxed));
      }
    }
  }
}

}  // namespace ramjet::route
