// bench_chat_load: a streaming chat load generator for an OpenAI-compatible /v1/chat/completions
// (frugal_server, llama.cpp's llama-server), on 127.0.0.1 only (described in benchmarks/server/README.md).
//
// It replays the chat trace (examples/common/chat_trace.hpp: shared system prompts, growing multi-turn
// histories) with "stream": true, greedy, max_tokens from the trace's answer length, and
// "stream_options": {"include_usage": true}, over keep-alive connections.
//
//   closed loop (default): --concurrency C workers, each sending the trace's next request when its last
//     one has ended, until --requests have been sent or --duration-s has passed;
//   --overload: open-loop Poisson arrivals at --rate per second for --duration-s, each on its own
//     connection; 429 and 503 answers are counted as rejections with how fast they came, and a share
//     (--disconnect-share) of the clients close their connection after --disconnect-after content deltas.
//
// Per request: time to first token (the first non-empty content delta), inter-token latencies (between
// content deltas, one token per delta), end-to-end time, the usage, and what went wrong (an HTTP status, a
// connection that failed or broke mid-stream, an error event, a stream without [DONE]). One JSON summary on
// stdout (or --out FILE), one JSON line per request with --jsonl FILE.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "chat_trace.hpp"
#include "flags.hpp"
#include "stats.hpp"

#include <httplib.h>

namespace {

using json = nlohmann::json;
using clk = std::chrono::steady_clock;

const char* const usage_text =
    "usage: bench_chat_load --url http://127.0.0.1:PORT [--model NAME] [--concurrency C] [--requests N]\n"
    "                       [--duration-s S] [--seed N] [--system-prompts N] [--max-turns N]\n"
    "                       [--answer-median N] [--answer-max N] [--timeout-s S] [--extra JSON]\n"
    "                       [--out FILE] [--jsonl FILE]\n"
    "       bench_chat_load --overload --url ... --rate R --duration-s S [--disconnect-share P]\n"
    "                       [--disconnect-after N] [--max-inflight N] ...\n";

struct options {
  std::string host;
  int port = 0;
  std::string model = "smollm2";
  std::size_t concurrency = 1;
  std::size_t requests = 48;
  double duration_s = 600;
  std::uint64_t seed = 1;
  std::size_t system_prompts = 4;
  std::size_t max_turns = 4;
  double answer_median = 24;
  std::size_t answer_max = 96;
  double timeout_s = 120;
  json extra = json::object();  ///< merged into every request's body (e.g. {"ignore_eos": true})
  std::string out, jsonl;
  bool overload = false;
  double rate = 0;
  double disconnect_share = 0;
  std::size_t disconnect_after = 4;
  std::size_t max_inflight = 2048;
};

// Only the loopback: the generator is a benchmark tool, not a way to load someone else's server.
void parse_url(const std::string& url, options& o) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    throw examples::usage_error("--url must be http://127.0.0.1:PORT or http://localhost:PORT, not \"" + url +
                                "\"");
  std::string rest = url.substr(scheme.size());
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    if (rest.find_first_not_of('/', slash) != std::string::npos)
      throw examples::usage_error("--url takes no path (the endpoint is /v1/chat/completions): \"" + url +
                                  "\"");
    rest.resize(slash);
  }
  const auto colon = rest.rfind(':');
  if (colon == std::string::npos) throw examples::usage_error("--url needs a port: \"" + url + "\"");
  o.host = rest.substr(0, colon);
  if (o.host != "127.0.0.1" && o.host != "localhost")
    throw examples::usage_error("--url: the host must be 127.0.0.1 or localhost, not \"" + o.host + "\"");
  o.port = static_cast<int>(examples::integer_flag("--url's port", rest.substr(colon + 1), 1, 65535));
}

