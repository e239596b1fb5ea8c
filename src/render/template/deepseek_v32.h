// render::deepseek_v32: the DeepSeek-V3.2 prompt encoder that vLLM runs in Python
// (`--tokenizer-mode deepseek_v32`: vllm/tokenizers/deepseek_v32_encoding.py, from
// deepseek-ai/DeepSeek-V3.2 encoding/encoding_dsv32.py), in C++.
//
// Input: an OpenAI chat-completions request body (messages, tools?, chat_template_kwargs?).
// Output: the prompt text vLLM builds for it, byte for byte:
//   * `chat_template_kwargs.thinking` (Python truthiness) selects thinking mode; every other
//     kwarg (enable_thinking, reasoning_effort, ...) is ignored, as vLLM ignores it;
//   * a non-empty `tools` list inserts a leading {"role": "system", tools} message whose text is
//     the "## Tools" block with DSML calling instructions and each function as JSON, and turns
//     drop_thinking off;
//   * user/developer turns end with `<｜Assistant｜>` + `<think>` (last user turn in thinking
//     mode) or `</think>`; assistant tool calls are DSML <invoke>/<parameter> blocks; tool results
//     are grouped in <function_results>; reasoning is written only for assistant turns after the
//     last user turn in thinking mode;
//   * messages are first post-processed like vLLM chat_utils (content null -> "", tool-call
//     arguments JSON-decoded, "" -> {}, reasoning/reasoning_content aliases).
// JSON values inside the prompt (tool schemas, non-string arguments) are written like Python
// json.dumps(ensure_ascii=False): ", " and ": " separators, Python float repr, dict semantics for
// duplicate keys.
//
// Every input vLLM would reject (its encoder asserts, raises or the request does not validate)
// and every input this encoder does not reproduce exactly (content-part arrays, NaN literals, lone
// surrogates, numbers Python reads differently) is a typed RenderError, never a crash and never a
// guess: the caller then defers to the engine.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ramjet::render::deepseek_v32 {

enum class RenderErrc {
  kBadJson,       // the body is not JSON (or not UTF-8, or has a lone surrogate escape)
  kBadRequest,    // JSON, but not a chat request vLLM accepts (wrong field types)
  kInvalid,       // a conversation vLLM's encoder rejects (assertion / unknown role)
  kUnsupported,   // valid, but not rendered locally (content-part arrays, NaN/Infinity, ...)
  kLimit,         // a Limits bound was exceeded
};

std::string_view to_string(RenderErrc code);

struct RenderError {
  RenderErrc code = RenderErrc::kBadRequest;
  std::string message;  // never contains request text
};

struct Limits {
  size_t max_request_bytes = 64u << 20;
  size_t max_output_bytes = 256u << 20;
  size_t max_messages = 1u << 16;
  size_t max_depth = 128;  // JSON nesting (request and tool-call arguments)
};

struct Options {
  Limits limits;
  bool add_default_bos_token = true;  // encode_messages(add_default_bos_token=True), as vLLM
};

template <typename T>
using RenderResult = ramjet::Result<T, RenderError>;

// The prompt text for one request body.
RenderResult<std::string> encode(std::string_view request_json, const Options& options = {});

// Python json.dumps(ensure_ascii=False) of a JSON document (exposed for tests): the document is
// parsed with Python json.loads semantics and re-serialised.
RenderResult<std::string> python_json_dumps(std::string_view json, const Limits& limits = {});

}  // namespace ramjet::render::deepseek_v32
