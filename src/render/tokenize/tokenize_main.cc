// ramjet-tokenize: encodes text with a tokenizer.json.
//   ramjet-tokenize --tokenizer tokenizer.json [--added-tokens override.json] [--rss]
//                   [--jsonl] [--decode]
// Default: reads all of stdin as one text and prints {"token_ids":[...]}.
// --jsonl: each stdin line is a JSON string; prints one line of comma-separated ids per line
//          (the differential test's input format).
// --rss:   prints the resident memory before and after loading (from /proc/self/statm) to stderr.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include <simdjson.h>

#include "render/tokenize/tokenizer.h"

namespace {

long resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

void print_ids(const std::vector<uint32_t>& ids) {
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line.push_back(',');
    line += std::to_string(ids[i]);
  }
  std::puts(line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, added;
  bool rss = false, jsonl = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc) {
      path = argv[++i];
    } else if (a == "--added-tokens" && i + 1 < argc) {
      added = argv[++i];
    } else if (a == "--rss") {
      rss = true;
    } else if (a == "--jsonl") {
      jsonl = true;
    } else {
      std::fprintf(stderr, "usage: %s --tokenizer tokenizer.json [--added-tokens override.json] "
                           "[--rss] [--jsonl]\n", argv[0]);
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "%s: --tokenizer is required\n", argv[0]);
    return 2;
  }
  const long before = resident_bytes();
  auto tok = ramjet::render::Tokenizer::from_file(path, {}, added);
  if (!tok) {
    std::fprintf(stderr, "load failed (%s): %s\n",
                 std::string(ramjet::render::to_string(tok.error().code)).c_str(),
                 tok.error().message.c_str());
    return 1;
  }
  if (rss) {
    const long after = resident_bytes();
    std::fprintf(stderr, "resident before load %.1f MiB, after %.1f MiB, tokenizer %.1f MiB\n",
                 before / 1048576.0, after / 1048576.0, (after - before) / 1048576.0);
  }
  if (jsonl) {
    std::string line;
    simdjson::dom::parser parser;
    while (std::getline(std::cin, line)) {
      std::string_view text;
      if (parser.parse(line).get_string().get(text) != simdjson::SUCCESS) {
        std::puts("ERROR bad json line");
        continue;
      }
      auto ids = (*tok)->encode(text);
      if (!ids) {
        std::printf("ERROR %s\n", ids.error().message.c_str());
        continue;
      }
      print_ids(*ids);
    }
    return 0;
  }
  const std::string text((std::istreambuf_iterator<char>(std::cin)),
                         std::istreambuf_iterator<char>());
  auto ids = (*tok)->encode(text);
  if (!ids) {
    std::fprintf(stderr, "encode failed: %s\n", ids.error().message.c_str());
    return 1;
  }
  std::string out = "{\"token_ids\":[";
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i) out.push_back(',');
    out += std::to_string((*ids)[i]);
  }
  out += "]}";
  std::puts(out.c_str());
  return 0;
}
