// Value parsers for the options table: numbers, enums, host:port and the upstream URL list.
// Problems are phrases without the variable name; none of them quotes the input.
#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "config/options.h"

namespace ramjet::config {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alnum(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char to_lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return to_lower(x) == to_lower(y);
         });
}

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> items;
  while (true) {
    size_t comma = s.find(',');
    items.push_back(trim(s.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return items;
}

// Digits only, no sign; nullopt when empty, not all digits, or above 2^64-1.
std::optional<uint64_t> decimal(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), is_digit)) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

bool valid_ipv4(std::string_view s) {
  if (s.size() > 15) return false;
  std::string z(s);
  in_addr a{};
  return inet_pton(AF_INET, z.c_str(), &a) == 1;
}

bool valid_ipv6(std::string_view s) {
  if (s.size() > 45) return false;
  std::string z(s);
  in6_addr a{};
  return inet_pton(AF_INET6, z.c_str(), &a) == 1;
}

// Labels of letters, digits, '-' and '_' (Compose service names use '_'), 1..63 bytes each,
// not starting or ending with '-'; at most 253 bytes in all.
bool valid_hostname(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  while (true) {
    size_t dot = s.find('.');
    std::string_view label = s.substr(0, dot);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!is_alnum(c) && c != '-' && c != '_') return false;
    }
    if (dot == std::string_view::npos) return true;
    s.remove_prefix(dot + 1);
  }
}

// An unbracketed host: an IPv4 literal when it looks numeric, else a hostname.
bool check_host(std::string_view host, std::string_view prefix, Problems& problems) {
  if (host.empty()) {
    problems.push_back(std::string(prefix) + "missing host");
    return false;
  }
  bool numeric =
      std::all_of(host.begin(), host.end(), [](char c) { return is_digit(c) || c == '.'; });
  if (numeric ? !valid_ipv4(host) : !valid_hostname(host)) {
    problems.push_back(std::string(prefix) + (numeric ? "host is not a valid IPv4 address"
                                                      : "host is not a valid hostname"));
    return false;
  }
  return true;
}

// "a or b", "a, b or c".
std::string alternatives(std::span<const std::string_view> choices) {
  std::string s;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) s += i + 1 == choices.size() ? " or " : ", ";
    s += choices[i];
  }
  return s;
}

std::string count_problem(size_t n, uint64_t min, uint64_t max) {
  return std::to_string(n) + " items; expected " + std::to_string(min) + ".." + std::to_string(max);
}

// One http://host[:port][/base-path] item; `prefix` is "item N: ".
std::optional<UpstreamUrl> parse_upstream(std::string_view item, const std::string& prefix,
                                          Problems& problems) {
  auto fail = [&](std::string_view what) {
    problems.push_back(prefix + std::string(what));
    return std::nullopt;
  };
  size_t sep = item.find("://");
  if (sep == std::string_view::npos) return fail("expected http[s]://host[:port][/base-path]");
  std::string_view scheme = item.substr(0, sep);
  const bool tls = iequals(scheme, "https");
  if (!tls && !iequals(scheme, "http")) return fail("unsupported scheme; use http:// or https://");
  std::string_view rest = item.substr(sep + 3);
  size_t auth_end = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, auth_end);
  std::string_view path = auth_end == std::string_view::npos ? "" : rest.substr(auth_end);
  if (authority.find('@') != std::string_view::npos) {
    return fail("credentials in the URL are not supported; use RJ_UPSTREAM_TOKEN");
  }
  if (path.find_first_of("?#") != std::string_view::npos) {
    return fail("query strings and fragments are not supported in a base URL");
  }

  UpstreamUrl url;
  url.tls = tls;
  if (tls) url.port = 443;
  std::string_view port_text;
  bool has_port = false;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return fail("unterminated [IPv6] host");
    std::string_view host = authority.substr(1, close - 1);
    if (!valid_ipv6(host)) return fail("host is not a valid IPv6 address");
    url.host = std::string(host);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return fail("unexpected text after ]");
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    size_t colon = authority.find(':');
    if (colon != std::string_view::npos &&
        authority.find(':', colon + 1) != std::string_view::npos) {
      return fail("IPv6 hosts must be written in brackets: http://[addr]:port");
    }
    std::string_view host = authority.substr(0, colon);
    if (!check_host(host, prefix, problems)) return std::nullopt;
    url.host = std::string(host);
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = authority.substr(colon + 1);
    }
  }
  if (has_port) {
    auto port = port_number(port_text, 1);
    if (!port) return fail("port must be 1..65535");
    url.port = *port;
  }

  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  for (char c : path) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return fail("base path may hold only printable ASCII without spaces (percent-encode)");
    }
  }
  url.base_path = std::string(path);
  return url;
}

}  // namespace