options parse(int argc, char** argv) {
  options o;
  bool have_url = false, have_rate = false;
  examples::flags f(argc, argv);
  while (f.next()) {
    if (f.is("--url")) {
      parse_url(f.value(), o);
      have_url = true;
    } else if (f.is("--model")) {
      o.model = f.value();
    } else if (f.is("--concurrency")) {
      o.concurrency = f.integer(1, 4096);
    } else if (f.is("--requests")) {
      o.requests = f.integer(1, 5000);
    } else if (f.is("--duration-s")) {
      o.duration_s = f.number(0.1, 86400);
    } else if (f.is("--seed")) {
      o.seed = f.integer(0, UINT64_MAX);
    } else if (f.is("--system-prompts")) {
      o.system_prompts = f.integer(1, 1000);
    } else if (f.is("--max-turns")) {
      o.max_turns = f.integer(1, 100);
    } else if (f.is("--answer-median")) {
      o.answer_median = f.number(1, 4096);
    } else if (f.is("--answer-max")) {
      o.answer_max = f.integer(4, 8192);
    } else if (f.is("--timeout-s")) {
      o.timeout_s = f.number(0.1, 3600);
    } else if (f.is("--extra")) {
      const std::string v = f.value();
      o.extra = json::parse(v, nullptr, false);
      if (!o.extra.is_object())
        throw examples::usage_error("--extra must be a JSON object, not \"" + v + "\"");
    } else if (f.is("--out")) {
      o.out = f.value();
    } else if (f.is("--jsonl")) {
      o.jsonl = f.value();
    } else if (f.is("--overload")) {
      o.overload = true;
    } else if (f.is("--rate")) {
      o.rate = f.number(0.01, 100000);
      have_rate = true;
    } else if (f.is("--disconnect-share")) {
      o.disconnect_share = f.number(0, 1);
    } else if (f.is("--disconnect-after")) {
      o.disconnect_after = f.integer(1, 100000);
    } else if (f.is("--max-inflight")) {
      o.max_inflight = f.integer(1, 100000);
    } else if (f.is("--help") || f.is("-h")) {
      std::fputs(usage_text, stdout);
      std::exit(0);
    } else {
      f.unknown();
    }
  }
  if (!have_url) throw examples::usage_error("--url is required");
  if (o.overload && !have_rate) throw examples::usage_error("--overload needs --rate");
  if (!o.overload && have_rate) throw examples::usage_error("--rate is for --overload only");
  if (o.answer_median > static_cast<double>(o.answer_max))
    throw examples::usage_error("--answer-median must not exceed --answer-max");
  return o;
}

// What one request saw.
struct record {
  std::size_t index = 0;  // arrival order
  const chat_trace::request* q = nullptr;
  double start_s = 0;  // since the run's start
  int status = 0;      // 0: no response
  bool retry_after = false;
  double response_s = -1;  // headers received, since the request's start
  double ttft_s = -1;
  std::vector<double> itl_s;
  double e2e_s = -1;
  std::size_t deltas = 0;
  std::optional<std::size_t> prompt_tokens, completion_tokens, cached_tokens;
  std::string finish_reason;
  bool done = false;                // [DONE] seen
  bool disconnect_planned = false;  // overload: this client leaves after disconnect_after deltas
  bool disconnected = false;        // and it did
  std::size_t stale_retries = 0;    // see run_one
  std::string error;                // empty: none
  std::string error_detail;

  bool rejected() const { return status == 429 || status == 503; }
  std::size_t tokens() const { return completion_tokens.value_or(deltas); }
};

// Server-Sent Events split from the bytes as they come; each "data:" payload goes to on_data.
class sse_reader {
 public:
  template <typename F>
  void feed(const char* d, std::size_t n, F&& on_data) {
    for (std::size_t i = 0; i < n; ++i)
      if (d[i] != '\r') buf_ += d[i];
    for (std::size_t end; (end = buf_.find("\n\n")) != std::string::npos; buf_.erase(0, end + 2)) {
      std::string data;
      std::size_t at = 0;
      while (at < end) {
        std::size_t nl = buf_.find('\n', at);
        if (nl == std::string::npos || nl > end) nl = end;
        const std::string_view line(buf_.data() + at, nl - at);
        if (line.rfind("data:", 0) == 0) {
          std::string_view v = line.substr(5);
          if (!v.empty() && v[0] == ' ') v.remove_prefix(1);
          if (!data.empty()) data += '\n';
          data += v;
        }
        at = nl + 1;
      }
      if (!data.empty() && !on_data(data)) return;
    }
  }
  bool pending() const { return buf_.find_first_not_of("\n") != std::string::npos; }

