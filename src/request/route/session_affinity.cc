#include "request/route/session_affinity.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace ramjet::route {

std::string_view session_mode_label(SessionAffinityMode m) {
  switch (m) {
    case SessionAffinityMode::kOff: return "off";
    case SessionAffinityMode::kShadow: return "shadow";
    case SessionAffinityMode::kOn: return "on";
  }
  return "off";
}

std::string_view session_outcome_label(SessionOutcome o) {
  switch (o) {
    case SessionOutcome::kNoSession: return "no_session";
    case SessionOutcome::kInvalid: return "invalid";
    case SessionOutcome::kUnavailable: return "unavailable";
    case SessionOutcome::kLoadGated: return "load_gated";
    case SessionOutcome::kAgree: return "agree";
    case SessionOutcome::kMoved: return "moved";
    case SessionOutcome::kCount: break;
  }
  return "no_session";
}

namespace {

// splitmix64's finaliser: a bijection that spreads every input bit over the output.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

SessionPair session_pair(std::string_view key, std::string_view session, size_t engines) {
  std::vector<size_t> ordinals(engines);
  for (size_t i = 0; i < engines; ++i) ordinals[i] = i;
  return session_pair(key, session, ordinals);
}

SessionPair session_pair(std::string_view key, std::string_view session, std::span<const size_t> ordinals) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(session.data()),
       session.size(), digest, &len);
  uint64_t h0 = 0, h1 = 0;
  for (int i = 0; i < 8; ++i) {
    h0 = (h0 << 8) | digest[i];
    h1 = (h1 << 8) | digest[8 + i];
  }
  // Each ordinal's weight: the keyed digest mixed with the ordinal (ties cannot happen for two
  // ordinals: mix is a bijection and the inputs differ).
  auto weight = [&](size_t ordinal) { return mix(h0 ^ mix(h1 + static_cast<uint64_t>(ordinal))); };
  SessionPair p;
  uint64_t best = 0, second = 0;
  bool have_best = false;
  for (const size_t i : ordinals) {
    const uint64_t w = weight(i);
    if (!have_best || w > best) {
      if (have_best) {
        p.secondary = p.primary;
        second = best;
      }
      p.primary = i;
      best = w;
      have_best = true;
    } else if (!p.secondary || w > second) {
      p.secondary = i;
      second = w;
    }
  }
  return p;
}

void apply_session_prior(const SessionAffinityConfig& config, const SessionPair& pair, FleetSnapshot& fleet,
                         SessionNote& note) {
  note.primary = pair.primary;
  note.secondary = pair.secondary;
  // Candidates are the members, in ordinal order (not indexed by ordinal).
  auto find = [&](size_t ordinal) -> CandidateState* {
    for (CandidateState& c : fleet.candidates)
      if (c.ordinal == ordinal) return &c;
    return nullptr;
  };
  auto eligible = [&](size_t i) { return find(i) != nullptr && find(i)->eligible; };
  std::optional<size_t> target;
  if (eligible(pair.primary)) target = pair.primary;
  else if (pair.secondary && eligible(*pair.secondary)) target = pair.secondary;
  if (!target) {
    note.outcome = SessionOutcome::kUnavailable;
    return;
  }
  int64_t least = std::numeric_limits<int64_t>::max();
  for (const CandidateState& c : fleet.candidates) {
    if (c.eligible) least = std::min(least, c.load_units + c.foreign_load_units);
  }
  CandidateState& t = *find(*target);
  note.target = target;
  if (t.load_units + t.foreign_load_units - least > config.max_load_delta) {
    note.outcome = SessionOutcome::kLoadGated;
    return;
  }
  t.session_bonus = config.bonus_blocks;
}

}  // namespace ramjet::route
