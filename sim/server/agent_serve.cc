// sim/server/agent_serve: POST /v1/responses, POST /v1/messages and POST /sim/render of
// SimServer — the agent APIs (agent_convert.h, agent_reply.h) on the chat path's engine
// machinery: the same Prompter::chat rendering, engine request, disconnect watch and cancel.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <optional>

#include "sim/server/agent_reply.h"
#include "sim/server/kv_transfer.h"
#include "sim/server/server.h"
#include "sim/server/server_io.h"

namespace ramjet::sim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
// server_io.h: the HTTP helpers shared by server.cc and agent_serve.cc.
using detail::error_type;
using detail::filler;
using detail::find;
using detail::vllm_error;
using detail::wall_now;
using detail::watch_disconnect;
using detail::write_response;
using detail::write_sse_chunk;

asio::awaitable<bool> SimServer::serve_agent(tcp::socket& socket, unsigned version, bool keep_alive,
                                             const std::string& body, AgentApi api, Inbound in) {
  auto reply = [&](unsigned status, std::string b) {
    return write_response(socket, version, keep_alive, status, std::move(b), std::string("application/json"));
  };
  // A decode leg refused before it reaches the engine frees the producer's blocks, as on the
  // chat path (vLLM 0.32 reads kv_transfer_params on both agent APIs: docs/sim.md §8.4).
  KvParams kv;
  auto fail = [&](const AgentError& e) {
    if (kv.kind == KvTransfer::kRemotePrefill) notify_done(kv.remote);
    return reply(e.status, agent_error_body(api, e));
  };

  auto parsed = parse_agent_request(api, body, disabled_thinking_effort_);
  if (!parsed) {
    const AgentError e = parsed.error();
    co_return co_await fail(e);
  }
  const AgentRequest& a = parsed.value();
  if (opt_.kv_transfer.enabled()) {  // without a connector vLLM carries the params unread
    auto kp = parse_kv_params(find(a.original, "kv_transfer_params"));
    if (!kp) co_return co_await fail(kp.error());
    kv = std::move(kp.value());
  }
  const CacheNamespace ns = namespace_of(a.model, a.cache_salt);
  const std::string response_model = ns.lora() ? ns.lora_name : opt_.served_model_name();
  if (auto e = unknown_model(a.model, ns)) co_return co_await fail(*e);
  if (api == AgentApi::kResponses && a.background) {
    // vLLM without VLLM_ENABLE_RESPONSES_API_STORE (its default, and the sim's only mode).
    const AgentError e{400, "invalid_request_error",
                       "This vLLM engine does not support `store=True` and therefore does not support the background "
                       "mode. To enable these features, set the environment variable "
                       "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server.",
                       "background"};
    co_return co_await fail(e);
  }
  if (api == AgentApi::kResponses && !a.previous_response_id.empty()) {
    // The sim stores no responses (vLLM's default: store=true is silently dropped), so every
    // previous_response_id is unknown, as it is to a default vLLM.
    const AgentError e{404, "invalid_request_error", "Response with id '" + a.previous_response_id + "' not found.",
                       "response_id"};
    co_return co_await fail(e);
  }
  // The length checks of the chat request a body becomes (Messages sets max_completion_tokens).
  const uint64_t model_len = opt_.engine.max_model_len;
  const std::string_view cap_param = api == AgentApi::kMessages ? "max_completion_tokens" : "max_output_tokens";
  if (auto e = detail::check_output_cap(a.max_tokens, cap_param, model_len)) co_return co_await fail(*e);
  auto ids = prompter_.chat(a.chat);
  if (!ids || ids->empty()) {
    const AgentError e{400, "BadRequestError", ids ? std::string("prompt is empty") : ids.error().message, {}};
    co_return co_await fail(e);
  }
  if (auto e = detail::check_prompt_length(ids->size(), true, model_len)) co_return co_await fail(*e);
  auto budget = detail::output_budget(a.max_tokens, opt_.default_max_tokens, ids->size(), model_len);
  if (!budget) co_return co_await fail(budget.error());
  const uint64_t max_tokens = budget.value();
  if (error_rate_ > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < error_rate_) {
    const AgentError e{error_status_, std::string(error_type(error_status_)), "injected fault", {}};
    co_return co_await fail(e);
  }
  const uint32_t prompt_len = static_cast<uint32_t>(ids->size());

  // Messages becomes a chat request, which reads X-Data-Parallel-Rank; vLLM's Responses path
  // never reads it (the API server's pick).
  // SGLang 0.5.19 reads neither its body fields nor the header on Responses, and only the header
  // on Messages.
  if (api == AgentApi::kResponses) in.dp_rank.reset();
  auto placed = opt_.dp.sglang
                    ? place_sglang(in, nullptr, SglangRankSources{.body = false, .header = api != AgentApi::kResponses})
                    : place(in);
  if (!placed) {
    const AgentError e{400, "BadRequestError", placed.error(), {}};
    co_return co_await fail(e);
  }
  Rank& rank = *placed.value();
  Live live(ctx_);
  if (!submit(rank, in, live, std::move(ids.value()), static_cast<uint32_t>(max_tokens), ns, kv.kind)) {
    co_return co_await fail(detail::pool_too_small(prompt_len, max_tokens, engine_pool_tokens()));
  }
  auto done = std::make_shared<bool>(false);
  auto cancel = std::make_shared<asio::cancellation_signal>();
  asio::co_spawn(ctx_, watch_disconnect(socket, done, &live, &rank.engine, cancel), asio::detached);

  // Messages answers under the chat completion's id (X-Request-Id names it); Responses under
  // the request's request_id, else a fresh one.
  std::string response_id;
  if (api == AgentApi::kMessages) {
    response_id = detail::response_id("chatcmpl-", in.request_id, a.original, id_salt_ + live.id);
  } else if (const json::value* rid = find(a.original, "request_id"); rid && rid->is_string()) {
    response_id = rid->as_string();
  } else {
    response_id = "resp_" + detail::request_hex(id_salt_ + live.id);
  }
  // (no suspension since submit: the engine has not stepped this request yet)
  if (kv.kind == KvTransfer::kRemoteDecode) kv_names_[live.id] = internal_request_id(response_id, false, id_salt_ ^ (live.id << 17));
  if (kv.kind == KvTransfer::kRemotePrefill) {
    kv_pending_[live.id] = kv.remote;
    asio::co_spawn(ctx_, heartbeats(live.id, &rank), asio::detached);
  }
  AgentReply out(a, id_salt_ + live.id, response_id, response_model, static_cast<int64_t>(wall_now()), max_tokens,
                 opt_.enable_prompt_tokens_details);
  bool write_failed = false;
  auto write = [&](std::string s) { return write_sse_chunk(socket, std::move(s), write_failed); };
  if (a.stream) {
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::server, "uvicorn");
    res.set(http::field::content_type, "text/event-stream; charset=utf-8");
    res.chunked(true);
    res.keep_alive(keep_alive);
    http::response_serializer<http::empty_body> sr{res};
    boost::system::error_code wec;
    co_await http::async_write_header(socket, sr, asio::redirect_error(asio::use_awaitable, wec));
    if (wec) write_failed = true;
    std::string head = out.head();
    if (!head.empty()) co_await write(std::move(head));
  }
  uint32_t generated = 0, cached = 0, created = 0;
  FinishReason finish = FinishReason::kNone;
  bool started = false;
  bool stalled = false;  // fault: nothing more is written, and the connection is held open
  std::string text;      // non-streaming: the whole generation
  while (!live.client_gone && !write_failed && (finish == FinishReason::kNone || stalled)) {
    if (live.updates.empty()) {
      live.wake.expires_at(std::chrono::steady_clock::time_point::max());
      boost::system::error_code wec;
      co_await live.wake.async_wait(asio::redirect_error(asio::use_awaitable, wec));
      continue;
    }
    RequestOutput o = live.updates.front();
    live.updates.pop_front();
    // The request's first output (its first token, or a finish) fixes its cache counts and
    // starts the Messages stream; prefill chunks before it are silent.
    if (!o.new_tokens && o.finish == FinishReason::kNone) continue;
    if (o.finish == FinishReason::kError) {  // a failed KV pull (kv_load_failure_policy fail)
      finish = o.finish;
      break;
    }
    if (!started) {
      started = true;
      cached = o.cached_tokens;
      created = o.created_cache_tokens;
      // A decode leg reports the producer's prefix hit (OutputProcessor: remote_prefill_cached_tokens).
      if (kv.kind == KvTransfer::kRemotePrefill && kv.remote.cached_tokens) {
        cached = static_cast<uint32_t>(std::clamp<int64_t>(*kv.remote.cached_tokens, 0, UINT32_MAX));
      }
      std::string first = a.stream ? out.first_output(prompt_len) : std::string();
      if (!first.empty()) co_await write(std::move(first));
    }
    if (o.new_tokens && !stalled) {
      std::string piece = filler(generated, o.new_tokens);
      if (a.stream) {
        std::string events = out.text(piece);
        co_await write(std::move(events));
      } else {
        text += piece;
      }
    }
    generated += o.new_tokens;
    if (stall_after_tokens_ && generated >= stall_after_tokens_) stalled = true;
    finish = o.finish;
  }
  *done = true;
  cancel->emit(asio::cancellation_type::terminal);
  retire(live, live.client_gone || write_failed);
  if (live.client_gone || write_failed) co_return false;
  if (finish == FinishReason::kError) {
    // GenerationError("Internal server error"): a 500 (a stream already open ends without its tail).
    // (retire told the producer already: no second notification)
    const AgentError e{500, "InternalServerError", "Internal server error", {}};
    if (!a.stream) co_return co_await reply(e.status, agent_error_body(api, e));
    co_return false;
  }
  const AgentUsage usage{prompt_len, generated, cached, created};
  const bool length = finish == FinishReason::kLength;
  if (!a.stream) {
    std::string b = out.full(usage, length, text, live.kv_answer ? &*live.kv_answer : nullptr);
    co_return co_await reply(200, std::move(b));
  }
  std::string tail = out.close(usage, length);
  co_await write(std::move(tail));
  if (!write_failed) {
    boost::system::error_code wec;
    co_await asio::async_write(socket, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, wec));
    if (wec) write_failed = true;
  }
  co_return !write_failed && keep_alive;
}

