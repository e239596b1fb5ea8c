// common/build_info: which build this is — the project version, the git commit, the build type
// and the compiler — for every binary's --version, ramjet's /health and its ramjet_build_info
// gauge (metrics/build_metrics.h). The values live in one file generated into the build directory
// at build time (cmake/BuildInfo.cmake), so a new commit recompiles that file alone.
#pragma once

#include <string>
#include <string_view>

namespace ramjet {

// No value holds a character that JSON or a Prometheus label value would need escaped
// (cmake/BuildInfo.cmake keeps them to [A-Za-z0-9._+-], and spaces in `compiler`).
struct BuildInfo {
  std::string_view version;     // project(VERSION) in CMakeLists.txt: "0.5.0"
  std::string_view commit;      // `git describe --always --dirty` at build time, or "unknown"
  std::string_view build_type;  // CMAKE_BUILD_TYPE ("Debug", "RelWithDebInfo"), or "none"
  std::string_view compiler;    // compiler id and version: "GCC 12.2.0"
};

const BuildInfo& build_info();

// What --version prints (without the newline):
// "ramjet 0.5.0 (commit 6d9246f, build Debug, compiler GCC 12.2.0)".
std::string version_line(std::string_view program);

// /health's "version" object: {"version":"0.5.0","commit":"6d9246f","build_type":"Debug"}.
std::string build_info_json();

}  // namespace ramjet
