// render::manifest_cli: `ramjet manifest` — writes a tokenizer compatibility manifest from a
// live engine's own answers (see manifest_cli.h).
#include "render/service/manifest_cli.h"

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "config/options.h"
#include "model/model_profile.h"
#include "net/client.h"
#include "net/tls.h"
#include "render/identity/manifest.h"
#include "render/service/tokenizer_service.h"

namespace ramjet::render::manifest_cli {

namespace {

namespace asio = boost::asio;
namespace json = boost::json;

constexpr std::string_view kUsage = R"(usage:
  ramjet manifest --upstream URL --model-dir DIR [--profile LABEL] [--requests goldens.jsonl]
                  [--model-id ID] [--timeout-ms N]
  ramjet manifest --upstream URL --profile LABEL --tokenizer tokenizer.json
                  [--template chat_template.jinja|tokenizer_config.json] [--requests goldens.jsonl]
                  [--model-id ID] [--timeout-ms N]
Asks the engine at URL for its identity (GET /v1/models, GET /version) and for the token ids of
each golden request (POST /tokenize, with the same payload ramjet's tokenizer shadow sends),
checks that ramjet's own render + encode reproduces every one, and prints the manifest JSON for
RJ_TOKENIZER_MANIFEST_PATH. Pin it with `sha256sum` (RJ_TOKENIZER_MANIFEST_SHA256).
  --model-dir  the engines' model folder (as RJ_MODEL_DIR): its tokenizer, template and, without
               --profile, the profile from config.json's model_type
  --requests   JSONL: each line a request body, or {"id", "endpoint": "chat"|"completions",
               "request": {...}}; 1 to 64 lines. Default: ramjet's built-in goldens
  --model-id   the served model id to pin when /v1/models lists several
  RJ_UPSTREAM_TOKEN, when set, is sent as the bearer token. An https:// engine is verified as
  ramjet verifies it: RJ_UPSTREAM_TLS_CA_FILE, RJ_UPSTREAM_TLS_CERT_FILE and _KEY_FILE apply.
Exit status: 0 ok, 2 bad arguments or files, 1 the engine or the local renderer disagrees.
)";

struct Args {
  std::string upstream, profile, tokenizer, templ, requests, model_id, model_dir;
  uint64_t timeout_ms = 30000;
  bool help = false;
};

std::optional<std::string> parse_args(int argc, char** argv, Args& a) {
  const std::pair<std::string_view, std::string Args::*> opts[] = {
      {"--upstream", &Args::upstream}, {"--profile", &Args::profile},   {"--tokenizer", &Args::tokenizer},
      {"--template", &Args::templ},    {"--requests", &Args::requests}, {"--model-id", &Args::model_id},
      {"--model-dir", &Args::model_dir},
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help = true;
      continue;
    }
    std::string value;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return std::string(arg) + " needs a value";
    }
    if (arg == "--timeout-ms") {
      char* end = nullptr;
      a.timeout_ms = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || *end || a.timeout_ms == 0 || a.timeout_ms > 600000) return "--timeout-ms: 1..600000";
      continue;
    }
    bool matched = false;
    for (const auto& [name, field] : opts) {
      if (arg != name) continue;
      matched = true;
      a.*field = value;
    }
    if (!matched) return "unknown argument '" + std::string(argv[i]) + "'";
  }
  if (a.help) return std::nullopt;
  if (a.upstream.empty()) return "--upstream is required";
  if (!a.model_dir.empty()) {
    if (!a.tokenizer.empty() || !a.templ.empty()) return "--model-dir names the files: not with --tokenizer or --template";
    return std::nullopt;
  }
  if (a.profile.empty()) return "--profile is required (or --model-dir)";
  if (a.tokenizer.empty()) return "--tokenizer is required (or --model-dir)";
  return std::nullopt;
}

// Runs one client call to completion on a private io_context.
net::SimpleResponse call(const config::UpstreamUrl& url, bool post, std::string path, std::string body,
                         std::chrono::milliseconds timeout, net::GetFailure& failure) {
  asio::io_context io;
  net::SimpleResponse out;
  const char* token = std::getenv("RJ_UPSTREAM_TOKEN");
  std::string bearer = token ? token : "";
  auto op = post ? net::simple_post(url, std::move(path), std::move(body), bearer, timeout, 64u << 20, failure)
                 : net::simple_get(url, std::move(path), bearer, timeout, 16u << 20, failure);
  net::run_to_completion(io, std::move(op), out, failure);
  return out;
}

}  // namespace

