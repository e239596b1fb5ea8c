// Fuzz target for render::jinja + render::chat_template: a chat template is configuration, a
// request is untrusted; a wrong or hostile one must give a typed RenderError, never a crash, a
// hang or unbounded memory. Input: template source, optionally followed by "\0" and a chat
// request JSON (otherwise a fixed tool-calling conversation is used).
// Checked: parse/render never crash; limits hold (output size); an error has a message (or is
// raise_exception's); rendering is deterministic (a second render gives the same result).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "render/template/chat_template.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

constexpr std::string_view kRequest = R"({"messages":[
  {"role":"system","content":"sys"},
  {"role":"user","content":"hi \u4f60\u597d"},
  {"role":"assistant","content":"<think>r</think>ok","reasoning_content":"r",
   "tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\": [1, 2.5, null]}"}}]},
  {"role":"tool","tool_call_id":"1","content":"out"},
  {"role":"user","content":[{"type":"text","text":"part"}]}],
  "tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}],
  "add_generation_prompt":true,"chat_template_kwargs":{"enable_thinking":false,"thinking":true}})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ramjet::render;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view src = in;
  std::string_view request = kRequest;
  if (size_t z = in.find('\0'); z != std::string_view::npos) {
    src = in.substr(0, z);
    request = in.substr(z + 1);
  }
  jinja::RenderOptions opt;
  opt.limits.max_template_bytes = 1 << 16;
  opt.limits.max_output_bytes = 1 << 18;
  opt.limits.max_steps = 200'000;
  opt.limits.max_depth = 64;
  opt.limits.max_range = 10'000;
  opt.now = [] { return int64_t{1767225600}; };
  SpecialTokens st;
  st.tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  auto tpl = ChatTemplate::parse(src, opt.limits);
  if (!tpl.ok()) {
    check(!tpl.error().message.empty());
    return 0;
  }
  auto a = render(tpl.value(), request, st, {}, opt);
  auto b = render(tpl.value(), request, st, {}, opt);
  check(a.ok() == b.ok());
  if (a.ok()) {
    check(a.value().size() <= opt.limits.max_output_bytes);
    check(a.value() == b.value());
  } else {
    check(a.error().code == b.error().code && a.error().message == b.error().message);
    check(!a.error().message.empty() || a.error().code == RenderErrc::kRaised);
  }
  return 0;
}
