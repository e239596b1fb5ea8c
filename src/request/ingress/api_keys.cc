#include "request/ingress/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "common/hex.h"
#include "common/log.h"

namespace ramjet::request {

namespace {

constexpr size_t kMaxNameBytes = 64;
constexpr std::string_view kUnnamed = "unnamed";
constexpr std::string_view kHashPrefix = "sha256:";

using metrics::Family;
using metrics::MetricKind;

constexpr std::array<Family, 3> kFamilies = {{
    {"ramjet_client_auth_total", MetricKind::kCounter, "outcome",
     "Requests checked against RJ_API_KEYS_FILE (every path but GET /health and CORS preflights), "
     "by outcome: accepted, missing (no Authorization or x-api-key header; answered 401), invalid "
     "(a key that is not loaded; answered 401)."},
    {"ramjet_client_requests_by_key_total", MetricKind::kCounter, "key",
     "Accepted requests by the operator's name of the key they presented (\"unnamed\" for keys "
     "listed without a name). Names of keys removed by a reload stop being exported."},
    {"ramjet_api_keys_reloads_total", MetricKind::kCounter, "outcome",
     "Reloads of RJ_API_KEYS_FILE on SIGHUP: ok (the new keys replaced the old ones), error (the "
     "file was unreadable or invalid; the old keys stay and the log names the line)."},
}};

struct MdDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

const EVP_MD* sha256_md() {
  static EVP_MD* md = [] {
    EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (m == nullptr) {
      std::fprintf(stderr, "ramjet: EVP_MD_fetch(SHA256) failed\n");
      std::abort();
    }
    return m;
  }();
  return md;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// Splits on blanks into at most 3 words (the third only to tell "too many").
size_t split_words(std::string_view line, std::array<std::string_view, 3>& words) {
  size_t n = 0;
  size_t i = 0;
  while (i < line.size() && n < words.size()) {
    while (i < line.size() && is_blank(line[i])) ++i;
    if (i == line.size()) break;
    const size_t start = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    words[n++] = line.substr(start, i - start);
  }
  return n;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool visible_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) return false;
  }
  return true;
}

std::optional<KeyDigest> parse_hex_digest(std::string_view hex) {
  KeyDigest d{};
  if (hex.size() != 2 * d.size()) return std::nullopt;
  for (size_t i = 0; i < d.size(); ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    d[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return d;
}

Error key_error(size_t line, std::string_view what) {
  return Error{"invalid_key_file", "line " + std::to_string(line) + ": " + std::string(what)};
}

// The key of "Bearer <key>" (scheme case-insensitive), or "" for another scheme.
std::string_view bearer_token(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() || !is_blank(authorization[kScheme.size()])) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    char c = authorization[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kScheme[i]) return {};
  }
  return trim(authorization.substr(kScheme.size()));
}

}  // namespace

KeyDigest sha256(std::string_view bytes) {
  thread_local std::unique_ptr<EVP_MD_CTX, MdDeleter> ctx(EVP_MD_CTX_new());
  KeyDigest out{};
  unsigned int len = 0;
  if (!ctx || EVP_DigestInit_ex2(ctx.get(), sha256_md(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), out.data(), &len) != 1 || len != out.size()) {
    std::fprintf(stderr, "ramjet: SHA-256 failed\n");
    std::abort();
  }
  return out;
}

// --- KeySet ----------------------------------------------------------------------------------

