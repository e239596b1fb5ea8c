// companion/snapshot: the companion's dump of one engine's digest inventory, as bytes. A snapshot
// carries the inventory's whole state (cache/events InventoryState: learned block size, group
// kinds and adapter names, the shard's blocks with their removal keys and copy counts) and is bound
// to one connection (the client's challenge), the companion's generation, the engine incarnation,
// the last real vLLM event sequence folded into it, and the block-digest key (its key_id). The
// envelope ends with a SHA-256 of everything before it. Authentication is the frame layer's
// (companion/frames); trust decisions (fence, publish) are the caller's.
//
// Blocks are carried by chain key, not by digest: the shard keeps only chain keys (a digest is
// hashed into its block's key when stored), so a snapshot costs 16 B per block + 12 B per removal
// key and is imported without hashing. Both ends must share the chain function (exact_next over
// digest words), which the version names.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "cache/events/inventory.h"
#include "cache/index/block_digest.h"
#include "common/result.h"

namespace ramjet::companion {

using Challenge = std::array<uint8_t, 32>;

inline constexpr char kSnapshotMagic[8] = {'R', 'J', 'S', 'N', 'A', 'P', '0', '1'};
inline constexpr uint32_t kSnapshotVersion = 1;  // body layout + chain function (XXH3 exact_next, v1 seeds)
inline constexpr size_t kSnapshotEnvelopeHead = 24;  // magic, version, flags, body length
inline constexpr size_t kSnapshotChecksumBytes = 32;

struct SnapshotLimits {
  size_t max_bytes = 32u << 20;      // the whole envelope
  uint32_t max_records = 262144;     // blocks (the exact shard's default RJ_KV_INDEX_MAX_BLOCKS)
  uint32_t max_removals = 524288;    // removal keys (copies of a block under other ranks/groups)
  uint32_t max_groups = 1024;
  uint32_t max_loras = 4096;         // cache::events::kMaxLoras
  uint32_t max_string_bytes = 1024;  // the incarnation, each adapter name (kv::DecodeLimits' strings)
  uint32_t max_block_size = 1u << 20;
};

// The limits for an inventory of `max_blocks` (RJ_KV_INDEX_MAX_BLOCKS, --index-max-blocks): a
// snapshot of any state such an index can hold is never refused for its size (at most 2 GiB).
// Both ends use it: the companion for the frame it may send, ramjet for what it accepts.
SnapshotLimits snapshot_limits_for(uint64_t max_blocks);

struct SnapshotHeader {
  Challenge challenge{};                          // the client's hello challenge
  cache::DigestKeyId key_id{};                    // the block-digest key the chain keys derive from
  uint64_t generation = 0;                        // the companion's generation (bumped on every reset)
  std::optional<uint64_t> last_event_sequence{};  // last real vLLM sequence folded in; none before any
  std::string incarnation{};                      // the engine incarnation the state belongs to
};

struct Snapshot {
  SnapshotHeader header{};
  cache::events::InventoryState state{};
};

enum class SnapshotErrc : uint8_t {
  kTruncated,       // shorter than its lengths say
  kBadMagic,
  kBadVersion,      // a version or flags this build does not read
  kOversized,       // beyond max_bytes
  kBadChecksum,
  kLimit,           // a count or string beyond the limits
  kMalformed,       // a field out of its range, or bytes after the body
  kWrongChallenge,  // bound to another connection (verify_binding)
  kWrongKey,        // chain keys under another digest key (verify_binding)
  kImport,          // records inconsistent as a shard (import_snapshot; detail in import_error)
};
std::string_view reason(SnapshotErrc e);

struct SnapshotError {
  SnapshotErrc code = SnapshotErrc::kMalformed;
  std::optional<cache::ExactImportErrc> import_error{};
  std::string_view reason() const { return companion::reason(code); }
};

std::string encode_snapshot(const Snapshot& snapshot);
// Never trusts `bytes`: lengths, counts and strings are checked against `limits` before anything
// is allocated for them, and the checksum before anything is parsed.
Result<Snapshot, SnapshotError> decode_snapshot(std::span<const uint8_t> bytes, const SnapshotLimits& limits = {});
// The snapshot answers this connection's challenge and uses the expected digest key (constant
// time comparisons).
std::optional<SnapshotError> verify_binding(const SnapshotHeader& header, const Challenge& challenge,
                                            const cache::DigestKeyId& key_id);
// The companion's side: the inventory's state under `header`.
Snapshot capture_snapshot(const cache::events::Inventory& inventory, SnapshotHeader header);
// ramjet's side: a decoded snapshot into a private digest inventory (left empty on an error).
std::optional<SnapshotError> import_snapshot(const Snapshot& snapshot, cache::events::Inventory& inventory);

}  // namespace ramjet::companion
