// Internal: template source -> AST (parser.cc).
#pragma once

#include <string_view>

#include "render/template/jinja/template.h"

namespace ramjet::render::jinja {

bool parse_template(std::string_view source, const Limits& limits, Template& out,
                    RenderError& err);
// Whether jinja2's default environment has a filter / test of this name (the `filter` and
// `test` tests).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
// Whether this interpreter implements a filter of this name (its filter table, builtins.cc).
bool is_implemented_filter(std::string_view name);

}  // namespace ramjet::render::jinja
