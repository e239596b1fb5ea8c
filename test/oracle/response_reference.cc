#include "oracle/response_reference.h"

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include "net/http.h"
#include "oracle/cut_feed.h"

namespace ramjet::oracle {

namespace {

namespace http = boost::beast::http;
using beast_sv = boost::beast::string_view;

// Beast reading the whole message, as ResponseParser did (head fields kept, body appended).
class BeastResponse final : public http::basic_parser<false> {
 public:
  unsigned status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
  bool trailers = false;

 private:
  void on_request_impl(http::verb, beast_sv, beast_sv, int, boost::system::error_code&) override {}
  void on_response_impl(int code, beast_sv r, int, boost::system::error_code&) override {
    status = static_cast<unsigned>(code);
    reason.assign(r.data(), r.size());
  }
  void on_field_impl(http::field, beast_sv name, beast_sv value, boost::system::error_code&) override {
    trailers = trailers || header_done_;
    if (!header_done_) fields.emplace_back(std::string(name.data(), name.size()), std::string(value.data(), value.size()));
  }
  void on_header_impl(boost::system::error_code&) override { header_done_ = true; }
  bool header_done_ = false;
  void on_body_init_impl(const boost::optional<std::uint64_t>&, boost::system::error_code&) override {}
  size_t on_body_impl(beast_sv s, boost::system::error_code&) override {
    body.append(s.data(), s.size());
    return s.size();
  }
  void on_chunk_header_impl(std::uint64_t, beast_sv, boost::system::error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, beast_sv s, boost::system::error_code&) override {
    body.append(s.data(), s.size());
    return s.size();
  }
  void on_finish_impl(boost::system::error_code&) override {}
};

template <typename Parser, typename Drain>
ResponseRead drive(Parser& p, std::string_view bytes, const std::vector<size_t>& cuts, Drain drain) {
  ResponseRead r;
  std::string buffer;
  CutFeed feed(bytes, cuts);
  boost::system::error_code ec;
  for (;;) {
    // Parse what is buffered until the parser needs more (the relay's loop).
    while (!buffer.empty() && !p.is_done()) {
      const size_t used = p.put(boost::asio::const_buffer(buffer.data(), buffer.size()), ec);
      drain(p);
      buffer.erase(0, used);
      r.used += used;
      const bool more = ec == http::error::need_more;
      if (more || ec == http::error::need_buffer) {  // need_buffer: the pieces were drained, go on
        ec = {};
        if (more) break;
        continue;
      }
      if (ec) break;
      if (used == 0) break;
    }
    if (ec || p.is_done()) break;
    if (feed.exhausted()) {  // the connection ends
      end_of_connection(p, ec);
      break;
    }
    feed.append_next(buffer);
  }
  r.ok = !ec && p.is_done();
  r.header_done = p.is_header_done();
  r.keep_alive = r.ok && p.keep_alive();
  if (ec) r.error = ec.message();
  return r;
}

}  // namespace

ResponseRead read_response(bool ours, std::string_view bytes, const std::vector<size_t>& cuts, int64_t body_limit,
                           bool head_request) {
  const boost::optional<std::uint64_t> limit =
      body_limit < 0 ? boost::none : boost::optional<std::uint64_t>(static_cast<std::uint64_t>(body_limit));
  if (ours) {
    net::ResponseHead head;
    net::ResponseParser p(head);
    p.body_limit(limit);
    p.header_limit(256 * 1024);
    if (head_request) p.skip(true);
    p.eager(true);
    std::string body;
    ResponseRead r = drive(p, bytes, cuts, [&body](net::ResponseParser& q) {
      for (size_t i = 0; i < q.piece_count(); ++i) body.append(q.piece(i));
      q.clear_pieces();
    });
    r.status = head.status;
    if (r.header_done) {
      r.reason = head.reason;
      r.fields = field_list(head.fields);
    }
    r.body = std::move(body);
    r.trailers = p.had_trailers();
    return r;
  }
  BeastResponse p;
  p.body_limit(limit);
  p.header_limit(256 * 1024);
  if (head_request) p.skip(true);
  p.eager(true);
  // Beast reads the bytes as they are, all at once: fed in small pieces, its final-chunk step
  // asserts (basic_parser.ipp: BOOST_ASSERT(n >= 5) with fewer bytes buffered), and a reading
  // must not depend on how the bytes arrived anyway.
  (void)cuts;
  ResponseRead r = drive(p, bytes, {}, [](BeastResponse&) {});
  r.status = p.status;
  if (r.header_done) {
    r.reason = std::move(p.reason);
    r.fields = std::move(p.fields);
  }
  r.body = std::move(p.body);
  r.trailers = p.trailers;
  return r;
}

}  // namespace ramjet::oracle
