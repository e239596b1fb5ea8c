// loadgen/sse: what a streamed (or plain JSON) chat completion says, measured from its bytes.
// SseSplitter cuts a text/event-stream body into `data` payloads; scan_chunk reads one OpenAI
// chunk without a full JSON parse (the hot path at tens of thousands of events per second);
// StreamAccount turns timed events into TTFT, TPOT and token counts. Pure: times are passed in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ramjet::bench {

class SseSplitter {
 public:
  explicit SseSplitter(size_t max_event_bytes = 16 << 20) : max_event_bytes_(max_event_bytes) {}
  // Calls on_event(std::string_view data) for every complete event that carries data. Returns
  // false when an event grew past the limit (the stream is then unusable).
  template <typename OnEvent>
  bool feed(std::string_view bytes, OnEvent&& on_event);
  // End of stream: an event not terminated by a blank line is dispatched too.
  template <typename OnEvent>
  void finish(OnEvent&& on_event);

 private:
  template <typename OnEvent>
  void line(std::string_view l, OnEvent& on_event);

  size_t max_event_bytes_;
  std::string partial_;  // an incomplete line carried over from the previous feed
  std::string data_;     // the data of the event being assembled
  bool has_data_ = false;
};

// Token usage as reported by the server; -1 = not reported.
struct Usage {
  int64_t prompt_tokens = -1;
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;
};

struct ChunkInfo {
  bool done = false;          // the "[DONE]" sentinel
  bool error = false;         // an error object instead of a completion chunk
  bool has_token = false;     // non-empty delta content (or reasoning content)
  std::string_view content;   // escaped body of delta.content ("" when absent or null)
  bool finished = false;      // finish_reason is set
  bool has_usage = false;
  Usage usage;
};

// Reads one chunk's JSON by key search. Keys are matched as `"key"` followed by ':' so they cannot
// match inside string values (a quote inside a JSON string is always escaped).
ChunkInfo scan_chunk(std::string_view data);

// Extracts the usage object that starts at the value position of a "usage" key. Exposed for tests.
bool parse_usage_object(std::string_view json_from_value, Usage& out);

// Outcome of one response, streamed or not. Times are seconds since the request was sent.
class StreamAccount {
 public:
  explicit StreamAccount(bool collect_content = false) : collect_(collect_content) {}

  void on_event(std::string_view data, double t);
  // A non-streamed chat.completion body (parsed with Boost.JSON: once per request).
  void on_json_body(std::string_view body, double t);

  bool done() const { return done_; }          // saw [DONE] (streaming) or a full JSON body
  bool error() const { return error_; }        // the server reported an error in-band
  bool finished() const { return finished_; }  // a finish_reason arrived
  uint32_t content_chunks() const { return content_chunks_; }
  double first_token_time() const { return first_token_t_; }  // -1 when no token arrived
  double last_token_time() const { return last_token_t_; }
  const Usage& usage() const { return usage_; }
  const std::string& content() const { return content_; }  // only with collect_content

  // Output tokens: usage.completion_tokens, else the number of chunks that carried content.
  uint32_t output_tokens() const;
  // (last token time − first token time) / (output tokens − 1); -1 when fewer than 2 tokens.
  double tpot() const;

 private:
  bool collect_;
  bool done_ = false;
  bool error_ = false;
  bool finished_ = false;
  uint32_t content_chunks_ = 0;
  double first_token_t_ = -1;
  double last_token_t_ = -1;
  Usage usage_;
  std::string content_;
};

template <typename OnEvent>
void SseSplitter::line(std::string_view l, OnEvent& on_event) {
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  if (l.empty()) {
    if (has_data_) {
      on_event(std::string_view(data_));
      data_.clear();
      has_data_ = false;
    }
    return;
  }
  if (l.front() == ':') return;  // comment / keep-alive
  size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  if (field != "data") return;  // event, id, retry: not used by OpenAI streams
  std::string_view value = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

template <typename OnEvent>
bool SseSplitter::feed(std::string_view bytes, OnEvent&& on_event) {
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      return partial_.size() + data_.size() <= max_event_bytes_;
    }
    if (partial_.empty()) {
      line(bytes.substr(0, nl), on_event);
    } else {
      partial_.append(bytes.substr(0, nl));
      std::string l = std::move(partial_);
      partial_.clear();
      line(l, on_event);
    }
    bytes.remove_prefix(nl + 1);
    if (data_.size() > max_event_bytes_) return false;
  }
  return true;
}

template <typename OnEvent>
void SseSplitter::finish(OnEvent&& on_event) {
  if (!partial_.empty()) {
    std::string l = std::move(partial_);
    partial_.clear();
    line(l, on_event);
  }
  line(std::string_view{}, on_event);
}

}  // namespace ramjet::bench
