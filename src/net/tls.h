// net/tls: TLS both ways. UpstreamTls is the client side (https:// engines): one OpenSSL context
// for the process (system CA store or RJ_UPSTREAM_TLS_CA_FILE, optional client certificate for
// mTLS, TLS 1.2+), peer verification always on (chain + the URL's host name or IP literal, SNI
// for names), and per engine its last session so a new connection resumes instead of a full
// handshake. ServerTls is the listener side (RJ_TLS_CERT_FILE / RJ_TLS_KEY_FILE): a context
// swapped whole on reload, so connections in progress keep the one they started with.
// Errors name the file's role and OpenSSL's reason, never file contents or host names.
#pragma once

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/result.h"
#include "metrics/metrics.h"

namespace ramjet::net {

// Why a TLS handshake with an engine failed. Verification outcomes first (what the certificate
// said), then everything else (protocol, a refused client certificate, a reset mid-handshake).
enum class TlsFailure { kUntrusted, kHostname, kExpired, kNotYetValid, kHandshake, kCount };
std::string_view tls_failure_label(TlsFailure f);
// The failure of a handshake on `ssl` that did not complete.
TlsFailure classify_tls_failure(const SSL* ssl);

struct UpstreamTlsOptions {
  std::string ca_file;    // RJ_UPSTREAM_TLS_CA_FILE ("" = the system store)
  std::string cert_file;  // RJ_UPSTREAM_TLS_CERT_FILE (mTLS; with key_file)
  std::string key_file;   // RJ_UPSTREAM_TLS_KEY_FILE
};

// One https:// engine (host:port): its resumable session and its handshake counters.
class TlsTarget {
 public:
  // The last session the engine gave us (up-referenced; the caller frees it), or nullptr.
  SSL_SESSION* session() const;
  void remember(SSL_SESSION* s);  // takes ownership of one reference
  void forget();                  // after a failed resumption or handshake

  void count_handshake(bool resumed) { handshakes_[resumed ? 1 : 0].fetch_add(1, std::memory_order_relaxed); }
  void count_failure(TlsFailure f) { failures_[static_cast<size_t>(f)].fetch_add(1, std::memory_order_relaxed); }
  uint64_t handshakes(bool resumed) const { return handshakes_[resumed ? 1 : 0].load(std::memory_order_relaxed); }
  uint64_t failures(TlsFailure f) const { return failures_[static_cast<size_t>(f)].load(std::memory_order_relaxed); }

  TlsTarget() = default;
  ~TlsTarget();
  TlsTarget(const TlsTarget&) = delete;
  TlsTarget& operator=(const TlsTarget&) = delete;

 private:
  mutable std::mutex mu_;
  SSL_SESSION* session_ = nullptr;
  std::array<std::atomic<uint64_t>, 2> handshakes_{};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(TlsFailure::kCount)> failures_{};
};

class UpstreamTls {
 public:
  // Builds the client context. Errors: an unreadable or invalid CA file, certificate or key, a
  // key that does not match the certificate, a certificate without its key (or the reverse).
  static Result<std::unique_ptr<UpstreamTls>> create(const UpstreamTlsOptions& options);

  // The process-wide instance: the one install()ed at startup, else (CLI tools) one with the
  // system store built on first use.
  static UpstreamTls& instance();
  static void install(std::unique_ptr<UpstreamTls> tls);  // before any connection is made

  const std::shared_ptr<boost::asio::ssl::context>& context() const { return ctx_; }
  // The engine at host:port (stable address; created on first use). Thread-safe.
  TlsTarget& target(const std::string& host, uint16_t port);
  // The engine at host:port if a connection to it was ever attempted, else nullptr.
  const TlsTarget* find(const std::string& host, uint16_t port) const;

  // Sets SNI, the name (or IP) to verify and the session to resume on a new connection's SSL.
  // Returns false when OpenSSL refused a setting (the connection must not go on).
  bool prepare(SSL* ssl, const std::string& host, TlsTarget& target);

 private:
  explicit UpstreamTls(std::shared_ptr<boost::asio::ssl::context> ctx) : ctx_(std::move(ctx)) {}
  static int on_new_session(SSL* ssl, SSL_SESSION* session);

  std::shared_ptr<boost::asio::ssl::context> ctx_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<TlsTarget>> targets_;
};

// Listener-side TLS: the current server context, replaced whole by reload().
class ServerTls {
 public:
  static Result<std::unique_ptr<ServerTls>> create(std::string cert_file, std::string key_file);

  // The context for a new connection; it stays alive as long as the connection holds it.
  std::shared_ptr<boost::asio::ssl::context> current() const;
  // Re-reads both files; on any error keeps the current context and returns the reason.
  Result<bool> reload();

  enum class Listener { kApi, kMetrics, kCount };
  void count_handshake_failure(Listener l) const {
    handshake_failures_[static_cast<size_t>(l)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t handshake_failures(Listener l) const {
    return handshake_failures_[static_cast<size_t>(l)].load(std::memory_order_relaxed);
  }
  uint64_t reloads(bool ok) const { return reloads_[ok ? 1 : 0].load(std::memory_order_relaxed); }

 private:
  ServerTls(std::string cert_file, std::string key_file, std::shared_ptr<boost::asio::ssl::context> ctx)
      : cert_file_(std::move(cert_file)), key_file_(std::move(key_file)), ctx_(std::move(ctx)) {}
  static Result<std::shared_ptr<boost::asio::ssl::context>> build(const std::string& cert_file,
                                                                  const std::string& key_file);

  std::string cert_file_, key_file_;
  mutable std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> ctx_;
  mutable std::array<std::atomic<uint64_t>, static_cast<size_t>(Listener::kCount)> handshake_failures_{};
  std::array<std::atomic<uint64_t>, 2> reloads_{};
};

// The listeners' TLS series (RJ_TLS_CERT_FILE set): handshake failures per listener and reloads.
// `tls` null writes zeros (the docs' example).
void write_server_tls_metrics(metrics::Exposition& x, const ServerTls* tls);
std::span<const metrics::Family> server_tls_families();

}  // namespace ramjet::net