 private:
  std::string buf_;
};

json request_body(const options& o, const chat_trace::request& q) {
  json messages = json::array();
  for (const auto& m : q.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
  json b = {{"model", o.model},
            {"messages", std::move(messages)},
            {"max_tokens", q.answer_tokens},
            {"temperature", 0},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}};
  b.update(o.extra);
  return b;
}

double since(clk::time_point a, clk::time_point b) { return std::chrono::duration<double>(b - a).count(); }

httplib::Client make_client(const options& o) {
  httplib::Client c(o.host, o.port);
  c.set_keep_alive(true);
  c.set_tcp_nodelay(true);
  c.set_connection_timeout(5, 0);
  const auto whole = static_cast<time_t>(o.timeout_s);
  const auto usec = static_cast<time_t>((o.timeout_s - static_cast<double>(whole)) * 1e6);
  c.set_read_timeout(whole, usec);
  c.set_write_timeout(whole, usec);
  return c;
}

// Sends one streamed request on @p c and fills @p r; returns httplib's error.
httplib::Error attempt(httplib::Client& c, const options& o, const std::string& body, clk::time_point t_run,
                       record& r) {
  const auto t0 = clk::now();
  r.start_s = since(t_run, t0);
  std::optional<clk::time_point> last;
  std::string error_body;
  bool stop_reading = false;
  sse_reader sse;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  req.body = body;
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    r.retry_after = res.has_header("Retry-After");
    r.response_s = since(t0, clk::now());
    return true;
  };
  const auto on_data = [&](const std::string& data) {
    if (r.done) {
      r.error = "bad_event";
      r.error_detail = "an event after [DONE]";
      return !(stop_reading = true);
    }
    if (data == "[DONE]") {
      r.done = true;
      return true;
    }
    const json j = json::parse(data, nullptr, false);
    if (!j.is_object()) {
      r.error = "bad_event";
      r.error_detail = data.substr(0, 200);
      return !(stop_reading = true);
    }
    if (j.contains("error")) {
      r.error = "error_event";
      r.error_detail = j["error"].dump().substr(0, 300);
      return true;
    }
    if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
      if (u->contains("prompt_tokens")) r.prompt_tokens = u->value("prompt_tokens", std::size_t{0});
      if (u->contains("completion_tokens"))
        r.completion_tokens = u->value("completion_tokens", std::size_t{0});
      if (const auto d = u->find("prompt_tokens_details");
          d != u->end() && d->is_object() && d->contains("cached_tokens"))
        r.cached_tokens = d->value("cached_tokens", std::size_t{0});
    }
    const auto ch = j.find("choices");
    if (ch == j.end() || !ch->is_array() || ch->empty()) return true;
    const json& c0 = (*ch)[0];
    if (const auto fr = c0.find("finish_reason"); fr != c0.end() && fr->is_string()) r.finish_reason = *fr;
    const auto d = c0.find("delta");
    if (d == c0.end() || !d->is_object()) return true;
    const auto content = d->find("content");
    if (content == d->end() || !content->is_string() || content->get_ref<const std::string&>().empty())
      return true;
    const auto now = clk::now();
    if (last)
      r.itl_s.push_back(since(*last, now));
    else
      r.ttft_s = since(t0, now);
    last = now;
    ++r.deltas;
    if (r.disconnect_planned && r.deltas >= o.disconnect_after) {
      r.disconnected = true;
      return !(stop_reading = true);
    }
    return true;
  };
  req.content_receiver = [&](const char* d, std::size_t n, std::uint64_t, std::uint64_t) {
    if (r.status != 200) {
      if (error_body.size() < 400) error_body.append(d, std::min<std::size_t>(n, 400));
      return true;
    }
    sse.feed(d, n, on_data);
    return !stop_reading;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = c.send(req, res, err);
  r.e2e_s = since(t0, clk::now());
  if (r.disconnected || !r.error.empty()) return err;
  if (r.status == 0) {
    r.error = err == httplib::Error::Connection ? "connect" : "transport";
    r.error_detail = httplib::to_string(err);
  } else if (r.status != 200) {
    r.error = "http_" + std::to_string(r.status);
    r.error_detail = error_body.substr(0, 300);
  } else if (!sent || err != httplib::Error::Success) {
    r.error = "broken_stream";
    r.error_detail = httplib::to_string(err);
  } else if (!r.done) {
    r.error = "missing_done";
    r.error_detail = sse.pending() ? "a partial event at the end" : "the stream ended without [DONE]";
  }
  return err;
}

