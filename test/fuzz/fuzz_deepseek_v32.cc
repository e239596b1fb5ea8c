// Fuzz target for render::deepseek_v32::encode (untrusted chat-request bodies). Checked: no crash,
// hang or sanitizer report on any bytes; encoding is deterministic; a rendered prompt starts with
// the BOS token; Python-style json.dumps is a fixed point (dumps(loads(dumps(x))) == dumps(x)).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "render/template/deepseek_v32.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ds = ramjet::render::deepseek_v32;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ds::Options options;
  options.limits.max_output_bytes = 1u << 20;
  auto a = ds::encode(text, options);
  auto b = ds::encode(text, options);
  check(a.ok() == b.ok());
  if (a.ok()) {
    check(*a == *b);
    check(a->rfind("<｜begin▁of▁sentence｜>", 0) == 0);
  } else {
    check(a.error().code == b.error().code);
  }
  auto d = ds::python_json_dumps(text);
  if (d.ok()) {
    auto again = ds::python_json_dumps(*d);
    check(again.ok() && *again == *d);
  }
  return 0;
}