std::string SimServer::render_debug(std::string_view api, const std::string& body, unsigned& status) const {
  json::object chat;
  std::optional<AgentApi> agent;
  std::string tool_name;
  if (api == "responses" || api == "messages") {
    agent = api == "messages" ? AgentApi::kMessages : AgentApi::kResponses;
    auto parsed = parse_agent_request(*agent, body, disabled_thinking_effort_);
    if (!parsed) {
      status = parsed.error().status;
      return agent_error_body(*agent, parsed.error());
    }
    chat = std::move(parsed->chat);
    tool_name = parsed->tool_name;
  } else if (api == "chat") {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    const json::value* m = !ec && v.is_object() ? find(v.as_object(), "messages") : nullptr;
    if (!m || !m->is_array()) {
      status = 400;
      return vllm_error("request body must be a JSON object with a messages array", "BadRequestError", 400);
    }
    chat = std::move(v.as_object());
  } else {
    status = 400;
    return vllm_error("api must be chat, responses or messages", "BadRequestError", 400);
  }
  auto ids = prompter_.chat(chat);
  if (!ids) {
    status = 400;
    const AgentError e{400, "BadRequestError", ids.error().message, {}};
    return agent ? agent_error_body(*agent, e) : vllm_error(e.message, "BadRequestError", 400);
  }
  json::array tokens;
  for (auto t : ids.value()) tokens.push_back(t);
  json::object r{{"prompt_token_ids", std::move(tokens)}, {"messages", chat["messages"]}};
  for (std::string_view k : {"tools", "tool_choice", "chat_template_kwargs", "reasoning_effort",
                             "add_generation_prompt", "continue_final_message"}) {
    if (auto it = chat.find(k); it != chat.end()) r[k] = it->value();
  }
  if (agent) r["sim_tool_call"] = tool_name.empty() ? json::value(nullptr) : json::value(tool_name);
  return json::serialize(r);
}

}  // namespace ramjet::sim
