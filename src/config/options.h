// The options table behind config.h: one row per RJ_* variable with its --flag, type, default,
// bounds, one-line doc and the Config field it sets, plus the value parsers the rows use.
// Internal to src/config and its tests; the rest of the program reads the typed Config.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.h"

namespace ramjet::config {

enum class Type { kString, kUint, kDecimal, kBool, kEnum, kList, kHostPort, kUrlList };

// "string", "uint", "decimal", "bool", "enum", "list", "host:port", "url-list".
std::string_view type_name(Type t);
// One line on how a value of this type is written (the value-syntax section of the docs).
std::string_view type_syntax(Type t);

struct HostPortField {
  std::string Config::*host = nullptr;
  uint16_t Config::*port = nullptr;
};

// Where a row's parsed value lands in Config: the row's setter (describe() reads it back).
// The alternative must match the row's Type (string/enum: string; uint: uint32_t or uint64_t;
// decimal: double; bool: bool; list: vector<string>; host:port: HostPortField; url-list:
// vector<UpstreamUrl>); the table test checks every row.
using Field =
    std::variant<std::monostate, std::string Config::*, uint32_t Config::*, uint64_t Config::*,
                 double Config::*, bool Config::*, std::vector<std::string> Config::*,
                 HostPortField, std::vector<UpstreamUrl> Config::*>;

struct Option {
  std::string_view env{};   // RJ_UPSTREAM_TOKEN
  std::string_view flag{};  // --upstream-token: env without RJ_, lowercase, '_' -> '-'
  Type type = Type::kString;
  std::string_view default_text{};  // written as a user would write it; "" = none
  uint64_t min = 0;                 // uint: value bounds; list/url-list: item count
  uint64_t max = 0;
  double dmin = 0;  // decimal: value bounds (finite, 0 <= dmin <= dmax)
  double dmax = 0;
  // enum: every accepted value; list: when set, every item must be one of these
  std::span<const std::string_view> choices{};
  bool bytes = false;      // docs show numbers as KiB/MiB/GiB
  bool secret = false;     // never printed: describe() shows <redacted>, errors omit the value
  bool hosts = false;      // list items name hosts: describe() shows their count only
  bool required = false;   // must be non-empty unless the action is --help / --help-markdown
  std::string_view doc{};  // one line
  Field field{};
};

// Every option, in documentation order.
std::span<const Option> options();
const Option* find_by_env(std::string_view env);
const Option* find_by_flag(std::string_view flag);  // "--threads"

// "64 MiB" for whole KiB/MiB/GiB when `bytes`, "2^53" for large powers of two, else decimal.
std::string format_number(uint64_t v, bool bytes);
// The shortest plain decimal that reads back as `v`: "4", "2.5", "0.125" (never an exponent).
std::string format_decimal(double v);

// Docs rendering of a row: "1 KiB..1 GiB", "0..256", "0..1000" (decimal), "1..256 items",
// "0..256 items, each mtp or standard", "trace, debug, ...".
std::string bounds_text(const Option& o);
// "(required)", "(none)", "67108864 (64 MiB)"; with `markdown` the value is in backticks.
std::string default_display(const Option& o, bool markdown);

// Value parsers. Each appends problems to `problems` — phrases without the variable name that
// never quote the input (the caller decides whether the value may be echoed) — and returns
// nullopt when the value is unusable. Surrounding ASCII whitespace is ignored.
using Problems = std::vector<std::string>;

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

std::optional<uint64_t> parse_uint(std::string_view text, uint64_t min, uint64_t max, bool bytes,
                                   Problems& problems);
// Strict non-negative decimal: digits, optionally '.' and more digits ("4", "2.5", "0.125").
// Refused: a sign, an exponent, hex, inf/nan, and a bare point on either side ("4.", ".5").
std::optional<double> parse_decimal(std::string_view text, double min, double max,
                                    Problems& problems);
std::optional<bool> parse_bool(std::string_view text, Problems& problems);
// Case-insensitive; returns the canonical spelling from `choices`.
std::optional<std::string> parse_enum(std::string_view text,
                                      std::span<const std::string_view> choices,
                                      Problems& problems);
// A port: digits only, min..65535.
std::optional<uint16_t> port_number(std::string_view text, uint16_t min);
// host:port with an IPv4 literal, "localhost" or a hostname; port 0..65535 (0 = ephemeral).
std::optional<HostPort> parse_host_port(std::string_view text, Problems& problems);
// Comma list; items trimmed, empty items rejected; a blank text is an empty list. With
// `choices`, every item must be one of them (case-insensitive) and is stored in the canonical
// spelling; a bad item is named by its 1-based position ("item 3: expected mtp or standard").
std::optional<std::vector<std::string>> parse_list(std::string_view text, uint64_t min,
                                                   uint64_t max, Problems& problems,
                                                   std::span<const std::string_view> choices = {});
// An RJ_PASSTHROUGH_PATHS item: an absolute path ("/a/b") or a prefix ending in '*' ("/a/*"),
// of RFC 3986 path characters without percent-encoding, empty, "." or ".." segments (so
// what matches is what the engine routes). Returns a problem phrase, or nullopt when valid.
std::optional<std::string> path_pattern_problem(std::string_view pattern);
// An RJ_KV_EVENT_*_ENDPOINTS item: "-" (none), tcp://host:port (port 1..65535, host a name, an
// IPv4 address or a bracketed IPv6 one) or ipc://path. The problem phrase never quotes the item.
std::optional<std::string> zmq_endpoint_problem(std::string_view endpoint);
// An RJ_COMPANION_ENDPOINTS item: "-" (none), unix:/absolute/path (under 108 bytes) or
// tcp://host:port (port 1..65535, an IPv6 host in brackets). The phrase never quotes the item.
std::optional<std::string> companion_endpoint_problem(std::string_view endpoint);

// Comma list of http://host[:port][/base-path]; items are named by 1-based ordinal, never by
// content (hosts stay out of logs). A blank text is an empty list.
std::optional<std::vector<UpstreamUrl>> parse_upstreams(std::string_view text, uint64_t min,
                                                        uint64_t max, Problems& problems);

}  // namespace ramjet::config
