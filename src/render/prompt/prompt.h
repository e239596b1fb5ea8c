// render::prompt: one loaded model prompt pipeline — tokenizer.json, plus either a HuggingFace
// chat template (a .jinja file, or the chat_template of a tokenizer_config.json) or a native
// formatter — that turns a chat request into the prompt text and token ids the engine builds.
// Shared by `ramjet render`, `ramjet manifest`, the tokenizer service
// (render/service/tokenizer_service.h) and ramjet-sim's real-tokenizer mode, so all three render a
// request the same way.
//
// Pinning: PromptRenderer::load takes optional SHA-256 digests of the tokenizer and template
// files and refuses files whose bytes differ (a digest names the bytes, not the path).
#pragma once

#include <cstddef>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/fwd.hpp>

#include "common/result.h"
#include "render/template/chat_template.h"
#include "render/tokenize/tokenizer.h"

namespace ramjet::render {

class SessionCache;
struct Turn;

// The native formatters this build has (a C++ port of an engine's own prompt encoder).
inline constexpr std::string_view kNativeDeepseekV32 = "deepseek-v32";
bool native_formatter_known(std::string_view name);
std::string native_formatter_list();  // "deepseek-v32" (for error messages)

// Native formatters for an HF chat template (render/template/qwen3_native.h): named by the model
// profile, used in place of the template only when the loaded template's SHA-256 is one the
// formatter reproduces, and only for the requests it covers; the template renders everything else.
inline constexpr std::string_view kTemplateFormatterQwen3 = "qwen3";
bool template_formatter_known(std::string_view name);

struct PromptSources {
  std::string tokenizer_path;         // tokenizer.json (empty: render only, no token ids)
  std::string tokenizer_sha256;       // 64 hex; checked when set
  std::string added_tokens_path;      // optional added-tokens override
  std::string template_path;          // .jinja, or a tokenizer_config.json with chat_template
  std::string template_sha256;        // 64 hex; checked when set
  std::string native_formatter;       // instead of a template: "deepseek-v32"
  // With a template: a native formatter for it ("qwen3"), used when it reproduces the template.
  std::string template_formatter;
  // bos_token, eos_token, ... for the template: this file, else template_path when it is a
  // tokenizer_config.json, else (sibling_config) a tokenizer_config.json beside tokenizer_path.
  std::string tokenizer_config_path;
  // Off where every file that shapes the prompt must be pinned (the tokenizer service): the
  // special tokens then come only from a tokenizer_config.json given as the template.
  bool sibling_config = true;
};

// What failed. kind is stable (a metric label / CLI error kind), code is the component's code.
enum class PromptErrc {
  kUsage,      // the sources name no formatter, or both, or an unknown native formatter
  kIo,         // a file could not be read
  kDigest,     // a file's SHA-256 differs from the pinned digest
  kTokenizer,  // tokenizer.json does not load
  kTemplate,   // the template does not parse
  kConfig,     // tokenizer_config.json is unusable
  kDecode,     // the request is not a JSON chat request
  kRender,     // the template / formatter failed on this request
  kEncode,     // tokenizing failed
};
std::string_view to_string(PromptErrc kind);  // usage|io|digest|tokenizer|template|config|decode|render|encode

struct PromptError {
  PromptErrc kind;
  std::string code;     // the component's error code ("" when none)
  std::string message;  // never contains request bytes
};

// How chat requests were rendered with a template that has a native formatter.
struct NativeRenderStats {
  bool active = false;      // the loaded template is one the named formatter reproduces
  uint64_t native = 0;      // requests rendered natively
  uint64_t fallbacks = 0;   // requests rendered by the template instead
  std::array<uint64_t, 16> by_reason{};  // fallbacks by qwen3::Fallback
  uint64_t reused_messages = 0;  // messages whose rendering came from the prefix cache
  uint64_t reused_bytes = 0;
};

struct RenderedPrompt {
  std::string text;
  std::vector<uint32_t> ids;  // empty when the renderer has no tokenizer
};

class PromptRenderer {
 public:
  static Result<std::shared_ptr<const PromptRenderer>, PromptError> load(const PromptSources& sources);

