// render::prompt (see prompt.h).
#include "render/prompt/prompt.h"

#include <openssl/evp.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "render/template/deepseek_v32.h"
#include "render/template/qwen3_native.h"
#include "render/prompt/session_cache.h"
#include "render/prompt/turn_cache.h"

namespace ramjet::render {

namespace {

std::optional<PromptError> check_digest(const std::string& path, std::string_view bytes,
                                        const std::string& pinned) {
  if (pinned.empty()) return std::nullopt;
  if (sha256_hex(bytes) == lower_hex(pinned)) return std::nullopt;
  // The message names the file, not the digests (a digest is a fingerprint of private bytes
  // only for request content; model files are public, but keep errors short).
  return PromptError{PromptErrc::kDigest, "sha256_mismatch", path + ": SHA-256 differs from the pinned digest"};
}

std::string line_suffix(int line) { return line > 0 ? " (line " + std::to_string(line) + ")" : ""; }

// A tokenizer_config.json: a JSON object with a chat_template (string, or a list of
// {"name","template"}).
bool looks_like_config(std::string_view source) {
  size_t i = source.find_first_not_of(" \t\r\n");
  if (i == std::string_view::npos || source[i] != '{') return false;
  boost::system::error_code ec;
  auto v = boost::json::parse(source, ec);
  return !ec && v.is_object() && v.as_object().contains("chat_template");
}

Result<ChatTemplate, PromptError> parse_template(const std::string& path, std::string_view source) {
  auto parsed = ChatTemplate::parse(source);
  if (!parsed) {
    return PromptError{PromptErrc::kTemplate, std::string(jinja::to_string(parsed.error().code)),
                       path + line_suffix(parsed.error().line) + ": " + parsed.error().message};
  }
  return std::move(parsed.value());
}

bool has_tools(const boost::json::value& request) {
  if (!request.is_object()) return false;
  const auto* t = request.as_object().if_contains("tools");
  return t && t->is_array() && !t->as_array().empty();
}

PromptError from_render_error(const RenderError& e) {
  const bool decode = e.code == RenderErrc::kBadRequest;
  return PromptError{decode ? PromptErrc::kDecode : PromptErrc::kRender, std::string(jinja::to_string(e.code)),
                     e.message + line_suffix(e.line)};
}

// As chat_template's own request parse: nesting up to 256, the DOM in one arena freed at once.
constexpr size_t kMaxRequestDepth = 256;

}  // namespace

bool native_formatter_known(std::string_view name) { return name == kNativeDeepseekV32; }
bool template_formatter_known(std::string_view name) { return name == kTemplateFormatterQwen3; }

struct PromptRenderer::Counters {
  std::atomic<uint64_t> native{0}, fallbacks{0}, reused_messages{0}, reused_bytes{0};
  std::array<std::atomic<uint64_t>, qwen3::kFallbackCount> by_reason{};
};

NativeRenderStats PromptRenderer::native_stats() const {
  NativeRenderStats s;
  s.active = native_template_;
  s.native = counters_->native.load(std::memory_order_relaxed);
  s.fallbacks = counters_->fallbacks.load(std::memory_order_relaxed);
  s.reused_messages = counters_->reused_messages.load(std::memory_order_relaxed);
  s.reused_bytes = counters_->reused_bytes.load(std::memory_order_relaxed);
  for (size_t i = 0; i < qwen3::kFallbackCount && i < s.by_reason.size(); ++i)
    s.by_reason[i] = counters_->by_reason[i].load(std::memory_order_relaxed);
  return s;
}
std::string native_formatter_list() { return std::string(kNativeDeepseekV32); }

std::string_view to_string(PromptErrc kind) {
  switch (kind) {
    case PromptErrc::kUsage: return "usage";
    case PromptErrc::kIo: return "io";
    case PromptErrc::kDigest: return "digest";
    case PromptErrc::kTokenizer: return "tokenizer";
    case PromptErrc::kTemplate: return "template";
    case PromptErrc::kConfig: return "config";
    case PromptErrc::kDecode: return "decode";
    case PromptErrc::kRender: return "render";
    case PromptErrc::kEncode: return "encode";
  }
  return "unknown";
}

Result<std::shared_ptr<const PromptRenderer>, PromptError> PromptRenderer::load(const PromptSources& s) {
  std::shared_ptr<PromptRenderer> r(new PromptRenderer());
  r->counters_ = std::make_unique<Counters>();
  if (!s.template_formatter.empty()) {
    if (s.template_path.empty())
      return PromptError{PromptErrc::kUsage, "", "a template formatter needs a chat template"};
    if (!template_formatter_known(s.template_formatter))
      return PromptError{PromptErrc::kUsage, "", "unknown template formatter '" + s.template_formatter + "'"};
  }
  if (!s.native_formatter.empty()) {
    if (!s.template_path.empty())
      return PromptError{PromptErrc::kUsage, "", "a native formatter and a chat template are exclusive"};
    if (!native_formatter_known(s.native_formatter)) {
      return PromptError{PromptErrc::kUsage, "", "unknown native formatter '" + s.native_formatter +
                                                     "' (this build has: " + native_formatter_list() + ")"};
    }
    r->native_ = s.native_formatter;
  } else if (s.template_path.empty()) {
    return PromptError{PromptErrc::kUsage, "", "a chat template or a native formatter is required"};
  }

  if (!s.tokenizer_path.empty()) {
    // One read: the bytes hashed are the bytes loaded.
    auto bytes = read_file(s.tokenizer_path, PromptErrc::kTokenizer);
    if (!bytes) return bytes.error();
    if (auto e = check_digest(s.tokenizer_path, *bytes, s.tokenizer_sha256)) return *e;
    std::optional<std::string> override_json;
    if (!s.added_tokens_path.empty()) {
      auto o = read_file(s.added_tokens_path, PromptErrc::kTokenizer);
      if (!o) return o.error();
      override_json = std::move(o.value());
    }
    auto tok = Tokenizer::from_json(*bytes, {}, override_json ? std::optional<std::string_view>(*override_json)
                                                              : std::nullopt);
    if (!tok) {
      const std::string& m = tok.error().message;
      return PromptError{PromptErrc::kTokenizer, std::string(to_string(tok.error().code)),
                         s.tokenizer_path + (s.added_tokens_path.empty() ? "" : " with " + s.added_tokens_path) +
                             ": " + m};
    }
    r->tokenizer_ = std::move(tok.value());
  } else if (!s.tokenizer_sha256.empty() || !s.added_tokens_path.empty()) {
    return PromptError{PromptErrc::kUsage, "", "a tokenizer digest or override needs a tokenizer path"};
  }

  std::string config_path = s.tokenizer_config_path;
  std::string config;
  std::string template_sha256;  // of the default template's text
  if (!s.template_path.empty()) {
    auto source = read_file(s.template_path, PromptErrc::kTemplate);
    if (!source) return source.error();
    if (auto e = check_digest(s.template_path, *source, s.template_sha256)) return *e;
    if (looks_like_config(*source)) {
      // tokenizer_config.json: the template(s) and the special tokens in one file.
      const auto v = boost::json::parse(*source);
      const auto& ct = v.as_object().at("chat_template");
      if (ct.is_string()) {
        auto t = parse_template(s.template_path, std::string(ct.as_string()));
        if (!t) return t.error();
        r->template_ = std::move(t.value());
        template_sha256 = sha256_hex(ct.as_string());
      } else if (ct.is_array()) {
        for (const auto& e : ct.as_array()) {
          const auto* o = e.if_object();
          const auto* name = o ? o->if_contains("name") : nullptr;
          const auto* text = o ? o->if_contains("template") : nullptr;
          if (!name || !name->is_string() || !text || !text->is_string()) {
            return PromptError{PromptErrc::kConfig, "bad_chat_template",
                               s.template_path + ": chat_template list entries need name and template strings"};
          }
          auto t = parse_template(s.template_path + " [" + std::string(name->as_string()) + "]",
                                  std::string(text->as_string()));
          if (!t) return t.error();
          if (name->as_string() == "default") {
            r->template_ = std::move(t.value());
            template_sha256 = sha256_hex(text->as_string());
          }
          if (name->as_string() == "tool_use") r->tool_template_ = std::move(t.value());
        }
        if (!r->template_) {
          return PromptError{PromptErrc::kConfig, "bad_chat_template",
                             s.template_path + ": no template named \"default\""};
        }
      } else {
        return PromptError{PromptErrc::kConfig, "bad_chat_template",
                           s.template_path + ": chat_template must be a string or a list"};
      }
      if (config_path.empty()) config = std::move(source.value());
    } else {
      auto t = parse_template(s.template_path, *source);
      if (!t) return t.error();
      r->template_ = std::move(t.value());
      template_sha256 = sha256_hex(*source);
    }
  }
  // The native formatter stands in only for a template it is known to reproduce byte for byte
  // (and never beside a separate tool-use template).
  r->native_template_ = s.template_formatter == kTemplateFormatterQwen3 && !r->tool_template_ &&
                        qwen3::reproduces(template_sha256);
  if (config.empty() && config_path.empty() && !s.tokenizer_path.empty() && s.sibling_config) {
    auto sibling = std::filesystem::path(s.tokenizer_path).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(sibling, ec)) config_path = sibling.string();
  }
  if (config.empty() && !config_path.empty()) {
    auto bytes = read_file(config_path, PromptErrc::kConfig);
    if (!bytes) return bytes.error();
    config = std::move(bytes.value());
  }
  if (!config.empty() && r->template_) {
    auto st = special_tokens_from_config(config);
    if (!st) {
      return PromptError{PromptErrc::kConfig, std::string(jinja::to_string(st.error().code)),
                         (config_path.empty() ? s.template_path : config_path) + ": " + st.error().message};
    }
    r->specials_ = std::move(st.value());
  }
  return std::shared_ptr<const PromptRenderer>(std::move(r));
}