int run(int argc, char** argv) {
  auto& err = std::cerr;
  Args a;
  if (auto e = parse_args(argc, argv, a)) {
    err << "ramjet manifest: " << *e << "\n" << kUsage;
    return 2;
  }
  if (a.help) {
    std::cout << kUsage;
    return 0;
  }
  std::vector<std::string> problems;
  auto urls = config::parse_upstreams(a.upstream, 1, 1, problems);
  if (!urls || urls->size() != 1) {
    err << "ramjet manifest: --upstream: " << (problems.empty() ? "one http[s]:// URL" : problems.front()) << "\n";
    return 2;
  }
  const config::UpstreamUrl url = urls->front();
  if (url.tls) {
    auto env = [](const char* name) {
      const char* v = std::getenv(name);
      return std::string(v ? v : "");
    };
    auto tls = net::UpstreamTls::create({env("RJ_UPSTREAM_TLS_CA_FILE"), env("RJ_UPSTREAM_TLS_CERT_FILE"),
                                         env("RJ_UPSTREAM_TLS_KEY_FILE")});
    if (!tls) {
      err << "ramjet manifest: " << tls.error().message << "\n";
      return 2;
    }
    net::UpstreamTls::install(std::move(tls).value());
  }
  std::string tokenizer_config;  // --model-dir: its special tokens
  if (!a.model_dir.empty()) {
    auto folder = read_model_folder(a.model_dir, a.profile, "give --profile");
    if (!folder) {
      err << "ramjet manifest: --model-dir: " << folder.error() << "\n";
      return 2;
    }
    a.profile = folder->profile;
    a.tokenizer = folder->tokenizer_path;
    a.templ = folder->template_path;
    tokenizer_config = folder->tokenizer_config_path;
  }
  const model::ModelProfile* profile = model::find_profile(a.profile);
  if (!profile) {
    err << "ramjet manifest: --profile: unknown profile '" << a.profile << "'\n";
    return 2;
  }
  const bool hf = profile->formatter_source() == model::FormatterSource::kHfChatTemplate;
  if (hf == a.templ.empty()) {
    err << "ramjet manifest: profile " << a.profile << (hf ? " needs --template\n" : " takes no --template\n");
    return 2;
  }
  PromptSources src;
  src.tokenizer_path = a.tokenizer;
  src.template_path = a.templ;
  if (!tokenizer_config.empty()) {  // as ramjet loads the folder: only its files shape the prompt
    src.tokenizer_config_path = tokenizer_config;
    src.sibling_config = false;
  }
  if (!hf) src.native_formatter = std::string(profile->native_formatter());
  if (hf) src.template_formatter = std::string(profile->template_formatter());
  auto renderer = PromptRenderer::load(src);
  if (!renderer) {
    err << "ramjet manifest: " << to_string(renderer.error().kind) << " error: " << renderer.error().message << "\n";
    return 2;
  }

  // The golden requests.
  struct Golden {
    std::string id;
    bool chat;
    json::object request;
  };
  std::vector<Golden> goldens;
  if (a.requests.empty()) {
    for (const ManifestGolden& g : builtin_goldens()) {
      auto payload = build_tokenize_payload(*profile, g.chat, g.request);
      if (!payload || payload->local_refusal) continue;  // not one this profile renders
      goldens.push_back(Golden{g.id, g.chat, json::parse(g.request).as_object()});
    }
  } else {
    std::ifstream in(a.requests);
    if (!in) {
      err << "ramjet manifest: --requests: " << a.requests << ": cannot be read\n";
      return 2;
    }
    std::string line;
    size_t n = 0;
    while (std::getline(in, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      boost::system::error_code ec;
      json::value v = json::parse(line, ec);
      if (ec || !v.is_object()) {
        err << "ramjet manifest: --requests line " << n << ": not a JSON object\n";
        return 2;
      }
      Golden g{"g" + std::to_string(goldens.size() + 1), true, {}};
      json::object& o = v.as_object();
      if (o.contains("request")) {
        if (!o["request"].is_object()) {
          err << "ramjet manifest: --requests line " << n << ": request must be an object\n";
          return 2;
        }
        if (auto* id = o.if_contains("id"); id && id->is_string()) g.id = std::string(id->as_string());
        if (auto* ep = o.if_contains("endpoint"); ep && ep->is_string()) g.chat = ep->as_string() != "completions";
        g.request = o["request"].as_object();
      } else {
        g.chat = o.contains("messages");
        g.request = std::move(o);
      }
      goldens.push_back(std::move(g));
    }
  }
  if (goldens.empty() || goldens.size() > ManifestLimits{}.max_goldens) {
    err << "ramjet manifest: --requests: 1 to " << ManifestLimits{}.max_goldens << " requests\n";
    return 2;
  }

  const auto timeout = std::chrono::milliseconds(a.timeout_ms);
  net::GetFailure failure = net::GetFailure::kNone;
  auto models = call(url, false, "/v1/models", "", timeout, failure);
  if (failure != net::GetFailure::kNone || models.status != 200) {
    err << "ramjet manifest: GET /v1/models failed (status " << models.status << ")\n";
    return 1;
  }
  boost::system::error_code ec;
  json::value mv = json::parse(models.body, ec);
  const json::object* card = nullptr;
  if (!ec && mv.is_object() && mv.as_object().contains("data") && mv.as_object().at("data").is_array()) {
    for (const auto& c : mv.as_object().at("data").as_array()) {
      const auto* o = c.if_object();
      const auto* id = o ? o->if_contains("id") : nullptr;
      if (!id || !id->is_string()) continue;
      if (!a.model_id.empty() && id->as_string() != a.model_id) continue;
      if (card) {
        err << "ramjet manifest: /v1/models lists several models: choose one with --model-id\n";
        return 1;
      }
      card = o;
    }
  }
  if (!card || !card->if_contains("root") || !card->at("root").is_string() || !card->if_contains("max_model_len") ||
      !card->at("max_model_len").is_number()) {
    err << "ramjet manifest: /v1/models has no usable model card" << (a.model_id.empty() ? "" : " with that id")
        << "\n";
    return 1;
  }
  auto version = call(url, false, "/version", "", timeout, failure);
  json::value vv = json::parse(version.body, ec);
  if (failure != net::GetFailure::kNone || version.status != 200 || ec || !vv.is_object() ||
      !vv.as_object().contains("version") || !vv.as_object().at("version").is_string()) {
    err << "ramjet manifest: GET /version failed\n";
    return 1;
  }

  // A service with only the renderer: its render_local is exactly the startup check's.
  json::array out_goldens;
  int mismatches = 0;
  for (const Golden& g : goldens) {
    auto payload = build_tokenize_payload(*profile, g.chat, json::serialize(g.request));
    if (!payload || payload->local_refusal) {
      err << "ramjet manifest: golden '" << g.id << "': profile " << a.profile
          << " does not render this request locally (choose requests it renders)\n";
      return 2;
    }
    auto res = call(url, true, "/tokenize", payload->json, timeout, failure);
    std::optional<std::vector<uint32_t>> decoded;
    if (failure == net::GetFailure::kNone && res.status == 200) decoded = decode_tokenize_response(res.body);
    if (!decoded) {
      err << "ramjet manifest: golden '" << g.id << "': POST /tokenize failed (status " << res.status
          << (res.status == 200 ? ", not a {count, tokens} answer" : "") << ")\n";
      return 1;
    }
    const std::vector<uint32_t>& engine_ids = *decoded;
    auto local = render_payload(**renderer, *payload);
    if (!local || *local != engine_ids) {
      ++mismatches;
      err << "ramjet manifest: golden '" << g.id << "': the engine produced " << engine_ids.size()
          << " tokens, ramjet's renderer "
          << (local ? std::to_string(local->size()) + " (different ids)" : "failed: " + local.error().message) << "\n";
    }
    out_goldens.push_back(json::object{{"id", g.id},
                                       {"endpoint", g.chat ? "chat" : "completions"},
                                       {"request", g.request},
                                       {"token_count", engine_ids.size()},
                                       {"token_ids_sha256", token_ids_sha256(engine_ids)}});
  }
  if (mismatches) {
    err << "ramjet manifest: " << mismatches << " of " << goldens.size()
        << " goldens differ: ramjet would refuse this manifest at startup (no manifest written)\n";
    return 1;
  }
  json::object manifest{
      {"schema", 1},
      {"model", json::object{{"id", card->at("id")}, {"root", card->at("root")}, {"max_model_len", card->at("max_model_len")}}},
      {"engine", json::object{{"version", vv.as_object().at("version")}}},
      {"tokenizer", json::object{{"sha256", *file_sha256_hex(a.tokenizer)}}},
  };
  if (hf) manifest["chat_template"] = json::object{{"sha256", *file_sha256_hex(a.templ)}};
  manifest["renderer"] = json::object{{"profile", a.profile}};
  manifest["goldens"] = std::move(out_goldens);
  // What ramjet will load: the same parser and limits (a model length of 0, an empty version,
  // ids too long or a manifest over 1 MiB are caught here, not at the next restart).
  const std::string text = json::serialize(manifest);
  if (auto check = parse_manifest(text); !check) {
    err << "ramjet manifest: the engine's answers make an invalid manifest: " << check.error().message << "\n";
    return 1;
  }
  std::cout << text << "\n";
  return std::cout ? 0 : 1;
}

}  // namespace ramjet::render::manifest_cli
