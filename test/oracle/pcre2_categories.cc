// Dumps PCRE2's (10.42: Unicode 14) classification of every code point for the general
// categories the tokenizers' patterns use: one line per class, "L 0041 005A ..." as ranges.
// Built and run by unicode_delta.mjs: g++ -O2 pcre2_categories.cc -lpcre2-8
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <string>

int main() {
  for (const char* cls : {"L", "M", "N", "P", "S"}) {
    const std::string pat = std::string("\\p{") + cls + "}";
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.c_str()), pat.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &off, nullptr);
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    std::printf("%s", cls);
    long start = -1;
    for (long cp = 0; cp <= 0x110000; ++cp) {
      bool in = false;
      if (cp < 0x110000 && (cp < 0xD800 || cp > 0xDFFF)) {
        char buf[4];
        int n = 0;
        if (cp < 0x80) { buf[n++] = static_cast<char>(cp); }
        else if (cp < 0x800) { buf[n++] = static_cast<char>(0xC0 | (cp >> 6)); buf[n++] = static_cast<char>(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) { buf[n++] = static_cast<char>(0xE0 | (cp >> 12)); buf[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); buf[n++] = static_cast<char>(0x80 | (cp & 0x3F)); }
        else { buf[n++] = static_cast<char>(0xF0 | (cp >> 18)); buf[n++] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F)); buf[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); buf[n++] = static_cast<char>(0x80 | (cp & 0x3F)); }
        in = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(buf), n, 0, 0, md, nullptr) >= 0;
      }
      if (in && start < 0) start = cp;
      if (!in && start >= 0) {
        std::printf(" %lX-%lX", start, cp - 1);
        start = -1;
      }
    }
    std::printf("\n");
    pcre2_match_data_free(md);
    pcre2_code_free(re);
  }
}