Result<RenderedPrompt, PromptError> PromptRenderer::chat(std::string_view request_json, SessionCache* cache) const {
  if (!template_) return native_chat(request_json, cache);
  boost::json::monotonic_resource arena(request_json.size() + 4096);
  boost::json::parse_options opt;
  opt.max_depth = kMaxRequestDepth;
  boost::system::error_code ec;
  const boost::json::value request = boost::json::parse(request_json, ec, &arena, opt);
  if (ec) return from_render_error(RenderError{RenderErrc::kBadRequest, "invalid JSON", 0});
  return template_chat(request, cache);
}

Result<RenderedPrompt, PromptError> PromptRenderer::chat_parsed(const boost::json::value& request,
                                                                SessionCache* cache,
                                                                std::string_view request_json, Turn* turn) const {
  if (turn) turn->render.kinds.clear();
  if (template_) return template_chat(request, cache, cache ? turn : nullptr);
  if (!request_json.empty()) return native_chat(request_json, cache);
  return native_chat(boost::json::serialize(request), cache);
}

Result<RenderedPrompt, PromptError> PromptRenderer::template_chat(const boost::json::value& request,
                                                                  SessionCache* cache, Turn* turn) const {
  RenderedPrompt out;
  if (native_template_) {
    if (!tokenizer_) turn = nullptr;
    auto f = qwen3::format(request, cache ? &cache->render_prefixes() : nullptr, {}, turn ? &turn->render : nullptr);
    if (f) {
      counters_->native.fetch_add(1, std::memory_order_relaxed);
      counters_->reused_messages.fetch_add(f->reused_messages, std::memory_order_relaxed);
      counters_->reused_bytes.fetch_add(f->reused_bytes, std::memory_order_relaxed);
      out.text = std::move(f->text);
      if (turn) {
        SessionCache::TextCuts cuts;
        if (auto e = cache->encode(*tokenizer_, out.text, out.ids, /*add_special_tokens=*/false, &cuts))
          return PromptError{PromptErrc::kEncode, std::string(to_string(e->code)), e->message};
        if (cuts.complete) turn->cuts = std::move(cuts.cuts);
        else turn->render.kinds.clear();
        return out;
      }
      if (auto e = encode_prompt(out, cache)) return *e;
      return out;
    }
    if (turn) turn->render.kinds.clear();
    counters_->fallbacks.fetch_add(1, std::memory_order_relaxed);
    counters_->by_reason[static_cast<size_t>(f.error())].fetch_add(1, std::memory_order_relaxed);
  }
  const ChatTemplate& tpl = tool_template_ && has_tools(request) ? *tool_template_ : *template_;
  auto r = render::render_parsed(tpl, request, specials_);
  if (!r) return from_render_error(r.error());
  out.text = std::move(r.value());
  if (auto e = encode_prompt(out, cache)) return *e;
  return out;
}

