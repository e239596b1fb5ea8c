#include "net/http.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include <charconv>
#include <string>
#include <vector>

namespace ramjet::net {

namespace {

// Calls f(token) for every comma-separated token of a Connection value, blanks trimmed.
template <class F>
void for_each_token(std::string_view v, F&& f) {
  size_t pos = 0;
  while (pos <= v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string_view::npos) comma = v.size();
    std::string_view token = v.substr(pos, comma - pos);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty()) f(token);
    pos = comma + 1;
  }
}

bool fixed_hop_by_hop(http::field f) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::proxy_authenticate:
    case http::field::proxy_authorization:
    case http::field::te:
    case http::field::trailer:
    case http::field::transfer_encoding:
    case http::field::upgrade:
    case http::field::content_length:
    case http::field::host:
    case http::field::proxy_connection:
      return true;
    default:
      return false;
  }
}

}  // namespace

void strip_hop_by_hop(http::fields& fields) {
  std::vector<std::string> named;
  for (auto it = fields.find(http::field::connection); it != fields.end() && it->name() == http::field::connection; ++it) {
    for_each_token(it->value(), [&](std::string_view token) { named.emplace_back(token); });
  }
  for (const auto& n : named) fields.erase(n);
  for (auto f : {http::field::connection, http::field::keep_alive, http::field::proxy_authenticate,
                 http::field::proxy_authorization, http::field::te, http::field::trailer,
                 http::field::transfer_encoding, http::field::upgrade, http::field::content_length,
                 http::field::host}) {
    fields.erase(f);
  }
  fields.erase("Trailers");
  fields.erase("Proxy-Connection");
}

void HeadBuffer::grow(size_t n) {
  size_t cap = cap_ < 256 ? 256 : cap_ * 2;
  while (cap - size_ < n) cap *= 2;
  std::unique_ptr<char[]> bigger(new char[cap]);
  if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
  data_ = std::move(bigger);
  cap_ = cap;
}

void HeadFields::add(http::field id, std::string_view name, std::string_view value) {
  Entry e{id, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(name.size()), 0,
          static_cast<uint32_t>(value.size())};
  arena_.append(name);
  e.value_off = static_cast<uint32_t>(arena_.size());
  arena_.append(value);
  fields_.push_back(e);
}

std::string_view HeadFields::get(http::field id) const {
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (fields_[i].id == id) return value(i);
  }
  return {};
}

std::optional<std::string_view> HeadFields::find(std::string_view name) const {
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (boost::beast::iequals(this->name(i), name)) return value(i);
  }
  return std::nullopt;
}

HopByHop::HopByHop(const HeadFields& fields, std::string_view also) : also_(also) {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields.id(i) != http::field::connection) continue;
    for_each_token(fields.value(i), [&](std::string_view token) {
      if (count_ < named_.size()) {
        named_[count_++] = token;
      } else {
        more_.push_back(token);
      }
    });
  }
}

bool HopByHop::drop(const HeadFields& fields, size_t i) const {
  const http::field id = fields.id(i);
  if (fixed_hop_by_hop(id)) return true;
  const std::string_view name = fields.name(i);
  if (id == http::field::unknown) {
    if (boost::beast::iequals(name, "Trailers")) return true;
    if (!also_.empty() && boost::beast::iequals(name, also_)) return true;
  }
  for (size_t k = 0; k < count_; ++k) {
    if (boost::beast::iequals(name, named_[k])) return true;
  }
  for (std::string_view n : more_) {
    if (boost::beast::iequals(name, n)) return true;
  }
  return false;
}

void RequestParser::on_request_impl(http::verb method, beast_sv method_str, beast_sv target,
                                    int version, boost::system::error_code&) {
  head_.method = method;
  head_.method_string.assign(method_str);
  head_.target.assign(target);
  head_.version = static_cast<unsigned>(version);
}

void ResponseParser::on_response_impl(int code, beast_sv reason, int version,
                                      boost::system::error_code&) {
  head_.status = static_cast<unsigned>(code);
  head_.reason.assign(reason);
  head_.version = static_cast<unsigned>(version);
}

size_t ResponseParser::piece(std::string_view s, boost::system::error_code& ec) {
  if (s.empty()) return 0;
  if (count_ == pieces_.size()) {
    ec = http::error::need_buffer;
    return 0;
  }
  pieces_[count_++] = s;
  bytes_ += s.size();
  return s.size();
}

void append_decimal(HeadBuffer& out, uint64_t v) {
  char* p = out.prepare(20);
  out.advance(static_cast<size_t>(std::to_chars(p, p + 20, v).ptr - p));
}

void append_status_line(HeadBuffer& out, unsigned version, unsigned code, std::string_view fallback) {
  out.append(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ");
  append_decimal(out, code);
  out.push_back(' ');
  const http::status s = http::int_to_status(code);
  if (s != http::status::unknown) {
    out.append(http::obsolete_reason(s));
  } else {
    out.append(fallback);
  }
  out.append("\r\n");
}

void append_connection(HeadBuffer& out, unsigned version, bool keep_alive) {
  if (version >= 11) {
    if (!keep_alive) out.append("Connection: close\r\n");
  } else if (keep_alive) {
    out.append("Connection: keep-alive\r\n");
  }
}

}  // namespace ramjet::net
