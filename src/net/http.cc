#include "net/http.h"

#include <string>
#include <vector>

namespace ramjet::net {

namespace http = boost::beast::http;

void strip_hop_by_hop(http::fields& fields) {
  std::vector<std::string> named;
  for (auto it = fields.find(http::field::connection); it != fields.end() && it->name() == http::field::connection; ++it) {
    std::string_view v = it->value();
    size_t pos = 0;
    while (pos <= v.size()) {
      size_t comma = v.find(',', pos);
      if (comma == std::string_view::npos) comma = v.size();
      std::string_view token = v.substr(pos, comma - pos);
      while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
      while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
      if (!token.empty()) named.emplace_back(token);
      pos = comma + 1;
    }
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

}  // namespace ramjet::net
