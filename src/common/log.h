// Structured logging: JSON lines on stderr via spdlog.
// Privacy rule: never log prompts, completions, token IDs, hashes, secrets or hostnames.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace ramjet::log {

// Installs the process logger (JSON lines on stderr). Level: trace|debug|info|warn|error|off.
// Returns false for an unknown level (the logger stays at info).
bool init(std::string_view level);
// A new level for the logger init() made (a configuration reload): never makes a logger again.
void set_level(std::string_view level);

// Escapes a string for inclusion inside a JSON string literal (log messages are JSON).
std::string json_escape(std::string_view s);

}  // namespace ramjet::log
