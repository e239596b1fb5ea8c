#include "workload.h"

#include <cmath>

#include "text.h"

namespace ramjet::bench {
namespace {

// Stream tags, so that the texts of different purposes never share a seed.
constexpr uint64_t kTagApp = 0xA11, kTagUser = 0x05E5, kTagUnique = 0x0417, kTagBlock = 0xB10C,
                   kTagTail = 0x7A11, kTagMaxTokens = 0x3A7;

std::string kib(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace

uint32_t MaxTokens::pick(uint64_t key) const {
  if (choices_.empty()) return 0;
  if (choices_.size() == 1) return choices_[0];
  return choices_[derive(seed_, kTagMaxTokens, key) % choices_.size()];
}

std::string MaxTokens::describe() const {
  if (choices_.empty()) return "server";
  std::string s;
  for (uint32_t c : choices_) {
    if (!s.empty()) s += ',';
    s += std::to_string(c);
  }
  return s;
}

std::string chat_body(std::string_view model_json, const WorkRequest& req, bool stream,
                      bool ignore_eos) {
  std::string b;
  b.reserve(req.messages.size() + model_json.size() + 160);
  b += "{\"model\":";
  b += model_json;
  b += ",\"messages\":";
  b += req.messages;
  if (req.max_tokens) {
    b += ",\"max_tokens\":";
    b += std::to_string(req.max_tokens);
  }
  if (ignore_eos) b += ",\"ignore_eos\":true";
  if (stream) b += ",\"stream\":true,\"stream_options\":{\"include_usage\":true}";
  b += '}';
  return b;
}

std::string single_user_messages(std::string_view content) {
  std::string m = "[{\"role\":\"user\",\"content\":";
  append_json_string(m, content);
  m += "}]";
  return m;
}

// ---- shared-prefix ----

SharedPrefixWorkload::SharedPrefixWorkload(SharedPrefixParams p) : p_(std::move(p)) {
  if (p_.apps == 0) p_.apps = 1;
  if (p_.turns == 0) p_.turns = 1;
  const size_t bytes = static_cast<size_t>(p_.prefix_kib * 1024);
  for (uint32_t a = 0; a < p_.apps; ++a) {
    std::string text = "You are assistant number " + std::to_string(a) + ".";
    append_text_bytes(text, derive(p_.seed, kTagApp, a), bytes > text.size() ? bytes - text.size() : 0);
    std::string escaped;
    append_json_string(escaped, text);
    system_prompts_.push_back(std::move(escaped));
  }
  begin_step(0);
}

std::string SharedPrefixWorkload::describe() const {
  return "shared-prefix apps=" + std::to_string(p_.apps) + " prefix_kib=" + kib(p_.prefix_kib) +
         " sessions=" + (p_.sessions ? std::to_string(p_.sessions) : std::string("concurrency")) +
         " turns=" + std::to_string(p_.turns) + " max_tokens=" + p_.max_tokens.describe();
}

std::string SharedPrefixWorkload::user_message(uint64_t session, uint32_t turn) const {
  std::string text = "Turn " + std::to_string(turn + 1) + ":";
  append_words(text, derive(p_.seed, kTagUser ^ (session << 16), turn), p_.user_words);
  return text;
}

uint64_t SharedPrefixWorkload::new_session_locked() {
  const uint64_t id = next_id_++;
  Session s;
  s.app = static_cast<uint32_t>(id % p_.apps);
  s.messages.reserve(system_prompts_[s.app].size() + 4096);
  s.messages = "[{\"role\":\"system\",\"content\":";
  s.messages += system_prompts_[s.app];
  s.messages += '}';
  sessions_.emplace(id, std::move(s));
  return id;
}

void SharedPrefixWorkload::begin_step(size_t sessions) {
  std::lock_guard lock(mu_);
  sessions_.clear();
  idle_.clear();
  const size_t n = p_.sessions ? p_.sessions : sessions;
  for (size_t i = 0; i < n; ++i) idle_.push_back(new_session_locked());
}

std::optional<WorkRequest> SharedPrefixWorkload::next() {
  std::lock_guard lock(mu_);
  uint64_t id;
  if (idle_.empty()) {
    id = new_session_locked();  // open loop, or more requests in flight than sessions
  } else {
    id = idle_.front();
    idle_.pop_front();
  }
  Session& s = sessions_.at(id);
  s.messages += ",{\"role\":\"user\",\"content\":";
  append_json_string(s.messages, user_message(id, s.turn));
  s.messages += '}';
  WorkRequest r;
  r.messages.reserve(s.messages.size() + 1);
  r.messages = s.messages;
  r.messages += ']';
  r.max_tokens = p_.max_tokens.pick((id << 20) ^ s.turn);
  r.session = id;
  r.turn = s.turn;
  r.wants_answer = s.turn + 1 < p_.turns;
  return r;
}

void SharedPrefixWorkload::complete(const WorkRequest& req, bool ok, std::string_view answer) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(req.session);
  if (it == sessions_.end()) return;  // from a previous step
  Session& s = it->second;
  if (ok && s.turn + 1 < p_.turns) {
    s.messages += ",{\"role\":\"assistant\",\"content\":";
    append_json_string(s.messages, answer);
    s.messages += '}';
    ++s.turn;
    idle_.push_back(req.session);
    return;
  }
  sessions_.erase(it);  // finished (or failed): a fresh conversation takes its place
  idle_.push_back(new_session_locked());
}

size_t SharedPrefixWorkload::live_sessions() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

// ---- unique ----

std::string UniqueWorkload::describe() const {
  return "unique prompt_kib=" + kib(kib_) +
         " max_tokens=" + max_tokens_.describe();
}

WorkRequest UniqueWorkload::at(uint64_t index) const {
  std::string text = "Request " + std::to_string(index) + ":";
  append_text_bytes(text, derive(seed_, kTagUnique, index), bytes_ > text.size() ? bytes_ - text.size() : 0);
  WorkRequest r;
  r.messages = single_user_messages(text);
  r.max_tokens = max_tokens_.pick(index);
  return r;
}

std::optional<WorkRequest> UniqueWorkload::next() {
  return at(counter_.fetch_add(1, std::memory_order_relaxed));
}

// ---- trace ----

TraceWorkload::TraceWorkload(std::vector<TraceEntry> entries, TraceParams p, std::string name)
    : entries_(std::move(entries)), p_(std::move(p)), name_(std::move(name)) {
  if (p_.block_tokens == 0) p_.block_tokens = 1;
}

std::string TraceWorkload::describe() const {
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", p_.time_scale);
  return "trace " + name_ + " (" + std::to_string(entries_.size()) + " requests) block_tokens=" +
         std::to_string(p_.block_tokens) + " time_scale=" + scale +
         (p_.override_max_tokens ? " max_tokens=" + p_.max_tokens.describe() : "");
}

std::string TraceWorkload::prompt_text(size_t i) const {
  const TraceEntry& e = entries_[i];
  std::string text;
  text.reserve(static_cast<size_t>(e.input_length) * 4 + 8);
  uint64_t left = e.input_length;
  for (uint64_t id : e.hash_ids) {
    if (left == 0) break;
    const uint64_t n = left < p_.block_tokens ? left : p_.block_tokens;
    append_words(text, derive(p_.seed, kTagBlock, id), n);  // prefix-stable: a cut block is a prefix
    left -= n;
  }
  if (left > 0) append_words(text, derive(p_.seed, kTagTail, i), left);
  return text;
}

WorkRequest TraceWorkload::at(size_t i) const {
  WorkRequest r;
  r.messages = single_user_messages(prompt_text(i));
  const TraceEntry& e = entries_[i];
  r.max_tokens = p_.override_max_tokens ? p_.max_tokens.pick(i) : (e.output_length ? e.output_length : 1);
  r.arrival_s = (e.timestamp_ms - entries_.front().timestamp_ms) / 1000.0 * p_.time_scale;
  return r;
}

std::optional<WorkRequest> TraceWorkload::next() {
  size_t i = cursor_.fetch_add(1, std::memory_order_relaxed);
  if (i >= entries_.size()) return std::nullopt;
  return at(i);
}

}  // namespace ramjet::bench
