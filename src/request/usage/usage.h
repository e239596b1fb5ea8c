// request/usage: usage and finish accounting from response bodies (JSON or SSE), for
// OpenAI chat/completions, Responses and Anthropic messages. Also the first-generated-token
// signal that phase-aware load uses. Tolerates partial lines across chunks and malformed JSON
// (counted, never fatal). Timing (TTFT, decode rate) is measured by the caller with its clock.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "request/ingress/endpoint.h"

namespace ramjet::request {

struct UsageLimits {
  size_t max_line_bytes = 4u << 20;        // longer SSE lines are skipped and counted
  size_t max_json_body_bytes = 16u << 20;  // larger non-streaming bodies are not parsed (counted)
  uint32_t max_json_depth = 64;
  // Parse every SSE event, even one the byte scan shows can change nothing any more, and each
  // from its first byte (the reference behaviour, for the differential tests and the fuzz
  // target; the same Usage).
  bool parse_every_event = false;
};

struct Usage {
  std::optional<uint64_t> prompt_tokens;      // prompt_tokens | input_tokens (Messages: input_tokens +
                                              // cache_read_input_tokens + cache_creation_input_tokens)
  std::optional<uint64_t> cached_tokens;      // prompt_tokens_details.cached_tokens | cached_tokens | cache_read_input_tokens
                                              // | input_tokens_details.cached_tokens (Responses)
  std::optional<uint64_t> completion_tokens;  // completion_tokens | output_tokens
  std::string finish_reason;                  // raw value of choice 0 / stop_reason / status (<= 64 bytes)
  bool generated = false;                     // at least one generated token/delta was seen
};

// Finish reason buckets: stop (stop, end_turn, completed), length (length, max_tokens,
// incomplete), tool_calls (tool_calls, tool_use), cancelled (cancelled, canceled), other;
// "" -> none.
std::string_view finish_bucket(std::string_view finish_reason);

// full (cached >= prompt > 0), partial (0 < cached), cold (cached == 0), unknown otherwise.
std::string_view cache_outcome(const Usage& u);

class UsageAccumulator {
 public:
  UsageAccumulator(Endpoint endpoint, bool sse, UsageLimits limits = {});

  // Feeds decoded body bytes (transfer framing already removed), in arrival order.
  // Until the first generated token, every SSE event is parsed (a malformed one is a parse
  // failure). After it, an event can only change the finish reason and the usage, so only the
  // events a byte scan finds a non-null usage, finish_reason, stop_reason or status key in (or
  // a \u-escaped ASCII letter, which could spell one) are parsed; the rest, most of a stream,
  // cannot change the Usage and are not parsed (nor counted when malformed).
  // Returns true exactly once: on the call whose bytes completed the first SSE event that
  // carries a generated token (non-empty content/reasoning delta, tool-call delta, Anthropic
  // text/thinking/partial_json delta, Responses string delta, /v1/completions choice text).
  // Always false for JSON bodies.
  // `last` (JSON bodies): these are the body's last bytes, and the call finishes the body as
  // finish() does; one that arrives whole in this call is read where it is, without a copy.
  bool feed(std::string_view bytes, bool last = false);

  // End of body: parses the buffered JSON body, or a trailing SSE line without newline.
  // Idempotent; feed() after finish() is ignored.
  void finish();

  const Usage& usage() const { return usage_; }
  uint32_t parse_failures() const { return parse_failures_; }

 private:
  // must_read: the byte scan already found a key to read in `line` (quiet_lines() stopped at it).
  void on_line(std::string_view line, bool must_read = false);
  bool on_json(std::string_view json);  // returns true when it carried a generated token
  // Where the byte scan of an SSE line starts once a token was generated: after `data:`, the
  // blanks before the payload and the last read event's opening, when the payload repeats it
  // and goes on with a key (an event read on from its opening reads as the whole one, and the
  // opening holds no member extraction reads: a key in it changes nothing); 0 otherwise. It
  // reads only a prefix of `line` without a newline (an opening holds none), so the first line
  // of a longer buffer gives the same answer as the line alone.
  size_t scan_start(std::string_view line) const;
  // `json` starts with the last read event's opening and goes on with a key: read on from there
  // (on_json), scanned from there (scan_start).
  bool repeats_opening(std::string_view json) const;

  Endpoint endpoint_;
  bool sse_;
  UsageLimits limits_;
  Usage usage_;
  uint32_t parse_failures_ = 0;
  bool first_token_reported_ = false;
  bool skipping_long_line_ = false;
  bool body_too_large_ = false;
  bool finished_ = false;
  std::string pending_;  // partial SSE line, or the buffered JSON body
  // The opening of the last SSE event read whole: its first root members (vLLM's id, object,
  // created and model), none of which extraction reads, each with its comma. An event that
  // starts with the same bytes and goes on with a key is read as `{` + the rest: the same
  // acceptance, the same Usage, the repeated members not read again.
  static constexpr size_t kMaxOpeningBytes = 256;
  uint32_t opening_size_ = 0;
  std::array<char, kMaxOpeningBytes> opening_;
};

}  // namespace ramjet::request
