#include "request/ingress/api_keys.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace ramjet::request {
namespace {

std::string hex(const KeyDigest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

std::string render(const ApiKeys& keys) {
  metrics::Exposition x;
  keys.write_metrics(x);
  return x.take();
}

// A key file in a fresh temporary directory, removed with the fixture.
class KeyFile {
 public:
  KeyFile() {
    dir_ = std::filesystem::temp_directory_path() / ("api_keys_test." + std::to_string(::getpid()) + "." +
                                                     std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "keys").string();
  }
  ~KeyFile() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  void write(std::string_view text) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << text;
  }
  const std::string& path() const { return path_; }

 private:
  static inline std::atomic<int> counter_{0};
  std::filesystem::path dir_;
  std::string path_;
};

std::string error_of(std::string_view text, const KeyFileLimits& limits = {}) {
  auto r = KeySet::parse(text, limits);
  return r.ok() ? std::string("(parsed)") : r.error().message;
}

TEST(ApiKeysSha256, MatchesTheKnownDigestOfTheEmptyStringAndAbc) {
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiKeysFile, PlainKeysWithAndWithoutNamesAreLoadedAndBlankLinesAndCommentsIgnored) {
  auto r = KeySet::parse(
      "# production keys\n"
      "\n"
      "alice sk-alice-1\r\n"
      "   \t\n"
      "  sk-anonymous  \n"
      "\t# indented comment\n"
      "bob\tsk-bob-1\n"
      "alice sk-alice-2");  // no final newline
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(r->names(), (std::vector<std::string>{"alice", "unnamed", "bob"}));
  EXPECT_EQ(r->match(sha256("sk-alice-1")), 0u);
  EXPECT_EQ(r->match(sha256("sk-alice-2")), 0u);
  EXPECT_EQ(r->match(sha256("sk-anonymous")), 1u);
  EXPECT_EQ(r->match(sha256("sk-bob-1")), 2u);
  EXPECT_EQ(r->match(sha256("sk-bob-2")), std::nullopt);
  EXPECT_EQ(r->match(sha256("alice")), std::nullopt);
  EXPECT_EQ(r->match(sha256("sk-alice-1 ")), std::nullopt);
}

TEST(ApiKeysFile, AKeyGivenAsItsSha256MatchesThePlainKeyInEitherHexCase) {
  const std::string digest = hex(sha256("sk-hashed-key"));
  std::string upper = hex(sha256("sk-upper"));
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto r = KeySet::parse("ci sha256:" + digest + "\nsha256:" + upper + "\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->match(sha256("sk-hashed-key")), 0u);
  EXPECT_EQ(r->match(sha256("sk-upper")), 1u);
  // The hash text itself is not a key.
  EXPECT_EQ(r->match(sha256("sha256:" + digest)), std::nullopt);
  EXPECT_EQ(r->match(sha256(digest)), std::nullopt);
  EXPECT_EQ(r->names(), (std::vector<std::string>{"ci", "unnamed"}));
}

TEST(ApiKeysFile, AByteOrderMarkBeforeTheFirstLineIsIgnored) {
  auto r = KeySet::parse("\xEF\xBB\xBFk1 sk-one\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->match(sha256("sk-one")), 0u);
}

TEST(ApiKeysFile, BadLinesAreErrorsNamingTheLineNumberButNeverItsContent) {
  const std::string secret = "sk-secret-never-echoed";
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"ok sk-1\nname " + secret + " extra\n", "line 2: expected `key` or `name key`"},
      {"# c\n\nbad/name " + secret + "\n", "line 3: a key name holds"},
      {std::string(65, 'n') + " " + secret + "\n", "line 1: a key name holds"},
      {"x sha256:abc\n", "line 1: sha256: must be followed by exactly 64 hex digits"},
      {"sha256:" + std::string(63, 'a') + "g\n", "line 1: sha256: must be followed"},
      {"x " + secret + "\xC3\xA9\n", "line 1: a key holds visible ASCII characters only"},
      {"a " + secret + "\nb " + secret + "\n", "line 2: the same key as line 1"},
      {"a sha256:" + hex(sha256(secret)) + "\n" + secret + "\n", "line 2: the same key as line 1"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.text);
    EXPECT_TRUE(e.starts_with(c.expect)) << "got: " << e << "\nexpected to start with: " << c.expect;
    EXPECT_EQ(e.find(secret), std::string::npos) << e;
    EXPECT_EQ(e.find("bad/name"), std::string::npos) << e;
  }
}

TEST(ApiKeysFile, AFileWithoutKeysIsAnError) {
  EXPECT_EQ(error_of(""), "no keys (only blank lines and comments)");
  EXPECT_EQ(error_of("# only a comment\n\n  \n"), "no keys (only blank lines and comments)");
}

TEST(ApiKeysFile, LimitsOnKeyCountAndKeyLengthFailClosed) {
  KeyFileLimits limits;
  limits.max_keys = 2;
  limits.max_key_bytes = 8;
  EXPECT_EQ(error_of("k1\nk2\nk3\n", limits), "line 3: more than 2 keys");
  EXPECT_EQ(error_of("123456789\n", limits), "line 1: key longer than 8 bytes");
  EXPECT_EQ(error_of("12345678\n", limits), "(parsed)");
}

TEST(ApiKeysCheck, BearerAndXApiKeyAreAcceptedAndCountedByName) {
  ApiKeys keys("unused", KeySet::parse("alice sk-a\nsk-u\n").value());
  using O = ApiKeys::Outcome;
  EXPECT_EQ(keys.check("Bearer sk-a", ""), O::kAccepted);
  EXPECT_EQ(keys.check("bearer   sk-a", ""), O::kAccepted);
  EXPECT_EQ(keys.check("BEARER sk-u", ""), O::kAccepted);
  EXPECT_EQ(keys.check("", "sk-a"), O::kAccepted);
  EXPECT_EQ(keys.check("", ""), O::kMissing);
  EXPECT_EQ(keys.check("Bearer sk-wrong", ""), O::kInvalid);
  EXPECT_EQ(keys.check("", "sk-wrong"), O::kInvalid);
  EXPECT_EQ(keys.check("sk-a", ""), O::kInvalid);           // no scheme
  EXPECT_EQ(keys.check("Basic c2stYQ==", ""), O::kInvalid);  // another scheme
  EXPECT_EQ(keys.check("Bearer", ""), O::kInvalid);
  EXPECT_EQ(keys.check("Bearersk-a", ""), O::kInvalid);
  // Either header may carry the key (an Anthropic SDK with an OpenAI-style proxy header, say).
  EXPECT_EQ(keys.check("Bearer sk-wrong", "sk-u"), O::kAccepted);
  EXPECT_EQ(keys.check("Basic xyz", "sk-a"), O::kAccepted);

  const std::string m = render(keys);
  EXPECT_NE(m.find("ramjet_client_auth_total{outcome=\"accepted\"} 6\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_client_auth_total{outcome=\"missing\"} 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_client_auth_total{outcome=\"invalid\"} 6\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_client_requests_by_key_total{key=\"alice\"} 4\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_client_requests_by_key_total{key=\"unnamed\"} 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_api_keys_reloads_total{outcome=\"ok\"} 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_api_keys_reloads_total{outcome=\"error\"} 0\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("sk-"), std::string::npos) << m;
}

TEST(ApiKeysCheck, ErrorBodiesAreOpenAiStyleAuthenticationErrors) {
  for (auto o : {ApiKeys::Outcome::kMissing, ApiKeys::Outcome::kInvalid}) {
    const std::string_view body = ApiKeys::error_body(o);
    EXPECT_TRUE(body.starts_with(R"({"error":{"message":")")) << body;
    EXPECT_NE(body.find(R"("type":"authentication_error")"), std::string::npos) << body;
    EXPECT_NE(body.find(R"("code":"invalid_api_key"}})"), std::string::npos) << body;
  }
}

TEST(ApiKeysLoad, AMissingOrInvalidFileIsAStartupErrorNamingTheFileAndLine) {
  KeyFile f;
  auto missing = ApiKeys::load(f.path() + ".absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find(".absent: "), std::string::npos) << missing.error().message;

  f.write("ok sk-1\nbad name sk-secret\n");
  auto bad = ApiKeys::load(f.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, f.path() + ": line 2: expected `key` or `name key` (a key holds no blanks; "
                                            "comments take a whole line)");

  f.write("# nothing\n");
  auto empty = ApiKeys::load(f.path());
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().message, f.path() + ": no keys (only blank lines and comments)");

  KeyFileLimits limits;
  limits.max_bytes = 16;
  f.write("a-key-of-seventeen\n");
  auto large = ApiKeys::load(f.path(), limits);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.error().message, f.path() + ": larger than 16 bytes");
}

TEST(ApiKeysReload, ASuccessfulReloadSwapsTheKeysAndKeepsCountsOfNamesThatStay) {
  KeyFile f;
  f.write("alice sk-old\nbob sk-bob\n");
  auto loaded = ApiKeys::load(f.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  ApiKeys& keys = **loaded;
  EXPECT_EQ(keys.check("Bearer sk-old", ""), ApiKeys::Outcome::kAccepted);
  EXPECT_EQ(keys.check("Bearer sk-bob", ""), ApiKeys::Outcome::kAccepted);

  f.write("alice sk-new\ncarol sha256:" + hex(sha256("sk-carol")) + "\n");
  EXPECT_TRUE(keys.reload());
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys.check("Bearer sk-old", ""), ApiKeys::Outcome::kInvalid);
  EXPECT_EQ(keys.check("Bearer sk-bob", ""), ApiKeys::Outcome::kInvalid);
  EXPECT_EQ(keys.check("", "sk-new"), ApiKeys::Outcome::kAccepted);
  EXPECT_EQ(keys.check("", "sk-carol"), ApiKeys::Outcome::kAccepted);

  const std::string m = render(keys);
  EXPECT_NE(m.find("ramjet_client_requests_by_key_total{key=\"alice\"} 2\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_client_requests_by_key_total{key=\"carol\"} 1\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("key=\"bob\""), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_api_keys_reloads_total{outcome=\"ok\"} 1\n"), std::string::npos) << m;
}

TEST(ApiKeysReload, AFailedReloadKeepsTheOldKeysAndCountsTheError) {
  KeyFile f;
  f.write("alice sk-old\n");
  auto loaded = ApiKeys::load(f.path());
  ASSERT_TRUE(loaded.ok());
  ApiKeys& keys = **loaded;

  f.write("alice sk-new\nthis line is broken\n");
  EXPECT_FALSE(keys.reload());
  f.write("# emptied by mistake\n");
  EXPECT_FALSE(keys.reload());
  std::filesystem::remove(f.path());
  EXPECT_FALSE(keys.reload());

  EXPECT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys.check("Bearer sk-old", ""), ApiKeys::Outcome::kAccepted);
  EXPECT_EQ(keys.check("Bearer sk-new", ""), ApiKeys::Outcome::kInvalid);
  const std::string m = render(keys);
  EXPECT_NE(m.find("ramjet_api_keys_reloads_total{outcome=\"ok\"} 0\n"), std::string::npos) << m;
  EXPECT_NE(m.find("ramjet_api_keys_reloads_total{outcome=\"error\"} 3\n"), std::string::npos) << m;
}

// Readers on several threads while the set is swapped: every check sees the old or the new set,
// never neither (and TSan sees no race).
TEST(ApiKeysReload, ChecksOnOtherThreadsSeeTheOldOrTheNewSetDuringReloads) {
  KeyFile f;
  f.write("stays sk-stays\nold sk-old\n");
  auto loaded = ApiKeys::load(f.path());
  ASSERT_TRUE(loaded.ok());
  ApiKeys& keys = **loaded;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        if (keys.check("Bearer sk-stays", "") != ApiKeys::Outcome::kAccepted) failures.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 50; ++i) {
    f.write(i % 2 ? "stays sk-stays\nold sk-old\n" : "stays sk-stays\nnew sk-new\n");
    EXPECT_TRUE(keys.reload());
    (void)render(keys);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace ramjet::request