Result<KeySet> KeySet::parse(std::string_view text, const KeyFileLimits& limits) {
  KeySet set;
  std::vector<size_t> line_of;  // per key: its line, for the duplicate message
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 byte order mark
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    std::array<std::string_view, 3> words;
    const size_t n = split_words(line, words);
    if (n > 2) return key_error(line_no, "expected `key` or `name key` (a key holds no blanks; comments take a whole line)");
    const std::string_view name = n == 2 ? words[0] : kUnnamed;
    const std::string_view key = n == 2 ? words[1] : words[0];
    if (n == 2 && !valid_name(name)) {
      return key_error(line_no, "a key name holds 1 to 64 letters, digits, '_', '-' or '.'");
    }
    KeyDigest digest;
    if (key.starts_with(kHashPrefix)) {
      const auto d = parse_hex_digest(key.substr(kHashPrefix.size()));
      if (!d) return key_error(line_no, "sha256: must be followed by exactly 64 hex digits");
      digest = *d;
    } else {
      if (key.size() > limits.max_key_bytes) {
        return key_error(line_no, "key longer than " + std::to_string(limits.max_key_bytes) + " bytes");
      }
      if (!visible_ascii(key)) return key_error(line_no, "a key holds visible ASCII characters only");
      digest = sha256(key);
    }
    for (size_t k = 0; k < set.digests_.size(); ++k) {
      if (set.digests_[k] == digest) {
        return key_error(line_no, "the same key as line " + std::to_string(line_of[k]));
      }
    }
    if (set.digests_.size() == limits.max_keys) {
      return key_error(line_no, "more than " + std::to_string(limits.max_keys) + " keys");
    }
    size_t name_index = 0;
    while (name_index < set.names_.size() && set.names_[name_index] != name) ++name_index;
    if (name_index == set.names_.size()) set.names_.emplace_back(name);
    set.digests_.push_back(digest);
    set.name_of_.push_back(static_cast<uint32_t>(name_index));
    line_of.push_back(line_no);
  }
  if (set.digests_.empty()) return Error{"invalid_key_file", "no keys (only blank lines and comments)"};
  return set;
}

std::optional<size_t> KeySet::match(const KeyDigest& digest) const {
  // Every stored hash is compared, and the match is selected without a branch on secret data.
  size_t found = 0;
  size_t any = 0;
  for (size_t k = 0; k < digests_.size(); ++k) {
    const size_t eq = static_cast<size_t>(CRYPTO_memcmp(digests_[k].data(), digest.data(), digest.size()) == 0);
    const size_t mask = ~(eq - 1);  // all ones when equal
    found |= k & mask;
    any |= eq;
  }
  if (!any) return std::nullopt;
  return name_of_[found];
}

// --- ApiKeys ---------------------------------------------------------------------------------

std::string_view ApiKeys::outcome_label(Outcome o) {
  switch (o) {
    case Outcome::kAccepted: return "accepted";
    case Outcome::kMissing: return "missing";
    case Outcome::kInvalid: return "invalid";
    case Outcome::kCount: break;
  }
  return "invalid";
}

std::string_view ApiKeys::error_body(Outcome o) {
  if (o == Outcome::kMissing) {
    return R"({"error":{"message":"missing API key: send Authorization: Bearer <key> or x-api-key: <key>",)"
           R"("type":"authentication_error","param":null,"code":"invalid_api_key"}})";
  }
  return R"({"error":{"message":"invalid API key","type":"authentication_error","param":null,)"
         R"("code":"invalid_api_key"}})";
}

namespace {

// The file's bytes, or an error naming the file (never its content).
Result<std::string> read_key_file(const std::string& path, size_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Error{"unreadable_key_file", path + ": " + std::strerror(errno)};
  std::string text;
  char buf[16384];
  bool too_large = false;
  bool failed = false;
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, f);
    if (n > 0) {
      if (text.size() + n > max_bytes) {
        too_large = true;
        break;
      }
      text.append(buf, n);
    }
    if (n < sizeof buf) {
      failed = std::ferror(f) != 0;
      break;
    }
  }
  const int err = errno;
  std::fclose(f);
  if (failed) return Error{"unreadable_key_file", path + ": " + std::strerror(err)};
  if (too_large) return Error{"invalid_key_file", path + ": larger than " + std::to_string(max_bytes) + " bytes"};
  return text;
}

Result<KeySet> load_key_file(const std::string& path, const KeyFileLimits& limits) {
  auto text = read_key_file(path, limits.max_bytes);
  if (!text) return text.error();
  auto keys = KeySet::parse(*text, limits);
  // Best effort: the plain keys' bytes do not outlive the parse.
  OPENSSL_cleanse(text->data(), text->size());
  if (!keys) return Error{keys.error().reason, path + ": " + keys.error().message};
  return keys;
}

}  // namespace

Result<std::unique_ptr<ApiKeys>> ApiKeys::load(std::string path, const KeyFileLimits& limits) {
  auto keys = load_key_file(path, limits);
  if (!keys) return keys.error();
  return std::make_unique<ApiKeys>(std::move(path), std::move(keys).value(), limits);
}

