// Fuzz target for observe/prom_text and the engine scrape's readers: engines' /metrics bodies,
// DCGM-exporter text and nvidia-smi output are untrusted bytes. Checked: the limits hold, a text
// that parses re-renders to a text that parses to the same samples, the engine reader agrees
// with the parser on whether a text is usable, and the readers' outputs stay bounded.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "upstream/engine_text.h"
#include "metrics/metrics.h"
#include "metrics/prom_text.h"

namespace {

using ramjet::metrics::PromLabel;
using ramjet::metrics::PromSample;
using ramjet::metrics::PromTextLimits;

void check(bool ok) {
  if (!ok) std::abort();
}

struct Copy {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  bool operator==(const Copy& o) const {
    return name == o.name && labels == o.labels &&
           (value == o.value || (std::isnan(value) && std::isnan(o.value)));
  }
};

std::vector<Copy> parse_all(std::string_view text, const PromTextLimits& limits, bool* ok) {
  std::vector<Copy> out;
  auto r = ramjet::metrics::parse_prom_text(text, limits, [&](const PromSample& s) {
    check(s.labels.size() <= limits.max_labels);
    Copy c{std::string(s.name), {}, s.value};
    for (const PromLabel& l : s.labels) c.labels.emplace_back(std::string(l.name), std::string(l.value));
    out.push_back(std::move(c));
  });
  check(r.samples == out.size());
  check(r.samples <= limits.max_samples);
  check(r.ok() || r.line > 0 || r.error == ramjet::metrics::PromTextError::kTooLarge);
  *ok = r.ok();
  return out;
}

std::string render(const std::vector<Copy>& samples) {
  std::string out;
  for (const Copy& c : samples) {
    out += c.name;
    out += '{';
    for (const auto& [k, v] : c.labels) {
      out += k + "=\"";
      out += ramjet::metrics::escape_label_value(v);
      out += "\",";
    }
    out += "} ";
    char buf[64];
    if (std::isnan(c.value)) {
      out += "NaN";
    } else if (std::isinf(c.value)) {
      out += c.value > 0 ? "+Inf" : "-Inf";
    } else {
      std::snprintf(buf, sizeof buf, "%.17g", c.value);
      out += buf;
    }
    out += '\n';
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  PromTextLimits defaults;
  PromTextLimits tight;
  tight.max_bytes = 2048;
  tight.max_line = 128;
  tight.max_samples = 16;
  tight.max_labels = 4;
  for (const PromTextLimits& limits : {defaults, tight}) {
    bool ok = false;
    const std::vector<Copy> samples = parse_all(input, limits, &ok);
    if (ok) {
      // Round trip: what parsed re-renders to text that parses to the same samples.
      PromTextLimits roomy;
      roomy.max_line = SIZE_MAX;
      roomy.max_bytes = SIZE_MAX;
      bool again_ok = false;
      const std::vector<Copy> again = parse_all(render(samples), roomy, &again_ok);
      check(again_ok);
      check(again == samples);
    }
    ramjet::upstream::EngineSample sample;
    std::vector<ramjet::upstream::GpuSample> gpus;
    auto r = ramjet::upstream::read_engine_metrics(input, limits, sample, gpus, 8);
    check(r.ok() == ok);
    check(sample.ok == ok);
    check(gpus.size() <= 8);
    if (sample.kv_usage) check(!std::isnan(*sample.kv_usage));
  }
  const auto host = ramjet::upstream::parse_nvidia_smi_csv(input, 8);
  check(host.size() <= 8);
  for (const auto& g : host) check(g.engine == SIZE_MAX && !g.device.empty());
  return 0;
}
