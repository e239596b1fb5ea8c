#include "net/tls.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>

#include <cstring>
#include <optional>

namespace ramjet::net {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

namespace {

// OpenSSL's reason for the last error on this thread (library text only: no file contents),
// and the queue cleared.
std::string openssl_reason() {
  std::string why, system;
  while (unsigned long e = ERR_get_error()) {
    if (ERR_SYSTEM_ERROR(e)) {
      system = std::strerror(ERR_GET_REASON(e));  // e.g. a missing file: "No such file or directory"
    } else if (const char* r = ERR_reason_error_string(e)) {
      why = r;
    }
  }
  if (!system.empty()) return system;
  return why.empty() ? "unknown" : why;
}

Error tls_error(std::string message) { return Error{"tls", std::move(message)}; }

// TLS 1.2 and later, no compression, no renegotiation.
bool harden(SSL_CTX* ctx) {
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1;
}

// Loads a certificate chain and its key into ctx; `prefix` (RJ_TLS or RJ_UPSTREAM_TLS) names
// the variables in errors.
std::optional<Error> load_pair(SSL_CTX* ctx, const std::string& cert_file, const std::string& key_file,
                               std::string_view prefix) {
  const std::string p(prefix);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return tls_error(p + "_CERT_FILE: " + openssl_reason());
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    const unsigned long e = ERR_peek_last_error();
    if (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return tls_error(p + "_KEY_FILE does not match " + p + "_CERT_FILE");
    }
    return tls_error(p + "_KEY_FILE: " + openssl_reason());
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return tls_error(p + "_KEY_FILE does not match " + p + "_CERT_FILE");
  }
  return std::nullopt;
}

int target_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

std::unique_ptr<UpstreamTls>& installed() {
  static std::unique_ptr<UpstreamTls> tls;
  return tls;
}

// The ALPN protocol a listener speaks: HTTP/1.1 only (a client offering h2 falls back to it).
int select_http11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                  unsigned int inlen, void*) {
  static constexpr unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kHttp11, sizeof(kHttp11), in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;  // no ALPN answer: the client assumes HTTP/1.1
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

std::string_view tls_failure_label(TlsFailure f) {
  switch (f) {
    case TlsFailure::kUntrusted: return "untrusted";
    case TlsFailure::kHostname: return "hostname";
    case TlsFailure::kExpired: return "expired";
    case TlsFailure::kNotYetValid: return "not_yet_valid";
    case TlsFailure::kHandshake: return "handshake";
    case TlsFailure::kCount: break;
  }
  return "unknown";
}

TlsFailure classify_tls_failure(const SSL* ssl) {
  if (ssl == nullptr) return TlsFailure::kHandshake;
  switch (SSL_get_verify_result(ssl)) {
    case X509_V_OK: return TlsFailure::kHandshake;
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH: return TlsFailure::kHostname;
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CRL_HAS_EXPIRED: return TlsFailure::kExpired;
    case X509_V_ERR_CERT_NOT_YET_VALID:
    case X509_V_ERR_CRL_NOT_YET_VALID: return TlsFailure::kNotYetValid;
    default: return TlsFailure::kUntrusted;
  }
}

// --- TlsTarget ---------------------------------------------------------------------------------

TlsTarget::~TlsTarget() { SSL_SESSION_free(session_); }

SSL_SESSION* TlsTarget::session() const {
  std::lock_guard lock(mu_);
  if (session_ == nullptr) return nullptr;
  SSL_SESSION_up_ref(session_);
  return session_;
}

void TlsTarget::remember(SSL_SESSION* s) {
  std::lock_guard lock(mu_);
  SSL_SESSION_free(session_);
  session_ = s;
}

void TlsTarget::forget() { remember(nullptr); }

// --- UpstreamTls -------------------------------------------------------------------------------

Result<std::unique_ptr<UpstreamTls>> UpstreamTls::create(const UpstreamTlsOptions& options) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  SSL_CTX* c = ctx->native_handle();
  if (!harden(c)) return tls_error("cannot require TLS 1.2: " + openssl_reason());
  if (options.ca_file.empty()) {
    if (SSL_CTX_set_default_verify_paths(c) != 1) return tls_error("system CA store: " + openssl_reason());
  } else if (SSL_CTX_load_verify_locations(c, options.ca_file.c_str(), nullptr) != 1) {
    return tls_error("RJ_UPSTREAM_TLS_CA_FILE: " + openssl_reason());
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return tls_error("RJ_UPSTREAM_TLS_CERT_FILE and RJ_UPSTREAM_TLS_KEY_FILE go together");
  }
  if (!options.cert_file.empty()) {
    if (auto e = load_pair(c, options.cert_file, options.key_file, "RJ_UPSTREAM_TLS")) return *e;
  }
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
  // Sessions go to their engine's TlsTarget (OpenSSL's own client cache is keyed by nothing we
  // could look up by): the callback sees every session, including TLS 1.3 tickets that arrive
  // after the handshake.
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(c, &UpstreamTls::on_new_session);
  return std::unique_ptr<UpstreamTls>(new UpstreamTls(std::move(ctx)));
}

UpstreamTls& UpstreamTls::instance() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (installed()) return;
    auto made = create({});
    if (made) installed() = std::move(made).value();
  });
  if (!installed()) {
    // No system store at all: a context that trusts nothing, so every https:// engine fails
    // verification (typed and counted) rather than crashing a CLI tool.
    installed().reset(new UpstreamTls(std::make_shared<ssl::context>(ssl::context::tls_client)));
    SSL_CTX_set_verify(installed()->ctx_->native_handle(), SSL_VERIFY_PEER, nullptr);
  }
  return *installed();
}

