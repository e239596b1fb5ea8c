// cache/kv MessagePack reader: the bounded reads decode.cc is built from. Every read is checked
// against the bytes left; a container count is checked against the bytes left before the caller
// reserves anything (each element takes at least one byte, a map entry two); skip() is iterative
// with a bounded depth. The first failure is kept as a DecodeError. Internal to cache/kv.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "cache/kv/codec.h"

namespace ramjet::cache::kv::msgpack {

enum class T : uint8_t {
  kNil, kBool, kUint, kInt, kFloat, kStr, kBin, kArray, kMap, kExt, kReserved
};

inline T type_of(uint8_t b) {
  if (b <= 0x7f) return T::kUint;
  if (b <= 0x8f) return T::kMap;
  if (b <= 0x9f) return T::kArray;
  if (b <= 0xbf) return T::kStr;
  if (b >= 0xe0) return T::kInt;
  switch (b) {
    case 0xc0: return T::kNil;
    case 0xc1: return T::kReserved;
    case 0xc2: case 0xc3: return T::kBool;
    case 0xc4: case 0xc5: case 0xc6: return T::kBin;
    case 0xc7: case 0xc8: case 0xc9: return T::kExt;
    case 0xca: case 0xcb: return T::kFloat;
    case 0xcc: case 0xcd: case 0xce: case 0xcf: return T::kUint;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: return T::kInt;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: return T::kExt;
    case 0xd9: case 0xda: case 0xdb: return T::kStr;
    case 0xdc: case 0xdd: return T::kArray;
    default: return T::kMap;  // 0xde, 0xdf
  }
}

// An integer as read: non-negative values (whatever their encoding) are `u`, negative ones `i`.
struct Int {
  bool negative = false;
  uint64_t u = 0;
  int64_t i = 0;
};

constexpr uint32_t kDepthCap = 64;

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : p_(in.data()), end_(in.data() + in.size()) {}

  size_t left() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* pos() const { return p_; }
  void seek(const uint8_t* p) { p_ = p; }
  const DecodeError& error() const { return err_; }

  bool fail(DecodeErrc code, std::string_view message) {
    if (!failed_) err_ = DecodeError{code, message};
    failed_ = true;
    return false;
  }
  bool truncated() {
    return fail(DecodeErrc::kTruncated, "a value runs past the end of the payload");
  }

  // The type of the next value, without consuming it.
  bool peek(T& t) {
    if (p_ == end_) return truncated();
    t = type_of(*p_);
    if (t == T::kReserved) return fail(DecodeErrc::kInvalidMsgpack, "the reserved byte 0xc1");
    return true;
  }

  // The callers below are only called when peek() gave the matching type.
  void nil() { ++p_; }

  bool integer(Int& out) {
    const uint8_t b = *p_++;
    if (b <= 0x7f) {
      out = Int{false, b, 0};
      return true;
    }
    if (b >= 0xe0) {
      out = Int{true, 0, static_cast<int8_t>(b)};
      return true;
    }
    uint64_t v = 0;
    switch (b) {
      case 0xcc: case 0xcd: case 0xce: case 0xcf:
        if (!be(size_t{1} << (b - 0xcc), v)) return false;
        out = Int{false, v, 0};
        return true;
      default: {  // 0xd0..0xd3: int8..int64
        const size_t n = size_t{1} << (b - 0xd0);
        if (!be(n, v)) return false;
        const int shift = static_cast<int>(64 - 8 * n);
        const auto s = static_cast<int64_t>(v << shift) >> shift;  // sign-extend
        out = s < 0 ? Int{true, 0, s} : Int{false, static_cast<uint64_t>(s), 0};
        return true;
      }
    }
  }

  bool floating(double& out) {
    const uint8_t b = *p_++;
    uint64_t v = 0;
    if (b == 0xca) {
      if (!be(4, v)) return false;
      const auto bits = static_cast<uint32_t>(v);
      float f;
      std::memcpy(&f, &bits, 4);
      out = f;
    } else {
      if (!be(8, v)) return false;
      std::memcpy(&out, &v, 8);
    }
    return true;
  }

  bool str(std::string_view& out) {
    const uint8_t b = *p_++;
    uint64_t n = 0;
    if (b <= 0xbf) {
      n = b & 0x1f;
    } else if (!be(size_t{1} << (b - 0xd9), n)) {
      return false;
    }
    if (n > left()) return truncated();
    out = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }

  bool bin(std::span<const uint8_t>& out) {
    const uint8_t b = *p_++;
    uint64_t n = 0;
    if (!be(size_t{1} << (b - 0xc4), n)) return false;
    if (n > left()) return truncated();
    out = std::span<const uint8_t>(p_, n);
    p_ += n;
    return true;
  }

  // A container header; its count is checked against the bytes left (a map entry is >= 2 bytes).
  bool container(uint32_t& n) {
    const uint8_t b = *p_++;
    const T t = type_of(b);
    uint64_t v = 0;
    if (b <= 0x9f) {
      v = b & 0x0f;
    } else if (!be(b == 0xdc || b == 0xde ? 2 : 4, v)) {
      return false;
    }
    if (v * (t == T::kMap ? 2 : 1) > left()) return truncated();
    n = static_cast<uint32_t>(v);
    return true;
  }

  bool ext() {
    const uint8_t b = *p_++;
    uint64_t n = 0;
    if (b >= 0xd4) {
      n = uint64_t{1} << (b - 0xd4);
    } else if (!be(size_t{1} << (b - 0xc7), n)) {
      return false;
    }
    if (n + 1 > left()) return truncated();  // the type byte, then the data
    p_ += n + 1;
    return true;
  }

  // Skips one value of any type, iteratively; containers nest at most `max_depth` deep.
  bool skip(uint32_t max_depth) {
    std::array<uint64_t, kDepthCap> open;  // values still to skip in each enclosing container
    const uint32_t depth_limit = std::min(max_depth, kDepthCap);
    uint32_t depth = 0;
    uint64_t todo = 1;
    for (;;) {
      while (todo == 0) {
        if (depth == 0) return true;
        todo = open[--depth];
      }
      --todo;
      T t;
      if (!peek(t)) return false;
      switch (t) {
        case T::kNil: case T::kBool:
          ++p_;
          break;
        case T::kUint: case T::kInt: {
          Int i;
          if (!integer(i)) return false;
          break;
        }
        case T::kFloat: {
          double d;
          if (!floating(d)) return false;
          break;
        }
        case T::kStr: {
          std::string_view s;
          if (!str(s)) return false;
          break;
        }
        case T::kBin: {
          std::span<const uint8_t> b;
          if (!bin(b)) return false;
          break;
        }
        case T::kExt:
          if (!ext()) return false;
          break;
        case T::kArray: case T::kMap: {
          uint32_t n;
          if (!container(n)) return false;
          const uint64_t items = t == T::kMap ? 2ull * n : n;
          if (items == 0) break;
          if (depth >= depth_limit) return fail(DecodeErrc::kTooDeep, "values nest too deep");
          open[depth++] = todo;
          todo = items;
          break;
        }
        case T::kReserved:
          return false;  // peek() failed already
      }
    }
  }

 private:
  bool be(size_t n, uint64_t& v) {
    if (n > left()) return truncated();
    v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | p_[i];
    p_ += n;
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  DecodeError err_{DecodeErrc::kTruncated, ""};
  bool failed_ = false;
};

}  // namespace ramjet::cache::kv::msgpack
