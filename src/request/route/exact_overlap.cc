#include "request/route/exact_overlap.h"

#include <algorithm>
#include <array>
#include <vector>

#include "upstream/engine_catalog.h"
#include "upstream/fleet.h"

namespace ramjet::route {

std::string_view label(ExactOutcome o) {
  switch (o) {
    case ExactOutcome::kNone: return "none";
    case ExactOutcome::kExact: return "exact";
    case ExactOutcome::kShadowAgree: return "shadow_agree";
    case ExactOutcome::kShadowWouldMove: return "shadow_would_move";
    case ExactOutcome::kUntrusted: return "untrusted";
    case ExactOutcome::kBusy: return "busy";
    case ExactOutcome::kIneligible: return "ineligible";
    case ExactOutcome::kTokenizeTimeout: return "tokenize_timeout";
    case ExactOutcome::kTokenizeFailed: return "tokenize_failed";
    case ExactOutcome::kNoEngine: return "no_engine";
    case ExactOutcome::kWithdrawn: return "withdrawn";
    case ExactOutcome::kUnattested: return "unattested";
    case ExactOutcome::kTokenizeBusy: return "tokenize_busy";
    case ExactOutcome::kExactPartial: return "exact_partial";
    case ExactOutcome::kCount: break;
  }
  return "none";
}

uint64_t TierWeights::weigh(const cache::TierBlocks& tokens) const {
  return tokens.by_tier[0] + static_cast<uint64_t>(cpu * tokens.by_tier[1] + disk * tokens.by_tier[2]);
}

thread_local ExactOverlap::LastLookup ExactOverlap::last_lookup_;

ExactOverlap::ExactOverlap(const cache::events::KvFleet& kv, const upstream::Fleet& fleet, ExactMode mode,
                           const PredictionCheck* check, cache::ProvisionalLimits provisional, const Clock& clock)
    : kv_(kv), fleet_(fleet), mode_(mode), check_(check), clock_(clock) {
  provisional_.reserve(kv.size());
  for (size_t i = 0; i < kv.size(); ++i) provisional_.push_back(std::make_unique<cache::ProvisionalBlocks>(provisional));
}

cache::events::ExactRequest ExactOverlap::exact_request(const request::PreparedRequest& req) const {
  cache::events::ExactRequest r{req.exact.tokens, req.exact.model, req.exact.cache_salt, std::nullopt};
  if (catalog_ != nullptr && !req.exact.model.empty()) r.adapter = catalog_->is_adapter(req.exact.model);
  return r;
}

std::optional<uint32_t> ExactOverlap::resident_now(size_t engine, std::span<const uint32_t> tokens,
                                                   std::string_view model, std::string_view cache_salt) const {
  const cache::events::Inventory* inv = engine < kv_.size() ? kv_.trusted(engine) : nullptr;
  if (inv == nullptr) return std::nullopt;
  cache::events::ExactRequest r{tokens, model, cache_salt, std::nullopt};
  if (catalog_ != nullptr && !model.empty()) r.adapter = catalog_->is_adapter(model);
  const std::array<const cache::events::Inventory*, 1> one{inv};
  std::array<std::optional<uint32_t>, 1> out;
  cache::events::lookup(one, r, out);
  return out[0];
}

void ExactOverlap::placed(size_t engine, const request::PreparedRequest& req, uint32_t resident) {
  if (req.exact.status != request::ExactTokens::kTokenized || engine >= provisional_.size()) return;
  const cache::events::Inventory* inv = kv_.trusted(engine);
  if (inv == nullptr || inv->block_size() == 0) return;
  // The chains the lookup just computed on this thread for this request, else computed again.
  std::optional<cache::events::RequestChains> own;
  cache::events::RequestChains* chains = last_lookup_.req == &req ? &*last_lookup_.chains : nullptr;
  if (chains == nullptr) {
    own.emplace(exact_request(req));
    chains = &*own;
  }
  const std::span<const uint64_t> chain = chains->of(*inv);
  const size_t entered = provisional_[engine]->enter(chain, resident / inv->block_size(), clock_.now_ms());
  entered_.fetch_add(entered, std::memory_order_relaxed);
  last_lookup_ = {};  // its spans point into this request, which is about to go
}

uint32_t ExactOverlap::units(uint64_t tokens, uint64_t prompt_tokens, uint64_t blocks) {
  if (tokens == 0 || prompt_tokens == 0) return 0;
  tokens = std::min(tokens, prompt_tokens);
  return static_cast<uint32_t>((tokens * blocks + prompt_tokens - 1) / prompt_tokens);
}

bool ExactOverlap::overlaps(const request::PreparedRequest& req, std::span<uint32_t> out, OverlapNote& note) const {
  using request::ExactTokens;
  switch (req.exact.status) {
    case ExactTokens::kOff: return false;
    case ExactTokens::kIneligible: note.exact = ExactOutcome::kIneligible; return false;
    case ExactTokens::kTimeout: note.exact = ExactOutcome::kTokenizeTimeout; return false;
    case ExactTokens::kFailed: note.exact = ExactOutcome::kTokenizeFailed; return false;
    case ExactTokens::kNoEngine: note.exact = ExactOutcome::kNoEngine; return false;
    case ExactTokens::kUnattested: note.exact = ExactOutcome::kUnattested; return false;
    case ExactTokens::kBusy: note.exact = ExactOutcome::kTokenizeBusy; return false;
    case ExactTokens::kTokenized: break;
  }
  last_lookup_ = {};
  const bool control = req.exact.cohort == request::ExactCohort::kControl || req.exact.cohort == request::ExactCohort::kNoSession;
  const bool shadow = mode_ == ExactMode::kShadow || control;
  const size_t n = std::min(out.size(), kv_.size());
  thread_local std::vector<const cache::events::Inventory*> inventories;
  thread_local std::vector<std::optional<uint32_t>> resident;
  thread_local std::vector<std::optional<cache::TierBlocks>> tiers;
  thread_local std::vector<uint64_t> weighted;  // resident tokens as the score sees them
  thread_local std::vector<uint8_t> estimated;
  inventories.assign(n, nullptr);
  resident.assign(n, std::nullopt);
  tiers.assign(n, std::nullopt);
  weighted.assign(n, 0);
  estimated.assign(n, 0);
  // A healthy engine whose index is not trusted (or whose predictions keep missing) gets the
  // approximate index's estimate on the same scale, so the trusted ones are still placed exactly;
  // in shadow (which compares the exact choice with the approximate one) it declines instead.
  size_t trusted = 0;
  ExactOutcome untrusted = ExactOutcome::kNone;  // why the last engine without exact overlaps has none
  for (size_t i = 0; i < n; ++i) {
    inventories[i] = kv_.trusted(i);
    if (!fleet_.at(i).healthy()) continue;
    const bool withdrawn = inventories[i] != nullptr && check_ != nullptr && check_->withdrawn(i);
    if (inventories[i] == nullptr || withdrawn) {
      untrusted = withdrawn && untrusted != ExactOutcome::kUntrusted ? ExactOutcome::kWithdrawn : ExactOutcome::kUntrusted;
      if (shadow || estimates_ == nullptr) {
        note.exact = untrusted;
        return false;
      }
      inventories[i] = nullptr;
      estimated[i] = 1;
      continue;
    }
    ++trusted;
    note.block_size = std::max(note.block_size, inventories[i]->block_size());
    if (i < note.stamps.size()) note.stamps[i] = ExactStamp{kv_.generation(i), inventories[i]->shard().revision(), false};
  }
  if (trusted == 0 && untrusted != ExactOutcome::kNone) {
    note.exact = untrusted;
    return false;
  }
  last_lookup_.chains.emplace(exact_request(req));
  last_lookup_.req = &req;
  cache::events::RequestChains& chains = *last_lookup_.chains;
  cache::events::lookup_tiers(inventories, chains, tiers);
  for (size_t i = 0; i < n; ++i) {
    if (tiers[i]) {
      resident[i] = tiers[i]->total();
      weighted[i] = weights_.weigh(*tiers[i]);
    }
  }
  const uint64_t prompt = req.exact.tokens.size();
  const uint64_t blocks = req.fingerprints.chain.size();
  const int64_t now = clock_.now_ms();
  bool lengthened = false;
  for (size_t i = 0; i < n; ++i) {
    if (inventories[i] == nullptr) {  // out of service, or estimated below: no exact prediction
      resident[i] = 0;
      continue;
    }
    if (!resident[i]) {
      note.exact = ExactOutcome::kBusy;
      return false;
    }
    if (i < note.tokens.size()) note.tokens[i] = *resident[i];
    if (i < note.tiers.size()) note.tiers[i] = *tiers[i];
    // Speculative residency: the match continues through blocks just placed there.
    const uint32_t bs = inventories[i]->block_size();
    if (bs == 0 || i >= provisional_.size()) continue;
    const size_t more = provisional_[i]->match(chains.of(*inventories[i]), *resident[i] / bs, now);
    if (more == 0) continue;
    lengthened = true;
    const uint32_t extra = static_cast<uint32_t>(more * bs);
    if (i < note.provisional.size()) note.provisional[i] = extra;
    resident[i] = *resident[i] + extra;
    weighted[i] += extra;  // the request just placed there prefills them into its GPU cache
  }
  if (lengthened) used_.fetch_add(1, std::memory_order_relaxed);
  if (shadow) {
    note.shadow = true;  // the router tells agree from would-move once the policy decided
    return false;
  }
  for (size_t i = 0; i < n; ++i) out[i] = units(weighted[i], prompt, blocks);
  if (untrusted != ExactOutcome::kNone) {
    thread_local std::vector<uint32_t> estimate;
    estimate.assign(out.size(), 0);
    OverlapNote ignored;
    if (estimates_->overlaps(req, estimate, ignored)) {
      for (size_t i = 0; i < n; ++i) {
        if (estimated[i] != 0) out[i] = estimate[i];
      }
    }
    for (size_t i = 0; i < n && i < note.stamps.size(); ++i) note.stamps[i].estimated = estimated[i] != 0;
  }
  note.exact = untrusted != ExactOutcome::kNone ? ExactOutcome::kExactPartial : ExactOutcome::kExact;
  return true;
}

std::optional<bool> ExactOverlap::held_since(size_t engine, std::span<const uint32_t> tokens, std::string_view model,
                                             std::string_view cache_salt, uint64_t from_tokens,
                                             const ExactStamp& stamp) const {
  const cache::events::Inventory* inv = engine < kv_.size() ? kv_.trusted(engine) : nullptr;
  // An index that lost track of the engine since (fenced, cleared, replaced) holds nothing since
  // the decision: the engine's state in between is unknown, which is no evidence of a mismatch.
  if (inv == nullptr || kv_.generation(engine) != stamp.generation) return false;
  const uint32_t bs = inv->block_size();
  if (bs == 0) return false;
  cache::events::ExactRequest r{tokens, model, cache_salt, std::nullopt};
  if (catalog_ != nullptr && !model.empty()) r.adapter = catalog_->is_adapter(model);
  cache::events::RequestChains chains(r);
  return inv->shard().held_since(chains.of(*inv), from_tokens / bs, stamp.revision);
}

}  // namespace ramjet::route