void UpstreamTls::install(std::unique_ptr<UpstreamTls> tls) { installed() = std::move(tls); }

TlsTarget& UpstreamTls::target(const std::string& host, uint16_t port) {
  std::string key = host + ":" + std::to_string(port);
  std::lock_guard lock(mu_);
  auto& slot = targets_[key];
  if (!slot) slot = std::make_unique<TlsTarget>();
  return *slot;
}

const TlsTarget* UpstreamTls::find(const std::string& host, uint16_t port) const {
  std::string key = host + ":" + std::to_string(port);
  std::lock_guard lock(mu_);
  auto it = targets_.find(key);
  return it == targets_.end() ? nullptr : it->second.get();
}

bool UpstreamTls::prepare(SSL* ssl, const std::string& host, TlsTarget& target) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (!ec) {
    // An IP literal: checked against the certificate's IP SANs, and never sent as SNI (RFC 6066).
    if (X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) != 1) return false;
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set1_host(ssl, host.c_str()) != 1) return false;
    if (SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) return false;
  }
  if (SSL_set_ex_data(ssl, target_index(), &target) != 1) return false;
  if (SSL_SESSION* s = target.session()) {
    const int ok = SSL_SESSION_is_resumable(s) == 1 ? SSL_set_session(ssl, s) : 0;
    SSL_SESSION_free(s);
    if (ok != 1) {  // a full handshake instead, and no more offers of that session
      ERR_clear_error();
      target.forget();
    }
  }
  return true;
}

int UpstreamTls::on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* target = static_cast<TlsTarget*>(SSL_get_ex_data(ssl, target_index()));
  if (target == nullptr || SSL_SESSION_is_resumable(session) != 1) return 0;
  target->remember(session);
  return 1;  // we keep the reference
}

// --- ServerTls ---------------------------------------------------------------------------------

Result<std::shared_ptr<ssl::context>> ServerTls::build(const std::string& cert_file, const std::string& key_file) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX* c = ctx->native_handle();
  if (!harden(c)) return tls_error("cannot require TLS 1.2: " + openssl_reason());
  if (auto e = load_pair(c, cert_file, key_file, "RJ_TLS")) return *e;
  SSL_CTX_set_options(c, SSL_OP_CIPHER_SERVER_PREFERENCE);
  static constexpr unsigned char kContext[] = "ramjet";
  SSL_CTX_set_session_id_context(c, kContext, sizeof(kContext) - 1);
  SSL_CTX_set_alpn_select_cb(c, &select_http11, nullptr);
  return ctx;
}

Result<std::unique_ptr<ServerTls>> ServerTls::create(std::string cert_file, std::string key_file) {
  if (cert_file.empty() != key_file.empty()) return tls_error("RJ_TLS_CERT_FILE and RJ_TLS_KEY_FILE go together");
  auto ctx = build(cert_file, key_file);
  if (!ctx) return ctx.error();
  return std::unique_ptr<ServerTls>(new ServerTls(std::move(cert_file), std::move(key_file), std::move(ctx).value()));
}

std::shared_ptr<ssl::context> ServerTls::current() const {
  std::lock_guard lock(mu_);
  return ctx_;
}

Result<bool> ServerTls::reload() {
  auto ctx = build(cert_file_, key_file_);
  if (!ctx) {
    reloads_[0].fetch_add(1, std::memory_order_relaxed);
    return ctx.error();
  }
  {
    std::lock_guard lock(mu_);
    ctx_ = std::move(ctx).value();
  }
  reloads_[1].fetch_add(1, std::memory_order_relaxed);
  return true;
}

namespace {

constexpr std::array<metrics::Family, 2> kServerFamilies = {{
    {"ramjet_tls_handshake_failures_total", metrics::MetricKind::kCounter, "listener",
     "Client connections closed because their TLS handshake failed or did not finish within "
     "RJ_HEADER_TIMEOUT_MS (plain HTTP to an HTTPS port, an unknown CA, a silent client), by "
     "listener: api, metrics."},
    {"ramjet_tls_reloads_total", metrics::MetricKind::kCounter, "outcome",
     "SIGHUP re-reads of RJ_TLS_CERT_FILE and RJ_TLS_KEY_FILE, by outcome: ok (new connections get "
     "the new certificate), error (the old one stays; the log says why)."},
}};

}  // namespace

std::span<const metrics::Family> server_tls_families() { return kServerFamilies; }

void write_server_tls_metrics(metrics::Exposition& x, const ServerTls* tls) {
  x.family(kServerFamilies[0]);
  static constexpr std::string_view kListeners[] = {"api", "metrics"};
  for (size_t l = 0; l < 2; ++l) {
    const uint64_t n = tls ? tls->handshake_failures(static_cast<ServerTls::Listener>(l)) : 0;
    x.sample(kServerFamilies[0].name, "listener=\"" + std::string(kListeners[l]) + "\"", n);
  }
  x.family(kServerFamilies[1]);
  x.sample(kServerFamilies[1].name, "outcome=\"ok\"", tls ? tls->reloads(true) : uint64_t{0});
  x.sample(kServerFamilies[1].name, "outcome=\"error\"", tls ? tls->reloads(false) : uint64_t{0});
}

}  // namespace ramjet::net