ApiKeys::ApiKeys(std::string path, KeySet keys, const KeyFileLimits& limits)
    : path_(std::move(path)), limits_(limits), current_(adopt(std::move(keys), nullptr)) {}

std::shared_ptr<const ApiKeys::Loaded> ApiKeys::adopt(KeySet keys, const Loaded* previous) {
  auto loaded = std::make_shared<Loaded>();
  for (const std::string& name : keys.names()) {
    std::shared_ptr<metrics::Counter> counter;
    if (previous != nullptr) {
      const auto& old = previous->keys.names();
      for (size_t i = 0; i < old.size(); ++i) {
        if (old[i] == name) counter = previous->by_name[i];
      }
    }
    loaded->by_name.push_back(counter ? std::move(counter) : std::make_shared<metrics::Counter>());
  }
  loaded->keys = std::move(keys);
  return loaded;
}

ApiKeys::Outcome ApiKeys::check(std::string_view authorization, std::string_view x_api_key, std::string* name_out) {
  const std::string_view bearer = bearer_token(authorization);
  Outcome outcome = Outcome::kInvalid;
  if (authorization.empty() && x_api_key.empty()) {
    outcome = Outcome::kMissing;
  } else {
    // Hashed before the lock; an empty key is never a loaded one.
    std::optional<KeyDigest> a, b;
    if (!bearer.empty()) a = sha256(bearer);
    if (!x_api_key.empty()) b = sha256(x_api_key);
    std::shared_lock lock(mu_);
    const Loaded& l = *current_;
    std::optional<size_t> name = a ? l.keys.match(*a) : std::nullopt;
    if (!name && b) name = l.keys.match(*b);
    if (name) {
      outcome = Outcome::kAccepted;
      l.by_name[*name]->inc();
      if (name_out != nullptr) *name_out = l.keys.names()[*name];
    }
  }
  outcomes_[static_cast<size_t>(outcome)].inc();
  return outcome;
}

bool ApiKeys::reload() {
  auto keys = load_key_file(path_, limits_);
  if (!keys) {
    reloads_[1].inc();
    spdlog::warn("API keys: reload failed, keeping the {} keys loaded before: {}", size(),
                 log::json_escape(keys.error().message));
    return false;
  }
  const size_t n = keys->size();
  std::shared_ptr<const Loaded> old;
  {
    // adopt() reads the previous set; only reload() replaces it, one at a time, so the set read
    // here is the one replaced below.
    std::lock_guard serial(reload_mu_);
    std::shared_ptr<const Loaded> previous;
    {
      std::shared_lock lock(mu_);
      previous = current_;
    }
    auto next = adopt(std::move(keys).value(), previous.get());
    std::unique_lock lock(mu_);
    old = std::exchange(current_, std::move(next));
  }
  // `old` is released here, outside the lock.
  reloads_[0].inc();
  spdlog::info("API keys: reloaded {} keys", n);
  return true;
}

size_t ApiKeys::size() const {
  std::shared_lock lock(mu_);
  return current_->keys.size();
}

std::vector<std::string> ApiKeys::names() const {
  std::shared_lock lock(mu_);
  return current_->keys.names();
}

void ApiKeys::write_metrics(metrics::Exposition& x) const {
  std::shared_ptr<const Loaded> l;
  {
    std::shared_lock lock(mu_);
    l = current_;
  }
  x.family(kFamilies[0]);
  for (size_t o = 0; o < outcomes_.size(); ++o) {
    x.sample(kFamilies[0].name, "outcome=\"" + std::string(outcome_label(static_cast<Outcome>(o))) + "\"",
             outcomes_[o].get());
  }
  x.family(kFamilies[1]);
  const auto& names = l->keys.names();
  for (size_t i = 0; i < names.size(); ++i) {
    x.sample(kFamilies[1].name, "key=\"" + names[i] + "\"", l->by_name[i]->get());
  }
  x.family(kFamilies[2]);
  x.sample(kFamilies[2].name, "outcome=\"ok\"", reloads_[0].get());
  x.sample(kFamilies[2].name, "outcome=\"error\"", reloads_[1].get());
}

std::span<const metrics::Family> api_key_families() { return kFamilies; }

}  // namespace ramjet::request
