// sim/server/sglang_dp (see sglang_dp.h).
#include "sim/server/sglang_dp.h"

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

namespace ramjet::sim {
namespace json = boost::json;

namespace {

// One body field as pydantic's Optional[int] takes it here: absent or null is none; an integer is
// the rank; anything else is refused (the sim does not model pydantic's lax coercions).
Result<std::optional<DpRankHeader>, std::string> body_rank(const json::object& body, std::string_view key) {
  const json::value* v = body.if_contains(key);
  if (v == nullptr || v->is_null()) return std::optional<DpRankHeader>();
  if (v->is_int64()) return std::optional<DpRankHeader>(DpRankHeader{std::to_string(v->as_int64()), v->as_int64()});
  if (v->is_uint64()) return std::optional<DpRankHeader>(DpRankHeader{std::to_string(v->as_uint64()), std::nullopt});
  return std::string(key) + ": Input should be a valid integer";
}

}  // namespace

Result<std::optional<DpRankHeader>, std::string> sglang_requested_rank(const json::object& body,
                                                                       std::optional<std::string_view> header,
                                                                       SglangRankSources reads) {
  std::optional<DpRankHeader> rank;
  if (reads.body) {
    auto routed = body_rank(body, "routed_dp_rank");
    if (!routed) return routed.error();
    auto deprecated = body_rank(body, "data_parallel_rank");
    if (!deprecated) return deprecated.error();
    rank = routed.value() ? routed.value() : deprecated.value();
  }
  if (reads.header && header) {
    const std::optional<DpRankHeader> h = parse_dp_rank_header(*header);
    if (!h) {
      return "Invalid X-Data-Parallel-Rank header: must be an integer, got '" + std::string(*header) + "'";
    }
    rank = h;
  }
  return rank;
}

Result<std::optional<size_t>, std::string> sglang_rank_check(const std::optional<DpRankHeader>& rank, size_t dp_size) {
  if (!rank) return std::optional<size_t>();
  const std::optional<int64_t>& v = rank->value;
  if (dp_size <= 1 && v == 0) return std::optional<size_t>();  // "is ignored because dp_size=1"
  if (!v || *v < 0 || static_cast<uint64_t>(*v) >= dp_size) {
    return "routed_dp_rank=" + rank->text + " out of range [0, " + std::to_string(dp_size) + ")";
  }
  return std::optional<size_t>(static_cast<size_t>(*v));
}

std::string sglang_error(std::string_view message, std::string_view type, unsigned code) {
  return json::serialize(json::object{{"object", "error"},
                                      {"message", message},
                                      {"type", type},
                                      {"param", nullptr},
                                      {"code", code}});
}

}  // namespace ramjet::sim
