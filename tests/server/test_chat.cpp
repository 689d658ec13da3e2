// The example server's language-model endpoints as clients use them: frugal_server in a child process on
// 127.0.0.1 with SmolLM2 from its GGUF file, a real HTTP client, and promtool on its /metrics.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <frugal/model/bpe.hpp>
#include <frugal/model/gguf.hpp>

#include "../support/process.hpp"
#include "../support/prometheus.hpp"
#include "../support/requires.hpp"

#include <httplib.h>

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using frugal_test::gguf_model;
using frugal_test::gguf_model_path;
using frugal_test::needs;

const std::string model_name = "smollm2";

// frugal_server serving one chat model from a --models file, on a free port; killed at scope exit.
struct chat_server {
  fs::path config;
  frugal_test::child proc;
  int port = 0;
  explicit chat_server(const json& extra = json::object(), std::vector<std::string> flags = {},
                       const std::string& token = "") {
    json entry = {{"name", model_name}, {"kind", "chat"}, {"path", gguf_model_path()},
                  {"pinned", true},     {"threads", 1},   {"kv_budget_mb", 64}};
    entry.update(extra);
    static std::atomic<int> seq{0};
    config = fs::temp_directory_path() /
             ("frugal_chat_" + std::to_string(::getpid()) + "_" + std::to_string(seq++) + ".json");
    std::ofstream(config) << json{{"models", {entry}}}.dump();
    std::vector<std::string> args{FRUGAL_SERVER_EXE, "--models", config.string(), "--port", "0"};
    args.insert(args.end(), flags.begin(), flags.end());
    if (!token.empty()) ::setenv("FRUGAL_SERVER_TOKEN", token.c_str(), 1);
    proc = frugal_test::child::spawn(args);
    ::unsetenv("FRUGAL_SERVER_TOKEN");
    const std::string l = proc.read_line();
    REQUIRE_MESSAGE(l.rfind("listening on 127.0.0.1:", 0) == 0, "server said: " << l);
    port = std::stoi(l.substr(l.rfind(':') + 1));
  }
  chat_server(const chat_server&) = delete;
  chat_server& operator=(const chat_server&) = delete;
  ~chat_server() {
    if (proc.pid > 0) {
      ::kill(proc.pid, SIGKILL);
      proc.wait();
    }
    proc.close_fds();
    std::error_code ec;
    fs::remove(config, ec);
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
  int wait_exit(std::chrono::seconds within) {
    const auto end = std::chrono::steady_clock::now() + within;
    int st = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (::waitpid(proc.pid, &st, WNOHANG) == proc.pid) {
        proc.pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
};

json chat_body(const std::string& user, std::size_t max_tokens, json extra = json::object()) {
  json b = {{"model", model_name},
            {"messages", {{{"role", "user"}, {"content", user}}}},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  b.update(extra);
  return b;
}

// The events of an SSE body: each "data: " payload, in order.
std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (std::size_t end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string e = body.substr(at, end - at);
    REQUIRE_MESSAGE(e.rfind("data: ", 0) == 0, "not an SSE data event: " << e);
    out.push_back(e.substr(6));
  }
  CHECK_MESSAGE(at == body.size(), "bytes after the last event: " << body.substr(at));
  return out;
}

// A streamed request's parts: the role, the content deltas joined, the finish_reason, the usage.
struct streamed {
  std::string role, text, finish_reason;
  json usage;
  bool done = false;
};
streamed parse_stream(const std::string& body, bool chat = true) {
  streamed s;
  const auto events = sse_events(body);
  REQUIRE(!events.empty());
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i] == "[DONE]") {
      CHECK(i + 1 == events.size());
      s.done = true;
      break;
    }
    const json j = json::parse(events[i]);
    if (j.contains("usage") && !j["usage"].is_null()) {
      CHECK(j["choices"].empty());
      s.usage = j["usage"];
      continue;
    }
    const json& c = j["choices"][0];
    if (chat) {
      CHECK(j["object"] == "chat.completion.chunk");
      if (i == 0) {
        CHECK(c["delta"]["role"] == "assistant");
        s.role = c["delta"]["role"];
      } else {
        CHECK_FALSE(c["delta"].contains("role"));
      }
      if (c["delta"].contains("content")) s.text += c["delta"]["content"].get<std::string>();
    } else {
      CHECK(j["object"] == "text_completion");
      s.text += c["text"].get<std::string>();
    }
    if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"];
  }
  return s;
}

