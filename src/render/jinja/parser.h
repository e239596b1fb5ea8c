// Internal: template source -> AST (parser.cc).
#pragma once

#include <string_view>

#include "render/jinja/template.h"

namespace ramjet::render::jinja {

bool parse_template(std::string_view source, const Limits& limits, Template& out,
                    RenderError& err);

}  // namespace ramjet::render::jinja
