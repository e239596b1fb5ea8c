#include "common/build_info.h"

namespace ramjet {

std::string version_line(std::string_view program) {
  const BuildInfo& b = build_info();
  std::string out(program);
  out += ' ';
  out += b.version;
  out += " (commit ";
  out += b.commit;
  out += ", build ";
  out += b.build_type;
  out += ", compiler ";
  out += b.compiler;
  out += ')';
  return out;
}

std::string build_info_json() {
  const BuildInfo& b = build_info();
  std::string out = R"({"version":")";
  out += b.version;
  out += R"(","commit":")";
  out += b.commit;
  out += R"(","build_type":")";
  out += b.build_type;
  out += R"("})";
  return out;
}

}  // namespace ramjet
