// sim/server/prompt: the one place ramjet-sim turns request bodies into prompt token ids. By
// default the built-in tokenizer (sim/engine/tokenizer.h); with --tokenizer a real
// render::PromptRenderer (tokenizer.json + chat template or native formatter), applied the way
// vLLM applies it (add_generation_prompt, continue_final_message, add_special_tokens, tools,
// chat_template_kwargs). Rendering itself lives in src/render; the HTTP shapes in server.cc.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sim/server/options.h"

namespace ramjet::render {
class PromptRenderer;
}

namespace ramjet::sim {

class Prompter {
 public:
  Prompter() = default;  // the built-in tokenizer
  explicit Prompter(std::shared_ptr<const render::PromptRenderer> renderer);

  // Loads the files PromptFlags names (once, at startup). Without flags.tokenizer: the built-in
  // tokenizer. Without a chat template or native formatter: chat_template.jinja beside the
  // tokenizer, else the chat_template of the tokenizer_config.json beside it (as vLLM falls back
  // to the model's own template). Error reasons: usage|io|digest|tokenizer|template|config.
  static Result<Prompter, Error> load(const PromptFlags& flags);

  bool real() const { return renderer_ != nullptr; }
  // What was loaded, for the startup log ("built-in" without --tokenizer).
  const std::string& description() const { return description_; }

  // A chat-style body (messages, tools, add_generation_prompt, continue_final_message,
  // add_special_tokens, chat_template_kwargs, reasoning_effort: merged into the kwargs with the
  // enable_thinking it implies, as vLLM 0.32's build_chat_params) -> prompt ids. The caller checked `messages`
  // exists. Errors (reason decode|render|encode|bad_request) are answered 400.
  Result<std::vector<uint32_t>, Error> chat(const boost::json::object& body) const;
  // The reasoning_effort vLLM 0.32 gives an Anthropic thinking.type "disabled"
  // (_probe_disabled_thinking_effort): "none", unless rendering "Hi" with effort "none" fails or
  // equals its rendering with a thinking effort (the template ignores it), then "low".
  std::string disabled_thinking_effort() const;
  // A completion prompt string -> ids (add_special_tokens: vLLM's default is true).
  Result<std::vector<uint32_t>, Error> text(std::string_view prompt, bool add_special_tokens) const;

 private:
  std::shared_ptr<const render::PromptRenderer> renderer_;
  std::string description_ = "built-in";
};

}  // namespace ramjet::sim
