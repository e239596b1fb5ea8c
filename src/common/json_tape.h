// common/json_tape: the validating JSON reader of request bodies (request/prepare), response
// bodies and SSE events (request/usage).
//
// One pass over the bytes checks the whole document as simdjson's DOM parser does (grammar,
// UTF-8, escapes and surrogate pairs, control characters in strings, numbers that fit 64 bits
// or a finite double, the nesting limit) and records a flat tape of its values: a container's
// entry knows where its subtree ends, a string keeps its place in the input (unescaped only
// when asked for). What accounting reads from an event is a handful of keys: for the 484-byte
// chat.completion of bench/instructions_per_request.sh, simdjson's parse and the walk of its tape
// cost ~7,300 instructions, this reader and its walk ~4,900 when it replaced them (~4,300 since
// its state moved into locals). The differential test and
// fuzz_usage hold it to the frozen simdjson reader (test/oracle/usage_reference.cc): the same
// documents accepted, the same values read. Strings are scanned 16 bytes at a time; a byte past
// ASCII is checked one sequence at a time (text in other scripts reads slower than simdjson's
// vector UTF-8 check would).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ramjet::json_tape {

enum class Kind : uint8_t {
  kNull,
  kTrue,
  kFalse,
  kString,
  kUint,    // an integer >= 0 (also -0), in u
  kNegInt,  // an integer < 0, its magnitude in u
  kDouble,  // a number with a fraction or an exponent (read from the input when asked for)
  kArray,
  kObject,
};

// A backslash escape at p (p[0] == '\\'): its length (2, 6, or 12 for a surrogate pair), or 0
// when it is not one simdjson accepts; its code point in *cp when cp is given.
size_t escape_at(const char* p, const char* end, uint32_t* cp);

// What a parse may hold. Before the tape grows past the entries it holds, allow() is asked
// whether it may, when the document has needed `needed` bytes of entries so far and the tape
// would then hold `bytes` (its capacity doubles); false ends the parse: parse() returns false and
// refused() true (the rest of the document is read into the entries already held, so no byte
// more is taken). The first 64 entries, and what an earlier parse left (trim()), are not asked for.
class Allowance {
 public:
  virtual bool allow(size_t needed, size_t bytes) = 0;

 protected:
  ~Allowance() = default;
};

class Tape {
 public:
  using Index = uint32_t;

  // Reads `json` (which must outlive the tape's use) with at most `max_depth` nested non-empty
  // containers, as simdjson::dom::parser's max_depth counts them. False: not a valid document,
  // or (refused()) one whose tape `allowance` would not let grow.
  bool parse(std::string_view json, size_t max_depth, Allowance* allowance = nullptr);
  // Whether the last parse() stopped because its allowance refused more memory.
  bool refused() const { return refused_; }
  // The bytes an entry takes (a document of n values holds n entries), and the last document's.
  static constexpr size_t kEntryBytes = 24;
  Index entries() const { return used_; }

  // Frees the storage a large document grew (the tape is kept per thread).
  void trim(size_t retained_nodes);

  static constexpr Index root() { return 0; }
  Kind kind(Index i) const { return nodes_[i].kind; }
  // The entry after i's subtree: its next sibling, or its container's end.
  Index next(Index i) const { return nodes_[i].next; }
  uint64_t uint_value(Index i) const { return nodes_[i].u; }
  // A kNegInt's value (from -2^63 to -1).
  int64_t negative_value(Index i) const { return static_cast<int64_t>(0 - nodes_[i].u); }
  // A kDouble's value, read from the input at each call (while the input lives).
  double double_value(Index i) const;

  // A string's value, unescaped: a view of the input, or of the tape's own copy for a string with
  // escapes (made at its first call, kept). Valid until the next parse() or trim().
  std::string_view string(Index i) const {
    const Node& n = nodes_[i];
    if (!n.escaped) return {input_.data() + n.off, n.len};
    return unescaped(i);
  }
  // Whether a string's value is empty (no unescaping needed).
  bool string_empty(Index i) const { return nodes_[i].len == 0; }
  // Where a string starts in the input: the byte after its opening quote.
  uint32_t string_offset(Index i) const { return nodes_[i].off; }
  // A string as the input spells it, between its quotes, and whether that holds an escape.
  std::string_view raw_string(Index i) const { return input_.substr(nodes_[i].off, nodes_[i].len); }
  bool escaped(Index i) const { return nodes_[i].escaped; }
  // Whether an array or object has members.
  bool container_empty(Index i) const { return nodes_[i].next == i + 1; }

  // An object's members: for (Index k = first_member(o); k != end(o); k = next_member(k)),
  // k being the key (a string) and k + 1 the value.
  static Index first_member(Index object) { return object + 1; }
  Index next_member(Index key) const { return nodes_[key + 1].next; }
  // An array's elements: for (Index e = first_element(a); e != end(a); e = next(e)).
  static Index first_element(Index array) { return array + 1; }
  Index end(Index container) const { return nodes_[container].next; }

 private:
  struct Node {
    Kind kind;
    bool escaped;  // strings: holds at least one backslash escape
    Index next;
    uint32_t off;  // strings: the first byte after the opening quote; doubles: the first byte
    uint32_t len;  // strings: raw bytes up to the closing quote; doubles: the number's bytes
    union {
      uint64_t u;  // kUint: the value; kNegInt: its magnitude
      struct {       // an escaped string once unescaped (at in `unescaped_`; at == 0: not yet,
        uint32_t at;  // 1 + the offset otherwise)
        uint32_t size;
      } copy;
    };
  };

  bool parse_number(const char*& p, const char* end, Node& node);
  std::string_view unescaped(Index i) const;
  void grow();
  static_assert(sizeof(Node) == kEntryBytes);

  std::string_view input_;
  Allowance* allowance_ = nullptr;  // the current parse's
  bool refused_ = false;
  // cap_ + 1 entries (the spare: a container opened at a refused growth keeps its index, cap_);
  // the first used_ hold the tape.
  std::unique_ptr<Node[]> storage_;
  Node* nodes_ = nullptr;
  Index cap_ = 0;
  Index used_ = 0;
  std::vector<Index> open_;  // the containers around the current value (its size: what parse() may use)
  // The unescaped escaped strings of the current document, each made once: reserved to the
  // input's size at the first (they never take more), so no earlier view moves.
  mutable std::string unescaped_;
};

}  // namespace ramjet::json_tape
