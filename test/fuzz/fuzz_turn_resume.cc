// Fuzz target for exact routing's follow-up fast path (render/identity/turn_resume.h) and the
// byte scan it relies on (render/template/message_spans.h), on untrusted request bodies:
//   1. scan_message_spans on the input: when Boost.JSON accepts the input as an object and the
//      scan finds spans, the messages array has that many elements and each span parses to its
//      element; scan_more_elements on the input: when "[{}" + input + "]" parses, the scan accepts
//      it and its spans parse to the elements after the first.
//   2. the input spliced in as a follow-up of a kept Qwen3 turn (appended after its last message,
//      and also as a whole body): render_routing_body with the session cache (which may resume
//      the turn) gives the same outcome and ids as without.
#include <boost/json/parse.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "model/model_profile.h"
#include "render/identity/tokenize_payload.h"
#include "render/prompt/prompt.h"
#include "render/prompt/session_cache.h"
#include "render/template/message_spans.h"

#ifndef RAMJET_TESTDATA_DIR
#define RAMJET_TESTDATA_DIR "test/data/testdata"
#endif

namespace {

namespace json = boost::json;
using namespace ramjet::render;

void check(bool ok) {
  if (!ok) std::abort();
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Each span [after the previous end, skipping ',' and whitespace; end) parses to elements[i].
void check_spans(std::string_view s, size_t start, const std::vector<uint32_t>& ends, const json::array& elements,
                 size_t first) {
  check(ends.size() + first == elements.size());
  for (size_t i = 0; i < ends.size(); ++i) {
    while (start < ends[i] && (s[start] == ',' || is_ws(s[start]))) ++start;
    check(start < ends[i] && ends[i] <= s.size());
    boost::system::error_code ec;
    json::parse_options opt;
    opt.max_depth = 256;
    const json::value v = json::parse(s.substr(start, ends[i] - start), ec, {}, opt);
    check(!ec && v == elements[first + i]);
    start = ends[i];
  }
}

struct Env {
  const ramjet::model::ModelProfile* profile = nullptr;
  std::shared_ptr<const PromptRenderer> renderer;
};

const Env& env() {
  static const Env e = [] {
    Env x;
    x.profile = ramjet::model::find_profile("qwen3");
    PromptSources s;
    s.tokenizer_path = std::string(RAMJET_TESTDATA_DIR) + "/models/qwen3/tokenizer.json";
    s.template_path = std::string(RAMJET_TESTDATA_DIR) + "/models/qwen3/tokenizer_config.json";
    s.sibling_config = false;
    s.template_formatter = std::string(kTemplateFormatterQwen3);
    auto r = PromptRenderer::load(s);
    check(r.ok() && x.profile != nullptr);
    x.renderer = *r;
    return x;
  }();
  return e;
}

constexpr std::string_view kHead =
    R"({"model":"Qwen/Qwen3-8B","messages":[{"role":"system","content":"sys"},{"role":"user","content":"q1"},)"
    R"({"role":"assistant","content":"","reasoning_content":"r","tool_calls":[{"id":"c1","type":"function",)"
    R"("function":{"name":"f","arguments":"{\"a\": 1}"}}]},{"role":"tool","content":"t1"})";
constexpr std::string_view kRest =
    R"(],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"stream":true})";

void same_with_and_without_cache(std::string_view body) {
  const Env& e = env();
  SessionCache cache;
  const std::string base = std::string(kHead) + std::string(kRest);
  const RoutingTokens warm = render_routing_body(*e.profile, *e.renderer, &cache, PromptApi::kChat, base);
  check(warm.outcome == ShadowOutcome::kSuccess && cache.turns().stats().entries == 1);
  const RoutingTokens a = render_routing_body(*e.profile, *e.renderer, nullptr, PromptApi::kChat, body);
  const RoutingTokens b = render_routing_body(*e.profile, *e.renderer, &cache, PromptApi::kChat, body);
  check(a.outcome == b.outcome && a.ids == b.ids && a.model == b.model && a.cache_salt == b.cache_salt);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  json::parse_options opt;
  opt.max_depth = 256;
  boost::system::error_code ec;
  const json::value doc = json::parse(in, ec, {}, opt);
  const auto spans = scan_message_spans(in);
  if (spans && !ec && doc.is_object()) {
    const json::value* m = doc.as_object().if_contains("messages");
    check(m != nullptr && m->is_array());
    check_spans(in, spans->open, spans->ends, m->as_array(), 0);
  }
  const std::string wrapped = "[{}" + std::string(in) + "]";
  const json::value arr = json::parse(wrapped, ec, {}, opt);
  if (!ec && arr.is_array()) {
    std::vector<uint32_t> ends;
    check(scan_more_elements(in, 0, ends));
    check_spans(in, 0, ends, arr.as_array(), 1);
  }

  same_with_and_without_cache(std::string(kHead) + std::string(in) + std::string(kRest));
  same_with_and_without_cache(in);
  return 0;
}
