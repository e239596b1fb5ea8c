#include "text.h"

#include "common/utf8.h"

#include <array>
#include <cmath>

namespace ramjet::bench {
namespace {

// Common English words of one to three letters (128 of them, so a draw is 7 bits).
constexpr std::array<std::string_view, kVocabSize> kVocab = {
    "a", "I", "an", "as", "at", "be", "by", "do", "go", "he", "if", "in", "is", "it", "me", "my",
    "no", "of", "on", "or", "so", "to", "up", "us", "we", "all", "and", "any", "are", "ask",
    "bad", "big", "bit", "box", "boy", "but", "buy", "can", "car", "cut", "day", "did", "end",
    "eye", "far", "few", "for", "fun", "get", "got", "had", "has", "her", "him", "his", "hot",
    "how", "its", "job", "key", "kid", "law", "lay", "let", "lie", "low", "man", "map", "may",
    "men", "mix", "new", "nor", "not", "now", "odd", "off", "oil", "old", "one", "our", "out",
    "own", "pay", "per", "put", "ran", "red", "run", "sat", "saw", "say", "see", "set", "she",
    "sit", "six", "sky", "son", "sun", "tax", "ten", "the", "too", "top", "try", "two", "use",
    "via", "war", "way", "who", "why", "win", "yes", "yet", "you", "age", "air", "art", "bed",
    "cup", "dog", "egg", "fit", "gas", "ice", "leg"};


bool hex4(std::string_view s, size_t at, uint32_t& v) {
  if (at + 4 > s.size()) return false;
  v = 0;
  for (size_t i = at; i < at + 4; ++i) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
    else return false;
  }
  return true;
}

}  // namespace

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Rng::next() {
  uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Rng::exponential(double rate) { return -std::log1p(-uniform()) / rate; }

std::string_view vocab_word(size_t i) { return kVocab[i % kVocabSize]; }

namespace {
// Seven bits of a 64-bit draw per word, nine words per draw.
class WordStream {
 public:
  explicit WordStream(uint64_t seed) : rng_(seed) {}
  std::string_view next() {
    if (left_ < 7) {
      bits_ = rng_.next();
      left_ = 63;
    }
    std::string_view w = kVocab[bits_ & (kVocabSize - 1)];
    bits_ >>= 7;
    left_ -= 7;
    return w;
  }

 private:
  Rng rng_;
  uint64_t bits_ = 0;
  int left_ = 0;
};
}  // namespace

void append_words(std::string& out, uint64_t seed, size_t words) {
  WordStream ws(seed);
  for (size_t i = 0; i < words; ++i) {
    out.push_back(' ');
    out.append(ws.next());
  }
}

void append_text_bytes(std::string& out, uint64_t seed, size_t bytes) {
  WordStream ws(seed);
  const size_t start = out.size();
  while (out.size() - start < bytes) {
    out.push_back(' ');
    out.append(ws.next());
  }
}

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t run = 0;  // start of the pending run of bytes that need no escaping
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
    }
  }
  out.append(s.data() + run, s.size() - run);
  out.push_back('"');
}

bool append_json_unescaped(std::string& out, std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t bs = s.find('\\', i);
    if (bs == std::string_view::npos) {
      out.append(s.data() + i, s.size() - i);
      return true;
    }
    out.append(s.data() + i, bs - i);
    if (bs + 1 >= s.size()) return false;
    char e = s[bs + 1];
    i = bs + 2;
    switch (e) {
      case '"': out.push_back('"'); break;
      case '\\': out.push_back('\\'); break;
      case '/': out.push_back('/'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'u': {
        uint32_t cp = 0;
        if (!hex4(s, i, cp)) return false;
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {  // high surrogate: expect a low one
          uint32_t lo = 0;
          if (i + 6 <= s.size() && s[i] == '\\' && s[i + 1] == 'u' && hex4(s, i + 2, lo) &&
              lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
          } else {
            cp = 0xFFFD;
          }
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          cp = 0xFFFD;
        }
        append_utf8(out, cp);
        break;
      }
      default: return false;
    }
  }
  return true;
}

}  // namespace ramjet::bench
