#include "upstream/dns.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>

#include "common/log.h"

namespace ramjet::upstream {

namespace {

using metrics::Family;
using metrics::MetricKind;

constexpr std::array<Family, 2> kFamilies = {{
    {"ramjet_upstream_dns_lookups_total", MetricKind::kCounter, "outcome",
     "RJ_UPSTREAM_DNS lookups by outcome: ok (addresses: the name's engines), empty (the name "
     "does not exist or has no address: it lists no engine), error (timeout, SERVFAIL, a bad "
     "answer: the engines it listed stay)."},
    {"ramjet_upstream_dns_engines", MetricKind::kGauge, "name",
     "Addresses the last successful lookup of each RJ_UPSTREAM_DNS name returned (name: its "
     "position in the list, 0, 1, ...; never the name itself)."},
}};

void sort_unique(std::vector<std::string>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// One address per engine: a dual-stack name answers A and AAAA for the same pod, so IPv4
// addresses are used when there are any, IPv6 ones only for an IPv6-only name.
void one_family(std::vector<std::string>& v) {
  const bool v4 = std::any_of(v.begin(), v.end(), [](const std::string& a) { return a.find(':') == std::string::npos; });
  if (v4) std::erase_if(v, [](const std::string& a) { return a.find(':') != std::string::npos; });
  sort_unique(v);
}

DnsAnswer system_lookup(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;  // no IPv6 answers on a host without IPv6
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &res);
  DnsAnswer a;
  if (rc == EAI_NONAME
#ifdef EAI_NODATA
      || rc == EAI_NODATA
#endif
  ) {
    a.outcome = DnsOutcome::kEmpty;
    return a;
  }
  if (rc != 0) return a;  // kError
  for (addrinfo* p = res; p; p = p->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (p->ai_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr, text, sizeof text);
    } else if (p->ai_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    a.addresses.emplace_back(text);
  }
  ::freeaddrinfo(res);
  one_family(a.addresses);
  a.outcome = a.addresses.empty() ? DnsOutcome::kEmpty : DnsOutcome::kOk;
  return a;
}

// One query type against `server` only. false: the lookup failed (not: no such records).
bool server_query(res_state st, const std::string& name, int type, std::vector<std::string>& out) {
  std::array<unsigned char, 8192> buf{};
  const int len = ::res_nquery(st, name.c_str(), ns_c_in, type, buf.data(), static_cast<int>(buf.size()));
  if (len < 0) return st->res_h_errno == HOST_NOT_FOUND || st->res_h_errno == NO_DATA;
  ns_msg msg;
  if (::ns_initparse(buf.data(), len, &msg) < 0) return false;
  const int n = ns_msg_count(msg, ns_s_an);
  for (int i = 0; i < n; ++i) {
    ns_rr rr;
    if (::ns_parserr(&msg, ns_s_an, i, &rr) < 0) return false;
    if (ns_rr_class(rr) != ns_c_in || ns_rr_type(rr) != type) continue;  // e.g. a CNAME on the way
    char text[INET6_ADDRSTRLEN] = {};
    if (type == ns_t_a && ns_rr_rdlen(rr) == 4) {
      ::inet_ntop(AF_INET, ns_rr_rdata(rr), text, sizeof text);
    } else if (type == ns_t_aaaa && ns_rr_rdlen(rr) == 16) {
      ::inet_ntop(AF_INET6, ns_rr_rdata(rr), text, sizeof text);
    } else {
      continue;
    }
    out.emplace_back(text);
  }
  return true;
}

DnsAnswer server_lookup(const std::string& name, const std::string& server, std::chrono::milliseconds timeout) {
  DnsAnswer a;
  const size_t colon = server.rfind(':');
  if (colon == std::string::npos) return a;
  uint16_t port = 0;
  const char* first = server.data() + colon + 1;
  const char* last = server.data() + server.size();
  if (std::from_chars(first, last, port).ptr != last || port == 0) return a;
  in_addr addr{};
  if (::inet_pton(AF_INET, server.substr(0, colon).c_str(), &addr) != 1) return a;
  struct __res_state st;
  std::memset(&st, 0, sizeof st);
  if (::res_ninit(&st) != 0) return a;
  const int configured = st.nscount;  // res_nclose frees what res_ninit made for these
  st.nscount = 1;
  st.nsaddr_list[0].sin_family = AF_INET;
  st.nsaddr_list[0].sin_port = htons(port);
  st.nsaddr_list[0].sin_addr = addr;
  st.retrans = std::max<int>(1, static_cast<int>(timeout.count() / 2000));
  st.retry = 2;
  st.options &= ~static_cast<unsigned long>(RES_DNSRCH | RES_DEFNAMES);  // the name as given, no search list
  // Some servers refuse or fail AAAA questions for IPv4-only names: A records that came back are
  // an answer; an error on both (or on A with no AAAA addresses) is not.
  const bool v4 = server_query(&st, name, ns_t_a, a.addresses);
  const size_t from_a = a.addresses.size();
  const bool v6 = server_query(&st, name, ns_t_aaaa, a.addresses);
  st.nscount = configured;
  ::res_nclose(&st);
  const bool ok = (v4 && v6) || (v4 && from_a > 0) || (v6 && a.addresses.size() > from_a);
  if (!ok) {
    a.addresses.clear();
    return a;
  }
  one_family(a.addresses);
  a.outcome = a.addresses.empty() ? DnsOutcome::kEmpty : DnsOutcome::kOk;
  return a;
}

}  // namespace

std::string_view dns_outcome_label(DnsOutcome o) {
  switch (o) {
    case DnsOutcome::kOk: return "ok";
    case DnsOutcome::kEmpty: return "empty";
    case DnsOutcome::kError:
    case DnsOutcome::kCount: break;
  }
  return "error";
}

std::span<const metrics::Family> dns_families() { return kFamilies; }

DnsAnswer resolve_addresses(const std::string& name, const std::string& server, std::chrono::milliseconds timeout) {
  return server.empty() ? system_lookup(name) : server_lookup(name, server, timeout);
}

// What the lookup thread shares with its owner. The thread holds it too: a lookup that blocks past
// stop() (a resolver that does not answer) finishes on a detached thread that touches nothing else.
struct DnsDiscovery::Shared {
  explicit Shared(DnsConfig c, std::function<void(size_t, std::vector<Listed>)> f)
      : config(std::move(c)), found(std::move(f)), engines(config.names.size()) {}
  const DnsConfig config;
  std::function<void(size_t, std::vector<Listed>)> found;  // called under mu, never after stop
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool exited = false;
  std::array<std::atomic<uint64_t>, static_cast<size_t>(DnsOutcome::kCount)> lookups{};
  std::vector<std::atomic<size_t>> engines;  // per name: addresses in its last answer
};

DnsDiscovery::DnsDiscovery(DnsConfig config, std::function<void(size_t, std::vector<Listed>)> found)
    : shared_(std::make_shared<Shared>(std::move(config), std::move(found))) {}

DnsDiscovery::~DnsDiscovery() { stop(); }

void DnsDiscovery::start() {
  if (shared_->config.names.empty() || thread_.joinable()) return;
  thread_ = std::thread([s = shared_] { run(*s); });
}

void DnsDiscovery::stop() {
  std::unique_lock lock(shared_->mu);
  shared_->stop = true;
  shared_->cv.notify_all();
  if (!thread_.joinable()) return;
  // A lookup in progress gets a moment to end; a resolver that keeps it longer does not hold up
  // the shutdown (the thread ends on its own, calling nothing).
  const bool ended = shared_->cv.wait_for(lock, std::chrono::seconds(2), [this] { return shared_->exited; });
  lock.unlock();
  if (ended) thread_.join();
  else thread_.detach();
}

void DnsDiscovery::run(Shared& s) {
  const auto timeout = std::min(s.config.interval, std::chrono::milliseconds(5000));
  std::unique_lock lock(s.mu);
  while (!s.stop) {
    lock.unlock();
    for (size_t n = 0; n < s.config.names.size(); ++n) {
      const Listed& entry = s.config.names[n];
      DnsAnswer a = resolve_addresses(entry.url.host, s.config.server, timeout);
      s.lookups[static_cast<size_t>(a.outcome)].fetch_add(1, std::memory_order_relaxed);
      if (a.outcome == DnsOutcome::kError) {
        spdlog::warn("upstream dns: lookup of name {} failed; its engines stay as they are", n);
        continue;
      }
      s.engines[n].store(a.addresses.size(), std::memory_order_relaxed);
      std::vector<Listed> engines;
      for (std::string& address : a.addresses) {
        Listed l = entry;
        l.url.name = entry.url.host;
        l.url.host = std::move(address);
        engines.push_back(std::move(l));
      }
      std::lock_guard hold(s.mu);
      if (s.stop) break;
      s.found(n, std::move(engines));
    }
    lock.lock();
    s.cv.wait_for(lock, s.config.interval, [&s] { return s.stop; });
  }
  s.exited = true;
  s.cv.notify_all();
}

void DnsDiscovery::write_metrics(metrics::Exposition& x) const {
  x.family(kFamilies[0]);
  for (size_t o = 0; o < static_cast<size_t>(DnsOutcome::kCount); ++o) {
    x.sample(kFamilies[0].name, "outcome=\"" + std::string(dns_outcome_label(static_cast<DnsOutcome>(o))) + "\"",
             shared_->lookups[o].load(std::memory_order_relaxed));
  }
  x.family(kFamilies[1]);
  for (size_t n = 0; n < shared_->engines.size(); ++n) {
    x.sample(kFamilies[1].name, "name=\"" + std::to_string(n) + "\"",
             uint64_t{shared_->engines[n].load(std::memory_order_relaxed)});
  }
}

}  // namespace ramjet::upstream
