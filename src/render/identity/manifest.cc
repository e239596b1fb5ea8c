// render::manifest (see manifest.h).
#include "render/identity/manifest.h"

#include <boost/json.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cctype>
#include <set>

#include "render/prompt/prompt.h"

namespace ramjet::render {

namespace json = boost::json;

namespace {

Error bad(std::string message) { return Error{"manifest", std::move(message)}; }

// Reads an object's fields: each known key once, anything else is an error.
class Fields {
 public:
  Fields(const json::object& o, std::string where, std::vector<std::string>& errors)
      : o_(o), where_(std::move(where)), errors_(errors) {}
  ~Fields() {
    for (const auto& [k, v] : o_)
      if (!seen_.count(std::string(k))) errors_.push_back(where_ + ": unknown field \"" + std::string(k) + "\"");
  }
  const json::value* get(std::string_view key, bool required = true) {
    seen_.insert(std::string(key));
    const json::value* v = o_.if_contains(key);
    if (!v && required) errors_.push_back(where_ + "." + std::string(key) + ": required");
    return v;
  }
  std::string string(std::string_view key, size_t max, bool required = true) {
    const json::value* v = get(key, required);
    if (!v) return {};
    if (!v->is_string() || v->as_string().empty() || v->as_string().size() > max) {
      errors_.push_back(where_ + "." + std::string(key) + ": a non-empty string of at most " +
                        std::to_string(max) + " bytes");
      return {};
    }
    return std::string(v->as_string());
  }
  std::string digest(std::string_view key) {
    std::string s = string(key, 64);
    if (s.empty()) return s;
    if (!is_sha256_hex(s)) {
      errors_.push_back(where_ + "." + std::string(key) + ": 64 hex digits");
      return {};
    }
    return lower_hex(s);
  }
  uint64_t count(std::string_view key, uint64_t min) {
    const json::value* v = get(key);
    if (!v) return 0;
    uint64_t n = 0;
    if (v->is_uint64()) n = v->as_uint64();
    else if (v->is_int64() && v->as_int64() >= 0) n = static_cast<uint64_t>(v->as_int64());
    else {
      errors_.push_back(where_ + "." + std::string(key) + ": a non-negative integer");
      return 0;
    }
    if (n < min) errors_.push_back(where_ + "." + std::string(key) + ": at least " + std::to_string(min));
    return n;
  }
  const json::object* object(std::string_view key, bool required = true) {
    const json::value* v = get(key, required);
    if (!v) return nullptr;
    if (!v->is_object()) {
      errors_.push_back(where_ + "." + std::string(key) + ": an object");
      return nullptr;
    }
    return &v->as_object();
  }