// A worker's keep-alive connection; a new one after anything but a clean end.
struct connection {
  std::unique_ptr<httplib::Client> client;
  bool used = false;
};

// Sends one streamed request on @p conn and fills @p r. A reused keep-alive connection that the server
// closed just as the request went out fails before any response (llama-server closes some after a stream,
// and the close can cross the next request): that request is sent again once, on a new connection, and
// counted in stale_retries.
void run_one(connection& conn, const options& o, const std::string& body, clk::time_point t_run, record& r) {
  const record blank = r;
  for (int tries = 0;; ++tries) {
    const bool reused = conn.client && conn.used;
    if (!conn.client) {
      conn.client = std::make_unique<httplib::Client>(make_client(o));
      conn.used = false;
    }
    const httplib::Error err = attempt(*conn.client, o, body, t_run, r);
    conn.used = true;
    const bool clean = r.error.empty() && !r.disconnected;
    if (!clean) conn.client.reset();
    if (reused && tries == 0 && r.status == 0 &&
        (err == httplib::Error::Read || err == httplib::Error::Write)) {
      const std::size_t stale = r.stale_retries + 1;
      r = blank;
      r.stale_retries = stale;
      continue;
    }
    return;
  }
}

json distribution(std::vector<double> v) {
  if (v.empty()) return {{"n", 0}, {"p50", nullptr}, {"p99", nullptr}, {"mean", nullptr}, {"max", nullptr}};
  const auto rank = [&](double p) { return examples::quantile(v, p); };
  double sum = 0;
  for (const double x : v) sum += x;
  return {{"n", v.size()},
          {"p50", rank(0.50)},
          {"p99", rank(0.99)},
          {"mean", sum / static_cast<double>(v.size())},
          {"max", *std::max_element(v.begin(), v.end())}};
}

json to_json(const record& r) {
  json j = {{"index", r.index},
            {"conversation", r.q->conversation},
            {"turn", r.q->turn},
            {"messages", r.q->messages.size()},
            {"max_tokens", r.q->answer_tokens},
            {"start_s", r.start_s},
            {"status", r.status},
            {"error", r.error.empty() ? json(nullptr) : json(r.error)},
            {"ttft_s", r.ttft_s >= 0 ? json(r.ttft_s) : json(nullptr)},
            {"e2e_s", r.e2e_s},
            {"deltas", r.deltas},
            {"finish_reason", r.finish_reason},
            {"done", r.done}};
  if (!r.itl_s.empty()) {
    double sum = 0;
    for (const double x : r.itl_s) sum += x;
    j["itl_mean_s"] = sum / static_cast<double>(r.itl_s.size());
    j["itl_max_s"] = *std::max_element(r.itl_s.begin(), r.itl_s.end());
  }
  if (r.prompt_tokens) j["prompt_tokens"] = *r.prompt_tokens;
  if (r.completion_tokens) j["completion_tokens"] = *r.completion_tokens;
  if (r.cached_tokens) j["cached_tokens"] = *r.cached_tokens;
  if (r.rejected()) j["retry_after"] = r.retry_after;
  if (r.disconnect_planned) j["disconnected"] = r.disconnected;
  if (!r.error_detail.empty()) j["error_detail"] = r.error_detail;
  if (r.stale_retries) j["stale_retries"] = r.stale_retries;
  return j;
}

