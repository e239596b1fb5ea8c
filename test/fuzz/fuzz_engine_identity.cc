// Fuzz target for the tokenizer service's decoders of untrusted bytes: a compatibility manifest
// (render::parse_manifest, operator-supplied), engines' GET /v1/models and GET /version bodies
// (render::attest_models / attest_version, and render::engine_identity: what a golden proof is
// remembered by when no manifest pins one), engines' POST /tokenize answers
// (render::decode_tokenize_response), and request bodies turned into tokenize payloads for every
// profile (render::build_tokenize_payload). Checked: limits hold, outcomes are in range, a
// decoded answer has exactly `count` ids, and a payload is itself a JSON object.
#include <boost/json/parse.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/model_profile.h"
#include "render/identity/manifest.h"
#include "render/identity/tokenize_payload.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

const ramjet::render::Manifest& fixed_manifest() {
  static const ramjet::render::Manifest m = [] {
    ramjet::render::Manifest x;
    x.model_id = "m";
    x.model_root = "org/m";
    x.max_model_len = 4096;
    x.engine_version = "0.26.0";
    return x;
  }();
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ramjet::render;
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  ManifestLimits limits;
  limits.max_goldens = 4;
  limits.max_bytes = 64 * 1024;
  auto m = parse_manifest(in, limits);
  if (m.ok()) {
    check(!m->goldens.empty() && m->goldens.size() <= limits.max_goldens);
    check(m->tokenizer_sha256.size() == 64 && m->max_model_len >= 1);
    for (const auto& g : m->goldens) check(g.token_count >= 1 && g.token_ids_sha256.size() == 64);
  }
  check(static_cast<size_t>(attest_models(fixed_manifest(), in)) < kAttestationCount);
  check(static_cast<size_t>(attest_version(fixed_manifest(), in)) < kAttestationCount);
  // The identity of an engine answering `in` to /v1/models: a string, the same each time, or a
  // decode error; with `in` as /version too.
  for (std::string_view version : {std::string_view(R"({"version":"0.32.0"})"), in}) {
    auto id = engine_identity(in, version);
    if (id.ok()) {
      check(!id.value().empty());
      auto again = engine_identity(in, version);
      check(again.ok() && again.value() == id.value());
    } else {
      check(id.error() == Attestation::kModelsDecode || id.error() == Attestation::kVersionDecode);
    }
  }

  if (auto ids = decode_tokenize_response(in)) {
    boost::system::error_code ec;
    auto v = boost::json::parse(in, ec);
    check(!ec && v.is_object());
    check(v.as_object().at("tokens").as_array().size() == ids->size());
  }

  for (const auto* profile : ramjet::model::PROFILES) {
    for (bool chat : {true, false}) {
      auto p = build_tokenize_payload(*profile, chat, in);
      if (!p) continue;
      boost::system::error_code ec;
      auto v = boost::json::parse(p->json, ec);
      check(!ec && v.is_object() && v.as_object().contains("return_token_strs"));
      check(chat == p->chat);
    }
  }
  return 0;
}
