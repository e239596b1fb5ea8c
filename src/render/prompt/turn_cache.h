// render::TurnCache: exact routing's last turn of each conversation — its request body, where
// its messages are in it, the native formatter's state, the prompt text, its ids and cuts — so
// that a follow-up whose body is the same bytes with messages appended parses, renders and
// encodes only what is new (render/identity/tokenize_payload.h: render_routing_body).
//
// A follow-up B extends a turn T when B starts with T's body up to the end of its last message
// and ends with the rest of T's body (what followed the last message: the closing ']' and every
// key after "messages"), with only array elements between (the caller parses them and checks).
// Then B is T's request with messages appended and every other key the same, byte for byte.
//
// Owns the turns, their LRU order and limits. One turn per conversation in practice: a
// follow-up takes its turn out (take()), extends it in place and puts it back (put()), so the
// previous turn is not kept beside it; a second request extending the same turn while it is
// taken finds nothing and takes the full path. What a turn keeps (Turn::bytes()): the body, the
// prompt text, 4 bytes per id, 16 per cut, 9 per message; bounded by TurnLimits (an entry
// larger than max_bytes alone is not kept). Thread-safe (one mutex; comparing a body with a
// turn's runs outside it, on a turn no other thread holds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "render/template/qwen3_native.h"
#include "render/tokenize/tokenizer.h"

namespace ramjet::render {

struct TurnLimits {
  size_t max_entries = 1024;
  size_t max_bytes = 64u << 20;  // Turn::bytes() of all turns
};

struct TurnStats {
  uint64_t resumed = 0;     // follow-ups rendered from a turn (the caller counts: count_resumed)
  uint64_t misses = 0;      // take() found no turn the body extends
  uint64_t declined = 0;    // a turn was found but the follow-up could not be resumed from it
  uint64_t stored = 0;      // turns put
  uint64_t evictions = 0;   // turns dropped to stay within the limits
  uint64_t not_stored = 0;  // turns larger than max_bytes alone
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

// Who rendered a turn: a turn is resumed only by the same tokenizer, renderer and profile.
struct TurnKey {
  uint64_t tokenizer = 0;  // Tokenizer::serial(), never reused in a process
  const void* renderer = nullptr;
  const void* profile = nullptr;
  bool operator==(const TurnKey&) const = default;
};

struct Turn {
  TurnKey key;
  std::string body;               // the request body
  std::vector<uint32_t> msg_end;  // offset in body right after each message (MessageSpans::ends)
  std::string model, cache_salt;  // the namespace fields render_routing_body reads
  qwen3::TurnState render;        // the formatter's state
  std::string text;               // the prompt
  std::vector<uint32_t> ids;      // encode(text)
  std::vector<Tokenizer::Cut> cuts;  // every cut of text, with the ids before it
  size_t accounted = 0;           // bytes() when put

  size_t bytes() const;
  // body[msg_end.back(), end): what follows the last message; empty without messages.
  std::string_view rest() const;
};

class TurnCache {
 public:
  explicit TurnCache(TurnLimits limits = {});
  TurnCache(const TurnCache&) = delete;
  TurnCache& operator=(const TurnCache&) = delete;

  // The turn of `key` that `body` extends (the longest, when several do), taken out of the
  // cache; nullptr when none. The caller puts a turn back with put() or drops it. Looks at every
  // turn under the lock (a key, two sizes, the 64 bytes before its last message's end and its
  // rest: at most max_entries of them), then compares the one body prefix outside it.
  std::unique_ptr<Turn> take(const TurnKey& key, std::string_view body);
  void put(std::unique_ptr<Turn> turn);
  void count_resumed(bool resumed);  // a taken turn was resumed (true) or declined (false)

  TurnStats stats() const;
  void clear();

 private:
  using Lru = std::list<std::unique_ptr<Turn>>;  // most recent first
  void erase_locked(Lru::iterator it);

  const TurnLimits limits_;
  mutable std::mutex mu_;
  Lru lru_;
  TurnStats stats_;
};

}  // namespace ramjet::render
