// Fuzz target for request/ingress: the request line's method and target are untrusted bytes.
// Input: method, a NUL, the target. Checks the table's promises: nothing but the fixed paths,
// /tokenize when served and the passthrough list is ever forwarded; a passthrough prefix never
// matches through a dot segment or an encoded '.', '/' or '\'; 405 (allowed methods) only for a
// path the table serves; classification does not depend on the query string.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "request/ingress/endpoint.h"

namespace {

using ramjet::request::allowed_methods;
using ramjet::request::classify;
using ramjet::request::Endpoint;
using ramjet::request::ServedPaths;

void check(bool ok) {
  if (!ok) std::abort();
}

bool has_dot_segment_or_escape(std::string_view path) {
  for (std::string_view bad : {"/../", "/./", "%2e", "%2E", "%2f", "%2F", "%5c", "%5C", "\\"}) {
    if (path.find(bad) != std::string_view::npos) return true;
  }
  return path.ends_with("/..") || path.ends_with("/.");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view method = nul == std::string_view::npos ? std::string_view("POST") : in.substr(0, nul);
  const std::string_view target = nul == std::string_view::npos ? in : in.substr(nul + 1);
  const std::string_view path = target.substr(0, target.find('?'));

  const ServedPaths none;
  const ServedPaths served{.tokenize = true, .passthrough = {"/pooling/*", "/v1/embeddings"}};
  const Endpoint plain = classify(method, target, none);
  const Endpoint listed = classify(method, target, served);

  // With nothing listed, only the fixed table (and CORS preflights of it) is forwarded.
  const bool fixed = path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/responses" ||
                     path == "/v1/messages" || path == "/v1/models" || path == "/health";
  if (plain != Endpoint::kUnknown) check(fixed);
  if (plain == Endpoint::kOther) check(method == "OPTIONS");
  // Listing paths only adds kOther answers, and only for what is listed.
  if (listed != plain) {
    check(plain == Endpoint::kUnknown && listed == Endpoint::kOther);
    const bool tokenize = path == "/tokenize" || path == "/detokenize";
    const bool prefix = path.starts_with("/pooling/") && !has_dot_segment_or_escape(path);
    check(tokenize || prefix || path == "/v1/embeddings");
  }
  if (path.starts_with("/pooling/") && has_dot_segment_or_escape(path)) check(listed == Endpoint::kUnknown);
  // 405 material only for served paths; the query string never changes the answer.
  const std::string_view allow = allowed_methods(target, served);
  if (!allow.empty()) check(fixed || path == "/tokenize" || path == "/detokenize");
  check(classify(method, std::string(path) + "?x=1", served) == listed);
  return 0;
}
