#include "metrics/build_metrics.h"

#include <array>
#include <string>

namespace ramjet::metrics {
namespace {

constexpr std::array<Family, 1> kFamilies = {{
    {"ramjet_build_info", MetricKind::kGauge, "version,commit,build_type,compiler",
     "Always 1; the labels say which build answers: version (the CMake project version), commit "
     "(git describe --always --dirty when it was built, unknown outside a git checkout), "
     "build_type (CMAKE_BUILD_TYPE) and compiler (id and version), as `ramjet --version` prints them."},
}};

}  // namespace

std::span<const Family> build_families() { return kFamilies; }

void write_build_info(Exposition& x, const BuildInfo& b) {
  // BuildInfo's values need no escaping in a label value (common/build_info.h).
  std::string labels = "version=\"";
  labels += b.version;
  labels += "\",commit=\"";
  labels += b.commit;
  labels += "\",build_type=\"";
  labels += b.build_type;
  labels += "\",compiler=\"";
  labels += b.compiler;
  labels += '"';
  x.family(kFamilies[0]);
  x.sample(kFamilies[0].name, labels, uint64_t{1});
}

}  // namespace ramjet::metrics
