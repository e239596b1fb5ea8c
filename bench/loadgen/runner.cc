#include "runner.h"

#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "oracle.h"
#include "sse.h"
#include "text.h"

namespace ramjet::bench {
namespace {

namespace asio = boost::asio;
constexpr auto kTok = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxJsonBody = 64 << 20;

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
Clock::duration dur(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// One io_context per thread; the caller's thread runs context 0. (ramjet's net::IoPool does the
// same, but its library drags in the proxy's configuration module, which the bench has no use for.)
class IoThreads {
 public:
  explicit IoThreads(size_t n) {
    for (size_t i = 0; i < std::max<size_t>(n, 1); ++i) {
      contexts_.push_back(std::make_unique<asio::io_context>(1));
      guards_.push_back(asio::make_work_guard(*contexts_.back()));
    }
  }
  size_t size() const { return contexts_.size(); }
  asio::io_context& at(size_t i) { return *contexts_[i]; }
  void run() {
    std::vector<std::thread> threads;
    for (size_t i = 1; i < contexts_.size(); ++i) threads.emplace_back([this, i] { contexts_[i]->run(); });
    contexts_[0]->run();
    for (auto& t : threads) t.join();
  }
  void stop() {
    guards_.clear();
    for (auto& c : contexts_) c->stop();
  }
  // Destroys pending coroutine frames; call after run() returned and idle sockets were closed.
  void destroy() { contexts_.clear(); }

 private:
  std::vector<std::unique_ptr<asio::io_context>> contexts_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards_;
};

// One ladder step, shared read-mostly by every thread while it runs.
struct Step {
  double x = 0;
  size_t index = 0;
  Clock::time_point start;
  Clock::time_point issue_end = Clock::time_point::max();
  uint64_t quota = 0;  // 0: no request limit
  std::atomic<uint64_t> issued{0};
  std::atomic<int64_t> active{0};  // workers, generators and in-flight open-loop requests
  std::atomic<int64_t> inflight{0};

  bool take_ticket() { return quota == 0 || issued.fetch_add(1, std::memory_order_relaxed) < quota; }
};

struct ThreadState {
  ThreadState(asio::io_context& c, std::vector<Target> targets, std::chrono::milliseconds ct)
      : ctx(c), client(c, std::move(targets), ct) {}
  asio::io_context& ctx;
  Client client;
  std::vector<Sample> samples;  // written by this thread only, read by the controller between steps
  uint64_t rr = 0;              // oracle tie-break
  std::atomic<uint64_t> ok{0}, errors{0}, tokens{0};  // progress line
};

// Collects a small whole body (models list, oracle answers, error bodies).
class CollectSink final : public BodySink {
 public:
  void on_head(const ResponseParser&) override {}
  void on_body(std::string_view b, Clock::time_point) override {
    if (body.size() + b.size() <= (1 << 20)) body.append(b);
  }
  std::string body;
};

// Reads a chat completion, streamed or not, into a StreamAccount.
class ChatSink final : public BodySink {
 public:
  ChatSink(bool collect, Clock::time_point base) : account(collect), base_(base) {}
  void on_head(const ResponseParser& p) override {
    status = p.status();
    sse = status == 200 && p.event_stream();
  }
  void on_body(std::string_view b, Clock::time_point t) override {
    last_ = t;
    if (status != 200) return;  // error bodies are not kept
    if (sse) {
      const double at = secs(t - base_);
      if (!splitter_.feed(b, [&](std::string_view data) { account.on_event(data, at); }))
        overflow = true;
    } else if (body_.size() + b.size() <= kMaxJsonBody) {
      body_.append(b);
    } else {
      overflow = true;
    }
  }
  void finish() {
    if (status != 200) return;
    if (sse) splitter_.finish([&](std::string_view data) { account.on_event(data, secs(last_ - base_)); });
    else account.on_json_body(body_, secs(last_ - base_));
  }
  StreamAccount account;
  unsigned status = 0;
  bool sse = false;
  bool overflow = false;

 private:
  Clock::time_point base_;
  Clock::time_point last_;
  SseSplitter splitter_;
  std::string body_;
};

class Runner {
 public:
  Runner(const Options& o, std::vector<Target> targets, Workload& w)
      : o_(o), w_(w), pool_(o.threads), oracle_(o.target == "oracle") {
    for (size_t i = 0; i < pool_.size(); ++i)
      ts_.push_back(std::make_unique<ThreadState>(
          pool_.at(i), targets, std::chrono::milliseconds(static_cast<int64_t>(o.connect_timeout_s * 1000))));
    progress_tty_ = isatty(STDERR_FILENO) == 1;
  }

  Result<std::vector<StepReport>> run() {
    for (auto& t : ts_) asio::co_spawn(t->ctx, t->client.watchdog(), asio::detached);
    asio::co_spawn(ts_[0]->ctx, controller(), asio::detached);
    pool_.run();
    for (auto& t : ts_) t->client.close_idle();
    pool_.destroy();
    if (!fatal_.empty()) return Error{"run", fatal_};
    return std::move(steps_);
  }

 private:
  asio::awaitable<void> controller();
  asio::awaitable<void> closed_worker(ThreadState& ts, Step& st);
  asio::awaitable<void> open_generator(ThreadState& ts, Step& st, size_t thread);
  asio::awaitable<void> trace_generator(ThreadState& ts, Step& st, size_t thread);
  asio::awaitable<void> spawned(ThreadState& ts, Step& st, WorkRequest req);
  // Returns true when the target could not be reached (the closed loop then backs off briefly).
  asio::awaitable<bool> one_request(ThreadState& ts, Step& st, WorkRequest req);
  asio::awaitable<size_t> oracle_pick(ThreadState& ts, const WorkRequest& req);
  asio::awaitable<std::string> discover_model();
  void record_dropped(ThreadState& ts, Step& st);
  void progress(const Step& st, size_t steps, bool final_line);
  bool issue_gate(Step& st) {
    if (st.inflight.load(std::memory_order_relaxed) < static_cast<int64_t>(o_.max_inflight)) return true;
    return false;
  }

  const Options& o_;
  Workload& w_;
  IoThreads pool_;
  std::vector<std::unique_ptr<ThreadState>> ts_;
  bool oracle_;
  std::vector<std::string> model_jsons_;  // --model: one, or a comma list picked per conversation
  std::vector<StepReport> steps_;
  std::string fatal_;
  bool progress_tty_ = false;
  // progress line state
  Clock::time_point last_progress_;
  uint64_t last_ok_ = 0, last_tokens_ = 0;
};

asio::awaitable<std::string> Runner::discover_model() {
  ThreadState& ts = *ts_[0];
  CollectSink sink;
  std::string head = get_head(ts.client.url(0), "/v1/models");
  auto r = co_await ts.client.exchange(0, head, {}, sink, Clock::now() + std::chrono::seconds(10));
  if (!r.error.empty() || r.status != 200) co_return std::string();
  boost::system::error_code ec;
  auto v = boost::json::parse(sink.body, ec);
  if (ec || !v.is_object()) co_return std::string();
  const auto* data = v.as_object().if_contains("data");
  if (!data || !data->is_array() || data->as_array().empty() || !data->as_array()[0].is_object())
    co_return std::string();
  const auto* id = data->as_array()[0].as_object().if_contains("id");
  if (!id || !id->is_string()) co_return std::string();
  co_return std::string(id->as_string());
}

asio::awaitable<size_t> Runner::oracle_pick(ThreadState& ts, const WorkRequest& req) {
  const std::string body = resident_body(req.messages);
  std::vector<ResidentAnswer> answers(ts.client.targets());
  for (size_t e = 0; e < answers.size(); ++e) {
    CollectSink sink;
    std::string head = post_head(ts.client.url(e), "/sim/resident", body.size(), false);
    auto r = co_await ts.client.exchange(e, head, body, sink,
                                         Clock::now() + std::chrono::seconds(10));
    if (!r.error.empty() || r.status != 200) continue;
    if (auto a = parse_resident(sink.body)) answers[e] = a.value();
  }
  co_return choose_engine(answers, ts.rr);
}

asio::awaitable<bool> Runner::one_request(ThreadState& ts, Step& st, WorkRequest req) {
  size_t target = 0;
  if (oracle_) target = co_await oracle_pick(ts, req);
  // Several models (a base model's LoRA adapters, say): a conversation keeps one, the k-th
  // conversation the (k mod n)-th.
  const std::string& model_json = model_jsons_[req.session % model_jsons_.size()];
  const std::string body = chat_body(model_json, req, o_.stream, o_.ignore_eos);
  const std::string head = post_head(ts.client.url(target), "/v1/chat/completions", body.size(), o_.stream);
  const auto begin = Clock::now();
  ChatSink sink(req.wants_answer, begin);
  auto r = co_await ts.client.exchange(target, head, body, sink, begin + dur(o_.timeout_s));
  const auto end = Clock::now();
  sink.finish();

  Sample s;
  s.start_s = secs(begin - st.start);
  s.end_s = secs(end - st.start);
  s.latency_s = secs(end - begin);
  const StreamAccount& a = sink.account;
  if (!r.error.empty()) s.error = r.error;
  else if (r.status != 200) s.error = "http_" + std::to_string(r.status);
  else if (sink.overflow) s.error = "too_large";
  else if (a.error()) s.error = "stream_error";
  else if (sink.sse && !a.done() && !a.finished()) s.error = "incomplete";
  else if (!sink.sse && !a.done()) s.error = "bad_json";
  if (s.error.empty()) {
    s.ttft_s = sink.sse ? a.first_token_time() : s.latency_s;
    s.tpot_s = sink.sse ? a.tpot() : -1;
    s.output_tokens = a.output_tokens();
    s.prompt_tokens = a.usage().prompt_tokens;
    s.cached_tokens = a.usage().cached_tokens;
    s.engine = oracle_ ? std::to_string(target) : (r.upstream.empty() ? "direct" : r.upstream);
    ts.ok.fetch_add(1, std::memory_order_relaxed);
    ts.tokens.fetch_add(s.output_tokens, std::memory_order_relaxed);
  } else {
    ts.errors.fetch_add(1, std::memory_order_relaxed);
  }
  w_.complete(req, s.error.empty(), a.content());
  const bool unreachable = s.error == "connect" || s.error == "connect_timeout";
  ts.samples.push_back(std::move(s));
  co_return unreachable;
}

asio::awaitable<void> Runner::closed_worker(ThreadState& ts, Step& st) {
  while (Clock::now() < st.issue_end && st.take_ticket()) {
    auto req = w_.next();
    if (!req) break;
    if (co_await one_request(ts, st, std::move(*req))) {
      // A refused connect fails in microseconds: do not spin through millions of them.
      asio::steady_timer pause(ts.ctx, std::chrono::milliseconds(10));
      co_await pause.async_wait(kTok);
    }
  }
  st.active.fetch_sub(1, std::memory_order_release);
}

asio::awaitable<void> Runner::spawned(ThreadState& ts, Step& st, WorkRequest req) {
  co_await one_request(ts, st, std::move(req));
  st.inflight.fetch_sub(1, std::memory_order_relaxed);
  st.active.fetch_sub(1, std::memory_order_release);
}

void Runner::record_dropped(ThreadState& ts, Step& st) {
  Sample s;
  s.start_s = s.end_s = secs(Clock::now() - st.start);
  s.error = "dropped";
  ts.errors.fetch_add(1, std::memory_order_relaxed);
  ts.samples.push_back(std::move(s));
}

asio::awaitable<void> Runner::open_generator(ThreadState& ts, Step& st, size_t thread) {
  const double rate = st.x / static_cast<double>(ts_.size());  // superposed Poisson processes
  Rng rng(derive(o_.seed, 0x0B3A + st.index, thread));
  asio::steady_timer timer(ts.ctx);
  Clock::time_point next = st.start;
  while (true) {
    next += dur(rng.exponential(rate));
    if (next >= st.issue_end) break;
    if (next > Clock::now()) {
      timer.expires_at(next);
      co_await timer.async_wait(kTok);
    }
    if (!st.take_ticket()) break;
    if (!issue_gate(st)) {
      record_dropped(ts, st);
      continue;
    }
    auto req = w_.next();
    if (!req) break;
    st.inflight.fetch_add(1, std::memory_order_relaxed);
    st.active.fetch_add(1, std::memory_order_relaxed);
    asio::co_spawn(ts.ctx, spawned(ts, st, std::move(*req)), asio::detached);
  }
  st.active.fetch_sub(1, std::memory_order_release);
}

asio::awaitable<void> Runner::trace_generator(ThreadState& ts, Step& st, size_t thread) {
  const TraceWorkload& tw = *w_.as_trace();
  asio::steady_timer timer(ts.ctx);
  for (size_t i = thread; i < tw.size(); i += ts_.size()) {
    WorkRequest req = tw.at(i);
    const auto when = st.start + dur(req.arrival_s);
    if (when >= st.issue_end) break;
    if (when > Clock::now()) {
      timer.expires_at(when);
      co_await timer.async_wait(kTok);
    }
    // Tickets are taken in arrival order per thread, so --requests N replays roughly the first N.
    if (!st.take_ticket()) break;
    if (!issue_gate(st)) {
      record_dropped(ts, st);
      continue;
    }
    st.inflight.fetch_add(1, std::memory_order_relaxed);
    st.active.fetch_add(1, std::memory_order_relaxed);
    asio::co_spawn(ts.ctx, spawned(ts, st, std::move(req)), asio::detached);
  }
  st.active.fetch_sub(1, std::memory_order_release);
}

void Runner::progress(const Step& st, size_t steps, bool final_line) {
  if (o_.quiet) return;
  const auto now = Clock::now();
  uint64_t ok = 0, err = 0, tok = 0;
  for (auto& t : ts_) {
    ok += t->ok.load(std::memory_order_relaxed);
    err += t->errors.load(std::memory_order_relaxed);
    tok += t->tokens.load(std::memory_order_relaxed);
  }
  // Rates over the last second; the final line of a step shows the step's average instead.
  const double dt = final_line ? secs(now - st.start) : secs(now - last_progress_);
  const double rps = dt > 0 ? static_cast<double>(ok - (final_line ? 0 : last_ok_)) / dt : 0;
  const double tps = dt > 0 ? static_cast<double>(tok - (final_line ? 0 : last_tokens_)) / dt : 0;
  last_progress_ = now;
  last_ok_ = ok;
  last_tokens_ = tok;
  const std::string shape = o_.shape();
  std::string xs = shape == "open" ? "rate=" + format_number(st.x) : shape == "trace" ? std::string("trace")
                                                                     : "c=" + format_number(st.x);
  char line[256];
  std::snprintf(line, sizeof line,
                "[%s] %s (%zu/%zu) %5.1fs  ok %llu  err %llu  in-flight %lld  %.0f req/s  %.0f tok/s",
                o_.label.c_str(), xs.c_str(), st.index + 1, steps, secs(now - st.start),
                static_cast<unsigned long long>(ok), static_cast<unsigned long long>(err),
                static_cast<long long>(st.inflight.load(std::memory_order_relaxed) +
                                       (shape == "closed" ? st.active.load(std::memory_order_relaxed) : 0)),
                rps, tps);
  if (progress_tty_) std::fprintf(stderr, "\r%s\x1b[K%s", line, final_line ? "\n" : "");
  else if (final_line || static_cast<uint64_t>(secs(now - st.start)) % 10 == 0)
    std::fprintf(stderr, "%s\n", line);
}

asio::awaitable<void> Runner::controller() {
  std::string model = o_.model;
  if (model.empty()) {
    model = co_await discover_model();
    if (model.empty()) {
      fatal_ = "no --model given and GET /v1/models on " + ts_[0]->client.url(0).display() +
               " did not name one (is the target up?)";
      pool_.stop();
      co_return;
    }
    if (!o_.quiet) std::fprintf(stderr, "ramjet-bench: model %s\n", model.c_str());
  }
  for (std::string_view rest = model; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (comma != 0) append_json_string(model_jsons_.emplace_back(), rest.substr(0, comma));
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
  }
  if (model_jsons_.empty()) append_json_string(model_jsons_.emplace_back(), model);

  const std::string shape = o_.shape();
  std::vector<double> ladder;
  if (shape == "open") ladder = o_.rate;
  else if (shape == "trace") ladder = {0};
  else for (uint32_t c : o_.concurrency) ladder.push_back(c);

  asio::steady_timer timer(ts_[0]->ctx);
  for (size_t i = 0; i < ladder.size(); ++i) {
    Step st;
    st.x = ladder[i];
    st.index = i;
    st.quota = o_.requests_per_step;
    w_.begin_step(shape == "closed" ? static_cast<size_t>(st.x) : 0);
    for (auto& t : ts_) {
      t->ok = 0;
      t->errors = 0;
      t->tokens = 0;
    }
    last_ok_ = last_tokens_ = 0;
    st.start = Clock::now();
    last_progress_ = st.start;
    if (o_.duration_s > 0) st.issue_end = st.start + dur(o_.duration_s);
    const size_t n = ts_.size();
    if (shape == "closed") {
      const size_t workers = static_cast<size_t>(st.x);
      st.active = static_cast<int64_t>(workers);
      for (size_t w = 0; w < workers; ++w)
        asio::co_spawn(ts_[w % n]->ctx, closed_worker(*ts_[w % n], st), asio::detached);
    } else {
      st.active = static_cast<int64_t>(n);
      for (size_t t = 0; t < n; ++t) {
        if (shape == "open") asio::co_spawn(ts_[t]->ctx, open_generator(*ts_[t], st, t), asio::detached);
        else asio::co_spawn(ts_[t]->ctx, trace_generator(*ts_[t], st, t), asio::detached);
      }
    }
    auto next_progress = st.start + std::chrono::seconds(1);
    while (st.active.load(std::memory_order_acquire) > 0) {
      timer.expires_after(std::chrono::milliseconds(10));
      co_await timer.async_wait(kTok);
      if (Clock::now() >= next_progress) {
        progress(st, ladder.size(), false);
        next_progress += std::chrono::seconds(1);
      }
    }
    progress(st, ladder.size(), true);
    std::vector<Sample> all;
    for (auto& t : ts_) {
      all.insert(all.end(), std::make_move_iterator(t->samples.begin()),
                 std::make_move_iterator(t->samples.end()));
      t->samples.clear();
    }
    StepReport rep = aggregate(all, st.x, o_.warmup_s, o_.ttft_target_ms);
    if (o_.timeline_s > 0) rep.timeline = timeline(all, o_.timeline_s);
    if (!o_.quiet) {
      std::fprintf(stderr,
                   "[%s] step %zu/%zu x=%s: ok %llu err %llu  %.0f out tok/s  %.1f req/s  TTFT p50 %s "
                   "p95 %s ms  TPOT p50 %s ms  cached %s%%\n",
                   o_.label.c_str(), i + 1, ladder.size(), format_number(st.x).c_str(),
                   static_cast<unsigned long long>(rep.ok), static_cast<unsigned long long>(rep.errors),
                   rep.output_tok_s, rep.req_s, format_number(rep.ttft_p50_ms).c_str(),
                   format_number(rep.ttft_p95_ms).c_str(), format_number(rep.tpot_p50_ms).c_str(),
                   format_number(rep.cached_pct).c_str());
    }
    steps_.push_back(std::move(rep));
  }
  for (auto& t : ts_) t->client.stop();
  pool_.stop();
}

}  // namespace

Result<std::vector<StepReport>> run_ladder(const Options& opt, std::vector<Target> targets,
                                           Workload& workload) {
  Runner r(opt, std::move(targets), workload);
  return r.run();
}

}  // namespace ramjet::bench
