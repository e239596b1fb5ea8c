#include "oracle.h"

#include <boost/json.hpp>

namespace ramjet::bench {
namespace json = boost::json;

Result<ResidentAnswer> parse_resident(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return Error{"bad_resident", "resident answer is not a JSON object"};
  const auto& o = v.as_object();
  ResidentAnswer a;
  auto get = [&](std::string_view key, uint64_t& out) {
    const json::value* x = o.if_contains(key);
    if (!x) return false;
    if (x->is_uint64()) out = x->as_uint64();
    else if (x->is_int64() && x->as_int64() >= 0) out = static_cast<uint64_t>(x->as_int64());
    else return false;
    return true;
  };
  if (!get("resident_tokens", a.resident_tokens))
    return Error{"bad_resident", "resident answer lacks resident_tokens"};
  get("prompt_tokens", a.prompt_tokens);
  get("running", a.running);
  get("waiting", a.waiting);
  a.ok = true;
  return a;
}

std::string resident_body(std::string_view messages_json) {
  std::string b = "{\"messages\":";
  b += messages_json;
  b += '}';
  return b;
}

size_t choose_engine(const std::vector<ResidentAnswer>& answers, uint64_t& rr) {
  if (answers.empty()) return 0;
  bool any = false;
  uint64_t best_resident = 0, best_load = UINT64_MAX;
  for (const auto& a : answers) {
    if (!a.ok) continue;
    const uint64_t load = a.running + a.waiting;
    if (!any || a.resident_tokens > best_resident ||
        (a.resident_tokens == best_resident && load < best_load)) {
      best_resident = a.resident_tokens;
      best_load = load;
      any = true;
    }
  }
  if (!any) return static_cast<size_t>(rr++ % answers.size());
  std::vector<size_t> tied;
  for (size_t i = 0; i < answers.size(); ++i) {
    const auto& a = answers[i];
    if (a.ok && a.resident_tokens == best_resident && a.running + a.waiting == best_load)
      tied.push_back(i);
  }
  if (tied.size() == 1) return tied[0];
  return tied[rr++ % tied.size()];
}

}  // namespace ramjet::bench