double metric(const std::string& text, const std::string& series) {
  const std::string v = frugal_test::prom_value(text, series);
  return v == "(absent)" ? -1 : std::stod(v);
}

// Polls /metrics until every series has its value, for at most `within`; returns the last text.
std::string wait_metrics(httplib::Client& c, const std::vector<std::pair<std::string, double>>& want,
                         std::chrono::seconds within, const httplib::Headers& h = {}) {
  const auto end = std::chrono::steady_clock::now() + within;
  for (;;) {
    const std::string text = c.Get("/metrics", h)->body;
    bool all = true;
    for (const auto& [series, v] : want) all = all && metric(text, series) == v;
    if (all || std::chrono::steady_clock::now() > end) return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

const std::string kv_used = "frugal_kv_cache_blocks{model=\"smollm2\",state=\"used\"}";
const std::string running = "frugal_scheduler_running{model=\"smollm2\"}";

// Streams a request and stops reading (closing the connection) after `events` events; returns the events
// read.
std::size_t stream_then_leave(int port, const json& body, std::size_t events) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  httplib::Request r;
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.headers = {{"Content-Type", "application/json"}};
  r.body = body.dump();
  std::string buf;
  std::size_t seen = 0;
  r.content_receiver = [&](const char* d, std::size_t n, std::uint64_t, std::uint64_t) {
    buf.append(d, n);
    for (std::size_t at; (at = buf.find("\n\n")) != std::string::npos; buf.erase(0, at + 2)) ++seen;
    return seen < events;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  (void)c.send(r, res, err);
  return seen;
}

// Sends a POST on a new connection and leaves it open, unread; the caller closes the returned socket.
int post_and_hold(int port, const std::string& path, const std::string& payload) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  const std::string req = "POST " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                          "Content-Length: " + std::to_string(payload.size()) + "\r\n\r\n" + payload;
  REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
  return fd;
}

}  // namespace

