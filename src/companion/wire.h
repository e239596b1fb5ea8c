// companion/wire: little-endian fixed-width fields for the companion's snapshot and frame codecs.
// A reader never reads past its span: every get fails (returns false) once the input is short, and
// the decoder turns that into its typed "truncated" error.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace ramjet::companion {

class WireWriter {
 public:
  explicit WireWriter(std::string& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(uint16_t v) { le(v); }
  void u32(uint32_t v) { le(v); }
  void u64(uint64_t v) { le(v); }
  void bytes(std::span<const uint8_t> b) { out_.append(reinterpret_cast<const char*>(b.data()), b.size()); }
  void bytes(std::string_view b) { out_.append(b); }

 private:
  template <typename T>
  void le(T v) {
    char b[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<char>(static_cast<uint8_t>(v >> (8 * i)));
    out_.append(b, sizeof(T));
  }
  std::string& out_;
};

class WireReader {
 public:
  explicit WireReader(std::span<const uint8_t> in) : in_(in) {}
  size_t left() const { return in_.size() - pos_; }
  size_t pos() const { return pos_; }
  bool u8(uint8_t& v) { return le(v); }
  bool u16(uint16_t& v) { return le(v); }
  bool u32(uint32_t& v) { return le(v); }
  bool u64(uint64_t& v) { return le(v); }
  template <size_t N>
  bool bytes(std::array<uint8_t, N>& out) {
    if (left() < N) return false;
    std::memcpy(out.data(), in_.data() + pos_, N);
    pos_ += N;
    return true;
  }
  bool view(size_t n, std::span<const uint8_t>& out) {
    if (left() < n) return false;
    out = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  const uint8_t* cursor() const { return in_.data() + pos_; }
  void skip(size_t n) { pos_ += n; }  // after checking left()

 private:
  template <typename T>
  bool le(T& v) {
    if (left() < sizeof(T)) return false;
    T x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= static_cast<T>(static_cast<T>(in_[pos_ + i]) << (8 * i));
    v = x;
    pos_ += sizeof(T);
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace ramjet::companion
