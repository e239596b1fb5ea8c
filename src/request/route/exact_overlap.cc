#include "request/route/exact_overlap.h"

#include <algorithm>
#include <vector>

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
    case ExactOutcome::kCount: break;
  }
  return "none";
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
    case ExactTokens::kTokenized: break;
  }
  const size_t n = std::min(out.size(), kv_.size());
  thread_local std::vector<const cache::events::Inventory*> inventories;
  thread_local std::vector<std::optional<uint32_t>> resident;
  inventories.assign(n, nullptr);
  resident.assign(n, std::nullopt);
  for (size_t i = 0; i < n; ++i) {
    inventories[i] = kv_.trusted(i);
    if (!fleet_.at(i).healthy()) continue;
    if (inventories[i] == nullptr) {
      note.exact = ExactOutcome::kUntrusted;
      return false;
    }
    if (check_ != nullptr && check_->withdrawn(i)) {
      note.exact = ExactOutcome::kWithdrawn;
      return false;
    }
    note.block_size = std::max(note.block_size, inventories[i]->block_size());
  }
  cache::events::lookup(inventories, cache::events::ExactRequest{req.exact.tokens, req.exact.model, req.exact.cache_salt},
                        resident);
  const uint64_t prompt = req.exact.tokens.size();
  const uint64_t blocks = req.fingerprints.chain.size();
  for (size_t i = 0; i < n; ++i) {
    if (inventories[i] == nullptr) {  // an engine out of service: nothing to place there
      resident[i] = 0;
      continue;
    }
    if (!resident[i]) {
      note.exact = ExactOutcome::kBusy;
      return false;
    }
    if (i < note.tokens.size()) note.tokens[i] = *resident[i];
  }
  const bool control = req.exact.cohort == request::ExactCohort::kControl || req.exact.cohort == request::ExactCohort::kNoSession;
  if (mode_ == ExactMode::kShadow || control) {
    note.shadow = true;  // the router tells agree from would-move once the policy decided
    return false;
  }
  for (size_t i = 0; i < n; ++i) out[i] = units(*resident[i], prompt, blocks);
  note.exact = ExactOutcome::kExact;
  return true;
}

}  // namespace ramjet::route
