// request/ingress/api_keys: client authentication (RJ_API_KEYS_FILE). Owns the key file's
// format, the loaded key set (SHA-256 hashes only, never the plain keys), the constant-time check
// of a presented key, reload on SIGHUP (atomic swap; a bad file keeps the old keys) and the
// authentication metrics. Where the check runs (before the body is read) and what is forwarded
// upstream instead of the client's key are request/stream's business.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "metrics/metrics.h"

namespace ramjet::request {

// Bounds of a key file (fail closed: a larger file or more keys is a configuration error). Every
// request compares its key's hash with every stored hash, so the key count bounds that scan.
struct KeyFileLimits {
  size_t max_bytes = 1u << 20;
  size_t max_keys = 4096;
  size_t max_key_bytes = 1024;  // a plain key
};

using KeyDigest = std::array<uint8_t, 32>;  // SHA-256

// SHA-256 of `bytes` (EVP_MD fetched once per process, one EVP_MD_CTX per thread).
KeyDigest sha256(std::string_view bytes);

// An immutable set of keys as parsed from a key file. Format, one entry per line:
//   key              a plain key: visible ASCII (no blanks), at most max_key_bytes
//   name key         the same, with an operator-chosen name (the metric label; letters, digits,
//                    '_', '-', '.', at most 64); keys without one are counted as "unnamed"
//   [name] sha256:<64 hex>   the key given as the SHA-256 of its bytes (lowercase or uppercase hex)
// Blank lines and lines whose first non-blank character is '#' are ignored; CRLF line ends and a
// leading UTF-8 byte order mark are fine. A name may be given to several keys (rotation under one label); the same key
// twice is an error. Errors name the line number, never the line.
class KeySet {
 public:
  static Result<KeySet> parse(std::string_view text, const KeyFileLimits& limits = {});

  size_t size() const { return digests_.size(); }
  // Names in order of first appearance ("unnamed" included when a key has no name).
  const std::vector<std::string>& names() const { return names_; }
  // The name index of the key whose hash is `digest`, or nullopt. Compares with every stored
  // hash (CRYPTO_memcmp, no early exit), so the time depends only on the number of keys.
  std::optional<size_t> match(const KeyDigest& digest) const;

 private:
  std::vector<KeyDigest> digests_;
  std::vector<uint32_t> name_of_;  // per key: index into names_
  std::vector<std::string> names_;
};

// The loaded key file and its metrics. check() runs on any io thread; reload() on any thread
// (the SIGHUP handler's); the set is swapped under a shared_mutex (readers hold it shared for
// one hash and one scan).
class ApiKeys {
 public:
  enum class Outcome : uint8_t { kAccepted, kMissing, kInvalid, kCount };
  static std::string_view outcome_label(Outcome o);  // accepted|missing|invalid

  // Reads and parses `path`; the error's message names the file and the line number (never its
  // content): a startup configuration error.
  static Result<std::unique_ptr<ApiKeys>> load(std::string path, const KeyFileLimits& limits = {});
  ApiKeys(std::string path, KeySet keys, const KeyFileLimits& limits = {});

  // A request's credentials: the Authorization value ("Bearer <key>", scheme case-insensitive)
  // and the x-api-key value, each "" when absent. Accepted when either holds a loaded key;
  // missing when both are absent; invalid otherwise. Counts the outcome and, when accepted, the
  // key's name.
  // `name` (optional) gets the accepted key's name ("unnamed" for a key without one).
  Outcome check(std::string_view authorization, std::string_view x_api_key, std::string* name = nullptr);

  // Re-reads the file. On success the new keys replace the old ones at once (counters of names
  // kept across the swap) and true is returned; otherwise the old keys stay, the reason (line
  // number only) is logged and false returned. Both are counted.
  bool reload();

  size_t size() const;
  // The loaded keys' names (first appearance order, "unnamed" included when a key has none).
  std::vector<std::string> names() const;
  void write_metrics(metrics::Exposition& x) const;

  // The 401 body for a request that was not accepted: OpenAI-style, type authentication_error,
  // code invalid_api_key.
  static std::string_view error_body(Outcome o);

 private:
  // The current set, with one counter per name (shared with the next set for the same name).
  struct Loaded {
    KeySet keys;
    std::vector<std::shared_ptr<metrics::Counter>> by_name;  // parallel to keys.names()
  };
  std::shared_ptr<const Loaded> adopt(KeySet keys, const Loaded* previous);

  std::string path_;
  KeyFileLimits limits_;
  std::mutex reload_mu_;          // one reload at a time (the counters carried over stay exact)
  mutable std::shared_mutex mu_;  // guards current_ (the pointer, not the immutable set)
  std::shared_ptr<const Loaded> current_;
  std::array<metrics::Counter, static_cast<size_t>(Outcome::kCount)> outcomes_;
  std::array<metrics::Counter, 2> reloads_;  // ok, error
};

// The families ApiKeys::write_metrics writes, in order (docs/metrics.md).
std::span<const metrics::Family> api_key_families();

}  // namespace ramjet::request
