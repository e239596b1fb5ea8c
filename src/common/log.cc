#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include "common/json.h"

namespace ramjet::log {

bool init(std::string_view level) {
  auto logger = spdlog::stderr_logger_mt("ramjet");
  // One JSON object per line; messages are pre-escaped by callers that interpolate text.
  logger->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","lvl":"%l","msg":"%v"})", spdlog::pattern_time_type::utc);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    spdlog::set_level(spdlog::level::info);
    return false;
  }
  spdlog::set_level(lvl);
  return true;
}

void set_level(std::string_view level) {
  const auto lvl = spdlog::level::from_str(std::string(level));
  spdlog::set_level(lvl == spdlog::level::off && level != "off" ? spdlog::level::info : lvl);
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  append_json_escaped(out, s);
  return out;
}

}  // namespace ramjet::log
