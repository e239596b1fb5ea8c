// render::jinja: a Jinja2 interpreter for HuggingFace chat templates, configured like
// transformers' ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols]) with its tojson override, raise_exception and strftime_now.
// Parse once (Template::parse), render many times (thread-safe: a render only reads the AST).
// Every failure is a typed RenderError; Limits bound template size, output size, work and depth
// so that no template or input can crash or hang the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "render/template/jinja/value.h"

namespace ramjet::render::jinja {

enum class RenderErrc {
  kTooLarge,     // the template exceeds Limits::max_template_bytes
  kSyntax,       // the template does not parse
  kUndefined,    // an operation on an undefined value that jinja2 rejects (x.y on undefined x)
  kType,         // a Python TypeError/ValueError (e.g. 'a' + 1, int('x'), 1 / 0)
  kRaised,       // the template called raise_exception(message)
  kLimit,        // output, step, range or depth limit exceeded
  kUnsupported,  // a construct this interpreter does not implement (or the sandbox forbids)
  kBadRequest,   // chat_template: the request JSON is not a chat request
};

std::string_view to_string(RenderErrc code);

struct RenderError {
  RenderErrc code = RenderErrc::kSyntax;
  std::string message;  // for kRaised, the template's own message
  int line = 0;         // 1-based template line, 0 when unknown
};

template <typename T>
using RenderResult = ramjet::Result<T, RenderError>;

struct Limits {
  size_t max_template_bytes = 1u << 20;
  size_t max_output_bytes = 64u << 20;
  uint64_t max_steps = 50'000'000;  // statements, loop iterations and calls per render
  int max_depth = 256;              // nesting of parsed expressions/blocks, of macro calls and
                                    // of recursive loop(...) calls
  int64_t max_range = 1'000'000;    // range() length
};

struct RenderOptions {
  Limits limits;
  // strftime_now(fmt) formats this clock (seconds since the epoch, local = UTC); unset = now.
  std::function<int64_t()> now;
};

struct Node;

class Template {
 public:
  static RenderResult<std::shared_ptr<const Template>> parse(std::string_view source,
                                                            const Limits& limits = {});
  ~Template();
  // Renders with `context` (a dict of template variables).
  RenderResult<std::string> render(const Value& context, const RenderOptions& options = {}) const;

  Template(const Template&) = delete;
  Template& operator=(const Template&) = delete;
  Template();

  const Node* root_ = nullptr;
  std::vector<std::unique_ptr<Node>> pool_;  // owns every AST node
};

}  // namespace ramjet::render::jinja
