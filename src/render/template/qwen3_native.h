// render::qwen3: a native formatter for the Qwen3 chat template — the same text the pinned HF
// template renders through render::chat_template (vLLM's preprocessing + Jinja), byte for byte,
// without the interpreter. It is used only in place of a template whose SHA-256 it lists
// (kTemplateSha256) and only for requests it fully covers; for anything else it answers a
// Fallback and the caller renders with Jinja (render/prompt/prompt.cc counts them).
//
// Covered: messages with role system/user/assistant/tool; content a string, null, or a list of
// text parts ({"type":"text"|"input_text","text"} or strings: joined with "\n"); reasoning /
// reasoning_content strings; tool_calls with a non-empty `function` object, a string name and
// arguments (a JSON string, decoded, or a JSON value); tools with a `function` object;
// add_generation_prompt (bool); chat_template_kwargs enable_thinking only. Everything else
// (other roles, other content or kwargs, other value types, nesting deeper than kMaxDepth) is a
// Fallback, never a guess.
//
// Follow-up turns (with a RenderPrefixCache): the template shows an assistant message's
// reasoning only after the last user query (`ns.last_query_index`: the last user message that is
// not a wrapped <tool_response>), and only then forces a <think> block on the last message.
// So the rendering of messages [0, b) is final — the same in every extension of the
// conversation — when message b-1 is a user query ("final" entries, stored at the last query).
// A longer prefix that ends before the last message is valid for extensions that add no new
// user query ("conditional" entries: an agent's tool loop); its key also records whether the
// message after it is a tool message (a tool message's <|im_end|> depends on its successor).
// Keys are 128-bit hashes of the parsed messages (role, content, reasoning, tool calls), the
// tools and the formatter's identity. qwen3_native_test and test/oracle/qwen3_native_oracle.py
// check that a follow-up renders exactly as a full render would.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/fwd.hpp>

#include "common/result.h"
#include "render/template/render_prefix_cache.h"

namespace ramjet::render::qwen3 {

// The template texts (SHA-256 of the Jinja source) this formatter reproduces: the Qwen3
// template of test/data/testdata/models/qwen3 (Qwen/Qwen3-8B's tokenizer_config.json
// chat_template).
inline constexpr std::array<std::string_view, 1> kTemplateSha256 = {
    "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
};
bool reproduces(std::string_view template_sha256);

// Why a request is left to the Jinja template (a metric label each).
enum class Fallback : uint8_t {
  kRequest,     // not an object, or messages / tools / kwargs of the wrong type
  kMessages,    // no messages, or more than Limits::max_messages
  kRole,        // a role other than system, user, assistant, tool (or not a string)
  kContent,     // content that is not a string, null or a list of text parts
  kReasoning,   // reasoning / reasoning_content that is not a string
  kToolCall,    // a tool call shape the formatter does not model
  kTools,       // a tool without a function object
  kKwargs,      // a chat_template_kwargs key other than enable_thinking
  kGeneration,  // add_generation_prompt that is not a bool
  kLimit,       // nesting deeper than kMaxDepth, or output larger than max_output_bytes
};
inline constexpr size_t kFallbackCount = 10;
std::string_view to_string(Fallback f);

inline constexpr int kMaxDepth = 64;  // JSON nesting inside a message / tool (Jinja allows 256)

struct Limits {
  size_t max_output_bytes = 256u << 20;
  size_t max_messages = 1u << 16;
};

struct Formatted {
  std::string text;
  size_t reused_messages = 0;  // messages whose rendering came from the prefix cache
  size_t reused_bytes = 0;
};

// What a follow-up turn needs of a request's rendering (exact routing's turn cache,
// render/prompt/turn_cache.h): each message's role and whether it is a query, where its
// rendering ends in the text, and the request's own settings.
struct TurnState {
  static constexpr uint32_t kUnknown = UINT32_MAX;  // an end inside a prefix the cache supplied
  std::vector<uint8_t> kinds;  // per message: role (0 system, 1 user, 2 assistant, 3 tool) | 4 if a query
  std::vector<uint32_t> ends;  // per message: the text's size after its rendering (or kUnknown)
  size_t last_query = 0;
  bool has_query = false;
  bool generation = true;      // add_generation_prompt
  bool thinking_off = false;   // enable_thinking false
};

// The prompt text of a parsed chat-completions request (as boost::json::parse gives it). With
// `turn`: also what a follow-up needs (extend()).
ramjet::Result<Formatted, Fallback> format(const boost::json::value& request,
                                           RenderPrefixCache* prefixes = nullptr,
                                           const Limits& limits = {}, TurnState* turn = nullptr);

// Follow-up turns from a TurnState: the request it was taken from with messages appended and
// nothing else changed (the caller proves that byte for byte). Every message before
// rerender_from() renders as it did: no new query leaves the last query, and with it each
// message's <think> block, where it was, and of the previous messages only the last one's
// rendering can depend on what follows it (an assistant message's forced <think>, a tool
// message's <|im_end|>; a user or system message's never does); a new query hides the reasoning
// of every message after the previous last query, and no earlier one. 0: the turn had no query
// (last_query would move with the length): not resumed.
size_t rerender_from(const TurnState& turn, bool query_appended);
// Whether any of `messages` is a query (a user message that is not a wrapped <tool_response>);
// a Fallback for a message the formatter does not model.
ramjet::Result<bool, Fallback> any_query(std::span<const boost::json::value* const> messages);
// Renders the follow-up: `messages` are the parsed messages from index `first` on (the turn's
// messages from `first`, then the appended ones), `first` at most rerender_from() and at least 1,
// with a known end before it. `text` (the turn's prompt) is cut back to where message `first`
// began and the rest is rendered after it; `turn` becomes the follow-up's. Returns the bytes of
// `text` kept. On a Fallback `text` and `turn` are left half-done: the caller drops them.
ramjet::Result<size_t, Fallback> extend(TurnState& turn, std::string& text, size_t first,
                                        std::span<const boost::json::value* const> messages,
                                        const Limits& limits = {});

// Python json.dumps(ensure_ascii=False) of a parsed value, as the template's tojson writes it
// (exposed for tests). False when nesting exceeds kMaxDepth.
bool dump_json(const boost::json::value& v, std::string& out, int depth = 0);

}  // namespace ramjet::render::qwen3
