// Replay driver for builds without libFuzzer: runs LLVMFuzzerTestOneInput over every file in
// the corpus directories (or files) given as arguments, then over deterministic pseudo-random
// mutations of that corpus, so ctest exercises each fuzz target on every ordinary build.
// Usage: fuzz_<name> <corpus dir or file>... (RAMJET_FUZZ_REPLAY_ITERATIONS overrides 3000).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

// splitmix64: fixed seed, so a failure reproduces on every machine.
struct Rng {
  uint64_t state = 0x2545f4914f6cdd1dull;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

// Bytes that matter to JSON and SSE decoders, so mutations reach interesting states.
constexpr char kInteresting[] =
    "{}[]\":,\\ \n\r\t0123456789-+.eEtrufalsn[DONE]data:\xc3\xa9\xff\x00";

std::string mutate(std::string s, const std::vector<std::string>& corpus, Rng& rng) {
  const size_t steps = 1 + rng.below(4);
  for (size_t i = 0; i < steps; ++i) {
    const size_t pos = rng.below(s.size() + 1);
    switch (rng.below(6)) {
      case 0:  // flip a byte
        if (!s.empty()) s[rng.below(s.size())] ^= static_cast<char>(1u << rng.below(8));
        break;
      case 1:  // insert an interesting byte
        s.insert(pos, 1, kInteresting[rng.below(sizeof(kInteresting) - 1)]);
        break;
      case 2:  // erase a range
        s.erase(pos, rng.below(16));
        break;
      case 3: {  // duplicate a range
        const std::string piece = s.substr(pos, rng.below(64));
        s.insert(rng.below(s.size() + 1), piece);
        break;
      }
      case 4: {  // splice in part of another corpus file
        const std::string& other = corpus[rng.below(corpus.size())];
        const size_t from = rng.below(other.size() + 1);
        s.insert(pos, other.substr(from, rng.below(128)));
        break;
      }
      default:  // truncate
        s.resize(pos);
        break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> corpus;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::vector<fs::path> files;
    if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
      return 2;
    }
    for (const fs::path& file : files) {
      corpus.push_back(read_file(file));
      run(corpus.back());
    }
  }
  const size_t replayed = corpus.size();
  if (corpus.empty()) corpus.emplace_back();

  size_t iterations = 3000;
  if (const char* env = std::getenv("RAMJET_FUZZ_REPLAY_ITERATIONS")) {
    iterations = std::strtoull(env, nullptr, 10);
  }
  Rng rng;
  for (size_t i = 0; i < iterations; ++i) {
    if (i % 10 == 0) {  // plain random bytes, now and then
      std::string s(rng.below(256), '\0');
      for (char& c : s) c = static_cast<char>(rng.next());
      run(s);
    } else {
      run(mutate(corpus[rng.below(corpus.size())], corpus, rng));
    }
  }
  std::printf("replayed %zu corpus inputs and %zu generated inputs\n", replayed, iterations);
  return 0;
}
