// The streaming chat load generator (benchmarks/server/chat_load.cpp, bench_chat_load) as the comparison
// script runs it: against a scripted SSE server in this process (what it counts as an error, by kind),
// and a short closed-loop run below capacity against frugal_server with SmolLM2, after which the server's
// /metrics must show it idle again.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../support/process.hpp"
#include "../support/prometheus.hpp"
#include "../support/requires.hpp"

#include <httplib.h>

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct temp_file {
  fs::path path;
  explicit temp_file(const std::string& what) {
    static std::atomic<int> seq{0};
    path = fs::temp_directory_path() /
           ("frugal_chat_load_" + what + "_" + std::to_string(::getpid()) + "_" + std::to_string(seq++));
  }
  ~temp_file() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  std::string read() const {
    std::ifstream f(path);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
};

// bench_chat_load with @p args; its exit status and stdout and stderr together.
std::pair<int, std::string> run_load(std::vector<std::string> args) {
  args.insert(args.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", FRUGAL_CHAT_LOAD_EXE});
  auto p = frugal_test::child::spawn(args);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(p.out, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  return {p.wait(), out};
}

std::vector<json> read_jsonl(const temp_file& f) {
  std::vector<json> out;
  std::istringstream lines(f.read());
  for (std::string l; std::getline(lines, l);) out.push_back(json::parse(l));
  return out;
}

double metric(const std::string& text, const std::string& series) {
  const std::string v = frugal_test::prom_value(text, series);
  return v == "(absent)" ? -1 : std::stod(v);
}

}  // namespace

TEST_CASE("chat load: a host other than the loopback, a bad URL or a bad flag is refused with status 2") {
  for (const auto& [args, words] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--url", "http://example.com:80"}, "must be 127.0.0.1 or localhost, not \"example.com\""},
           {{"--url", "http://10.0.0.1:8080"}, "not \"10.0.0.1\""},
           {{"--url", "https://127.0.0.1:8080"}, "--url must be http://"},
           {{"--url", "http://127.0.0.1"}, "needs a port"},
           {{"--url", "http://127.0.0.1:8080/v1"}, "takes no path"},
           {{"--concurrency", "4"}, "--url is required"},
           {{"--url", "http://127.0.0.1:8080", "--concurrency", "0"}, "--concurrency must be an integer"},
           {{"--url", "http://127.0.0.1:8080", "--rate", "5"}, "--rate is for --overload only"},
           {{"--url", "http://127.0.0.1:8080", "--overload"}, "--overload needs --rate"},
           {{"--url", "http://127.0.0.1:8080", "--extra", "[1]"}, "--extra must be a JSON object"}}) {
    CAPTURE(words);
    const auto [status, out] = run_load(args);
    CHECK(status == 2);
    CHECK_MESSAGE(out.find(words) != std::string::npos, out);
  }
}

TEST_CASE(
    "chat load: content deltas split anywhere are timed and counted, usage is read, and a 429, an error "
    "event, a stream without [DONE] and a broken stream are each counted as their kind") {
  // The n-th request (concurrency 1: in order) gets the n-th behaviour.
  std::atomic<int> seen{0};
  std::atomic<bool> bodies_ok{true};
  httplib::Server srv;
  srv.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    const json b = json::parse(req.body, nullptr, false);
    if (!b.is_object() || b["stream"] != true || b["temperature"] != 0 ||
        !b["max_tokens"].is_number_integer() || b["stream_options"]["include_usage"] != true ||
        b["model"] != "m" || b["messages"][0]["role"] != "system" || b["ignore_eos"] != true)
      bodies_ok = false;
    const int n = seen.fetch_add(1);
    if (n == 1) {
      res.status = 429;
      res.set_header("Retry-After", "1");
      res.set_content(R"({"error":{"message":"busy"}})", "application/json");
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [n](std::size_t, httplib::DataSink& sink) {
      const std::string role =
          "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
      const auto piece = [](const char* t) {
        return std::string("data: {\"choices\":[{\"delta\":{\"content\":\"") + t +
               "\"},\"finish_reason\":null}]}\r\n\r\n";
      };
      std::string s = role + piece("Hel") + piece("lo") + piece(" there");
      if (n == 2) s += "data: {\"error\":{\"message\":\"the model failed\"}}\n\n";
      s += "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n";
      s += "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":4,"
           "\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n";
      if (n != 3 && n != 4) s += "data: [DONE]\n\n";
      if (n == 4) s.resize(s.size() - 7);  // cut inside the usage event, then the connection closes
      // Written a few bytes at a time, with pauses: events split across reads.
      for (std::size_t at = 0; at < s.size(); at += 7) {
        if (!sink.write(s.data() + at, std::min<std::size_t>(7, s.size() - at))) return false;
        if (at % 91 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      if (n == 4) return false;
      sink.done();
      return true;
    });
  });
  const int port = srv.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread t([&] { srv.listen_after_bind(); });
  temp_file out("summary"), jsonl("requests");
  const auto [status, text] =
      run_load({"--url", "http://127.0.0.1:" + std::to_string(port), "--model", "m", "--concurrency", "1",
                "--requests", "6", "--timeout-s", "10", "--extra", R"({"ignore_eos": true})", "--out",
                out.path.string(), "--jsonl", jsonl.path.string()});
  srv.stop();
  t.join();
  REQUIRE_MESSAGE(status == 0, text);
  CHECK(bodies_ok);
  const json s = json::parse(out.read());
  CHECK(s["mode"] == "closed");
  CHECK(s["requests"] == 6);
  CHECK(s["ok"] == 2);
  CHECK(s["errors"] == 4);
  CHECK(s["errors_by_kind"] ==
        json{{"http_429", 1}, {"error_event", 1}, {"missing_done", 1}, {"broken_stream", 1}});
  CHECK(s["ttft_s"]["n"] == 2);
  CHECK(s["itl_s"]["n"] == 4);  // 3 deltas each, the empty role delta not one of them
  CHECK(s["with_usage"] == 2);
  CHECK(s["cached_prompt_tokens"] == 64);
  const auto rs = read_jsonl(jsonl);
  REQUIRE(rs.size() == 6);
  for (std::size_t i = 0; i < rs.size(); ++i) CHECK(rs[i]["index"] == i);
  CHECK(rs[0]["error"].is_null());
  CHECK(rs[0]["deltas"] == 3);
  CHECK(rs[0]["completion_tokens"] == 4);
  CHECK(rs[0]["finish_reason"] == "length");
  CHECK(rs[0]["done"] == true);
  CHECK(rs[0]["ttft_s"].get<double>() <= rs[0]["e2e_s"].get<double>());
  CHECK(rs[1]["status"] == 429);
  CHECK(rs[1]["error_detail"].get<std::string>().find("busy") != std::string::npos);
  CHECK(rs[2]["error"] == "error_event");
  CHECK(rs[3]["error"] == "missing_done");
  CHECK(rs[4]["error"] == "broken_stream");
  CHECK(rs[4]["done"] == false);
  CHECK(rs[5]["error"].is_null());  // the connection after the broken one is a new one, and works
}

TEST_CASE(
    "chat load: 12 streamed chat requests at concurrency 4 against frugal_server all complete with TTFT and "
    "ITL; the server's token count agrees, and afterwards nothing runs or waits and the KV cache is back "
    "at idle" *
    frugal_test::needs(frugal_test::gguf_model())) {
  const temp_file config("models");
  std::ofstream(config.path) << json{
      {"models",
       {{{"name", "smollm2"},
         {"kind", "chat"},
         {"path", frugal_test::gguf_model_path()},
         {"pinned", true},
         {"threads", 2},
         {"kv_budget_mb", 128},
         {"max_running", 8}}}}}.dump();
  auto proc = frugal_test::child::spawn({FRUGAL_SERVER_EXE, "--models", config.path.string(), "--port", "0"});
  struct killer {
    frugal_test::child& p;
    ~killer() {
      if (p.pid > 0) ::kill(p.pid, SIGKILL);
      p.wait();
    }
  } kill_at_exit{proc};
  const std::string l = proc.read_line();
  REQUIRE_MESSAGE(l.rfind("listening on 127.0.0.1:", 0) == 0, "server said: " << l);
  const int port = std::stoi(l.substr(l.rfind(':') + 1));
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(20, 0);
  const std::string kv_used = "frugal_kv_cache_blocks{model=\"smollm2\",state=\"used\"}";
  const std::string usage = "vllm:gpu_cache_usage_perc{model_name=\"smollm2\"}";
  auto before = c.Get("/metrics");
  REQUIRE(before);
  const double idle_blocks = metric(before->body, kv_used), idle_usage = metric(before->body, usage);
  REQUIRE(idle_blocks >= 0);
  REQUIRE(idle_usage >= 0);

  temp_file out("summary"), jsonl("requests");
  const auto [status, text] =
      run_load({"--url", "http://127.0.0.1:" + std::to_string(port), "--concurrency", "4", "--requests", "12",
                "--answer-median", "10", "--answer-max", "24", "--duration-s", "45", "--timeout-s", "40",
                "--out", out.path.string(), "--jsonl", jsonl.path.string()});
  REQUIRE_MESSAGE(status == 0, text);
  const json s = json::parse(out.read());
  INFO(s.dump(2));
  CHECK(s["requests"] == 12);
  CHECK(s["ok"] == 12);
  CHECK(s["errors"] == 0);
  CHECK(s["with_usage"] == 12);
  CHECK(s["ttft_s"]["n"] == 12);
  CHECK(s["ttft_s"]["p50"].get<double>() > 0);
  CHECK(s["ttft_s"]["p99"].get<double>() >= s["ttft_s"]["p50"].get<double>());
  CHECK(s["itl_s"]["n"].get<std::size_t>() > 12);
  CHECK(s["itl_s"]["p50"].get<double>() > 0);
  CHECK(s["output_tokens_per_s"].get<double>() > 0);
  // The trace's histories share system prompts and grow turn by turn: the prefix cache serves some.
  CHECK(s["cached_prompt_tokens"].get<std::size_t>() > 0);
  const auto rs = read_jsonl(jsonl);
  REQUIRE(rs.size() == 12);
  for (const json& r : rs) {
    CAPTURE(r.dump());
    CHECK(r["done"] == true);
    CHECK(r["status"] == 200);
    CHECK(r["completion_tokens"].get<std::size_t>() <= r["max_tokens"].get<std::size_t>());
    CHECK(r["deltas"].get<std::size_t>() <= r["completion_tokens"].get<std::size_t>());
    CHECK(r["ttft_s"].get<double>() <= r["e2e_s"].get<double>());
  }

  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::string m;
  for (;;) {
    m = c.Get("/metrics")->body;
    if ((metric(m, "vllm:num_requests_running{model_name=\"smollm2\"}") == 0 &&
         metric(m, "vllm:num_requests_waiting{model_name=\"smollm2\"}") == 0 &&
         metric(m, kv_used) == idle_blocks) ||
        std::chrono::steady_clock::now() > end)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(metric(m, "vllm:num_requests_running{model_name=\"smollm2\"}") == 0);
  CHECK(metric(m, "vllm:num_requests_waiting{model_name=\"smollm2\"}") == 0);
  CHECK(metric(m, kv_used) == idle_blocks);
  CHECK(metric(m, usage) == idle_usage);
  CHECK(metric(m, "frugal_llm_requests_total{model=\"smollm2\",outcome=\"ok\"}") == 12);
  CHECK(metric(m, "frugal_llm_tokens_total{model=\"smollm2\",kind=\"completion\"}") == s["output_tokens"]);
  CHECK(c.Get("/healthz")->status == 200);
}
