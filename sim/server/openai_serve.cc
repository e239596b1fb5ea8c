// sim/server/openai_serve: POST /v1/chat/completions and POST /v1/completions of SimServer, in
// vLLM 0.32's order: the body as FastAPI + pydantic read it (validation.h), the model (404), the
// output cap, the prompt (rendered by Prompter), its length, the clamped output budget; then the
// engine request and the answer (openai_reply.h), JSON or SSE.
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

#include "sim/server/openai_reply.h"
#include "sim/server/python_json.h"
#include "sim/server/server.h"
#include "sim/server/server_io.h"
#include "sim/server/validation.h"

namespace ramjet::sim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using detail::error_type;
using detail::filler;
using detail::find;
using detail::vllm_error;
using detail::wall_now;
using detail::watch_disconnect;
using detail::write_response;
using detail::write_sse_chunk;

namespace {

std::string_view finish_label(FinishReason f) {
  switch (f) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "";
}

struct ParsedInference {
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  std::optional<int64_t> max_tokens;      // as requested (validated as an integer)
  std::string max_tokens_param = "max_tokens";
  bool max_tokens_null = false;           // completions: an explicit null (not the default 16)
  std::string model;
  std::string cache_salt;
  std::vector<uint32_t> prompt;
  bool prompt_from_text = true;           // tokenized here (vs token ids sent)
};

std::optional<int64_t> int_field(const json::object& o, std::string_view k) {
  const json::value* v = find(o, k);
  if (!v) return std::nullopt;
  if (v->is_int64()) return v->as_int64();
  if (v->is_uint64()) return static_cast<int64_t>(std::min<uint64_t>(v->as_uint64(), INT64_MAX));
  return std::nullopt;
}

AgentError bad(std::string message, std::string param = {}) {
  return AgentError{400, "BadRequestError", std::move(message), std::move(param)};
}

// The fields of a validated body the simulator reads (no rendering yet).
ParsedInference read_fields(bool chat, const json::object& o) {
  ParsedInference p;
  if (auto* m = find(o, "model"); m && m->is_string()) p.model = m->as_string();
  if (auto* s = find(o, "stream"); s && s->is_bool()) p.stream = s->as_bool();
  if (auto* so = find(o, "stream_options"); so && so->is_object() && p.stream) {
    // StreamOptions: both default to false; continuous stats need include_usage.
    auto* iu = find(so->as_object(), "include_usage");
    p.include_usage = iu && iu->is_bool() && iu->as_bool();
    auto* cu = find(so->as_object(), "continuous_usage_stats");
    p.continuous_usage = p.include_usage && cu && cu->is_bool() && cu->as_bool();
  }
  if (chat && find(o, "max_completion_tokens")) {
    p.max_tokens = int_field(o, "max_completion_tokens");
    p.max_tokens_param = "max_completion_tokens";
  } else {
    p.max_tokens = int_field(o, "max_tokens");
    auto it = o.find("max_tokens");
    p.max_tokens_null = it != o.end() && it->value().is_null();
    // CompletionRequest.max_tokens defaults to 16 (chat's to the rest of the context, which a
    // simulator that never stops cannot use: --default-max-tokens).
    if (!chat && it == o.end()) p.max_tokens = 16;
  }
  if (auto* s = find(o, "cache_salt"); s && s->is_string()) p.cache_salt = s->as_string();
  return p;
}

// The prompt, as vLLM's renderer makes it (its errors are 400s).
std::optional<AgentError> render(bool chat, const json::object& o, const Prompter& prompter, ParsedInference& p) {
  if (chat) {
    const json::value* msgs = find(o, "messages");
    if (!msgs || msgs->as_array().empty())
      return bad("Cannot apply chat template to an empty conversation. Provide at least one message.");
    auto ids = prompter.chat(o);
    if (!ids) return bad(ids.error().message);
    p.prompt = std::move(ids.value());
    return std::nullopt;
  }
  const json::value* pr = find(o, "prompt");
  const bool empty = !pr || (pr->is_string() && pr->as_string().empty()) || (pr->is_array() && pr->as_array().empty());
  if (empty) return bad("Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", "prompt");
  if (pr->is_string()) {
    bool add_special = true;  // vLLM's default for completions
    if (auto* a = find(o, "add_special_tokens")) {
      if (!a->is_bool()) return bad("add_special_tokens must be a boolean", "add_special_tokens");
      add_special = a->as_bool();
    }
    auto ids = prompter.text(pr->as_string(), add_special);
    if (!ids) return bad(ids.error().message);
    p.prompt = std::move(ids.value());
  } else if (pr->is_array()) {
    p.prompt_from_text = false;
    for (const auto& t : pr->as_array()) {
      if (t.is_int64() && t.as_int64() >= 0) p.prompt.push_back(static_cast<uint32_t>(t.as_int64()));
      else if (t.is_uint64()) p.prompt.push_back(static_cast<uint32_t>(t.as_uint64()));
      else return bad("prompt must be a string or an array of token ids", "prompt");
    }
  } else {
    return bad("prompt must be a string or an array of token ids", "prompt");
  }
  if (p.prompt.empty()) return bad("Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)", "prompt");
  return std::nullopt;
}

}  // namespace

