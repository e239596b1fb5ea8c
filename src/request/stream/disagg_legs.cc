#include "request/stream/disagg_legs.h"

#include <boost/json.hpp>

namespace ramjet::request {

namespace json = boost::json;

std::string prefill_leg_members(Endpoint ep, std::optional<int64_t> priority) {
  // vLLM reads do_remote_decode alone; the null fields are the reference proxy's.
  std::string out =
      "\"kv_transfer_params\":{\"do_remote_decode\":true,\"do_remote_prefill\":false,\"remote_engine_id\":null,"
      "\"remote_block_ids\":null,\"remote_host\":null,\"remote_port\":null},\"stream\":false,";
  if (ep == Endpoint::kResponses) {
    out += "\"max_output_tokens\":1";
  } else if (ep == Endpoint::kChat) {
    out += "\"max_tokens\":1,\"max_completion_tokens\":1";
  } else {
    out += "\"max_tokens\":1";
  }
  if (priority) out += ",\"priority\":" + std::to_string(*priority);
  return out;
}

std::string decode_leg_members(std::string_view params, std::optional<int64_t> priority) {
  std::string out;
  if (!params.empty()) {
    out.reserve(params.size() + 40);
    out += "\"kv_transfer_params\":";
    out += params;
  }
  if (priority) {
    if (!out.empty()) out.push_back(',');
    out += "\"priority\":" + std::to_string(*priority);
  }
  return out;
}

std::string_view label(ParamsError e) {
  switch (e) {
    case ParamsError::kNone: return "ok";
    case ParamsError::kNotJson: return "not_json";
    case ParamsError::kMissing: return "missing";
    case ParamsError::kNotObject: return "not_object";
    case ParamsError::kNotRemote: return "not_remote";
    case ParamsError::kTooLarge: return "too_large";
  }
  return "not_json";
}

TransferParams transfer_params(std::string_view answer) {
  TransferParams out;
  if (answer.size() > kMaxPrefillAnswerBytes) {
    out.error = ParamsError::kTooLarge;
    return out;
  }
  json::parse_options opts;
  opts.max_depth = 64;
  boost::system::error_code ec;
  json::monotonic_resource mr;
  const json::value v = json::parse(answer, ec, &mr, opts);
  if (ec || !v.is_object()) {
    out.error = ParamsError::kNotJson;
    return out;
  }
  const json::value* p = v.get_object().if_contains("kv_transfer_params");
  if (p == nullptr || p->is_null()) {
    out.error = ParamsError::kMissing;
    return out;
  }
  if (!p->is_object()) {
    out.error = ParamsError::kNotObject;
    return out;
  }
  const json::object& o = p->get_object();
  const json::value* remote = o.if_contains("do_remote_prefill");
  if (remote == nullptr || !remote->is_bool() || !remote->get_bool()) {
    out.error = ParamsError::kNotRemote;
    return out;
  }
  out.json = json::serialize(o);
  if (out.json.size() > kMaxTransferParamsBytes) {
    out.json.clear();
    out.error = ParamsError::kTooLarge;
    return out;
  }
  if (const json::value* c = o.if_contains("remote_prefill_cached_tokens")) {
    if (c->is_uint64()) out.cached_tokens = c->get_uint64();
    if (c->is_int64() && c->get_int64() >= 0) out.cached_tokens = static_cast<uint64_t>(c->get_int64());
  }
  return out;
}

}  // namespace ramjet::request