TEST_CASE(
    "server chat: a greedy chat answer in OpenAI's shape equals its streamed deltas joined; usage counts the "
    "prefix cache; the scheduler's, KV cache's and the inference gateway's series are on /metrics" *
    needs(gguf_model())) {
  chat_server s;
  auto c = s.client();
  const json body = chat_body("Name three colours of the rainbow.", 16);
  auto r = c.Post("/v1/chat/completions", {{"X-Frugal-Feature", "chat"}}, body.dump(), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  const json j = json::parse(r->body);
  CHECK(j["object"] == "chat.completion");
  CHECK(j["model"] == model_name);
  CHECK(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  const json& choice = j["choices"][0];
  CHECK(choice["message"]["role"] == "assistant");
  const std::string text = choice["message"]["content"];
  CHECK(!text.empty());
  CHECK(choice["finish_reason"] == "length");
  CHECK(j["usage"]["completion_tokens"] == 16);
  const std::size_t prompt_tokens = j["usage"]["prompt_tokens"];
  CHECK(prompt_tokens > 10);
  CHECK(j["usage"]["total_tokens"] == prompt_tokens + 16);

  // Streamed: role first, deltas that join to the same text (native is batch-invariant: the same bits),
  // finish_reason, usage (its prompt's full blocks now from the prefix cache), [DONE].
  json sbody = body;
  sbody["stream"] = true;
  sbody["stream_options"] = {{"include_usage", true}};
  r = c.Post("/v1/chat/completions", sbody.dump(), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  CHECK(r->get_header_value("Content-Type").rfind("text/event-stream", 0) == 0);
  const streamed st = parse_stream(r->body);
  CHECK(st.done);
  CHECK(st.text == text);
  CHECK(st.finish_reason == "length");
  REQUIRE(st.usage.is_object());
  CHECK(st.usage["prompt_tokens"] == prompt_tokens);
  CHECK(st.usage["completion_tokens"] == 16);
  CHECK(st.usage["prompt_tokens_details"]["cached_tokens"] == prompt_tokens / 16 * 16);
  // Without include_usage no event has a usage key.
  sbody.erase("stream_options");
  r = c.Post("/v1/chat/completions", sbody.dump(), "application/json");
  CHECK(r->body.find("\"usage\"") == std::string::npos);
  CHECK(parse_stream(r->body).text == text);

  // A stop string that ends the answer early, matched on the decoded text across a token boundary; the
  // text before it is returned, the stop string is not; streamed, the same.
  const auto tok = frugal::bpe::tokenizer::from_gguf(frugal::gguf::file(gguf_model_path()));
  const auto ids = tok.encode(text);
  REQUIRE(ids.size() > 4);
  const std::size_t boundary = tok.decode(std::span(ids).first(3)).size();
  REQUIRE(boundary >= 2);
  const std::string stop = text.substr(boundary - 2, 4);
  const std::string before = text.substr(0, text.find(stop));
  json stopped = body;
  stopped["stop"] = json::array({"never appears 123", stop});
  r = c.Post("/v1/chat/completions", stopped.dump(), "application/json");
  REQUIRE(r->status == 200);
  CHECK(json::parse(r->body)["choices"][0]["message"]["content"] == before);
  CHECK(json::parse(r->body)["choices"][0]["finish_reason"] == "stop");
  // A stop string cancels the sequence, which resolves without its generation: the usage still counts
  // the prompt's blocks found in the prefix cache, and the tokens decoded up to the stop string.
  const json su = json::parse(r->body)["usage"];
  CHECK(su["prompt_tokens"] == prompt_tokens);
  CHECK(su["prompt_tokens_details"]["cached_tokens"] == prompt_tokens / 16 * 16);
  CHECK(su["completion_tokens"] >= 3);
  CHECK(su["completion_tokens"] < 16);
  stopped["stream"] = true;
  stopped["stream_options"] = {{"include_usage", true}};
  stopped["stop"] = stop;
  r = c.Post("/v1/chat/completions", stopped.dump(), "application/json");
  const streamed ss = parse_stream(r->body);
  CHECK(ss.text == before);
  CHECK(ss.finish_reason == "stop");
  REQUIRE(ss.usage.is_object());
  CHECK(ss.usage["prompt_tokens_details"]["cached_tokens"] == prompt_tokens / 16 * 16);
  CHECK(ss.usage["completion_tokens"] == su["completion_tokens"]);

  // /v1/completions: a raw prompt, streamed or not, equal.
  const json cbody = {{"model", model_name},
                      {"prompt", "The capital of France is"},
                      {"max_tokens", 8},
                      {"temperature", 0},
                      {"seed", 7}};
  r = c.Post("/v1/completions", cbody.dump(), "application/json");
  REQUIRE(r->status == 200);
  const json cj = json::parse(r->body);
  CHECK(cj["object"] == "text_completion");
  const std::string ctext = cj["choices"][0]["text"];
  CHECK(ctext.find("Paris") != std::string::npos);
  json cs = cbody;
  cs["stream"] = true;
  r = c.Post("/v1/completions", cs.dump(), "application/json");
  REQUIRE(r->status == 200);
  CHECK(parse_stream(r->body, false).text == ctext);
  // Sampled with a seed: the same seed, the same text.
  const json sampled = chat_body("Tell me a word.", 8, {{"temperature", 0.9}, {"top_p", 0.9}, {"seed", 42}});
  const auto a = c.Post("/v1/chat/completions", sampled.dump(), "application/json");
  const auto b = c.Post("/v1/chat/completions", sampled.dump(), "application/json");
  CHECK(json::parse(a->body)["choices"][0] == json::parse(b->body)["choices"][0]);

  const std::string m = wait_metrics(c, {{kv_used, 0}, {running, 0}}, std::chrono::seconds(10));
  CHECK(metric(m, "frugal_llm_requests_total{model=\"smollm2\",outcome=\"ok\"}") == 9);
  CHECK(metric(m, "frugal_requests_total{feature=\"chat\",outcome=\"ok\"}") == 1);
  CHECK(metric(m, "frugal_scheduler_finished_total{model=\"smollm2\",reason=\"length\"}") >= 6);
  CHECK(metric(m, "frugal_scheduler_tokens_total{model=\"smollm2\",kind=\"prefix_hit\"}") > 0);
  CHECK(metric(m, "frugal_kv_cache_prefix_hit_tokens_total{model=\"smollm2\"}") > 0);
  CHECK(metric(m, "vllm:num_requests_waiting{model_name=\"smollm2\"}") == 0);
  CHECK(metric(m, "vllm:num_requests_running{model_name=\"smollm2\"}") == 0);
  CHECK(metric(m, "vllm:gpu_cache_usage_perc{model_name=\"smollm2\"}") == 0);
  CHECK(metric(m, "vllm:kv_cache_usage_perc{model_name=\"smollm2\"}") == 0);
  CHECK(metric(m, "frugal_llm_tokens_total{model=\"smollm2\",kind=\"cached\"}") > 0);
  // The ledger counts the chat feature's tokens, and prices them from the measured steps.
  CHECK(metric(m, "frugal_generated_tokens_total{feature=\"chat\"}") > 0);
  CHECK(metric(m, "frugal_prompt_tokens_total{feature=\"chat\",source=\"computed\"}") +
            metric(m, "frugal_prompt_tokens_total{feature=\"chat\",source=\"prefix_cache\"}") >
        0);
  CHECK(metric(m, "frugal_steps_total") > 0);
  // promtool accepts the text; its only remarks are the colons of the gateway's names, which its
  // protocol fixes.
  if (frugal_test::available(frugal_test::tool("promtool", FRUGAL_PROMTOOL))) {
    const auto p = frugal_test::promtool_check(m);
    REQUIRE(p);
    std::istringstream lines(p->output);
    for (std::string l; std::getline(lines, l);)
      CHECK_MESSAGE(l.find("metric names should not contain ':'") != std::string::npos, l);
    CHECK(p->output.find("vllm:gpu_cache_usage_perc") != std::string::npos);
  }
  CHECK(json::parse(c.Get("/v1/models")->body)["data"][0]["kind"] == "chat");
}

TEST_CASE(
    "server chat: bad requests get OpenAI-shaped errors with the right status and field; 401 comes before "
    "the model" *
    needs(gguf_model())) {
  chat_server s(json::object(), {"--max-body-bytes", "60000"}, "tok3n");
  auto c = s.client();
  const httplib::Headers auth{{"Authorization", "Bearer tok3n"}};
  const auto expect = [&](const std::string& path, const std::string& b, int status, const std::string& words,
                          const char* param) {
    CAPTURE(b.substr(0, 200));
    auto r = c.Post(path, auth, b, "application/json");
    REQUIRE(r);
    CHECK(r->status == status);
    const json j = json::parse(r->body, nullptr, false);
    REQUIRE(j.is_object());
    CHECK_MESSAGE(j["error"]["message"].get<std::string>().find(words) != std::string::npos, r->body);
    if (param) CHECK(j["error"]["param"] == param);
  };
  const std::string chat = "/v1/chat/completions";
  // Auth first: no token, even for an unknown model, is 401.
  auto r = c.Post(chat, chat_body("hi", 4, {{"model", "nope"}}).dump(), "application/json");
  CHECK(r->status == 401);
  expect(chat, "{not json", 400, "not valid JSON", nullptr);
  expect(chat, chat_body("hi", 4, {{"model", "nope"}}).dump(), 404, "'nope' does not exist", "model");
  expect(chat, json{{"model", model_name}}.dump(), 400, "'messages' is required", "messages");
  expect(chat, chat_body("hi", 4, {{"messages", json::array()}}).dump(), 400, "must not be empty",
         "messages");
  expect(chat, chat_body("hi", 4, {{"messages", {{{"role", "bot"}, {"content", "x"}}}}}).dump(), 400, "'bot'",
         "messages");
  expect(chat, chat_body("hi", 4, {{"messages", {{{"role", "user"}, {"content", 5}}}}}).dump(), 400,
         "messages[0].content", "messages");
  expect(chat, chat_body("hi", 0).dump(), 400, "positive integer", "max_tokens");
  expect(chat, chat_body("hi", 4, {{"max_completion_tokens", "x"}}).dump(), 400, "positive integer",
         "max_completion_tokens");
  expect(chat, chat_body("hi", 4, {{"temperature", "hot"}}).dump(), 400, "'temperature'", "temperature");
  expect(chat, chat_body("hi", 4, {{"top_p", 0}}).dump(), 400, "'top_p'", "top_p");
  expect(chat, chat_body("hi", 4, {{"seed", 1.5}}).dump(), 400, "'seed'", "seed");
  expect(chat, chat_body("hi", 4, {{"stop", 3}}).dump(), 400, "'stop'", "stop");
  expect(chat, chat_body("hi", 4, {{"stream", "yes"}}).dump(), 400, "'stream'", "stream");
  expect(chat, chat_body("hi", 4, {{"stream_options", {{"include_usage", true}}}}).dump(), 400,
         "only allowed with", "stream_options");
  expect(chat, chat_body("hi", 4, {{"n", 2}}).dump(), 400, "'n' must be 1", "n");
  expect(chat, chat_body("hi", 4, {{"user", 3}}).dump(), 400, "'user'", "user");
  expect(chat, chat_body("hi", 4, {{"tools", json::array()}}).dump(), 400, "unrecognized", "tools");
  expect("/v1/completions", json{{"model", model_name}, {"prompt", 5}}.dump(), 400, "'prompt'", "prompt");
  expect("/v1/completions", chat_body("hi", 4).dump(), 400, "unrecognized", "messages");
  // The context (8192 tokens in the file): a prompt over it, then max_tokens that cannot fit after it.
  std::string words;
  for (int i = 0; i < 8300; ++i) words += " a";
  expect("/v1/completions", json{{"model", model_name}, {"prompt", words}}.dump(), 400,
         "maximum context length", "prompt");
  expect(chat, chat_body("hi", 8190).dump(), 400, "maximum context length", "max_tokens");
  // Within the context but over the KV cache's 64 MiB (1,456 tokens): the same field.
  expect(chat, chat_body("hi", 3000, {{"max_completion_tokens", 3000}}).dump(), 400, "KV cache",
         "max_completion_tokens");
  expect(chat, std::string(70000, ' '), 413, "over the server's limit", nullptr);
  // Nothing of the above reached the model.
  const std::string m = c.Get("/metrics", auth)->body;
  CHECK(metric(m, "frugal_scheduler_submitted_total{model=\"smollm2\"}") == 2);  // warm-up, too_long
  CHECK(c.Post(chat, auth, chat_body("hi", 2).dump(), "application/json")->status == 200);
}

TEST_CASE(
    "server chat: a client that leaves, streaming or not, has its sequence cancelled and its KV blocks "
    "freed; a full waiting queue is refused at once with 429 and Retry-After" *
    needs(gguf_model())) {
  chat_server s({{"max_running", 1}, {"max_waiting", 1}});
  auto c = s.client();
  const json story = chat_body("Write a very long story about a dragon and a knight.", 1200);
  json streaming = story;
  streaming["stream"] = true;
  // Streaming: read three events, then close.
  CHECK(stream_then_leave(s.port, streaming, 3) == 3);
  std::string m = wait_metrics(c, {{kv_used, 0}, {running, 0}}, std::chrono::seconds(20));
  CHECK(metric(m, kv_used) == 0);
  CHECK(metric(m, running) == 0);
  CHECK(metric(m, "frugal_scheduler_failed_total{model=\"smollm2\",cause=\"cancelled\"}") == 1);
  // A client that left is booked cancelled, in the route's counters and in the ledger, never as an error.
  CHECK(metric(m, "frugal_llm_requests_total{model=\"smollm2\",outcome=\"cancelled\"}") == 1);
  CHECK(metric(m, "frugal_llm_requests_total{model=\"smollm2\",outcome=\"error\"}") == 0);
  CHECK(metric(m, "frugal_requests_total{feature=\"default\",outcome=\"cancelled\"}") == 1);
  CHECK(metric(m, "frugal_requests_total{feature=\"default\",outcome=\"error\"}") == 0);
  CHECK(metric(m, "frugal_scheduler_tokens_total{model=\"smollm2\",kind=\"generated\"}") < 600);
  // Not streaming: the client gives up waiting.
  {
    httplib::Client impatient("127.0.0.1", s.port);
    impatient.set_read_timeout(1, 0);
    CHECK_FALSE(impatient.Post("/v1/chat/completions", story.dump(), "application/json"));
  }
  m = wait_metrics(
      c,
      {{kv_used, 0}, {running, 0}, {"frugal_llm_requests_total{model=\"smollm2\",outcome=\"cancelled\"}", 2}},
      std::chrono::seconds(20));
  CHECK(metric(m, kv_used) == 0);
  CHECK(metric(m, "frugal_llm_requests_total{model=\"smollm2\",outcome=\"cancelled\"}") == 2);
  CHECK(metric(m, "frugal_requests_total{feature=\"default\",outcome=\"cancelled\"}") == 2);
  CHECK(metric(m, "frugal_requests_total{feature=\"default\",outcome=\"error\"}") == 0);
  CHECK(metric(m, "frugal_scheduler_failed_total{model=\"smollm2\",cause=\"cancelled\"}") == 2);

  // One running, one waiting (their clients hold their connections open until closed here): the third
  // is refused at once.
  std::vector<int> holders;
  // One at a time: a sequence waits until the loop's next step admits it, and counts against max_waiting
  // until then.
  holders.push_back(post_and_hold(s.port, "/v1/chat/completions", story.dump()));
  m = wait_metrics(c, {{running, 1}}, std::chrono::seconds(20));
  holders.push_back(post_and_hold(s.port, "/v1/chat/completions", story.dump()));
  m = wait_metrics(c, {{running, 1}, {"frugal_scheduler_waiting{model=\"smollm2\"}", 1}},
                   std::chrono::seconds(20));
  REQUIRE_MESSAGE(metric(m, "frugal_scheduler_waiting{model=\"smollm2\"}") == 1, m);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.Post("/v1/chat/completions", chat_body("one more", 4).dump(), "application/json");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(r);
  CHECK(r->status == 429);
  CHECK(r->get_header_value("Retry-After") == "1");
  CHECK(json::parse(r->body)["error"]["type"] == "rate_limit_error");
  CHECK(secs < 0.5);
  for (const int fd : holders) ::close(fd);
  m = wait_metrics(c, {{kv_used, 0}, {running, 0}, {"frugal_scheduler_waiting{model=\"smollm2\"}", 0}},
                   std::chrono::seconds(20));
  CHECK(metric(m, kv_used) == 0);
  CHECK(metric(m, "frugal_llm_requests_total{model=\"smollm2\",outcome=\"rejected\"}") == 1);
  CHECK(metric(m, "frugal_requests_total{feature=\"default\",outcome=\"rejected\"}") == 1);
  CHECK(c.Post("/v1/chat/completions", chat_body("after", 2).dump(), "application/json")->status == 200);
}

TEST_CASE(
    "server chat: a real Prometheus scrapes the chat model's series: the gateway's gauges, time to first "
    "token counted per request, token counters equal to the answers' usage, the scheduler and the KV cache" *
    needs(gguf_model(), frugal_test::tool("prometheus", FRUGAL_PROMETHEUS))) {
  chat_server s(json{{"max_waiting", 7}});
  auto c = s.client();
  const double requests = 3;  // doubles: Prometheus answers in floats
  double prompt = 0, cached = 0, completion = 0;
  for (int i = 0; i < 3; ++i) {
    json b = chat_body("Say something about the number " + std::to_string(i % 2) + ".",
                       static_cast<std::size_t>(6 + 2 * i));
    if (i == 2) {
      b["stream"] = true;
      b["stream_options"] = {{"include_usage", true}};
    }
    auto r = c.Post("/v1/chat/completions", {{"X-Frugal-Feature", "scraped"}}, b.dump(), "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    const json u = i == 2 ? parse_stream(r->body).usage : json::parse(r->body)["usage"];
    REQUIRE(u.is_object());
    prompt += u["prompt_tokens"].get<double>();
    cached += u["prompt_tokens_details"]["cached_tokens"].get<double>();
    completion += u["completion_tokens"].get<double>();
  }
  CHECK(cached > 0);  // the third repeats the first's prompt

  const fs::path dir = fs::temp_directory_path() / ("frugal_chat_prom_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "prometheus.yml")
      << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: frugal\n"
      << "    static_configs:\n      - targets: ['127.0.0.1:" << s.port << "']\nrule_files:\n  - "
      << FRUGAL_ALERT_RULES << "\n";
  const int pport = frugal_test::free_port();
  struct prometheus {
    frugal_test::child proc;
    ~prometheus() {
      if (proc.pid > 0) ::kill(proc.pid, SIGKILL), proc.wait();
    }
  } prom{frugal_test::child::spawn({FRUGAL_PROMETHEUS, "--config.file=" + (dir / "prometheus.yml").string(),
                                    "--storage.tsdb.path=" + (dir / "data").string(),
                                    "--web.listen-address=127.0.0.1:" + std::to_string(pport)})};
  httplib::Client pc("127.0.0.1", pport);
  pc.set_read_timeout(5, 0);
  // One instant query's value; -1 when it has no result (not scraped yet), -2 when it has several.
  const auto query = [&](const std::string& q) -> double {
    auto r = pc.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
    if (!r || r->status != 200) return -1;
    const json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || j["data"]["result"].empty()) return -1;
    if (j["data"]["result"].size() > 1) return -2;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  };
  const std::string ttft_count = R"(frugal_time_to_first_token_seconds_count{feature="scraped"})";
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (query(ttft_count) != requests && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  REQUIRE(query(ttft_count) == requests);
  CHECK(query(R"(up{job="frugal"})") == 1);

  // The Gateway API Inference Extension's gauges, idle after the answers.
  CHECK(query(R"(vllm:num_requests_waiting{model_name="smollm2"})") == 0);
  CHECK(query(R"(vllm:num_requests_running{model_name="smollm2"})") == 0);
  const double kv = query(R"(vllm:kv_cache_usage_perc{model_name="smollm2"})");
  CHECK(kv >= 0);
  CHECK(kv <= 1);
  CHECK(query(R"(vllm:gpu_cache_usage_perc{model_name="smollm2"})") == kv);
  const double blocks = query(R"(sum(frugal_kv_cache_blocks{model="smollm2"}))");
  CHECK(blocks > 0);
  CHECK(query(R"(vllm:cache_config_info{model_name="smollm2",block_size="16"})") == 1);
  CHECK(query("count(vllm:cache_config_info{num_gpu_blocks=\"" + std::to_string(static_cast<long>(blocks)) +
              "\"})") == 1);

  // Time to first token: the ledger's histogram counts each request of the feature once, with a sum
  // that is positive and below the requests' own time; the scheduler's counts the warm-up generation too.
  const double ttft_sum = query(R"(frugal_time_to_first_token_seconds_sum{feature="scraped"})");
  CHECK(ttft_sum > 0);
  CHECK(ttft_sum <= query(R"(frugal_request_duration_seconds_sum{feature="scraped"})"));
  CHECK(query(R"(frugal_time_to_first_token_seconds_bucket{feature="scraped",le="+Inf"})") == requests);
  CHECK(query(R"(frugal_scheduler_time_to_first_token_seconds_count{model="smollm2"})") == requests + 1);
  CHECK(
      query(
          R"(histogram_quantile(0.5, sum by (le) (frugal_scheduler_time_to_first_token_seconds_bucket{model="smollm2"})))") >
      0);

  // Token counters, in the ledger (by feature) and the route's (by model), equal to the answers' usage.
  CHECK(query(R"(sum(frugal_prompt_tokens_total{feature="scraped"}))") == prompt);
  CHECK(query(R"(frugal_prompt_tokens_total{feature="scraped",source="prefix_cache"})") == cached);
  CHECK(query(R"(frugal_generated_tokens_total{feature="scraped"})") == completion);
  CHECK(query(R"(frugal_llm_tokens_total{model="smollm2",kind="prompt"})") == prompt);
  CHECK(query(R"(frugal_llm_tokens_total{model="smollm2",kind="cached"})") == cached);
  CHECK(query(R"(frugal_llm_tokens_total{model="smollm2",kind="completion"})") == completion);
  CHECK(query(R"(frugal_llm_requests_total{model="smollm2",outcome="ok"})") == requests);
  CHECK(query(R"(frugal_requests_total{feature="scraped",outcome="ok"})") == requests);

  // The scheduler and the KV cache: every sequence submitted finished by length, nothing holds a block.
  CHECK(query(R"(frugal_scheduler_submitted_total{model="smollm2"})") == requests + 1);
  CHECK(query(R"(frugal_scheduler_finished_total{model="smollm2",reason="length"})") == requests + 1);
  CHECK(query(R"(sum(frugal_scheduler_failed_total{model="smollm2"}))") == 0);
  CHECK(query(R"(frugal_scheduler_waiting{model="smollm2"})") == 0);
  CHECK(query(R"(frugal_scheduler_running{model="smollm2"})") == 0);
  CHECK(query(R"(frugal_scheduler_waiting_limit{model="smollm2"})") == 7);
  CHECK(query(R"(frugal_scheduler_tokens_total{model="smollm2",kind="prefix_hit"})") == cached);
  CHECK(query(R"(frugal_kv_cache_blocks{model="smollm2",state="used"})") == 0);
  CHECK(query(R"(frugal_kv_cache_prefix_hit_tokens_total{model="smollm2"})") == cached);
  CHECK(query(R"(frugal_steps_total)") > 0);

  // The chat alert rules loaded and evaluate without error on the real series (health "ok" once
  // evaluated), and none is pending or firing on the idle server.
  const auto chat_rules = [&] {
    json rules = json::array();
    auto r = pc.Get("/api/v1/rules");
    const json j = r ? json::parse(r->body, nullptr, false) : json();
    if (j.is_object() && j.contains("data"))
      for (const json& g : j.at("data").value("groups", json::array()))
        if (g.value("name", "") == "frugal-chat") rules = g.value("rules", json::array());
    return rules;
  };
  const auto all_ok = [](const json& rules) {
    for (const json& rule : rules)
      if (rule.value("health", "") != "ok") return false;
    return !rules.empty();
  };
  const auto rules_end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  json rules = chat_rules();
  while (!all_ok(rules) && std::chrono::steady_clock::now() < rules_end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rules = chat_rules();
  }
  INFO(rules.dump());
  CHECK(rules.size() == 4);
  CHECK(all_ok(rules));
  for (const json& rule : rules) CHECK(rule.value("alerts", json::array()).empty());
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_CASE(
    "server chat: SIGTERM lets a short stream finish, cuts a long one at the grace with finish_reason abort, "
    "and exits 0" *
    needs(gguf_model())) {
  chat_server s(json::object(), {"--drain-grace-s", "1.5"});
  std::string short_body, long_body;
  std::atomic<int> started{0};
  const auto run = [&](std::size_t max_tokens, std::string& out) {
    httplib::Client h("127.0.0.1", s.port);
    h.set_read_timeout(60, 0);
    httplib::Request r;
    r.method = "POST";
    r.path = "/v1/chat/completions";
    r.headers = {{"Content-Type", "application/json"}};
    r.body = chat_body("Write a long story about the sea.", max_tokens, {{"stream", true}}).dump();
    bool counted = false;
    r.content_receiver = [&](const char* d, std::size_t n, std::uint64_t, std::uint64_t) {
      out.append(d, n);
      if (!counted && out.find("\n\n") != std::string::npos) counted = true, started.fetch_add(1);
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    (void)h.send(r, res, err);
  };
  {
    std::jthread a([&] { run(24, short_body); }), b([&] { run(1000, long_body); });
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (started.load() < 2 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(started.load() == 2);
    ::kill(s.proc.pid, SIGTERM);
  }
  const streamed a = parse_stream(short_body), b = parse_stream(long_body);
  CHECK(a.done);
  CHECK(a.finish_reason == "length");
  CHECK(b.done);
  CHECK(b.finish_reason == "abort");
  CHECK(!b.text.empty());
  CHECK(s.wait_exit(std::chrono::seconds(30)) == 0);
}

TEST_CASE("server chat: a bad chat entry in --models is refused at start, naming the field" *
          needs(gguf_model())) {
  const auto refused = [](const json& entry, const std::string& words) {
    CAPTURE(words);
    const fs::path f =
        fs::temp_directory_path() / ("frugal_chat_bad_" + std::to_string(::getpid()) + ".json");
    std::ofstream(f) << json{{"models", {entry}}}.dump();
    auto p = frugal_test::child::spawn({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", FRUGAL_SERVER_EXE,
                                        "--models", f.string(), "--port", "0"});
    std::string out;
    for (std::string l; !(l = p.read_line()).empty();) out += l;
    int st = 0;
    ::waitpid(p.pid, &st, 0);
    p.pid = -1;
    p.close_fds();
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 2);
    CHECK_MESSAGE(out.find(words) != std::string::npos, out);
    fs::remove(f);
  };
  const std::string gguf = gguf_model_path();
  refused({{"name", "m"}, {"kind", "llm"}}, "models[0].kind: \"llm\" is not one of embedding, chat");
  refused({{"name", "m"}, {"kind", "chat"}}, "models[0].path: a chat model needs its GGUF file");
  refused({{"name", "m"}, {"kind", "chat"}, {"path", "/etc/hostname"}}, "is not a GGUF file");
  refused({{"name", "m"}, {"kind", "chat"}, {"path", gguf}, {"precision", "int3"}}, "models[0].precision");
  refused({{"name", "m"}, {"kind", "chat"}, {"path", gguf}, {"max_runing", 4}},
          "models[0].max_runing: unknown key");
  refused({{"name", "m"}, {"kind", "chat"}, {"path", gguf}, {"max_running", 64}, {"step_tokens", 32}},
          "models[0].step_tokens");
  refused({{"name", "m"}, {"kind", "chat"}, {"path", gguf}, {"threads", 0}}, "models[0].threads");
  refused({{"name", "m"}, {"path", "/nonexistent"}, {"kv_budget_mb", 8}},
          "models[0].kv_budget_mb: unknown key");
}
