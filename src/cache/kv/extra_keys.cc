#include "cache/kv/extra_keys.h"

#include "cache/kv/msgpack_reader.h"

namespace ramjet::cache::kv {

Result<ExtraKeyParts, DecodeError> parse_extra_key(std::string_view entry) {
  msgpack::Reader r(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(entry.data()), entry.size()));
  msgpack::T t;
  uint32_t n = 0;
  if (!r.peek(t)) return r.error();
  if (t != msgpack::T::kArray) return DecodeError{DecodeErrc::kBadField, "an extra_keys entry is not an array"};
  if (!r.container(n)) return r.error();
  ExtraKeyParts parts;
  for (uint32_t i = 0; i < n; ++i) {
    if (!r.peek(t)) return r.error();
    if (t == msgpack::T::kStr) {
      std::string_view s;
      if (!r.str(s)) return r.error();
      parts.strings.push_back(s);
      continue;
    }
    if (t == msgpack::T::kArray) parts.multimodal = true;
    else parts.other = true;
    if (!r.skip(msgpack::kDepthCap)) return r.error();
  }
  if (r.left() != 0) return DecodeError{DecodeErrc::kTrailingBytes, "bytes after an extra_keys entry"};
  return parts;
}

}  // namespace ramjet::cache::kv
