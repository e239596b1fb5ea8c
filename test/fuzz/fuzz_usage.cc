// Fuzz target for request/usage: upstream response bodies (SSE or JSON) are untrusted bytes.
// The input is fed whole and in pseudo-random chunks (seeded from the input, so a crash
// reproduces); both feedings must agree exactly, and the first-token signal fires at most once.
// The byte scan that skips SSE events which cannot change the Usage any more is held to parsing
// every event (UsageLimits::parse_every_event), each from its first byte: the same Usage and
// signal, no more failures (and as many while no token was generated: an event read on from a
// repeated opening is accepted exactly when it would be whole).
// And common/json_tape's reader is held to the frozen simdjson reader (oracle/usage_reference): the
// input as one JSON body is accepted or refused alike and, accepted, reads as the same Usage; one
// whose allowance refuses its growth is refused, or read as without it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/json_tape.h"
#include "oracle/usage_reference.h"
#include "request/usage/usage.h"

namespace {

using ramjet::request::Endpoint;
using ramjet::request::Usage;
using ramjet::request::UsageAccumulator;
using ramjet::request::UsageLimits;

void check(bool ok) {
  if (!ok) std::abort();
}

struct Outcome {
  Usage usage;
  uint32_t failures = 0;
  int signals = 0;
};

Outcome run(std::string_view input, Endpoint e, bool sse, UsageLimits limits, uint64_t seed) {
  UsageAccumulator acc(e, sse, limits);
  Outcome out;
  uint64_t x = seed | 1;
  while (!input.empty()) {
    size_t n = input.size();
    if (seed != 0) {  // xorshift64: chunks of 1..64 bytes
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      n = std::min<size_t>(n, 1 + x % 64);
    }
    // The relay marks a body's last bytes (the whole feeding and some seeds): the same reading
    // as finish() gives.
    if (acc.feed(input.substr(0, n), (seed == 0 || (seed & 2) != 0) && n == input.size())) ++out.signals;
    input.remove_prefix(n);
  }
  acc.finish();
  acc.finish();
  out.usage = acc.usage();
  out.failures = acc.parse_failures();
  check(out.signals <= 1);
  check(out.signals == 0 || (sse && out.usage.generated));
  check(out.usage.finish_reason.size() <= 64);
  return out;
}

void check_same(const Outcome& a, const Outcome& b) {
  check(a.usage.prompt_tokens == b.usage.prompt_tokens);
  check(a.usage.cached_tokens == b.usage.cached_tokens);
  check(a.usage.completion_tokens == b.usage.completion_tokens);
  check(a.usage.finish_reason == b.usage.finish_reason);
  check(a.usage.generated == b.usage.generated);
  check(a.failures == b.failures);
  check(a.signals == b.signals);
}

// The input as one JSON body, read by request/usage and by the simdjson reference.
void check_reference(std::string_view input, Endpoint e, const UsageLimits& limits) {
  if (input.size() > limits.max_json_body_bytes) return;  // not parsed: counted as too large
  Usage ref;
  bool failed = false;
  ramjet::oracle::usage_reference_event(input, e, limits.max_json_depth, ref, failed);
  UsageAccumulator acc(e, /*sse=*/false, limits);
  acc.feed(input);
  acc.finish();
  check(acc.parse_failures() == (failed ? 1u : 0u));
  if (failed) return;
  const Usage& u = acc.usage();
  check(u.prompt_tokens == ref.prompt_tokens);
  check(u.cached_tokens == ref.cached_tokens);
  check(u.completion_tokens == ref.completion_tokens);
  check(u.finish_reason == ref.finish_reason);
  check(u.generated == ref.generated);
}

// A tape whose allowance refuses past `limit` bytes: refused, or read as without one; and the
// same tape reads the input as before afterwards (the refused parse wrote only what it held).
struct Limit final : ramjet::json_tape::Allowance {
  size_t limit;
  explicit Limit(size_t l) : limit(l) {}
  bool allow(size_t needed, size_t bytes) override {
    check(needed <= bytes);
    return bytes <= limit;
  }
};

void check_allowance(std::string_view input, uint64_t seed) {
  using ramjet::json_tape::Tape;
  Tape whole;
  const bool ok = whole.parse(input, 32);
  Tape t;
  Limit limit((seed % 300) * Tape::kEntryBytes);
  const bool limited = t.parse(input, 32, &limit);
  check(!limited || !t.refused());
  if (!t.refused()) {
    check(limited == ok);
    if (ok) check(t.entries() == whole.entries());
  }
  check(t.parse(input, 32) == ok);
  if (ok) check(t.entries() == whole.entries() && t.next(Tape::root()) == whole.next(Tape::root()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  uint64_t seed = 0x9e3779b97f4a7c15ull ^ size;
  for (size_t i = 0; i < size && i < 16; ++i) seed = (seed ^ data[i]) * 0x100000001b3ull;

  check_allowance(input, seed);

  UsageLimits defaults;
  UsageLimits tight;
  tight.max_line_bytes = 96;
  tight.max_json_body_bytes = 512;
  tight.max_json_depth = 6;
  // Limits outermost: a depth change re-sizes the per-thread parser.
  for (const UsageLimits& limits : {defaults, tight}) {
    for (Endpoint e :
         {Endpoint::kChat, Endpoint::kCompletions, Endpoint::kResponses, Endpoint::kMessages}) {
      check_reference(input, e, limits);
      for (bool sse : {true, false}) {
        Outcome whole = run(input, e, sse, limits, 0);
        Outcome chunked = run(input, e, sse, limits, seed);
        check_same(whole, chunked);
        UsageLimits every = limits;
        every.parse_every_event = true;
        Outcome reference = run(input, e, sse, every, seed);
        check(whole.failures <= reference.failures);
        // Until the first generated token every event is read, whole or on from a repeated
        // opening: as many refused.
        if (!whole.usage.generated) check(whole.failures == reference.failures);
        reference.failures = whole.failures;
        check_same(whole, reference);
        // The buckets are total functions of whatever was extracted.
        check(!ramjet::request::finish_bucket(whole.usage.finish_reason).empty());
        check(!ramjet::request::cache_outcome(whole.usage).empty());
      }
    }
  }
  return 0;
}
