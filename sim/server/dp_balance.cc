// sim/server/dp_balance (see dp_balance.h).
#include "sim/server/dp_balance.h"

#include <algorithm>
#include <limits>

namespace ramjet::sim {

std::optional<DpRankHeader> parse_dp_rank_header(std::string_view v) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!v.empty() && space(v.front())) v.remove_prefix(1);
  while (!v.empty() && space(v.back())) v.remove_suffix(1);
  bool negative = false;
  if (!v.empty() && (v.front() == '+' || v.front() == '-')) {
    negative = v.front() == '-';
    v.remove_prefix(1);
  }
  std::string digits;
  for (size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (c >= '0' && c <= '9') {
      digits += c;
    } else if (c == '_' && i > 0 && i + 1 < v.size() && v[i - 1] != '_' && v[i + 1] >= '0' && v[i + 1] <= '9') {
      continue;  // int("1_0") == 10
    } else {
      return std::nullopt;
    }
  }
  if (digits.empty()) return std::nullopt;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  DpRankHeader h;
  h.text = (negative && digits != "0" ? "-" : "") + digits;
  if (digits.size() <= 18) {
    const int64_t x = std::stoll(digits);
    h.value = negative ? -x : x;
  }
  return h;
}

std::string dp_rank_out_of_range(const DpRankHeader& h, size_t ranks) {
  return "data_parallel_rank " + h.text + " is out of range [0, " + std::to_string(ranks) + ").";
}

DpCoordinator::DpCoordinator(size_t ranks, double publish_interval_s, double idle_interval_s)
    : counts_(ranks), last_sent_(ranks, {0, 0}), interval_s_(publish_interval_s), idle_interval_s_(idle_interval_s) {}

bool DpCoordinator::engine_counts(size_t rank, uint32_t running, uint32_t waiting, double kv_cache_usage) {
  // The engine's own filter (its last_counts): an unchanged (running, waiting) is not sent.
  const std::pair<uint32_t, uint32_t> now{running, waiting};
  if (last_sent_[rank] == now) return false;
  last_sent_[rank] = now;
  counts_[rank] = RankLoad{static_cast<double>(waiting), running, kv_cache_usage};
  changed_ = true;
  return true;
}

double DpCoordinator::next_publish_s() const { return last_publish_s_ + (changed_ ? interval_s_ : idle_interval_s_); }

std::optional<std::vector<RankLoad>> DpCoordinator::maybe_publish(double now_s) {
  if (now_s < next_publish_s()) return std::nullopt;
  last_publish_s_ = now_s;
  changed_ = false;
  return counts_;
}

DpClient::DpClient(size_t ranks, size_t client_count, size_t client_index)
    : loads_(ranks), in_flight_(ranks), client_count_(client_count), start_(ranks * client_index / client_count) {}

void DpClient::update(const std::vector<RankLoad>& snapshot) {
  if (snapshot.size() == loads_.size()) loads_ = snapshot;
}

size_t DpClient::pick() {
  const size_t n = loads_.size();
  double min_score = static_cast<double>(std::numeric_limits<int64_t>::max());  // sys.maxsize
  size_t chosen = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t idx = (start_ + i) % n;
    const RankLoad& l = loads_[idx];
    double score = std::max(static_cast<double>(client_count_ * in_flight_[idx]), l.waiting + l.running);
    if (l.waiting != 0) score += l.waiting * 6.0 * std::max(0.0, l.kv_cache_usage - 0.5);
    if (score < min_score) {
      min_score = score;
      chosen = idx;
    }
  }
  loads_[chosen].waiting += static_cast<double>(client_count_);
  start_ = (start_ + 1) % n;
  ++in_flight_[chosen];
  return chosen;
}

void DpClient::pinned(size_t rank) { ++in_flight_[rank]; }

void DpClient::finished(size_t rank) {
  if (in_flight_[rank] > 0) --in_flight_[rank];
}

}  // namespace ramjet::sim
