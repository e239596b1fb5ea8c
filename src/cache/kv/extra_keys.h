// cache/kv/extra_keys: what one block's extra_keys entry says, as far as routing cares. vLLM
// (generate_block_hash_extra_keys) concatenates, per block: the LoRA name (every block of a LoRA
// request), (multimodal identifier, offset) pairs for items overlapping the block, the
// cache_salt (only the block that starts at token 0) and a prompt-embeds digest (bytes). The
// decoder keeps each entry as its MessagePack bytes; this reads them. Which namespace a block
// belongs to is the index's decision (cache/events).
#pragma once

#include <string_view>
#include <vector>

#include "cache/kv/codec.h"
#include "common/result.h"

namespace ramjet::cache::kv {

struct ExtraKeyParts {
  std::vector<std::string_view> strings;  // top-level strings, in order (views into the entry)
  bool multimodal = false;                // a nested array: a multimodal item
  bool other = false;                     // bytes (prompt embeds), numbers, maps, …
};

// `entry` is one extra_keys element as decode_batch() keeps it (an array). Bounded by the
// decoder's own limits (the entry already passed them); errors never carry content.
Result<ExtraKeyParts, DecodeError> parse_extra_key(std::string_view entry);

}  // namespace ramjet::cache::kv
