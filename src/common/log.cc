#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdio>

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

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace ramjet::log
