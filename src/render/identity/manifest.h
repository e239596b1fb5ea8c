// render::manifest: the tokenizer compatibility manifest — what a deployment's local renderer
// is attested against. It pins the model identity the engines must report (served model id,
// root, max_model_len; vLLM version), the tokenizer and chat-template digests, the renderer
// profile, and golden requests with the token count and SHA-256 of the token ids the engine
// produced for them. ramjet re-renders every golden at startup and refuses to start on any
// difference; at runtime an engine's local tokens are used only while its /v1/models and
// /version match (attest_engine).
//
// Format (JSON, schema 1, at most 1 MiB, unknown fields rejected):
//   {"schema": 1,
//    "model": {"id": "served-name", "root": "org/model", "max_model_len": 32768},
//    "engine": {"version": "0.26.0"},
//    "tokenizer": {"sha256": "<64 hex>"},
//    "chat_template": {"sha256": "<64 hex>"},      (HF-template profiles only)
//    "renderer": {"profile": "qwen3.8-27b"},
//    "goldens": [{"id": "short-name", "endpoint": "chat" | "completions",
//                 "request": {...request body...}, "token_count": 123,
//                 "token_ids_sha256": "<64 hex: SHA-256 of the ids as u32 big-endian>"}, ...]}
// 1 to 64 goldens, ids unique. `ramjet manifest` writes one from a live engine's answers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ramjet::render {

struct ManifestLimits {
  size_t max_bytes = 1u << 20;
  size_t max_goldens = 64;
  size_t max_string = 4096;  // ids, model names, versions
  int max_depth = 64;        // JSON nesting
};

struct ManifestGolden {
  std::string id;
  bool chat = true;          // endpoint: chat (true) or completions
  std::string request;       // the request body, as JSON text
  uint64_t token_count = 0;
  std::string token_ids_sha256;  // lower-case hex
};

struct Manifest {
  std::string model_id, model_root;
  uint64_t max_model_len = 0;
  std::string engine_version;
  std::string tokenizer_sha256;      // lower-case hex
  std::string chat_template_sha256;  // lower-case hex; empty for native formatters
  std::string profile;
  std::vector<ManifestGolden> goldens;
  // false: no identity is pinned (RJ_MODEL_DIR without a manifest; made by builtin_manifest):
  // each engine identity is proven by the goldens on that engine's own /tokenize instead.
  bool identity_pinned = true;
};

// The golden requests ramjet proves an engine by when no manifest is given: text chat requests
// (system, multi-turn, tools and a tool call, unicode and whitespace) and a completions prompt;
// the token counts and digests are left for the local render to fill in.
std::vector<ManifestGolden> builtin_goldens();

// Parses and checks a manifest. Errors name the field, never echo request bytes.
Result<Manifest> parse_manifest(std::string_view json, const ManifestLimits& limits = {});

// Why an engine is or is not attested (a metric label).
enum class Attestation : uint8_t {
  kMatch,
  kModelsFetch,      // GET /v1/models failed (connect, timeout, status)
  kModelsDecode,     // its body is not a model list
  kModelMissing,     // no card with the manifest's model id
  kModelAmbiguous,   // more than one
  kModelRootMismatch,
  kModelContextMismatch,  // max_model_len differs
  kVersionFetch,     // GET /version failed
  kVersionDecode,
  kVersionMismatch,
  kTokenizeFetch,    // (no pinned identity) POST /tokenize of a golden failed or was not {count, tokens}
  kGoldenMismatch,   // (no pinned identity) the engine's tokens for a golden differ from ramjet's
  kUnchecked,        // not checked yet (startup) or the engine is not serving
};
inline constexpr size_t kAttestationCount = 13;
std::string_view to_string(Attestation a);

// The identity check of one engine: the bodies of its GET /v1/models and GET /version.
Attestation attest_models(const Manifest& m, std::string_view models_body);
Attestation attest_version(const Manifest& m, std::string_view version_body);

// An engine's identity when none is pinned: every card of its /v1/models (id, root,
// max_model_len) and its /version, in one canonical string — what a golden proof is remembered
// by. Errors: kModelsDecode, kVersionDecode.
Result<std::string, Attestation> engine_identity(std::string_view models_body, std::string_view version_body);

}  // namespace ramjet::render
