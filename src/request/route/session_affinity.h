// request/route/session_affinity: a session's preferred engines, as a score prior
// (RJ_SESSION_AFFINITY_*). A session (X-Session-ID, or the body's `user` with
// RJ_SESSION_AFFINITY_USER_FIELD) maps by keyed rendezvous hashing to a primary and a secondary
// engine ordinal: HMAC-SHA256(RJ_SESSION_AFFINITY_KEY, session), mixed with each ordinal, highest
// first. The target — the primary, or the secondary when the primary is not serving-eligible —
// earns RJ_SESSION_AFFINITY_BONUS_BLOCKS extra affinity blocks (capped at the overlap cap), and
// only while its load is within RJ_SESSION_AFFINITY_MAX_LOAD_DELTA units of the least-loaded
// eligible engine: cache and load decide first, the session only where they leave a choice. It is
// never a pin. `shadow` computes the same and records what it would have done.
//
// This file owns the hashing, the target and its gate. The router applies it (router.cc), the
// prefix policy scores it (CandidateState::session_bonus); request/stream parses the session.
// Privacy: the session and its hash never leave this process; only ordinals and outcome labels do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "request/route/policy.h"

namespace ramjet::route {

enum class SessionAffinityMode : uint8_t { kOff, kShadow, kOn };
std::string_view session_mode_label(SessionAffinityMode m);  // off|shadow|on

struct SessionAffinityConfig {
  SessionAffinityMode mode = SessionAffinityMode::kOff;  // RJ_SESSION_AFFINITY_MODE
  std::string key;                                       // RJ_SESSION_AFFINITY_KEY (32..256 bytes)
  uint32_t bonus_blocks = 4;                             // RJ_SESSION_AFFINITY_BONUS_BLOCKS
  int64_t max_load_delta = 0;                            // RJ_SESSION_AFFINITY_MAX_LOAD_DELTA
};

// What session affinity did for one decision (ramjet_session_affinity_total{outcome}, the
// journal's session_affinity.outcome). In shadow mode: what it would have done.
//   no_session   the request named no session
//   invalid      X-Session-ID was empty, longer than 256 bytes or given more than once (ignored)
//   unavailable  neither the primary nor the secondary is serving-eligible
//   load_gated   the target's load is more than MAX_LOAD_DELTA above the least-loaded eligible engine
//   agree        the bonus applies and the winner is the one cache and load chose anyway
//   moved        the bonus applies and it changed the winner (to the target)
enum class SessionOutcome : uint8_t { kNoSession, kInvalid, kUnavailable, kLoadGated, kAgree, kMoved, kCount };
std::string_view session_outcome_label(SessionOutcome o);

// The journal's policy_version of session_affinity (bumped when the rule changes).
inline constexpr int kSessionAffinityPolicyVersion = 1;

struct SessionNote {
  bool enabled = false;  // mode is not off (the journal writes session_affinity only then)
  SessionOutcome outcome = SessionOutcome::kNoSession;
  std::optional<size_t> primary, secondary, target;  // engine ordinals
};

struct SessionPair {
  size_t primary = 0;
  std::optional<size_t> secondary;  // none with one engine
};

// Keyed rendezvous over ordinals 0..engines-1 (engines >= 1): the two highest of
// mix(HMAC-SHA256(key, session), ordinal). Stable while the fleet keeps its ordinals; an engine
// that joins or leaves moves only the sessions that rank it first or second.
SessionPair session_pair(std::string_view key, std::string_view session, size_t engines);
// The same over the given ordinals (the fleet's members now; engines come and go, net/roster.h).
SessionPair session_pair(std::string_view key, std::string_view session, std::span<const size_t> ordinals);

// Picks the target and applies the gate: sets note.target and the target's session_bonus in
// `fleet` when the bonus applies (note.outcome is then left for the caller, which knows whether
// the winner moved), or sets note.outcome to unavailable / load_gated.
void apply_session_prior(const SessionAffinityConfig& config, const SessionPair& pair, FleetSnapshot& fleet,
                         SessionNote& note);

}  // namespace ramjet::route