  // A chat-completions request body (JSON) -> prompt text and token ids (add_special_tokens=false,
  // as vLLM encodes chat prompts: special tokens come from the template text). With a session
  // cache, a prompt that extends a cached one encodes only its new part (same ids).
  Result<RenderedPrompt, PromptError> chat(std::string_view request_json, SessionCache* cache = nullptr) const;
  // The same for a request the caller has already parsed (Boost.JSON: the last of duplicate keys
  // kept): a template renders it without another parse. The native formatter reads JSON text:
  // `request_json` when the caller has it (the same request, serialised), else the value is
  // serialised here.
  // With `turn` (exact routing's turn cache, render/prompt/turn_cache.h; needs `cache`): when
  // the native formatter renders the request and the cache finds every cut of the text, its
  // formatter state and cuts are set there for a follow-up (turn->render.kinds stays empty
  // otherwise); the text and ids are the caller's to move in.
  Result<RenderedPrompt, PromptError> chat_parsed(const boost::json::value& request, SessionCache* cache = nullptr,
                                                  std::string_view request_json = {}, Turn* turn = nullptr) const;
  // A follow-up of `turn` (its request with messages appended, nothing else changed; the caller
  // proves it): `messages` are the parsed messages from index `first` on (qwen3::extend). Renders
  // and encodes only from there, reusing the turn's text, ids and cuts, and updates `turn` in
  // place to the follow-up's. False: not resumed (the formatter does not model a new message, an
  // encode error...); `turn` is then unusable and the caller takes the full path.
  bool resume_turn(Turn& turn, size_t first, std::span<const boost::json::value* const> messages) const;
  // Whether chat requests are rendered by a native formatter standing in for the template (qwen3).
  bool native_template() const { return native_template_; }
  // Raw text -> token ids (completions: add_special_tokens=true, as vLLM's default).
  Result<std::vector<uint32_t>, PromptError> text(std::string_view text, bool add_special_tokens) const;

  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  NativeRenderStats native_stats() const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  PromptRenderer() = default;
  Result<RenderedPrompt, PromptError> template_chat(const boost::json::value& request, SessionCache* cache,
                                                    Turn* turn = nullptr) const;
  Result<RenderedPrompt, PromptError> native_chat(std::string_view request_json, SessionCache* cache) const;
  std::optional<PromptError> encode_prompt(RenderedPrompt& out, SessionCache* cache) const;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::optional<ChatTemplate> template_;       // the default template
  std::optional<ChatTemplate> tool_template_;  // tokenizer_config's "tool_use" template, if named
  SpecialTokens specials_;
  std::string native_;
  bool native_template_ = false;  // the template is rendered by render::qwen3 where it covers it
  struct Counters;
  std::unique_ptr<Counters> counters_;
};

// A file's bytes, at most max_bytes; otherwise an error of `kind` (code "io", or "too_large").
Result<std::string, PromptError> read_file(const std::string& path, PromptErrc kind,
                                           size_t max_bytes = SIZE_MAX);
// A pinned digest as it is compared: lower-case.
std::string lower_hex(std::string_view hex);
// Lower-case hex SHA-256 of bytes / of a file's bytes (nullopt when it cannot be read).
std::string sha256_hex(std::string_view bytes);
std::optional<std::string> file_sha256_hex(const std::string& path);
// SHA-256 over token ids as unsigned 32-bit big-endian integers (the manifest's token digest).
std::string token_ids_sha256(const std::vector<uint32_t>& ids);
// Whether `s` is 64 lower- or upper-case hex digits.
bool is_sha256_hex(std::string_view s);

}  // namespace ramjet::render
