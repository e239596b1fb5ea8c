// render::tokenizer_service (see tokenizer_service.h).
#include "render/service/tokenizer_service.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <filesystem>

#include "model/model_profile.h"
#include "render/template/qwen3_native.h"
#include "render/prompt/session_cache.h"

namespace ramjet::render {

namespace {

constexpr std::array kFamilies = {
    metrics::Family{"ramjet_tokenizer_info", metrics::MetricKind::kGauge, "mode,profile",
                    "1, labelled with RJ_TOKENIZER_MODE (off|remote-shadow|local-shadow|local) and the profile "
                    "(RJ_TOKENIZER_PROFILE or the model folder's); with several RJ_MODEL_DIR folders, one "
                    "sample per profile, its value the folders with it."},
    metrics::Family{"ramjet_tokenizer_shadow_total", metrics::MetricKind::kCounter, "backend,endpoint,outcome",
                    "Shadow tokenizations by backend (remote: the engine's /tokenize; local: ramjet's "
                    "render + encode), endpoint (chat|completions) and outcome. Remote: success, "
                    "timeout, connect_error, http_error, response_too_large, decode_error. Local: "
                    "parity_match, parity_mismatch (local-shadow), success (local), unsupported_request, "
                    "decode_error, render_error, encode_error, remote_authority_unavailable, unattested."},
    metrics::Family{"ramjet_tokenizer_shadow_skipped_total", metrics::MetricKind::kCounter, "reason",
                    "Completed requests not tokenized: queue_full, outside_size_window "
                    "(RJ_TOKENIZER_MIN_BYTES..RJ_TOKENIZER_MAX_BYTES), unsupported_endpoint (no "
                    "messages array / no string prompt), multimodal (a non-text content part: the engine is not "
                    "asked to fetch its media again), stopping."},
    metrics::Family{"ramjet_tokenizer_shadow_queue_depth", metrics::MetricKind::kGauge, "",
                    "Requests waiting for a shadow tokenization worker."},
    metrics::Family{"ramjet_tokenizer_shadow_duration_seconds", metrics::MetricKind::kHistogram, "backend",
                    "Time of one remote /tokenize call or one local render + encode."},
    metrics::Family{"ramjet_tokenizer_shadow_tokens_total", metrics::MetricKind::kCounter, "backend",
                    "Prompt tokens produced by successful remote and local tokenizations."},
    metrics::Family{"ramjet_tokenizer_attested", metrics::MetricKind::kGauge, "upstream",
                    "1 while the engine's /v1/models (model id, root, max_model_len) and /version match "
                    "the manifest, or (RJ_MODEL_DIR, no manifest) its /tokenize reproduced one model folder's "
                    "goldens under its current identity, so its requests are tokenized locally (local modes)."},
    metrics::Family{"ramjet_tokenizer_attestation_checks_total", metrics::MetricKind::kCounter, "upstream,outcome",
                    "Engine identity checks by outcome: match, models_fetch_error, models_decode, "
                    "model_missing, model_ambiguous, model_root_mismatch, model_context_mismatch, "
                    "version_fetch_error, version_decode, version_mismatch; with RJ_MODEL_DIR and no "
                    "manifest, tokenize_error (a golden's /tokenize failed) and golden_mismatch (the "
                    "engine's tokens for a golden differ from ramjet's); summed over several RJ_MODEL_DIR "
                    "folders (an engine can count one golden_mismatch from each other folder that asked it "
                    "before its own folder proved it)."},
    metrics::Family{"ramjet_tokenizer_session_cache_lookups_total", metrics::MetricKind::kCounter, "result",
                    "Local encodes by whether a cached conversation prefix was reused (hit) or not (miss)."},
    metrics::Family{"ramjet_tokenizer_session_cache_reused_bytes_total", metrics::MetricKind::kCounter, "",
                    "Prompt bytes whose token ids came from the session cache instead of being encoded."},
    metrics::Family{"ramjet_tokenizer_session_cache_evictions_total", metrics::MetricKind::kCounter, "",
                    "Cached prefixes dropped to stay within RJ_TOKENIZER_SESSION_CACHE_BYTES."},
    metrics::Family{"ramjet_tokenizer_session_cache_bytes", metrics::MetricKind::kGauge, "",
                    "Bytes held by the session cache (text, ids and index)."},
    metrics::Family{"ramjet_tokenizer_turns_total", metrics::MetricKind::kCounter, "result",
                    "Exact routing's local chat renders by what the conversation's kept last turn gave: resumed "
                    "(the body extended it byte for byte: only the new messages were parsed, rendered and "
                    "encoded), declined (it did, but the new messages were not resumable: full render), miss "
                    "(no kept turn it extends: full render)."},
    metrics::Family{"ramjet_tokenizer_turn_cache_bytes", metrics::MetricKind::kGauge, "",
                    "Bytes held by the kept last turns (bodies, prompts, ids and cuts; half of "
                    "RJ_TOKENIZER_SESSION_CACHE_BYTES)."},
    metrics::Family{"ramjet_tokenizer_native_render_total", metrics::MetricKind::kCounter, "result",
                    "Local chat renders with a template the profile's native formatter reproduces: native, or "
                    "rendered by the template because the formatter does not cover the request (request, "
                    "messages, role, content, reasoning, tool_call, tools, kwargs, generation_prompt, limit)."},
};
enum FamilyIndex {
  kInfo, kShadow, kSkipped, kQueue, kDuration, kTokens, kAttested, kChecks,
  kCacheLookups, kCacheReused, kCacheEvictions, kCacheBytes, kTurns, kTurnBytes, kNativeRender,
};

constexpr std::string_view kBackend[2] = {"remote", "local"};
constexpr std::string_view kEndpoint[2] = {"completions", "chat"};

std::string known_profiles() {
  std::string s;
  for (const auto* p : model::PROFILES) s += (s.empty() ? "" : ", ") + std::string(p->label());
  return s;
}

}  // namespace

std::span<const metrics::Family> tokenizer_families() { return kFamilies; }

TokenizerServiceConfig tokenizer_service_config(const config::Config& c, bool exact_on) {
  TokenizerServiceConfig t;
  t.mode = parse_tokenizer_mode(c.tokenizer_mode).value_or(TokenizerMode::kOff);
  if (t.mode == TokenizerMode::kOff && exact_on && config::exact_tokens_local(c)) t.mode = TokenizerMode::kLocal;
  t.profile = c.tokenizer_profile;
  t.model_dirs = c.model_dirs;
  t.tokenizer_path = c.tokenizer_path;
  t.tokenizer_sha256 = c.tokenizer_sha256;
  t.template_path = c.chat_template_path;
  t.template_sha256 = c.chat_template_sha256;
  t.manifest_path = c.tokenizer_manifest_path;
  t.manifest_sha256 = c.tokenizer_manifest_sha256;
  t.min_bytes = c.tokenizer_min_bytes;
  t.max_bytes = c.tokenizer_max_bytes;
  t.workers = c.tokenizer_workers;
  t.queue_capacity = c.tokenizer_queue_capacity;
  t.timeout = std::chrono::milliseconds(c.tokenizer_timeout_ms);
  t.attest_interval = std::chrono::milliseconds(c.probe_interval_ms);
  t.session_cache_bytes = c.tokenizer_session_cache_bytes;
  t.bearer = c.upstream_token;
  t.upstreams = c.upstreams;
  return t;
}

namespace {

// Jobs queued at once: the configured capacity, and bodies up to 64 MiB in all (at least one
// body of the largest size the window admits).
RenderPoolLimits pool_limits(const TokenizerServiceConfig& c) {
  return RenderPoolLimits{.threads = std::max<size_t>(1, c.workers),
                          .max_jobs = c.queue_capacity,
                          .max_bytes = std::max<size_t>(64u << 20, c.max_bytes)};
}

AttestationConfig attestation_config(const TokenizerServiceConfig& c) {
  return AttestationConfig{.upstreams = c.upstreams,
                           .roster = c.roster,
                           .bearer = c.bearer,
                           .timeout = c.timeout,
                           .interval = c.attest_interval,
                           .skip = {},
                           .name = {}};
}

}  // namespace

struct TokenizerService::Model {
  std::string dir;      // its RJ_MODEL_DIR folder ("" : the RJ_TOKENIZER_* files)
  std::string profile_name;
  std::string tokenizer_config_path;  // the folder's tokenizer_config.json (special tokens)
  const model::ModelProfile* profile = nullptr;
  std::vector<GoldenProbe> probes;  // the goldens as /tokenize calls (no pinned identity)
  std::shared_ptr<const PromptRenderer> renderer;
  std::optional<Manifest> manifest;
  std::unique_ptr<SessionCache> session_cache;  // local modes, when sized
  std::unique_ptr<EngineAttestation> attestation;
  std::unique_ptr<ShadowComparer> shadow;  // every model create() returns
};

TokenizerService::TokenizerService(TokenizerServiceConfig cfg) : cfg_(std::move(cfg)), pool_(pool_limits(cfg_)) {}

void TokenizerService::assemble(Model& m) {
  m.shadow = std::make_unique<ShadowComparer>(
      ShadowConfig{.mode = cfg_.mode,
                   .min_bytes = cfg_.min_bytes,
                   .max_bytes = cfg_.max_bytes,
                   .timeout = cfg_.timeout,
                   .max_response_bytes = cfg_.max_response_bytes,
                   .bearer = cfg_.bearer,
                   .upstreams = cfg_.upstreams,
                   .roster = cfg_.roster},
      m.profile, m.renderer, m.session_cache.get(), pool_, *m.attestation, counters_);
}

TokenizerService::~TokenizerService() { stop(); }

std::unique_ptr<TokenizerService> TokenizerService::unloaded_for_docs(TokenizerMode mode, size_t upstreams) {
  TokenizerServiceConfig c;
  c.mode = mode;
  c.profile = "qwen3";
  c.upstreams.resize(upstreams);
  std::unique_ptr<TokenizerService> s(new TokenizerService(std::move(c)));
  auto m = std::make_unique<Model>();
  m->profile_name = s->cfg_.profile;
  m->attestation = std::make_unique<EngineAttestation>(attestation_config(s->cfg_));
  s->assemble(*m);
  s->models_.push_back(std::move(m));
  return s;
}

Result<ModelFolder, std::string> read_model_folder(const std::string& dir_name, std::string_view profile,
                                                   std::string_view profile_setting) {
  namespace fs = std::filesystem;
  const fs::path dir(dir_name);
  std::error_code ec;
  auto file = [&](const char* name) {
    const fs::path p = dir / name;
    return fs::is_regular_file(p, ec) ? p.string() : std::string();
  };
  // A JSON file of the folder as an object (empty when it is missing, unreadable or not one).
  auto json_object = [](const std::string& path, size_t max_bytes) {
    auto text = read_file(path, PromptErrc::kConfig, max_bytes);
    boost::system::error_code jec;
    boost::json::value v = text ? boost::json::parse(*text, jec) : boost::json::value();
    return !jec && v.is_object() ? std::move(v.as_object()) : boost::json::object();
  };
  if (!fs::is_directory(dir, ec)) return dir_name + " is not a folder";
  ModelFolder out;
  out.tokenizer_path = file("tokenizer.json");
  if (out.tokenizer_path.empty()) return dir_name + " has no tokenizer.json (a fast tokenizer is needed)";
  out.tokenizer_config_path = file("tokenizer_config.json");
  out.profile = profile;
  if (out.profile.empty()) {
    const std::string config_json = file("config.json");
    const boost::json::object config = config_json.empty() ? boost::json::object() : json_object(config_json, 4u << 20);
    const boost::json::value* type = config.if_contains("model_type");
    if (type == nullptr || !type->is_string())
      return dir_name + " has no config.json with a model_type to pick the profile by: " + std::string(profile_setting) +
             " (known: " + known_profiles() + ")";
    const model::ModelProfile* p = model::profile_for_model_type(type->as_string());
    if (p == nullptr)
      return "config.json's model_type '" + std::string(type->as_string()) + "' has no profile here: " +
             std::string(profile_setting) + " (known: " + known_profiles() + ")";
    out.profile = std::string(p->label());
  }
  const model::ModelProfile* p = model::find_profile(out.profile);
  if (p != nullptr && p->formatter_source() == model::FormatterSource::kHfChatTemplate) {
    for (const char* name : {"chat_template.jinja", "chat_template.json", "tokenizer_config.json"}) {
      const std::string path = file(name);
      if (path.empty()) continue;
      // The JSON forms hold the template under "chat_template"; one without it is not a template.
      if (std::string_view(name).ends_with(".jinja") || json_object(path, 64u << 20).contains("chat_template")) {
        out.template_path = path;
        break;
      }
    }
    if (out.template_path.empty())
      return dir_name + " has no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json)";
  }
  return out;
}

namespace {

// RJ_MODEL_DIR into the service's files, their digests taken now (the files the renderer then
// loads are checked against them).
void resolve_model_dir(const std::string& dir, TokenizerServiceConfig& cfg, std::string& tokenizer_config,
                       std::vector<std::string>& errors) {
  auto folder = read_model_folder(dir, cfg.profile, "set RJ_TOKENIZER_PROFILE");
  if (!folder) {
    errors.push_back("RJ_MODEL_DIR: " + folder.error());
    return;
  }
  cfg.profile = folder->profile;
  cfg.tokenizer_path = folder->tokenizer_path;
  cfg.template_path = folder->template_path;
  tokenizer_config = folder->tokenizer_config_path;
  cfg.tokenizer_sha256 = file_sha256_hex(cfg.tokenizer_path).value_or("");
  if (!cfg.template_path.empty()) cfg.template_sha256 = file_sha256_hex(cfg.template_path).value_or("");
  if (cfg.tokenizer_sha256.empty() || (!cfg.template_path.empty() && cfg.template_sha256.empty()))
    errors.push_back("RJ_MODEL_DIR: " + dir + ": its files cannot be read");
}

}  // namespace

std::unique_ptr<TokenizerService> TokenizerService::create(const TokenizerServiceConfig& given,
                                                           std::vector<std::string>& errors) {
  const size_t before = errors.size();
  const std::vector<std::string>& dirs = given.model_dirs;
  if (dirs.size() > 1) {
    if (!given.profile.empty())
      errors.push_back("RJ_TOKENIZER_PROFILE: set with " + std::to_string(dirs.size()) +
                       " RJ_MODEL_DIR folders (each folder's config.json picks its own profile)");
    if (!given.manifest_path.empty())
      errors.push_back("RJ_TOKENIZER_MANIFEST_PATH: a manifest describes one model and RJ_MODEL_DIR names " +
                       std::to_string(dirs.size()) + " folders (their engines are proven by the built-in goldens)");
    for (size_t i = 0; i < dirs.size(); ++i)
      for (size_t j = 0; j < i; ++j) {
        std::error_code ec;  // (a folder that is not there is refused when it is read)
        if (std::filesystem::equivalent(dirs[i], dirs[j], ec)) errors.push_back("RJ_MODEL_DIR: " + dirs[i] + " is named twice");
      }
    if (errors.size() != before) return nullptr;
  }
  std::unique_ptr<TokenizerService> s(new TokenizerService(given));
  // Off: the profile alone is checked (one model, nothing loaded).
  const bool folders = !dirs.empty() && given.mode != TokenizerMode::kOff;
  const size_t n = folders ? dirs.size() : 1;
  for (size_t k = 0; k < n; ++k) {
    auto m = s->load_model(folders ? dirs[k] : std::string(), k, errors);
    if (!m) return nullptr;
    s->models_.push_back(std::move(m));
  }
  return s;
}

std::unique_ptr<TokenizerService::Model> TokenizerService::load_model(std::string dir, size_t index,
                                                                      std::vector<std::string>& errors) {
  TokenizerServiceConfig cfg = cfg_;
  const size_t before = errors.size();
  auto err = [&](std::string m) { errors.push_back(std::move(m)); };
  auto s = std::make_unique<Model>();
  s->dir = dir;
  if (!dir.empty()) {
    resolve_model_dir(dir, cfg, s->tokenizer_config_path, errors);
    if (errors.size() != before) return nullptr;
  }
  s->profile_name = cfg.profile;
  const bool several = cfg_.model_dirs.size() > 1 && cfg_.mode != TokenizerMode::kOff;
  // Several folders: an engine another folder attested is not asked for this one's goldens.
  AttestationConfig ac = attestation_config(cfg);
  if (several) {
    ac.name = " folder " + std::to_string(index + 1);
    ac.skip = [this, index](size_t i) {
      for (size_t j = 0; j < models_.size(); ++j)
        if (j != index && models_[j]->attestation->attested(i)) return true;
      return false;
    };
  }
  s->attestation = std::make_unique<EngineAttestation>(std::move(ac));

  // The profile is checked even when off: a typo must not quietly disable attestation later.
  if (!cfg.profile.empty()) {
    s->profile = model::find_profile(cfg.profile);
    if (!s->profile) err("RJ_TOKENIZER_PROFILE: unknown profile '" + cfg.profile + "' (known: " + known_profiles() + ")");
  } else if (cfg.mode != TokenizerMode::kOff) {
    err("RJ_TOKENIZER_PROFILE is required when RJ_TOKENIZER_MODE is " + std::string(to_string(cfg.mode)) +
        " (known: " + known_profiles() + ")");
  }
  auto pair = [&](const std::string& path, const std::string& sha, std::string_view path_name,
                  std::string_view sha_name) {
    if (path.empty() != sha.empty()) {
      err(std::string(path.empty() ? sha_name : path_name) + " is set without " +
          std::string(path.empty() ? path_name : sha_name) + ": a file and its SHA-256 pin go together");
    } else if (!sha.empty() && !is_sha256_hex(sha)) {
      err(std::string(sha_name) + ": 64 hex digits (the SHA-256 of the file)");
    }
  };
  pair(cfg.tokenizer_path, cfg.tokenizer_sha256, "RJ_TOKENIZER_PATH", "RJ_TOKENIZER_SHA256");
  pair(cfg.template_path, cfg.template_sha256, "RJ_CHAT_TEMPLATE_PATH", "RJ_CHAT_TEMPLATE_SHA256");
  pair(cfg.manifest_path, cfg.manifest_sha256, "RJ_TOKENIZER_MANIFEST_PATH", "RJ_TOKENIZER_MANIFEST_SHA256");
  if (cfg.min_bytes > cfg.max_bytes) err("RJ_TOKENIZER_MIN_BYTES is larger than RJ_TOKENIZER_MAX_BYTES");
  if (errors.size() != before) return nullptr;
  if (!local_mode(cfg.mode)) {
    assemble(*s);
    return s;
  }

  // Local modes: the renderer, pinned; the manifest, pinned; the goldens.
  const auto* profile = s->profile;
  const bool hf = profile->formatter_source() == model::FormatterSource::kHfChatTemplate;
  if (cfg.tokenizer_path.empty())
    err("RJ_MODEL_DIR (or RJ_TOKENIZER_PATH and RJ_TOKENIZER_SHA256) is required in local modes");
  if (cfg.manifest_path.empty() && dir.empty())
    err("RJ_TOKENIZER_MANIFEST_PATH and RJ_TOKENIZER_MANIFEST_SHA256 are required in local modes (or RJ_MODEL_DIR, "
        "whose engines are proven by built-in goldens)");
  if (hf && cfg.template_path.empty())
    err("profile " + cfg.profile + " renders with an HF chat template: RJ_CHAT_TEMPLATE_PATH and "
        "RJ_CHAT_TEMPLATE_SHA256 are required");
  if (!hf && !cfg.template_path.empty())
    err("profile " + cfg.profile + " has a native formatter: RJ_CHAT_TEMPLATE_PATH must not be set");
  if (!hf && !native_formatter_known(profile->native_formatter()))
    err("profile " + cfg.profile + " needs the native formatter '" + std::string(profile->native_formatter()) +
        "', which this build does not have (it has: " + native_formatter_list() +
        "); use RJ_TOKENIZER_MODE=off or remote-shadow");
  if (errors.size() != before) return nullptr;

  PromptSources src;
  src.tokenizer_path = cfg.tokenizer_path;
  src.tokenizer_sha256 = cfg.tokenizer_sha256;
  src.template_path = cfg.template_path;
  src.template_sha256 = cfg.template_sha256;
  src.sibling_config = false;  // only pinned files shape the prompt
  src.tokenizer_config_path = s->tokenizer_config_path;  // RJ_MODEL_DIR's (read now, with the rest)
  if (!hf) src.native_formatter = std::string(profile->native_formatter());
  if (hf) src.template_formatter = std::string(profile->template_formatter());
  auto renderer = PromptRenderer::load(src);
  if (!renderer) {
    err("tokenizer: " + std::string(to_string(renderer.error().kind)) + " error: " + renderer.error().message);
    return nullptr;
  }
  s->renderer = std::move(renderer.value());
  if (cfg.session_cache_bytes > 0) {
    // The budget is shared: half for exact routing's last turn of each conversation (body,
    // prompt, ids: a follow-up that extends it renders only its new messages,
    // render/prompt/turn_cache.h), three eighths for encoded prefixes, an eighth for the rendered
    // prefixes of a native formatter (render/template/qwen3_native.h).
    const uint64_t budget = cfg.session_cache_bytes;
    s->session_cache = std::make_unique<SessionCache>(
        SessionCacheLimits{.max_entries = 4096, .max_bytes = budget - budget / 2 - budget / 8},
        RenderPrefixLimits{.max_entries = 4096, .max_bytes = budget / 8},
        TurnLimits{.max_entries = 4096, .max_bytes = budget / 2});
  }

  if (cfg.manifest_path.empty()) {
    // RJ_MODEL_DIR without a manifest: the built-in goldens, their tokens ramjet's own (each
    // engine's /tokenize must reproduce them to be attested).
    Manifest m;
    m.identity_pinned = false;
    m.tokenizer_sha256 = lower_hex(cfg.tokenizer_sha256);
    m.chat_template_sha256 = hf ? lower_hex(cfg.template_sha256) : "";
    m.profile = cfg.profile;
    for (ManifestGolden g : builtin_goldens()) {
      auto payload = build_tokenize_payload(*profile, g.chat, g.request);
      if (!payload || payload->local_refusal) continue;  // not one this profile renders
      LocalResult r = render::render_local(*s->renderer, *payload, s->session_cache.get());
      if (r.outcome != ShadowOutcome::kSuccess) {
        err("golden '" + g.id + "': local " + std::string(to_string(r.outcome)) + " with RJ_MODEL_DIR's files");
        continue;
      }
      g.token_count = r.ids.size();
      g.token_ids_sha256 = token_ids_sha256(r.ids);
      s->probes.push_back(GoldenProbe{g.id, payload->json, g.token_count, g.token_ids_sha256});
      m.goldens.push_back(std::move(g));
    }
    if (errors.size() != before) return nullptr;
    if (m.goldens.size() < 2) {
      err("profile " + cfg.profile + " renders fewer than two of the built-in goldens: give RJ_TOKENIZER_MANIFEST_PATH");
      return nullptr;
    }
    s->manifest = std::move(m);
    assemble(*s);
    spdlog::info("tokenizer: mode={} profile={} from RJ_MODEL_DIR{} (tokenizer.json sha256 {}{}{}); no manifest: an "
                 "engine is attested once its /tokenize reproduces {} goldens",
                 to_string(cfg.mode), cfg.profile, several ? " folder " + std::to_string(index + 1) + " " + dir : "",
                 s->manifest->tokenizer_sha256,
                 hf ? ", chat template " + std::filesystem::path(cfg.template_path).filename().string() + " sha256 " : "",
                 hf ? s->manifest->chat_template_sha256 : "", s->probes.size());
    return s;
  }
  auto manifest_text = read_file(cfg.manifest_path, PromptErrc::kConfig, ManifestLimits{}.max_bytes);
  if (!manifest_text) {
    err("RJ_TOKENIZER_MANIFEST_PATH: " + manifest_text.error().message);
    return nullptr;
  }
  if (sha256_hex(*manifest_text) != lower_hex(cfg.manifest_sha256)) {
    err("RJ_TOKENIZER_MANIFEST_PATH: " + cfg.manifest_path + ": SHA-256 differs from RJ_TOKENIZER_MANIFEST_SHA256");
    return nullptr;
  }
  auto manifest = parse_manifest(*manifest_text);
  if (!manifest) {
    err("RJ_TOKENIZER_MANIFEST_PATH: " + manifest.error().message);
    return nullptr;
  }
  if (manifest->profile != cfg.profile)
    err("manifest renderer.profile is '" + manifest->profile + "', RJ_TOKENIZER_PROFILE is '" + cfg.profile + "'");
  if (manifest->tokenizer_sha256 != lower_hex(cfg.tokenizer_sha256))
    err("manifest tokenizer.sha256 differs from RJ_TOKENIZER_SHA256");
  if (hf && manifest->chat_template_sha256 != lower_hex(cfg.template_sha256))
    err("manifest chat_template.sha256 differs from RJ_CHAT_TEMPLATE_SHA256");
  if (!hf && !manifest->chat_template_sha256.empty())
    err("manifest chat_template: the profile has a native formatter (no template)");
  if (errors.size() != before) return nullptr;

  // Every golden, rendered and encoded as a live request would be.
  for (const ManifestGolden& g : manifest->goldens) {
    auto payload = build_tokenize_payload(*profile, g.chat, g.request);
    if (!payload) {
      err("manifest golden '" + g.id + "': not a " + (g.chat ? "chat" : "completions") + " request");
      continue;
    }
    LocalResult r = render::render_local(*s->renderer, *payload, s->session_cache.get());
    if (r.outcome != ShadowOutcome::kSuccess) {
      err("manifest golden '" + g.id + "': local " + std::string(to_string(r.outcome)));
    } else if (r.ids.size() != g.token_count) {
      err("manifest golden '" + g.id + "': rendered " + std::to_string(r.ids.size()) + " tokens, the manifest has " +
          std::to_string(g.token_count));
    } else if (token_ids_sha256(r.ids) != g.token_ids_sha256) {
      err("manifest golden '" + g.id + "': " + std::to_string(r.ids.size()) +
          " tokens, but the token ids differ from the manifest's digest");
    }
  }
  if (errors.size() != before) return nullptr;
  s->manifest = std::move(manifest.value());
  assemble(*s);
  spdlog::info("tokenizer: mode={} profile={} {} manifest goldens reproduced", to_string(cfg.mode), cfg.profile,
               s->manifest->goldens.size());
  return s;
}

TokenizerService::LocalResult TokenizerService::render_local(const TokenizePayload& p, size_t model) const {
  const Model& m = *models_.at(model);
  return render::render_local(*m.renderer, p, m.session_cache.get());
}

TokenizerService::RoutingRender TokenizerService::render_routing(PromptApi api, std::string_view body,
                                                                 size_t model) const {
  const Model* m = model < models_.size() ? models_[model].get() : nullptr;
  if (m == nullptr || m->renderer == nullptr || m->profile == nullptr) {
    RoutingRender refused;
    refused.outcome = ShadowOutcome::kDecodeError;
    return refused;
  }
  return render_routing_body(*m->profile, *m->renderer, m->session_cache.get(), api, body);
}

boost::asio::awaitable<Result<TokenizerService::RoutingRender, PoolRefusal>> TokenizerService::render_for_routing(
    size_t model, PromptApi api, std::string body, RenderPool::Clock::time_point deadline) {
  const size_t bytes = body.size();
  // The job owns the body: an awaiter that gives up at the deadline leaves it running. (Not a
  // coroutine itself: GCC 12 destroys a temporary lambda of a co_await expression twice.)
  auto job = [this, api, model, body = std::move(body)]() { return render_routing(api, body, model); };
  return pool_.run(deadline, bytes, std::move(job));
}

void TokenizerService::offer(size_t upstream, bool chat, std::string_view body) noexcept {
  if (models_.empty()) return;
  const Model& m = *models_[attesting_model(upstream).value_or(0)];
  if (m.shadow) m.shadow->offer(upstream, chat, body);
}

void TokenizerService::start(boost::asio::io_context& ctx) {
  if (cfg_.mode == TokenizerMode::kOff) return;
  pool_.start();
  for (auto& m : models_)
    if (m->manifest) m->attestation->start(ctx, *m->manifest, m->probes);
}

void TokenizerService::begin_stop() {
  pool_.begin_stop();  // queued jobs dropped, later offers skipped (stopping)
  for (auto& m : models_) {
    if (m->shadow) m->shadow->begin_stop();
    m->attestation->begin_stop();
  }
}

void TokenizerService::stop() {
  begin_stop();
  pool_.stop();  // at most one local render each after begin_stop()
}

std::optional<size_t> TokenizerService::attesting_model(size_t i) const {
  for (size_t k = 0; k < models_.size(); ++k)
    if (models_[k]->attestation->attested(i)) return k;
  return std::nullopt;
}

Attestation TokenizerService::attestation(size_t i) const {
  if (models_.empty()) return Attestation::kUnchecked;
  return models_[attesting_model(i).value_or(0)]->attestation->attestation(i);
}

const Manifest* TokenizerService::manifest(size_t model) const {
  return model < models_.size() && models_[model]->manifest ? &*models_[model]->manifest : nullptr;
}

void TokenizerService::write_metrics(metrics::Exposition& out) const {
  const auto& F = kFamilies;
  out.family(F[kInfo]);
  {  // one sample per profile: the model folders with it (1 for one)
    std::vector<std::pair<std::string_view, uint64_t>> profiles;
    for (const auto& m : models_) {
      auto it = std::find_if(profiles.begin(), profiles.end(), [&](const auto& p) { return p.first == m->profile_name; });
      if (it == profiles.end()) profiles.emplace_back(m->profile_name, 1);
      else ++it->second;
    }
    for (const auto& [profile, folders] : profiles)
      out.sample(F[kInfo].name, "mode=\"" + std::string(to_string(cfg_.mode)) + "\",profile=\"" + std::string(profile) + "\"",
                 folders);
  }
  if (cfg_.mode == TokenizerMode::kOff) return;
  const ShadowCounters& c = counters_;
  out.family(F[kShadow]);
  for (size_t b = 0; b < 2; ++b) {
    if (b == 0 && !remote_mode(cfg_.mode)) continue;
    if (b == 1 && !local_mode(cfg_.mode)) continue;
    for (size_t ep = 0; ep < 2; ++ep) {
      for (size_t o = 0; o < kShadowOutcomeCount; ++o) {
        const auto outcome = static_cast<ShadowOutcome>(o);
        const bool local_only = outcome == ShadowOutcome::kParityMatch || outcome == ShadowOutcome::kParityMismatch ||
                                outcome == ShadowOutcome::kUnsupported || outcome == ShadowOutcome::kRenderError ||
                                outcome == ShadowOutcome::kEncodeError || outcome == ShadowOutcome::kRemoteUnavailable ||
                                outcome == ShadowOutcome::kUnattested;
        const bool remote_only = outcome == ShadowOutcome::kTimeout || outcome == ShadowOutcome::kConnectError ||
                                 outcome == ShadowOutcome::kHttpError || outcome == ShadowOutcome::kResponseTooLarge;
        if ((b == 0 && local_only) || (b == 1 && remote_only)) continue;
        if (b == 1 && cfg_.mode == TokenizerMode::kLocal &&
            (outcome == ShadowOutcome::kParityMatch || outcome == ShadowOutcome::kParityMismatch ||
             outcome == ShadowOutcome::kRemoteUnavailable))
          continue;
        if (b == 1 && cfg_.mode == TokenizerMode::kLocalShadow && outcome == ShadowOutcome::kSuccess) continue;
        out.sample(F[kShadow].name,
                   "backend=\"" + std::string(kBackend[b]) + "\",endpoint=\"" + std::string(kEndpoint[ep]) +
                       "\",outcome=\"" + std::string(to_string(outcome)) + "\"",
                   c.outcomes[b][ep][o].get());
      }
    }
  }
  out.family(F[kSkipped]);
  for (size_t i = 0; i < kShadowSkipCount; ++i)
    out.sample(F[kSkipped].name, "reason=\"" + std::string(to_string(static_cast<ShadowSkip>(i))) + "\"",
               c.skipped[i].get());
  out.family(F[kQueue]);
  out.sample(F[kQueue].name, "", static_cast<int64_t>(pool_.queued()));
  out.family(F[kDuration]);
  for (size_t b = 0; b < 2; ++b)
    if ((b == 0 && remote_mode(cfg_.mode)) || (b == 1 && local_mode(cfg_.mode)))
      c.duration[b].write(out, F[kDuration].name, "backend=\"" + std::string(kBackend[b]) + "\"");
  out.family(F[kTokens]);
  for (size_t b = 0; b < 2; ++b)
    if ((b == 0 && remote_mode(cfg_.mode)) || (b == 1 && local_mode(cfg_.mode)))
      out.sample(F[kTokens].name, "backend=\"" + std::string(kBackend[b]) + "\"", c.tokens[b].get());
  if (!local_mode(cfg_.mode)) return;
  // The models' own parts, summed (their attestations, session caches and native renders).
  const size_t engines = models_.empty() ? 0 : models_[0]->attestation->engines();
  SessionCacheStats cs;
  TurnStats ts;
  NativeRenderStats ns;
  for (const auto& m : models_) {
    if (m->session_cache) {
      const SessionCacheStats x = m->session_cache->stats();
      cs.hits += x.hits, cs.misses += x.misses, cs.reused_bytes += x.reused_bytes, cs.evictions += x.evictions,
          cs.bytes += x.bytes;
      const TurnStats t = m->session_cache->turns().stats();
      ts.resumed += t.resumed, ts.declined += t.declined, ts.misses += t.misses, ts.bytes += t.bytes;
    }
    if (m->renderer) {
      const NativeRenderStats x = m->renderer->native_stats();
      ns.native += x.native;
      for (size_t i = 0; i < ns.by_reason.size(); ++i) ns.by_reason[i] += x.by_reason[i];
    }
  }
  out.family(F[kAttested]);
  for (size_t i = 0; i < engines; ++i)
    out.sample(F[kAttested].name, "upstream=\"" + std::to_string(i) + "\"", uint64_t{attested(i) ? 1u : 0u});
  out.family(F[kChecks]);
  for (size_t i = 0; i < engines; ++i)
    for (size_t a = 0; a < kAttestationCount; ++a) {
      if (static_cast<Attestation>(a) == Attestation::kUnchecked) continue;
      uint64_t checks = 0;
      for (const auto& m : models_) checks += m->attestation->checks(i, static_cast<Attestation>(a));
      out.sample(F[kChecks].name,
                 "upstream=\"" + std::to_string(i) + "\",outcome=\"" +
                     std::string(to_string(static_cast<Attestation>(a))) + "\"",
                 checks);
    }
  out.family(F[kCacheLookups]);
  out.sample(F[kCacheLookups].name, "result=\"hit\"", cs.hits);
  out.sample(F[kCacheLookups].name, "result=\"miss\"", cs.misses);
  out.family(F[kCacheReused]);
  out.sample(F[kCacheReused].name, "", cs.reused_bytes);
  out.family(F[kCacheEvictions]);
  out.sample(F[kCacheEvictions].name, "", cs.evictions);
  out.family(F[kCacheBytes]);
  out.sample(F[kCacheBytes].name, "", cs.bytes);
  out.family(F[kTurns]);
  out.sample(F[kTurns].name, "result=\"resumed\"", ts.resumed);
  out.sample(F[kTurns].name, "result=\"declined\"", ts.declined);
  out.sample(F[kTurns].name, "result=\"miss\"", ts.misses);
  out.family(F[kTurnBytes]);
  out.sample(F[kTurnBytes].name, "", ts.bytes);
  out.family(F[kNativeRender]);
  out.sample(F[kNativeRender].name, "result=\"native\"", ns.native);
  for (size_t i = 0; i < qwen3::kFallbackCount; ++i) {
    out.sample(F[kNativeRender].name,
               "result=\"" + std::string(qwen3::to_string(static_cast<qwen3::Fallback>(i))) + "\"", ns.by_reason[i]);
  }
}

}  // namespace ramjet::render
