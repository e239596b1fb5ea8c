// net/http: small HTTP helpers shared by the proxy, the probes and the simulator:
// hop-by-hop header filtering and address parsing. Boost.Beast types only.
#pragma once

#include <boost/beast/http/fields.hpp>

#include <string_view>

namespace ramjet::net {

// Removes hop-by-hop headers (RFC 9110 §7.6.1: Connection and every header it names,
// Keep-Alive, Proxy-Authenticate, Proxy-Authorization, TE, Trailer(s), Transfer-Encoding,
// Upgrade), plus Content-Length and Host, which the proxy sets itself.
void strip_hop_by_hop(boost::beast::http::fields& fields);

}  // namespace ramjet::net