std::optional<uint16_t> port_number(std::string_view s, uint16_t min) {
  auto v = decimal(s);
  if (!v || *v < min || *v > 65535) return std::nullopt;
  return static_cast<uint16_t>(*v);
}

std::optional<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max, bool bytes,
                                   Problems& problems) {
  std::string_view t = trim(text);
  std::string range = std::to_string(min) + ".." + std::to_string(max);
  std::string human = format_number(min, bytes) + ".." + format_number(max, bytes);
  if (human != range) range += " (" + human + ")";
  if (t.empty()) {
    problems.push_back("empty; expected a decimal integer in " + range);
    return std::nullopt;
  }
  if (!std::all_of(t.begin(), t.end(), is_digit)) {
    problems.push_back("not a decimal integer (no sign, unit or separators); expected " + range);
    return std::nullopt;
  }
  auto v = decimal(t);
  if (!v || *v < min || *v > max) {
    problems.push_back("out of bounds; expected " + range);
    return std::nullopt;
  }
  return v;
}

std::optional<double> parse_decimal(std::string_view text, double min, double max,
                                    Problems& problems) {
  std::string_view t = trim(text);
  std::string range = format_decimal(min) + ".." + format_decimal(max);
  if (t.empty()) {
    problems.push_back("empty; expected a decimal number in " + range);
    return std::nullopt;
  }
  // digits [ '.' digits ]: checked here so that from_chars never sees a sign, exponent, hex,
  // inf or nan, and "4." / ".5" are refused rather than guessed at.
  auto digits = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
  };
  size_t point = t.find('.');
  bool plain = point == std::string_view::npos
                   ? digits(t)
                   : digits(t.substr(0, point)) && digits(t.substr(point + 1));
  if (!plain) {
    problems.push_back(
        "not a decimal number (digits with an optional fractional part, e.g. 4 or 2.5; no "
        "sign, exponent or unit); expected " +
        range);
    return std::nullopt;
  }
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v, std::chars_format::fixed);
  if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v) || v < min || v > max) {
    problems.push_back("out of bounds; expected " + range);
    return std::nullopt;
  }
  return v;
}

std::optional<bool> parse_bool(std::string_view text, Problems& problems) {
  std::string_view t = trim(text);
  for (std::string_view yes : {"true", "1", "yes", "on"}) {
    if (iequals(t, yes)) return true;
  }
  for (std::string_view no : {"false", "0", "no", "off"}) {
    if (iequals(t, no)) return false;
  }
  problems.push_back("not a boolean; expected true/false, 1/0, yes/no or on/off");
  return std::nullopt;
}

std::optional<std::string> parse_enum(std::string_view text,
                                      std::span<const std::string_view> choices,
                                      Problems& problems) {
  std::string_view t = trim(text);
  std::string allowed;
  for (std::string_view c : choices) {
    if (iequals(t, c)) return std::string(c);
    if (!allowed.empty()) allowed += ", ";
    allowed += c;
  }
  problems.push_back("not an accepted value; expected one of: " + allowed);
  return std::nullopt;
}

std::optional<HostPort> parse_host_port(std::string_view text, Problems& problems) {
  std::string_view t = trim(text);
  if (t.empty()) {
    problems.push_back("empty; expected host:port, e.g. 0.0.0.0:8000");
    return std::nullopt;
  }
  size_t colon = t.rfind(':');
  if (t.front() == '[' || (colon != std::string_view::npos && t.find(':') != colon)) {
    problems.push_back("IPv6 listen addresses are not supported yet");
    return std::nullopt;
  }
  if (colon == std::string_view::npos) {
    problems.push_back("missing port; expected host:port, e.g. 0.0.0.0:8000");
    return std::nullopt;
  }
  std::string_view host = t.substr(0, colon);
  bool ok = true;
  if (host.empty()) {
    problems.push_back("missing host; use 0.0.0.0 for every interface");
    ok = false;
  } else {
    ok = check_host(host, "", problems);
  }
  auto port = port_number(t.substr(colon + 1), 0);
  if (!port) {
    problems.push_back("port must be 0..65535 (0 = ephemeral)");
    ok = false;
  }
  if (!ok) return std::nullopt;
  return HostPort{std::string(host), *port};
}

std::optional<std::vector<std::string>> parse_list(std::string_view text, uint64_t min,
                                                   uint64_t max, Problems& problems,
                                                   std::span<const std::string_view> choices) {
  std::vector<std::string> out;
  if (trim(text).empty()) return out;
  size_t before = problems.size();
  auto items = split_commas(text);
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].empty()) {
      problems.push_back("item " + std::to_string(i + 1) + " is empty");
    } else if (choices.empty()) {
      out.emplace_back(items[i]);
    } else {
      auto it = std::find_if(choices.begin(), choices.end(),
                             [&](std::string_view c) { return iequals(items[i], c); });
      if (it == choices.end()) {
        problems.push_back("item " + std::to_string(i + 1) + ": expected " + alternatives(choices));
      } else {
        out.emplace_back(*it);
      }
    }
  }
  if (items.size() < min || items.size() > max) {
    problems.push_back(count_problem(items.size(), min, max));
  }
  if (problems.size() != before) return std::nullopt;
  return out;
}