Result<RenderedPrompt, PromptError> PromptRenderer::native_chat(std::string_view request_json,
                                                                SessionCache* cache) const {
  RenderedPrompt out;
  auto r = deepseek_v32::encode(request_json);
  if (!r) {
    const auto c = r.error().code;
    const bool decode = c == deepseek_v32::RenderErrc::kBadJson || c == deepseek_v32::RenderErrc::kBadRequest;
    return PromptError{decode ? PromptErrc::kDecode : PromptErrc::kRender,
                       std::string(deepseek_v32::to_string(c)), r.error().message};
  }
  out.text = std::move(r.value());
  if (auto e = encode_prompt(out, cache)) return *e;
  return out;
}

bool PromptRenderer::resume_turn(Turn& turn, size_t first, std::span<const boost::json::value* const> messages) const {
  if (!native_template_ || !tokenizer_) return false;
  auto kept = qwen3::extend(turn.render, turn.text, first, messages);
  if (!kept) return false;
  if (turn.text.size() > tokenizer_->max_input_bytes()) return false;  // the full path reports it
  // The text is the turn's up to `kept` bytes: every cut of it that ends cut_reach() bytes before
  // that is a cut of the new text with the same ids before it (Tokenizer::cut_reach); encode
  // from the last of them.
  const size_t reach = tokenizer_->cut_reach();
  size_t keep_cuts = turn.cuts.size();
  while (keep_cuts > 0 && turn.cuts[keep_cuts - 1].byte + reach > *kept) --keep_cuts;
  const Tokenizer::Cut from = keep_cuts > 0 ? turn.cuts[keep_cuts - 1] : Tokenizer::Cut{};
  if (from.ids > turn.ids.size()) return false;
  turn.cuts.resize(keep_cuts);
  turn.ids.resize(from.ids);
  const size_t cuts_before = turn.cuts.size();
  if (tokenizer_->encode_with_cuts(std::string_view(turn.text).substr(from.byte), turn.ids, turn.cuts)) return false;
  for (size_t j = cuts_before; j < turn.cuts.size(); ++j) {
    turn.cuts[j].byte += from.byte;
    turn.cuts[j].ids += from.ids;
  }
  counters_->native.fetch_add(1, std::memory_order_relaxed);
  counters_->reused_messages.fetch_add(first, std::memory_order_relaxed);
  counters_->reused_bytes.fetch_add(*kept, std::memory_order_relaxed);
  return true;
}