// The summary of a run's records; @p wall_s is from the first request's start to the last one's end.
json summarize(const options& o, const std::vector<record>& rs, double wall_s) {
  std::map<std::string, std::size_t> errors;
  std::vector<double> ttft, itl, e2e, rejection;
  std::size_t ok = 0, tokens = 0, deltas = 0, with_usage = 0, prompt = 0, cached = 0, rejected = 0,
              retry_after = 0, accepted = 0, planned = 0, disconnected = 0, stale = 0;
  std::map<std::string, std::size_t> rejected_by;
  for (const record& r : rs) {
    stale += r.stale_retries;
    tokens += r.tokens();
    deltas += r.deltas;
    if (o.overload && r.rejected()) {
      ++rejected;
      ++rejected_by[std::to_string(r.status)];
      retry_after += r.retry_after;
      rejection.push_back(r.e2e_s);
      continue;
    }
    if (r.status == 200) ++accepted;
    planned += r.disconnect_planned;
    if (r.disconnected) {
      ++disconnected;
      continue;
    }
    if (!r.error.empty()) {
      ++errors[r.error];
      continue;
    }
    ++ok;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2e.push_back(r.e2e_s);
    if (r.completion_tokens) {
      ++with_usage;
      prompt += r.prompt_tokens.value_or(0);
      cached += r.cached_tokens.value_or(0);
    }
  }
  std::size_t error_total = 0;
  for (const auto& [k, n] : errors) error_total += n;
  json s = {{"mode", o.overload ? "overload" : "closed"},
            {"url", "http://" + o.host + ":" + std::to_string(o.port)},
            {"model", o.model},
            {"requests", rs.size()},
            {"ok", ok},
            {"errors", error_total},
            {"errors_by_kind", errors},
            {"wall_s", wall_s},
            {"output_tokens", tokens},
            {"content_deltas", deltas},
            {"output_tokens_per_s", wall_s > 0 ? static_cast<double>(tokens) / wall_s : 0.0},
            {"with_usage", with_usage},
            {"prompt_tokens", prompt},
            {"cached_prompt_tokens", cached},
            {"stale_connection_retries", stale},
            {"ttft_s", distribution(ttft)},
            {"itl_s", distribution(itl)},
            {"e2e_s", distribution(e2e)},
            {"seed", o.seed}};
  if (o.overload) {
    s["rate_per_s"] = o.rate;
    s["duration_s"] = o.duration_s;
    s["accepted"] = accepted;
    s["rejected"] = rejected;
    s["rejected_by_status"] = rejected_by;
    s["rejected_with_retry_after"] = retry_after;
    s["rejection_s"] = distribution(rejection);
    s["disconnect_planned"] = planned;
    s["disconnected"] = disconnected;
  } else {
    s["concurrency"] = o.concurrency;
  }
  return s;
}

// Closed loop: C workers, each on its own keep-alive connection, take the trace's next request in turn.
std::vector<record> closed_loop(const options& o, const std::vector<chat_trace::request>& trace,
                                clk::time_point t_run) {
  std::vector<record> rs(trace.size());
  std::atomic<std::size_t> next{0};
  const auto deadline =
      t_run + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(o.duration_s));
  {
    std::vector<std::jthread> workers;
    for (std::size_t w = 0; w < o.concurrency; ++w)
      workers.emplace_back([&] {
        connection c;
        for (;;) {
          if (clk::now() >= deadline) return;
          const std::size_t i = next.fetch_add(1);
          if (i >= trace.size()) return;
          record& r = rs[i];
          r.index = i;
          r.q = &trace[i];
          run_one(c, o, request_body(o, trace[i]).dump(), t_run, r);
        }
      });
  }
  rs.resize(std::min(next.load(), trace.size()));
  return rs;
}

