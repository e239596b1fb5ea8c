// sim/server/openai_reply: the bodies of /v1/chat/completions and /v1/completions answers as
// vLLM 0.32 writes them (entrypoints/openai/chat_completion/serving.py, completion/serving.py,
// their protocol.py models): every field pydantic dumps (nulls included) in the models' order;
// SSE chunks dumped with exclude_unset (only what the serving code sets), the final usage chunk
// with exclude_none; the finish reason on the chunk that carries the last token; the system
// fingerprint on the last chunk (the usage chunk when there is one); usage with
// prompt_tokens_details when --enable-prompt-tokens-details (cached_tokens always, 0 included,
// and on chat the created_cache_tokens of the request's first output). The engine loop and the
// socket are openai_serve.cc's.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ramjet::sim {

struct TokenUsage {
  uint32_t prompt = 0;
  uint32_t completion = 0;
  uint32_t cached = 0;   // num_cached_tokens (the prefix hit at first scheduling)
  uint32_t created = 0;  // num_cache_creation_tokens (PrefillStats.finalize)
};

struct OpenAiReplyShape {
  bool chat = true;
  std::string id{};
  int64_t created = 0;
  std::string model{};
  std::string fingerprint{};  // "vllm-<version>-<hash8>"
  bool details = false;       // --enable-prompt-tokens-details
  bool include_usage = false;
  bool continuous_usage = false;
};

class OpenAiReply {
 public:
  explicit OpenAiReply(OpenAiReplyShape shape) : s_(std::move(shape)) {}

  // Streaming: each returns one "data: …\n\n" event (chat's role chunk: the first engine output).
  std::string role_chunk(uint32_t prompt_tokens) const;
  // Generated text; `usage` holds the counts so far (this chunk's tokens included); `finish`
  // set on the chunk with the last token.
  std::string text_chunk(std::string_view text, const TokenUsage& usage, std::optional<std::string_view> finish) const;
  std::string usage_chunk(const TokenUsage& usage) const;  // include_usage: after the last chunk

  // Non-streaming: the whole body.
  // `kv`: the kv_transfer_params of a prefill leg (vLLM's response field; null otherwise).
  std::string full(std::string_view text, std::string_view finish, const TokenUsage& usage,
                   const boost::json::object* kv = nullptr) const;

 private:
  boost::json::object head() const;  // id, object, created, model
  boost::json::object running_usage(const TokenUsage& usage) const;  // continuous_usage_stats

  OpenAiReplyShape s_;
};

}  // namespace ramjet::sim
