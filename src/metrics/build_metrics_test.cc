#include "metrics/build_metrics.h"

#include <gtest/gtest.h>

namespace ramjet::metrics {
namespace {

TEST(BuildMetrics, TheBuildInfoGaugeIsOneWithTheBuildsValuesAsLabels) {
  Exposition x;
  write_build_info(x, BuildInfo{"0.5.0", "6d9246f-dirty", "Debug", "GCC 12.2.0"});
  EXPECT_EQ(x.take(),
            "# HELP ramjet_build_info " + std::string(build_families()[0].help) +
                "\n# TYPE ramjet_build_info gauge\n"
                R"(ramjet_build_info{version="0.5.0",commit="6d9246f-dirty",build_type="Debug",compiler="GCC 12.2.0"} 1)"
                "\n");
}

TEST(BuildMetrics, EveryRegistryRenderingStartsWithThisBuildsInfo) {
  Registry r;
  r.add([](Exposition& x) { x.family("ramjet_other", "gauge", "other"); });
  Exposition expected;
  write_build_info(expected);
  const std::string first = expected.take();
  const std::string text = r.render();
  EXPECT_EQ(text.substr(0, first.size()), first);
  EXPECT_NE(text.find("ramjet_other"), std::string::npos);
  EXPECT_NE(first.find("commit=\"" + std::string(build_info().commit) + "\""), std::string::npos);
}

}  // namespace
}  // namespace ramjet::metrics