std::optional<std::vector<UpstreamUrl>> parse_upstreams(std::string_view text, uint64_t min,
                                                        uint64_t max, Problems& problems) {
  std::vector<UpstreamUrl> out;
  if (trim(text).empty()) return out;
  size_t before = problems.size();
  auto items = split_commas(text);
  if (items.size() < min || items.size() > max) {
    problems.push_back(count_problem(items.size(), min, max));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    std::string prefix = "item " + std::to_string(i + 1) + ": ";
    if (items[i].empty()) {
      problems.push_back(prefix + "empty");
      continue;
    }
    auto url = parse_upstream(items[i], prefix, problems);
    if (!url) continue;
    for (size_t j = 0; j < out.size(); ++j) {
      if (iequals(out[j].host, url->host) && out[j].port == url->port &&
          out[j].base_path == url->base_path) {
        problems.push_back(prefix + "repeats an earlier item");
        break;
      }
    }
    out.push_back(std::move(*url));
  }
  if (problems.size() != before) return std::nullopt;
  return out;
}

std::optional<std::string> path_pattern_problem(std::string_view p) {
  if (p.empty() || p.front() != '/') return "must start with '/'";
  if (p.size() > 256) return "longer than 256 bytes";
  const bool prefix = p.back() == '*';
  const std::string_view path = prefix ? p.substr(0, p.size() - 1) : p;
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("/-._~!$&'()+,;=:@").find(ch) != std::string_view::npos;
    if (!ok) return "may hold only letters, digits, '/' and -._~!$&'()+,;=:@ ('*' only at the end)";
  }
  // Segments between slashes; the last may be a prefix's partial segment.
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view seg = path.substr(start, end - start);
    const bool last = end == path.size();
    if (seg == "." || seg == ".." || (seg.empty() && !last)) return "has an empty, '.' or '..' segment";
    start = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> zmq_endpoint_problem(std::string_view e) {
  if (e == "-") return std::nullopt;
  if (e.size() > 512) return "longer than 512 bytes";
  for (char ch : e) {
    if (static_cast<unsigned char>(ch) <= ' ' || ch == 0x7f) return "has a space or a control character";
  }
  if (e.starts_with("ipc://")) {
    return e.size() > 6 ? std::nullopt : std::optional<std::string>("ipc:// needs a path");
  }
  if (!e.starts_with("tcp://")) return "expected tcp://host:port, ipc://path or -";
  const std::string_view hp = e.substr(6);
  const size_t colon = hp.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return "expected tcp://host:port";
  const std::string_view host = hp.substr(0, colon), port = hp.substr(colon + 1);
  // * alone: each engine's own address (its RJ_UPSTREAM host or DNS address), as vLLM binds it.
  if (host != "*" && host.find('*') != std::string_view::npos) return "a subscriber connects: name the engine's host, or * for the engine's own address";
  if (host.front() == '[' ? host.back() != ']' : host.find(':') != std::string_view::npos) {
    return "an IPv6 host goes in brackets";
  }
  uint32_t p = 0;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || ptr != port.data() + port.size() || p == 0 || p > 65535) return "port must be 1..65535";
  return std::nullopt;
}

std::optional<std::string> companion_endpoint_problem(std::string_view e) {
  if (e == "-") return std::nullopt;
  if (e.size() > 512) return "longer than 512 bytes";
  for (char ch : e) {
    if (static_cast<unsigned char>(ch) <= ' ' || ch == 0x7f) return "has a space or a control character";
  }
  if (e.starts_with("unix:")) {
    const std::string_view path = e.substr(5);
    if (path.empty() || path.front() != '/') return "unix: needs an absolute path";
    if (path.size() >= 108) return "the unix socket path is longer than 107 bytes";
    return std::nullopt;
  }
  if (!e.starts_with("tcp://")) return "expected unix:/path, tcp://host:port or -";
  const std::string_view hp = e.substr(6);
  const size_t colon = hp.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return "expected tcp://host:port";
  const std::string_view host = hp.substr(0, colon), port = hp.substr(colon + 1);
  if (host.find('*') != std::string_view::npos) return "name the companion's host";
  if (host.front() == '[' ? host.back() != ']' || host.size() < 3 : host.find(':') != std::string_view::npos) {
    return "an IPv6 host goes in brackets";
  }
  uint32_t p = 0;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || ptr != port.data() + port.size() || p == 0 || p > 65535) return "port must be 1..65535";
  return std::nullopt;
}

}  // namespace ramjet::config
