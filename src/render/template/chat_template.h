// render::chat_template: vLLM's chat-request preprocessing followed by a HuggingFace chat
// template rendered with render::jinja — the prompt text vLLM builds for /v1/chat/completions.
//
// Preprocessing (vLLM chat_utils + serving_chat, see test/data/testdata/goldens/README.md):
//   * assistant tool_calls[].function.arguments JSON-decoded (a JSON string; empty -> {}),
//     an empty tool_calls list dropped;
//   * content null -> ""; a list of content parts is joined with "\n" (text parts) for
//     "string"-format templates, or kept as [{"type":"text","text":...}] for templates that
//     iterate the content ("openai" format, e.g. Qwen3.6);
//   * reasoning / reasoning_content: both set when either is given;
//   * tools as pydantic model_dump(): {"type":"function","function":{"name","description",
//     "parameters"}} (missing fields None);
//   * context = messages, tools (None when absent), documents (None), add_generation_prompt
//     (default true), the tokenizer's special tokens (bos_token, eos_token, ...), then every
//     chat_template_kwargs entry and finally `extra_kwargs`.
#pragma once

#include <boost/json/fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "render/template/jinja/template.h"

namespace ramjet::render {

using RenderError = jinja::RenderError;
using RenderErrc = jinja::RenderErrc;

// Template variables from tokenizer_config.json: bos_token, eos_token, unk_token, pad_token
// (strings or AddedToken objects; null ones are left undefined) and additional_special_tokens.
struct SpecialTokens {
  std::vector<std::pair<std::string, std::string>> tokens;  // name -> token text
  std::vector<std::string> additional;                      // additional_special_tokens
};
jinja::RenderResult<SpecialTokens> special_tokens_from_config(std::string_view tokenizer_config_json);

// The template context for a chat request body (JSON text).
jinja::RenderResult<jinja::Value> build_context(std::string_view request_json,
                                                const SpecialTokens& special,
                                                const jinja::Value& extra_kwargs = {},
                                                bool openai_content_format = false);
// The same for a body the caller has already parsed (as boost::json::parse does: the last of
// duplicate keys kept), skipping the parse — about half of build_context's cost. Values nested
// deeper than 256 containers are refused ("JSON nested too deeply").
jinja::RenderResult<jinja::Value> build_context_parsed(const boost::json::value& request,
                                                       const SpecialTokens& special,
                                                       const jinja::Value& extra_kwargs = {},
                                                       bool openai_content_format = false);

// Whether a template iterates message content (vLLM's "openai" content format).
bool template_uses_openai_content(std::string_view template_source);

struct ChatTemplate {
  std::shared_ptr<const jinja::Template> tpl;
  bool openai_content_format = false;
  static jinja::RenderResult<ChatTemplate> parse(std::string_view source,
                                                 const jinja::Limits& limits = {});
};

// Preprocess `request_json` and render it with the template.
jinja::RenderResult<std::string> render(const ChatTemplate& tpl, std::string_view request_json,
                                        const SpecialTokens& special,
                                        const jinja::Value& extra_kwargs = {},
                                        const jinja::RenderOptions& options = {});
// The same for an already-parsed request body (see build_context above).
jinja::RenderResult<std::string> render_parsed(const ChatTemplate& tpl,
                                               const boost::json::value& request,
                                               const SpecialTokens& special,
                                               const jinja::Value& extra_kwargs = {},
                                               const jinja::RenderOptions& options = {});
// One-shot: parse the template source, then render.
jinja::RenderResult<std::string> render(std::string_view template_source,
                                        std::string_view request_json,
                                        const SpecialTokens& special,
                                        const jinja::Value& extra_kwargs = {},
                                        const jinja::RenderOptions& options = {});

// JSON (Boost.JSON-parsed text) -> Value, keeping object order; bounded nesting.
jinja::RenderResult<jinja::Value> value_from_json(std::string_view json, int max_depth = 256);

}  // namespace ramjet::render
