// upstream/dns: engine discovery from DNS (RJ_UPSTREAM_DNS). Each name's A and AAAA records are
// its engines (a Kubernetes headless Service answers with one address per ready pod), asked
// again every RJ_UPSTREAM_DNS_INTERVAL_MS on a thread of its own (lookups block), and handed to
// upstream::Membership as source 1 + the name's position. Asked of the system resolver
// (getaddrinfo: /etc/hosts, /etc/resolv.conf) or, with RJ_UPSTREAM_DNS_SERVER, of that server
// only (glibc's resolver library, which also parses the answers). A name that does not exist or
// has no address lists no engines; a lookup that fails (timeout, SERVFAIL) changes nothing — the
// engines it listed stay until an answer says otherwise. Names and addresses are never logged.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "metrics/metrics.h"
#include "upstream/membership.h"

namespace ramjet::upstream {

enum class DnsOutcome { kOk, kEmpty, kError, kCount };
std::string_view dns_outcome_label(DnsOutcome o);

struct DnsAnswer {
  DnsOutcome outcome = DnsOutcome::kError;
  std::vector<std::string> addresses;  // sorted, unique (IPv4 and IPv6 text forms)
};

// One lookup, blocking for at most about `timeout`. `server`: "" (the system resolver) or an
// IPv4 "ip:port".
DnsAnswer resolve_addresses(const std::string& name, const std::string& server, std::chrono::milliseconds timeout);

struct DnsConfig {
  // RJ_UPSTREAM_DNS entries: url.host is the DNS name; profile per name (RJ_UPSTREAM_PROFILES).
  std::vector<Listed> names;
  std::chrono::milliseconds interval{5000};  // RJ_UPSTREAM_DNS_INTERVAL_MS
  std::string server{};                      // RJ_UPSTREAM_DNS_SERVER
};

// The families DnsDiscovery::write_metrics writes (docs/metrics.md).
std::span<const metrics::Family> dns_families();

class DnsDiscovery {
 public:
  // `found(name, engines)`: called on the lookup thread after every answer that is not an error.
  DnsDiscovery(DnsConfig config, std::function<void(size_t name, std::vector<Listed> engines)> found);
  ~DnsDiscovery();
  DnsDiscovery(const DnsDiscovery&) = delete;
  DnsDiscovery& operator=(const DnsDiscovery&) = delete;

  void start();
  // No `found` call after it returns. Joins the lookup thread, or (a lookup still blocked after
  // 2 s) lets it end on its own.
  void stop();
  void write_metrics(metrics::Exposition& x) const;

 private:
  struct Shared;
  static void run(Shared& s);
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace ramjet::upstream
