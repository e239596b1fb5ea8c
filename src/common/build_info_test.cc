#include "common/build_info.h"

#include <gtest/gtest.h>

namespace ramjet {
namespace {

TEST(BuildInfo, CarriesTheCMakeProjectVersionAndNonEmptyValues) {
  const BuildInfo& b = build_info();
  EXPECT_EQ(b.version, RAMJET_PROJECT_VERSION);
  EXPECT_FALSE(b.commit.empty());
  EXPECT_FALSE(b.build_type.empty());
  EXPECT_FALSE(b.compiler.empty());
}

TEST(BuildInfo, VersionLineIsOneLineNamingProgramVersionCommitBuildTypeAndCompiler) {
  const BuildInfo& b = build_info();
  const std::string line = version_line("ramjet-sim");
  EXPECT_EQ(line, "ramjet-sim " + std::string(b.version) + " (commit " + std::string(b.commit) + ", build " +
                      std::string(b.build_type) + ", compiler " + std::string(b.compiler) + ")");
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(BuildInfo, ValuesNeedNoEscapingInJsonOrPrometheusLabels) {
  const BuildInfo& b = build_info();
  for (std::string_view v : {b.version, b.commit, b.build_type, b.compiler}) {
    EXPECT_EQ(v.find_first_of("\"\\\n"), std::string_view::npos) << v;
  }
  EXPECT_EQ(build_info_json(), R"({"version":")" + std::string(b.version) + R"(","commit":")" +
                                   std::string(b.commit) + R"(","build_type":")" + std::string(b.build_type) +
                                   R"("})");
}

}  // namespace
}  // namespace ramjet