std::optional<PromptError> PromptRenderer::encode_prompt(RenderedPrompt& out, SessionCache* cache) const {
  if (!tokenizer_) return std::nullopt;
  auto e = cache ? cache->encode(*tokenizer_, out.text, out.ids, /*add_special_tokens=*/false)
                 : tokenizer_->encode_into(out.text, out.ids, /*add_special_tokens=*/false);
  if (e) return PromptError{PromptErrc::kEncode, std::string(to_string(e->code)), e->message};
  return std::nullopt;
}

Result<std::vector<uint32_t>, PromptError> PromptRenderer::text(std::string_view input,
                                                                bool add_special_tokens) const {
  if (!tokenizer_) return PromptError{PromptErrc::kUsage, "", "no tokenizer loaded"};
  std::vector<uint32_t> ids;
  if (auto e = tokenizer_->encode_into(input, ids, add_special_tokens)) {
    return PromptError{PromptErrc::kEncode, std::string(to_string(e->code)), e->message};
  }
  return ids;
}

Result<std::string, PromptError> read_file(const std::string& path, PromptErrc kind, size_t max_bytes) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return PromptError{kind, "io", path + ": is a directory"};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return PromptError{kind, "io", path + ": " + std::strerror(errno)};
  std::string out;
  char buf[1 << 16];
  size_t n;
  while (out.size() <= max_bytes && (n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) return PromptError{kind, "io", path + ": read error"};
  if (out.size() > max_bytes)
    return PromptError{kind, "too_large", path + ": larger than " + std::to_string(max_bytes) + " bytes"};
  return out;
}

std::string lower_hex(std::string_view hex) {
  std::string out(hex);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::optional<std::string> file_sha256_hex(const std::string& path) {
  auto bytes = read_file(path, PromptErrc::kIo);
  if (!bytes) return std::nullopt;
  return sha256_hex(*bytes);
}

std::string token_ids_sha256(const std::vector<uint32_t>& ids) {
  std::string be;
  be.reserve(ids.size() * 4);
  for (uint32_t id : ids) {
    be += static_cast<char>(id >> 24);
    be += static_cast<char>((id >> 16) & 0xff);
    be += static_cast<char>((id >> 8) & 0xff);
    be += static_cast<char>(id & 0xff);
  }
  return sha256_hex(be);
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace ramjet::render