// Open loop: Poisson arrivals at o.rate for o.duration_s, each on a connection of its own (a thread per
// request in flight, up to max_inflight; an arrival beyond it is counted, not sent). The trace's
// requests are used in turn, again from the first when the arrivals outnumber them.
std::vector<record> open_loop(const options& o, const std::vector<chat_trace::request>& trace,
                              clk::time_point t_run, std::size_t& dropped, std::size_t& late) {
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ull);
  std::exponential_distribution<double> gap(o.rate);
  std::bernoulli_distribution leaves(o.disconnect_share);
  std::vector<double> arrivals;
  for (double t = gap(rng); t < o.duration_s; t += gap(rng)) arrivals.push_back(t);
  std::vector<record> rs(arrivals.size());
  for (std::size_t i = 0; i < rs.size(); ++i) {
    rs[i].index = i;
    rs[i].q = &trace[i % trace.size()];
    rs[i].disconnect_planned = leaves(rng);
  }
  struct flight {
    std::jthread t;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  std::vector<flight> flights;
  std::vector<bool> sent(rs.size(), false);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto due =
        t_run + std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(arrivals[i]));
    std::this_thread::sleep_until(due);
    if (clk::now() - due > std::chrono::milliseconds(50)) ++late;
    std::erase_if(flights, [](const flight& f) { return f.finished->load(); });  // joins them
    if (flights.size() >= o.max_inflight) {
      ++dropped;
      continue;
    }
    sent[i] = true;
    auto fin = std::make_shared<std::atomic<bool>>(false);
    flights.push_back({std::jthread([&o, &r = rs[i], t_run, fin, body = request_body(o, *rs[i].q).dump()] {
                         connection c;
                         run_one(c, o, body, t_run, r);
                         fin->store(true);
                       }),
                       fin});
  }
  flights.clear();
  std::vector<record> out;
  for (std::size_t i = 0; i < rs.size(); ++i)
    if (sent[i]) out.push_back(std::move(rs[i]));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  try {
    o = parse(argc, argv);
  } catch (const examples::usage_error& e) {
    std::fprintf(stderr, "bench_chat_load: %s\n%s", e.what(), usage_text);
    return 2;
  }
  try {
    // Fortunes are finite (about 10,000 distinct ones of 20 to 160 bytes, two per request): an open loop
    // cycles through at most 2,000 requests.
    const std::size_t n =
        o.overload ? std::min<std::size_t>(2000, static_cast<std::size_t>(o.rate * o.duration_s) + 16)
                   : o.requests;
    const std::vector<chat_trace::request> trace = chat_trace::make({.requests = n,
                                                                     .system_prompts = o.system_prompts,
                                                                     .max_turns = o.max_turns,
                                                                     .answer_median = o.answer_median,
                                                                     .answer_max = o.answer_max,
                                                                     .seed = o.seed});
    const auto t_run = clk::now();
    std::size_t dropped = 0, late = 0;
    std::vector<record> rs =
        o.overload ? open_loop(o, trace, t_run, dropped, late) : closed_loop(o, trace, t_run);
    double first = 0, last = 0;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      first = i ? std::min(first, rs[i].start_s) : rs[i].start_s;
      last = std::max(last, rs[i].start_s + rs[i].e2e_s);
    }
    json s = summarize(o, rs, last - first);
    if (o.overload) {
      s["arrivals_not_sent"] = dropped;
      s["arrivals_late_50ms"] = late;
    } else {
      s["requests_planned"] = o.requests;
    }
    if (!o.jsonl.empty()) {
      std::ofstream f(o.jsonl);
      for (const record& r : rs) f << to_json(r).dump() << '\n';
      if (!f) throw std::runtime_error("cannot write " + o.jsonl);
    }
    const std::string text = s.dump(2) + "\n";
    if (o.out.empty()) {
      std::fputs(text.c_str(), stdout);
    } else {
      std::ofstream f(o.out);
      f << text;
      if (!f) throw std::runtime_error("cannot write " + o.out);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_chat_load: %s\n", e.what());
    return 1;
  }
}