 private:
  const json::object& o_;
  std::string where_;
  std::vector<std::string>& errors_;
  std::set<std::string> seen_;
};

}  // namespace

Result<Manifest> parse_manifest(std::string_view text, const ManifestLimits& limits) {
  if (text.size() > limits.max_bytes) return bad("larger than " + std::to_string(limits.max_bytes) + " bytes");
  boost::system::error_code ec;
  json::parse_options po;
  po.max_depth = static_cast<size_t>(limits.max_depth);
  json::value root = json::parse(text, ec, {}, po);
  if (ec) return bad("not JSON (" + ec.message() + ")");
  if (!root.is_object()) return bad("not a JSON object");

  Manifest m;
  std::vector<std::string> errors;
  {
    Fields top(root.as_object(), "manifest", errors);
    const json::value* schema = top.get("schema");
    if (schema && !(schema->is_int64() && schema->as_int64() == 1) && !(schema->is_uint64() && schema->as_uint64() == 1))
      errors.push_back("manifest.schema: must be 1");
    if (const auto* o = top.object("model")) {
      Fields f(*o, "model", errors);
      m.model_id = f.string("id", limits.max_string);
      m.model_root = f.string("root", limits.max_string);
      m.max_model_len = f.count("max_model_len", 1);
    }
    if (const auto* o = top.object("engine")) {
      Fields f(*o, "engine", errors);
      m.engine_version = f.string("version", limits.max_string);
    }
    if (const auto* o = top.object("tokenizer")) {
      Fields f(*o, "tokenizer", errors);
      m.tokenizer_sha256 = f.digest("sha256");
    }
    if (const auto* o = top.object("chat_template", false)) {
      Fields f(*o, "chat_template", errors);
      m.chat_template_sha256 = f.digest("sha256");
    }
    if (const auto* o = top.object("renderer")) {
      Fields f(*o, "renderer", errors);
      m.profile = f.string("profile", limits.max_string);
    }
    const json::value* goldens = top.get("goldens");
    if (goldens && (!goldens->is_array() || goldens->as_array().empty() ||
                    goldens->as_array().size() > limits.max_goldens)) {
      errors.push_back("manifest.goldens: a list of 1 to " + std::to_string(limits.max_goldens) + " goldens");
    } else if (goldens) {
      std::set<std::string> ids;
      size_t i = 0;
      for (const auto& g : goldens->as_array()) {
        const std::string where = "goldens[" + std::to_string(i++) + "]";
        if (!g.is_object()) {
          errors.push_back(where + ": an object");
          continue;
        }
        Fields f(g.as_object(), where, errors);
        ManifestGolden golden;
        golden.id = f.string("id", 256);
        if (!golden.id.empty() && !ids.insert(golden.id).second) errors.push_back(where + ".id: duplicate");
        std::string endpoint = f.string("endpoint", 32);
        if (endpoint == "chat") golden.chat = true;
        else if (endpoint == "completions") golden.chat = false;
        else if (!endpoint.empty()) errors.push_back(where + ".endpoint: chat or completions");
        if (const auto* req = f.object("request")) golden.request = json::serialize(*req);
        golden.token_count = f.count("token_count", 1);
        golden.token_ids_sha256 = f.digest("token_ids_sha256");
        m.goldens.push_back(std::move(golden));
      }
    }
  }
  if (!errors.empty()) {
    std::string msg = errors.front();
    if (errors.size() > 1) msg += " (and " + std::to_string(errors.size() - 1) + " more)";
    return bad(msg);
  }
  return m;
}

std::string_view to_string(Attestation a) {
  switch (a) {
    case Attestation::kMatch: return "match";
    case Attestation::kModelsFetch: return "models_fetch_error";
    case Attestation::kModelsDecode: return "models_decode";
    case Attestation::kModelMissing: return "model_missing";
    case Attestation::kModelAmbiguous: return "model_ambiguous";
    case Attestation::kModelRootMismatch: return "model_root_mismatch";
    case Attestation::kModelContextMismatch: return "model_context_mismatch";
    case Attestation::kVersionFetch: return "version_fetch_error";
    case Attestation::kVersionDecode: return "version_decode";
    case Attestation::kVersionMismatch: return "version_mismatch";
    case Attestation::kTokenizeFetch: return "tokenize_error";
    case Attestation::kGoldenMismatch: return "golden_mismatch";
    case Attestation::kUnchecked: return "unchecked";
  }
  return "unknown";
}

Attestation attest_models(const Manifest& m, std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return Attestation::kModelsDecode;
  const json::value* data = v.as_object().if_contains("data");
  if (!data || !data->is_array()) return Attestation::kModelsDecode;
  const json::object* card = nullptr;
  for (const auto& c : data->as_array()) {
    if (!c.is_object()) return Attestation::kModelsDecode;
    const json::value* id = c.as_object().if_contains("id");
    if (!id || !id->is_string()) return Attestation::kModelsDecode;
    if (id->as_string() != m.model_id) continue;
    if (card) return Attestation::kModelAmbiguous;
    card = &c.as_object();
  }
  if (!card) return Attestation::kModelMissing;
  const json::value* root = card->if_contains("root");
  if (!root || !root->is_string() || root->as_string() != m.model_root) return Attestation::kModelRootMismatch;
  const json::value* len = card->if_contains("max_model_len");
  const bool len_ok = len && ((len->is_uint64() && len->as_uint64() == m.max_model_len) ||
                              (len->is_int64() && len->as_int64() >= 0 &&
                               static_cast<uint64_t>(len->as_int64()) == m.max_model_len));
  return len_ok ? Attestation::kMatch : Attestation::kModelContextMismatch;
}

Attestation attest_version(const Manifest& m, std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return Attestation::kVersionDecode;
  const json::value* ver = v.as_object().if_contains("version");
  if (!ver || !ver->is_string()) return Attestation::kVersionDecode;
  return ver->as_string() == m.engine_version ? Attestation::kMatch : Attestation::kVersionMismatch;
}

Result<std::string, Attestation> engine_identity(std::string_view models_body, std::string_view version_body) {
  boost::system::error_code ec;
  json::value v = json::parse(models_body, ec);
  const json::value* data = !ec && v.is_object() ? v.as_object().if_contains("data") : nullptr;
  if (!data || !data->is_array() || data->as_array().empty() || data->as_array().size() > 4096)
    return Attestation::kModelsDecode;
  std::vector<std::string> cards;
  for (const auto& c : data->as_array()) {
    const json::object* o = c.if_object();
    const json::value* id = o ? o->if_contains("id") : nullptr;
    if (!id || !id->is_string()) return Attestation::kModelsDecode;
    const json::value* root = o->if_contains("root");
    const json::value* len = o->if_contains("max_model_len");
    cards.push_back(json::serialize(json::array{*id, root ? *root : json::value(nullptr), len ? *len : json::value(nullptr)}));
  }
  std::sort(cards.begin(), cards.end());
  json::value ver = json::parse(version_body, ec);
  const json::value* version = !ec && ver.is_object() ? ver.as_object().if_contains("version") : nullptr;
  if (!version || !version->is_string()) return Attestation::kVersionDecode;
  std::string out = json::serialize(*version);
  for (const std::string& c : cards) out += "\n" + c;
  return out;
}

std::vector<ManifestGolden> builtin_goldens() {
  // Chosen to cross what a template and a tokenizer can get wrong: the role markers, a system
  // prompt, turns, tools and a tool call with its result, non-ASCII text, runs of spaces and
  // newlines, digits, code; and a plain completions prompt (its special tokens).
  const char* chats[][2] = {
      {"hello", R"({"messages":[{"role":"user","content":"Hello!"}]})"},
      {"system-turns",
       R"({"messages":[{"role":"system","content":"You are a careful assistant. Answer in one line."},)"
       R"({"role":"user","content":"What is 17 * 23?"},{"role":"assistant","content":"391"},)"
       R"({"role":"user","content":"And 391 / 17?"}]})"},
      {"unicode-space",
       R"({"messages":[{"role":"user","content":"Grüße aus Zürich — 東京 🚀\n\n    def f(x):\n\treturn x  # tabs\u00a0and   spaces\n\n\n1234567890"}]})"},
      {"tools",
       R"({"messages":[{"role":"system","content":"Use the tools."},{"role":"user","content":"Weather in Paris?"},)"
       R"({"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":)"
       R"({"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},)"
       R"({"role":"tool","tool_call_id":"call_1","content":"{\"temp_c\": 21}"},{"role":"user","content":"Thanks."}],)"
       R"("tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather",)"
       R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]})"},
  };
  std::vector<ManifestGolden> out;
  for (const auto& [id, request] : chats) out.push_back(ManifestGolden{id, true, request, 0, {}});
  out.push_back(ManifestGolden{"completions", false, R"({"prompt":"The quick brown fox\njumps over 13 lazy dogs."})", 0, {}});
  return out;
}

}  // namespace ramjet::render
