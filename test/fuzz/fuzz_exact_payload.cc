// Fuzz target for request/stream's exact-routing payload: a client's request body (untrusted bytes)
// becomes the /tokenize body sent to an engine — chat and completions as they are, Responses and
// Anthropic Messages requests through render::api_conversion first. Any input must give nothing
// or a JSON object that carries only fields vLLM's /tokenize takes.
#include <boost/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "request/stream/exact_tokens.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (auto e : {ramjet::request::Endpoint::kChat, ramjet::request::Endpoint::kCompletions,
                 ramjet::request::Endpoint::kResponses, ramjet::request::Endpoint::kMessages,
                 ramjet::request::Endpoint::kModels}) {
    const auto call = ramjet::request::tokenize_call(e, body);
    if (!call) continue;
    check(e != ramjet::request::Endpoint::kModels);
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(call->payload, ec);
    check(!ec && v.is_object());
    const boost::json::object& o = v.as_object();
    check(o.contains(e == ramjet::request::Endpoint::kCompletions ? "prompt" : "messages"));
    check(o.at("return_token_strs") == false);
    for (const auto& kv : o) {  // only what /tokenize takes
      const std::string_view k = kv.key();
      check(k == "model" || k == "messages" || k == "prompt" || k == "add_generation_prompt" ||
            k == "continue_final_message" || k == "add_special_tokens" || k == "chat_template" || k == "tools" ||
            k == "chat_template_kwargs" || k == "return_token_strs");
    }
  }
  return 0;
}