asio::awaitable<bool> SimServer::serve_openai(tcp::socket& socket, unsigned version, bool keep_alive,
                                              const std::string& body, bool chat, Inbound in) {
  auto reply = [&](unsigned status, std::string b) {
    return write_response(socket, version, keep_alive, status, std::move(b), std::string("application/json"));
  };
  // A decode leg refused before it reaches the engine frees the producer's blocks
  // (_with_kv_transfer_rejection_cleanup).
  KvParams kv;
  auto fail = [&](const AgentError& e) {
    if (kv.kind == KvTransfer::kRemotePrefill) notify_done(kv.remote);
    return reply(e.status, vllm_error(e));
  };

  auto validated = validate_body(chat ? BodyApi::kChat : BodyApi::kCompletions, body);
  if (!validated) {
    const BodyRejection r = validated.error();
    co_return co_await reply(r.status, r.body);
  }
  const json::object& o = validated.value();
  ParsedInference p = read_fields(chat, o);
  if (opt_.kv_transfer.enabled()) {  // without a connector vLLM carries the params unread
    auto parsed = parse_kv_params(find(o, "kv_transfer_params"));
    if (!parsed) co_return co_await reply(400, vllm_error(parsed.error()));
    kv = std::move(parsed.value());
  }
  const CacheNamespace ns = namespace_of(p.model, p.cache_salt);
  if (auto e = unknown_model(p.model, ns)) co_return co_await fail(*e);
  const uint64_t model_len = opt_.engine.max_model_len;
  if (auto e = detail::check_output_cap(p.max_tokens, p.max_tokens_param, model_len)) co_return co_await fail(*e);
  if (auto e = render(chat, o, prompter_, p)) co_return co_await fail(*e);
  if (auto e = detail::check_prompt_length(p.prompt.size(), p.prompt_from_text, model_len)) co_return co_await fail(*e);
  auto budget = detail::output_budget(p.max_tokens, opt_.default_max_tokens, p.prompt.size(), model_len);
  if (!budget) co_return co_await fail(budget.error());
  const uint64_t max_tokens = budget.value();
  if (error_rate_ > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < error_rate_) {
    co_return co_await reply(error_status_, vllm_error("injected fault", error_type(error_status_), error_status_));
  }

  bool write_failed = false;
  auto write_chunk = [&](std::string s) { return write_sse_chunk(socket, std::move(s), write_failed); };
  auto open_stream = [&]() -> asio::awaitable<void> {
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::server, "uvicorn");
    res.set(http::field::content_type, "text/event-stream; charset=utf-8");
    res.chunked(true);
    res.keep_alive(keep_alive);
    http::response_serializer<http::empty_body> sr{res};
    boost::system::error_code wec;
    co_await http::async_write_header(socket, sr, asio::redirect_error(asio::use_awaitable, wec));
    if (wec) write_failed = true;
  };
  auto close_stream = [&]() -> asio::awaitable<bool> {
    co_await write_chunk("data: [DONE]\n\n");
    if (!write_failed) {
      boost::system::error_code wec;
      co_await asio::async_write(socket, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, wec));
      if (wec) write_failed = true;
    }
    co_return !write_failed && keep_alive;
  };

  // The data-parallel rank (X-Data-Parallel-Rank, else the API server's pick). vLLM checks the
  // header's range when the engine client takes the request, inside the result generator: a
  // non-streaming request gets the 400, a stream a 200 with the error as its one event.
  // SGLang (--engine-kind sglang) checks the rank before any output: a 400 for a stream too.
  auto placed = opt_.dp.sglang ? place_sglang(in, &o, SglangRankSources{.body = true, .header = true}) : place(in);
  if (!placed && opt_.dp.sglang) co_return co_await reply(400, sglang_error(placed.error(), "BadRequestError", 400));
  if (!placed) {
    const std::string message = placed.error();
    if (!p.stream) co_return co_await reply(400, vllm_error(message, "BadRequestError", 400));
    co_await open_stream();
    json::value err = json::object{
        {"error", json::object{{"message", message}, {"type", "BadRequestError"}, {"param", nullptr}, {"code", 400}}}};
    co_await write_chunk("data: " + python_json_dumps(err) + "\n\n");
    co_return co_await close_stream();
  }
  Rank& rank = *placed.value();
  const auto prompt_len = static_cast<uint32_t>(p.prompt.size());
  Live live(ctx_);
  if (!submit(rank, in, live, std::move(p.prompt), static_cast<uint32_t>(max_tokens), ns, kv.kind)) {
    co_return co_await fail(detail::pool_too_small(prompt_len, max_tokens, engine_pool_tokens()));
  }
  const std::string response_id = detail::response_id(chat ? "chatcmpl-" : "cmpl-", in.request_id, o, id_salt_ + live.id);
  // (no suspension since submit: the engine has not stepped this request yet)
  if (kv.kind == KvTransfer::kRemoteDecode) kv_names_[live.id] = internal_request_id(response_id, !chat, id_salt_ ^ (live.id << 17));
  if (kv.kind == KvTransfer::kRemotePrefill) {
    kv_pending_[live.id] = kv.remote;
    asio::co_spawn(ctx_, heartbeats(live.id, &rank), asio::detached);
  }
  auto done = std::make_shared<bool>(false);
  auto cancel = std::make_shared<asio::cancellation_signal>();
  asio::co_spawn(ctx_, watch_disconnect(socket, done, &live, &rank.engine, cancel), asio::detached);

  OpenAiReply out(OpenAiReplyShape{chat, response_id,
                                   static_cast<int64_t>(wall_now()), ns.lora() ? ns.lora_name : opt_.served_model_name(),
                                   fingerprint_, opt_.enable_prompt_tokens_details, p.include_usage,
                                   p.continuous_usage});
  TokenUsage usage{prompt_len, 0, 0, 0};
  FinishReason finish = FinishReason::kNone;
  if (p.stream) co_await open_stream();
  bool first = true;
  bool stalled = false;  // fault: nothing more is written, and the connection is held open
  while (!live.client_gone && !write_failed && (finish == FinishReason::kNone || stalled)) {
    if (live.updates.empty()) {
      live.wake.expires_at(std::chrono::steady_clock::time_point::max());
      boost::system::error_code wec;
      co_await live.wake.async_wait(asio::redirect_error(asio::use_awaitable, wec));
      continue;
    }
    RequestOutput step = live.updates.front();
    live.updates.pop_front();
    // vLLM's output processor emits a request's first output with its first token (or finish);
    // prefill chunks before it are silent.
    if (!step.new_tokens && step.finish == FinishReason::kNone) continue;
    if (step.finish == FinishReason::kError) {  // a failed KV pull (kv_load_failure_policy fail)
      finish = step.finish;
      break;
    }
    if (first) {
      usage.cached = step.cached_tokens;
      usage.created = step.created_cache_tokens;
      // A decode leg reports the producer's prefix hit (OutputProcessor: remote_prefill_cached_tokens).
      if (kv.kind == KvTransfer::kRemotePrefill && kv.remote.cached_tokens) {
        usage.cached = static_cast<uint32_t>(std::clamp<int64_t>(*kv.remote.cached_tokens, 0, UINT32_MAX));
      }
    }
    if (p.stream && chat && first) co_await write_chunk(out.role_chunk(prompt_len));
    first = false;
    if (stalled) continue;
    const uint32_t from = usage.completion;
    usage.completion += step.new_tokens;
    finish = step.finish;
    if (p.stream && (step.new_tokens || finish != FinishReason::kNone)) {
      std::optional<std::string_view> fin;
      if (finish != FinishReason::kNone) fin = finish_label(finish);
      co_await write_chunk(out.text_chunk(filler(from, step.new_tokens), usage, fin));
    }
    if (stall_after_tokens_ && usage.completion >= stall_after_tokens_) stalled = true;
  }
  *done = true;
  cancel->emit(asio::cancellation_type::terminal);
  retire(live, live.client_gone || write_failed);
  if (live.client_gone || write_failed) co_return false;
  if (finish == FinishReason::kError) {
    // GenerationError("Internal server error"): a 500, or in a stream its error event.
    if (!p.stream) co_return co_await reply(500, vllm_error("Internal server error", "InternalServerError", 500));
    json::value err = json::object{{"error", json::object{{"message", "Internal server error"},
                                                          {"type", "InternalServerError"},
                                                          {"param", nullptr},
                                                          {"code", 500}}}};
    co_await write_chunk("data: " + python_json_dumps(err) + "\n\n");
    co_return co_await close_stream();
  }
  const boost::json::object* kv_answer = live.kv_answer ? &*live.kv_answer : nullptr;
  if (!p.stream) co_return co_await reply(200, out.full(filler(0, usage.completion), finish_label(finish), usage, kv_answer));
  if (p.include_usage) co_await write_chunk(out.usage_chunk(usage));
  co_return co_await close_stream();
}

}  // namespace ramjet::sim
