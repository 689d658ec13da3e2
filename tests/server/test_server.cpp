// The example server as its users run it: a child process on 127.0.0.1, a real HTTP client, a real
// Prometheus scraping it, and wrk. Every service is started here on a free port and stopped after.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/process.hpp"
#include "../support/prometheus.hpp"
#include "../support/requires.hpp"
#include "bert.hpp"
#if FRUGAL_SERVER_HAS_REDIS
#  include "../redis/redis_server.hpp"
#endif

// After Eigen (see examples/server/server.hpp).
#include <httplib.h>

extern char** environ;

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

using frugal_test::free_port;
using frugal_test::model;
using frugal_test::model_dir;
using frugal_test::needs;

// A process under test (frugal_test::child: the kernel kills it if this test dies), with extra environment
// variables, killed at scope exit if it is still running.
struct child {
  frugal_test::child c;
  explicit child(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    for (const auto& e : env)
      ::setenv(e.substr(0, e.find('=')).c_str(), e.substr(e.find('=') + 1).c_str(), 1);
    c = frugal_test::child::spawn(args);
    for (const auto& e : env) ::unsetenv(e.substr(0, e.find('=')).c_str());
  }
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  pid_t pid() const { return c.pid; }
  std::string line() const { return c.read_line(); }  // "" when it exits first
  int wait_exit(std::chrono::seconds within) {
    const auto end = std::chrono::steady_clock::now() + within;
    int st = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {
        c.pid = -1;
        c.close_fds();
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  ~child() {
    if (c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      c.wait();
    }
    c.close_fds();
  }
};

// frugal_server on a free port, ready to serve.
struct server_proc {
  std::unique_ptr<child> proc;
  int port = 0;
  explicit server_proc(std::vector<std::string> flags, std::vector<std::string> env = {}) {
    std::vector<std::string> args{FRUGAL_SERVER_EXE, "--model", model_dir(), "--port", "0",
                                  "--precision",     "fp32"};
    args.insert(args.end(), flags.begin(), flags.end());
    proc = std::make_unique<child>(args, env);
    const std::string l = proc->line();
    REQUIRE_MESSAGE(l.rfind("listening on 127.0.0.1:", 0) == 0, "server said: " << l);
    port = std::stoi(l.substr(l.rfind(':') + 1));
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    return c;
  }
};

// One HTTP/1.1 POST on a fresh connection, read to EOF: the concurrency tests use it instead of
// httplib::Client, whose client side dropped some answers under a burst where curl and Python did not.
struct raw_response {
  int status = -1;  // -1: no answer (connection failed or closed without a status line)
  std::string headers, body;
};
raw_response raw_post(int port, const std::string& path, const std::string& payload) {
  raw_response r;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return r;
  }
  const std::string req =
      "POST " + path +
      " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n" +
      "Content-Length: " + std::to_string(payload.size()) + "\r\n\r\n" + payload;
  for (std::size_t off = 0; off < req.size();) {
    const ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      ::close(fd);
      return r;
    }
    off += static_cast<std::size_t>(n);
  }
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) all.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const auto eoh = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.1 ", 0) != 0 || eoh == std::string::npos) return r;
  r.status = std::atoi(all.c_str() + 9);
  r.headers = all.substr(0, eoh);
  r.body = all.substr(eoh + 4);
  return r;
}

std::string body(const json& input, const std::string& model = "all-MiniLM-L6-v2") {
  return json{{"model", model}, {"input", input}}.dump();
}

// The default model's batcher: the server exports one per model, labelled.
const std::string submitted = R"(frugal_batcher_submitted_total{model="all-MiniLM-L6-v2"})";

double metric(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

// Polls GET /metrics until `series` equals `want`, for at most `within`; returns the last text read, for
// the caller's checks (a series that lags the server's other state: counters recorded off the request path).
std::string wait_metric(httplib::Client& c, const std::string& series, double want,
                        std::chrono::seconds within) {
  const auto end = std::chrono::steady_clock::now() + within;
  std::string text = c.Get("/metrics")->body;
  while (metric(text, series) != want && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    text = c.Get("/metrics")->body;
  }
  return text;
}

}  // namespace

TEST_CASE(
    "server: /v1/embeddings answers in the OpenAI shape, equal to the encoder, and records it under its "
    "feature" *
    needs(model())) {
  server_proc s({});
  auto c = s.client();
  CHECK(c.Get("/healthz")->status == 200);
  CHECK(c.Get("/readyz")->status == 200);
  const std::vector<std::string> texts{"The quick brown fox.", "Ça va? 日本語", "the quick brown fox."};
  httplib::Headers h{{"X-Frugal-Feature", "search"}};
  auto r = c.Post("/v1/embeddings", h, body(texts), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  const json j = json::parse(r->body);
  CHECK(j["object"] == "list");
  CHECK(j["model"] == "all-MiniLM-L6-v2");
  REQUIRE(j["data"].size() == 3);
  const auto want = bert::encoder::load(model_dir()).encode_texts(texts);
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(j["data"][i]["index"] == i);
    CHECK(j["data"][i]["object"] == "embedding");
    const auto v = j["data"][i]["embedding"].get<std::vector<float>>();
    REQUIRE(v.size() == 384);
    CHECK(bert::cosine(v, want[i]) > 0.99999);
    tokens += bert::encoder::load(model_dir()).tokenize(texts[i]).size();
  }
  CHECK(j["usage"]["prompt_tokens"] == tokens);
  // A single string, a repeat (answered by the cache), and the user field as the feature.
  r = c.Post("/v1/embeddings",
             json{{"model", "all-MiniLM-L6-v2"}, {"input", texts[0]}, {"user", "chat"}}.dump(),
             "application/json");
  REQUIRE(r->status == 200);
  CHECK(json::parse(r->body)["data"].size() == 1);
  const std::string m = c.Get("/metrics")->body;
  CHECK(metric(m, "frugal_requests_total{feature=\"search\",outcome=\"ok\"}") == 3);
  CHECK(metric(m, "frugal_requests_total{feature=\"chat\",outcome=\"ok\"}") == 1);
  CHECK(metric(m, "frugal_cache_hits_total{feature=\"chat\"}") == 1);
  CHECK(metric(m, "frugal_process_resident_bytes") > 50e6);
  CHECK(metric(m, "frugal_model_ready") == 1);
  CHECK(metric(m, submitted) == 3);
  CHECK(metric(m, R"(frugal_result_cache_hits_total)") == 1);
  CHECK(metric(m, R"(frugal_pool_model_ready{model="all-MiniLM-L6-v2"})") == 1);
  // The whole text, every exporter composed, is valid by Prometheus' own checker.
  FRUGAL_CHECK_PROMTOOL(m);
  CHECK(c.Get("/v1/models")->body.find("all-MiniLM-L6-v2") != std::string::npos);
}

TEST_CASE("server: bad requests get OpenAI-shaped errors with the right status and the field named" *
          needs(model())) {
  server_proc s({"--max-body-bytes", "4096", "--max-inputs", "4"});
  auto c = s.client();
  const auto expect = [&](const std::string& b, int status, const std::string& words, const char* param) {
    CAPTURE(b);
    auto r = c.Post("/v1/embeddings", b, "application/json");
    REQUIRE(r);
    CHECK(r->status == status);
    const json j = json::parse(r->body, nullptr, false);
    REQUIRE(j.is_object());
    CHECK(j["error"]["message"].get<std::string>().find(words) != std::string::npos);
    if (param) CHECK(j["error"]["param"] == param);
  };
  expect("{not json", 400, "not valid JSON", nullptr);
  expect("[1, 2]", 400, "JSON object", nullptr);
  expect(R"({"input": "a"})", 400, "'model'", "model");
  expect(body("a", "gpt-9"), 404, "gpt-9", "model");
  expect(R"({"model": "all-MiniLM-L6-v2"})", 400, "'input' is required", "input");
  expect(body(42), 400, "string or an array", "input");
  expect(body(json::array()), 400, "must not be empty", "input");
  expect(body(""), 400, "empty string", "input");
  expect(body(json::array({"ok", 7})), 400, "input[1]", "input");
  expect(body(json::array({"a", "b", "c", "d", "e"})), 400, "over the limit of 4", "input");
  expect(json{{"model", "all-MiniLM-L6-v2"}, {"input", "a"}, {"encoding_format", "base64"}}.dump(), 400,
         "encoding_format", "encoding_format");
  expect(json{{"model", "all-MiniLM-L6-v2"}, {"input", "a"}, {"user", 5}}.dump(), 400, "'user'", "user");
  expect(body(std::string(5000, 'x')), 413, "over the server's limit", nullptr);
  auto r = c.Get("/nothing");
  CHECK(r->status == 404);
  CHECK(json::parse(r->body)["error"]["message"] == "no such route");
}

TEST_CASE("server: with a token, requests without it get 401 and never reach the model" * needs(model())) {
  server_proc s({}, {"FRUGAL_SERVER_TOKEN=s3cret-token"});
  auto c = s.client();
  auto r = c.Post("/v1/embeddings", body("hello"), "application/json");
  CHECK(r->status == 401);
  CHECK(r->get_header_value("WWW-Authenticate") == "Bearer");
  r = c.Post("/v1/embeddings", {{"Authorization", "Bearer s3cret-tokeN"}}, body("hello"), "application/json");
  CHECK(r->status == 401);
  CHECK(c.Get("/metrics")->status == 401);
  CHECK(c.Get("/healthz")->status == 200);
  const httplib::Headers ok{{"Authorization", "Bearer s3cret-token"}};
  const std::string m = c.Get("/metrics", ok)->body;
  CHECK(metric(m, submitted) == 0);  // the 401s reached no model
  CHECK(c.Post("/v1/embeddings", ok, body("hello"), "application/json")->status == 200);
}

TEST_CASE("server: SIGTERM answers every accepted request, flushes the ledger's exports and exits 0" *
          needs(model())) {
  const fs::path dir = fs::temp_directory_path() / ("frugal_server_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  server_proc s({"--window-ms", "3000", "--max-batch", "64", "--export-dir", dir.string()});
  constexpr int n = 12;
  std::atomic<int> ok{0};
  std::vector<std::jthread> clients;  // joined on every exit path, before the server is killed
  for (int i = 0; i < n; ++i)
    clients.emplace_back([&, i] {
      const auto r = raw_post(s.port, "/v1/embeddings", body("sentence number " + std::to_string(i)));
      if (r.status == 200 && json::parse(r.body)["data"].size() == 1) ok.fetch_add(1);
    });
  // Every request is in the batcher's window before the signal.
  auto c = s.client();
  REQUIRE(metric(wait_metric(c, submitted, n, std::chrono::seconds(10)), submitted) == n);
  ::kill(s.proc->pid(), SIGTERM);
  for (auto& t : clients) t.join();
  CHECK(ok.load() == n);
  CHECK(s.proc->wait_exit(std::chrono::seconds(30)) == 0);
  std::ifstream prom(dir / "ledger.prom");
  const std::string text((std::istreambuf_iterator<char>(prom)), {});
  CHECK(metric("\n" + text, "frugal_requests_total{feature=\"default\",outcome=\"ok\"}") == n);
  CHECK(fs::exists(dir / "ledger.json"));
  fs::remove_all(dir);
}

TEST_CASE("server: an export it cannot write is refused at start, or at SIGTERM exits 1 naming the file" *
          needs(model())) {
  const fs::path dir = fs::temp_directory_path() / ("frugal_server_exports_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "exports");
  { std::ofstream(dir / "a_file") << "x"; }
  const std::string under_file = (dir / "a_file" / "exports").string();
  {
    child p({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", FRUGAL_SERVER_EXE, "--model", model_dir(), "--port",
             "0", "--export-dir", under_file});
    std::string err;
    for (std::string l; !(l = p.line()).empty();) err += l;
    CHECK(p.wait_exit(std::chrono::seconds(20)) == 2);
    CHECK(err.find(under_file) != std::string::npos);
  }
  // A directory where the ledger's file must go: the flush at SIGTERM fails, and says where.
  fs::create_directories(dir / "exports" / "ledger.json");
  child p({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", FRUGAL_SERVER_EXE, "--model", model_dir(), "--port",
           "0", "--precision", "fp32", "--export-dir", (dir / "exports").string()});
  std::string err;
  for (std::string l; (l = p.line()).rfind("listening on", 0) != 0; err += l)
    REQUIRE_MESSAGE(!l.empty(), "the server exited before listening: " << err);
  ::kill(p.pid(), SIGTERM);
  for (std::string l; !(l = p.line()).empty();) err += l;
  CHECK(p.wait_exit(std::chrono::seconds(30)) == 1);
  CHECK(err.find((dir / "exports" / "ledger.json").string()) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("server: overload is refused at once with 429 and Retry-After; every accepted request succeeds" *
          needs(model())) {
  server_proc s({"--max-queued", "4", "--window-ms", "50", "--max-batch", "4", "--http-threads", "48",
                 "--cache-entries", "0", "--http-nice", "19"});
  constexpr int n = 40;
  std::atomic<int> ok{0}, rejected{0}, other{0};
  std::vector<std::jthread> clients;
  for (int i = 0; i < n; ++i)
    clients.emplace_back([&, i] {
      const auto r =
          raw_post(s.port, "/v1/embeddings",
                   body("a longer sentence that takes the model a while, number " + std::to_string(i)));
      if (r.status == 200)
        ok.fetch_add(1);
      else if (r.status == 429 && r.headers.find("\r\nRetry-After: 1") != std::string::npos)
        rejected.fetch_add(1);
      else {
        other.fetch_add(1);
        MESSAGE("overload: other answer " << r.status << " " << r.body);
      }
    });
  for (auto& t : clients) t.join();
  MESSAGE("overload: " << ok.load() << " answered, " << rejected.load() << " refused with 429");
  CHECK(other.load() == 0);
  CHECK(ok.load() + rejected.load() == n);
  CHECK(rejected.load() > 0);
  CHECK(ok.load() >= 4);
  auto c = s.client();
  // Refusals are counted as rejected, not as errors (an error-rate alert must not fire on them).
  const std::string m = c.Get("/metrics")->body;
  CHECK(metric(m, "frugal_requests_total{feature=\"default\",outcome=\"rejected\"}") == rejected.load());
  CHECK(metric(m, "frugal_requests_total{feature=\"default\",outcome=\"error\"}") == 0);
  CHECK(c.Get("/readyz")->status == 200);
  CHECK(c.Post("/v1/embeddings", body("after the storm"), "application/json")->status == 200);
  // --http-nice 19: the HTTP threads that served a request run at nice 19, the model's and the main
  // thread at 0 (so that under overload accepted work gets the CPU first).
  std::map<long, int> nices;  // nice value -> threads
  for (const auto& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(s.proc->pid()) + "/task")) {
    std::ifstream f(t.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(f)), {});
    std::istringstream rest(stat.substr(stat.rfind(')') + 2));
    std::string field;
    for (int i = 0; i <= 16; ++i) rest >> field;  // state is field 3, nice field 19
    ++nices[std::stol(field)];
  }
  CHECK(nices[19] >= 1);
  CHECK(nices[0] >= 1);
  CHECK(nices.size() == 2);
  // The listen backlog is widened from Debian's httplib's 5 (`ss` shows it as Send-Q of the listener).
  if (frugal_test::available(frugal_test::on_path("ss"))) {
    FILE* p = ::popen(("ss -lntH 'sport = :" + std::to_string(s.port) + "' 2>&1").c_str(), "r");
    REQUIRE(p);
    char buf[512] = {};
    const std::string line = std::fgets(buf, sizeof buf, p) ? buf : "";
    ::pclose(p);
    std::istringstream in(line);
    std::string state, recv_q, send_q;
    in >> state >> recv_q >> send_q;
    INFO("ss said: " << line);
    REQUIRE(state == "LISTEN");  // the server is listening on the port
    CHECK(std::stol(send_q) >= 128);
  }
}

TEST_CASE("server: a real Prometheus scrapes /metrics and sees frugal's series with the right values" *
          needs(model(), frugal_test::tool("prometheus", FRUGAL_PROMETHEUS))) {
  server_proc s({});
  auto c = s.client();
  for (int i = 0; i < 5; ++i)
    REQUIRE(c.Post("/v1/embeddings", {{"X-Frugal-Feature", "scraped"}},
                   body("scrape me " + std::to_string(i % 3)), "application/json")
                ->status == 200);
  const fs::path dir = fs::temp_directory_path() / ("frugal_prom_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream cfg(dir / "prometheus.yml");
    cfg << "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: frugal\n    static_configs:\n"
        << "      - targets: ['127.0.0.1:" << s.port << "']\nrule_files:\n  - " << FRUGAL_ALERT_RULES << "\n";
  }
  const int pport = free_port();
  child prom({FRUGAL_PROMETHEUS, "--config.file=" + (dir / "prometheus.yml").string(),
              "--storage.tsdb.path=" + (dir / "data").string(),
              "--web.listen-address=127.0.0.1:" + std::to_string(pport)});
  httplib::Client pc("127.0.0.1", pport);
  const auto query = [&](const std::string& q) -> double {
    auto r = pc.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
    if (!r || r->status != 200) return -1;
    const json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || j["data"]["result"].empty()) return -1;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  };
  double got = -1, hits = -1;
  for (int k = 0; k < 300 && (got != 5 || hits != 2); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    got = query(R"(frugal_requests_total{feature="scraped",outcome="ok"})");
    hits = query(R"(frugal_cache_hits_total{feature="scraped"})");
  }
  CHECK(got == 5);
  CHECK(hits == 2);
  CHECK(query("frugal_model_ready") == 1);
  CHECK(query(R"(up{job="frugal"})") == 1);
  // The alert rules loaded (a rule group is listed by the rules API).
  auto r = pc.Get("/api/v1/rules");
  REQUIRE(r);
  CHECK(r->body.find("FrugalP99LatencyHigh") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("server: a short wrk run below capacity gets no non-2xx response" *
          needs(model(), frugal_test::tool("wrk", FRUGAL_WRK))) {
  server_proc s({"--max-queued", "4096"});
  const fs::path dir = fs::temp_directory_path() / ("frugal_wrk_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "sentences.txt");
    for (int i = 0; i < 50; ++i) f << "wrk sentence " << i << " about the weather\n";
  }
  const std::string out = (dir / "wrk.txt").string();
  const std::string cmd = std::string(FRUGAL_WRK) + " -t 1 -c 4 -d 3s -s " + FRUGAL_WRK_SCRIPT +
                          " http://127.0.0.1:" + std::to_string(s.port) + "/v1/embeddings > " + out + " 2>&1";
  const int rc =
      std::system(("FRUGAL_WRK_SENTENCES=" + (dir / "sentences.txt").string() + " " + cmd).c_str());
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  INFO(text);
  CHECK(rc == 0);
  CHECK(text.find("requests in") != std::string::npos);
  CHECK(text.find("Non-2xx") == std::string::npos);
  CHECK(text.find("Socket errors") == std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE(
    "server: two replicas share results through a real Redis, and a dead Redis is a miss, not an error" *
    needs(model(),
          frugal_test::found("hiredis", FRUGAL_SERVER_HAS_REDIS,
                             "the build found no hiredis (libhiredis-dev)"),
          frugal_test::on_path("redis-server"))) {
#if FRUGAL_SERVER_HAS_REDIS
  auto redis = std::make_unique<frugal_test::redis_server>();  // answers PING before this returns
  const std::string addr = "127.0.0.1:" + std::to_string(redis->port());
  server_proc a({"--redis", addr}), b({"--redis", addr});
  auto ca = a.client(), cb = b.client();
  auto r1 = ca.Post("/v1/embeddings", body("computed once, served twice"), "application/json");
  REQUIRE(r1->status == 200);
  auto r2 = cb.Post("/v1/embeddings", body("computed once, served twice"), "application/json");
  REQUIRE(r2->status == 200);
  CHECK(json::parse(r1->body)["data"][0]["embedding"] == json::parse(r2->body)["data"][0]["embedding"]);
  const std::string mb = cb.Get("/metrics")->body;
  CHECK(metric(mb, "frugal_redis_hits_total") == 1);
  CHECK(metric(mb, submitted) == 0);  // replica B never called its model
  CHECK(metric(mb, "frugal_remote_hits_total{feature=\"default\"}") == 1);
  FRUGAL_CHECK_PROMTOOL(mb);  // with the shared tier's families
  CHECK(metric(ca.Get("/metrics")->body, submitted) == 1);
  // Redis dies: lookups fall back to the model after the command timeout; callers never see it.
  redis->kill();
  auto r3 = ca.Post("/v1/embeddings", body("redis is gone"), "application/json");
  REQUIRE(r3);
  CHECK(r3->status == 200);
  const std::string ma = ca.Get("/metrics")->body;
  CHECK(metric(ma, "frugal_redis_fallbacks_total") >= 1);
  CHECK(metric(ma, "frugal_remote_faults_total{feature=\"default\"}") >= 1);
#endif
}

namespace {

// A --models file in a per-process temp directory, removed at scope exit.
struct models_file {
  fs::path path;
  explicit models_file(const json& j, const std::string& tag) {
    path = fs::temp_directory_path() / ("frugal_models_" + std::to_string(::getpid()) + "_" + tag + ".json");
    std::ofstream f(path);
    f << j.dump();
    REQUIRE(f.good());
  }
  ~models_file() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

// The model's row of GET /v1/models.
json model_row(const httplib::Client& c, const std::string& name) {
  auto& cl = const_cast<httplib::Client&>(c);
  const auto r = cl.Get("/v1/models");
  REQUIRE(r);
  const json all = json::parse(r->body);  // named: a range-for over a temporary's member would dangle
  for (const auto& m : all["data"])
    if (m["id"] == name) return m;
  FAIL("no model " << name << " in /v1/models: " << r->body);
  return {};
}

// Polls until the model's row has `state`, for at most `within`.
bool wait_state(const httplib::Client& c, const std::string& name, const std::string& state,
                std::chrono::seconds within) {
  const auto end = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < end) {
    if (model_row(c, name)["state"] == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

TEST_CASE(
    "server: models from the pool; a cold start on the first request, unloaded when idle, loaded again" *
    needs(model())) {
  models_file mf(json{{"models",
                       {{{"name", "minilm-int8"}, {"precision", "int8"}, {"pinned", true}},
                        {{"name", "minilm-fp32"}, {"precision", "fp32"}, {"idle_unload_s", 0.5}}}}},
                 "idle");
  server_proc s({"--models", mf.path.string(), "--pool-collect-s", "0.1"});
  auto c = s.client();
  CHECK(c.Get("/readyz")->status == 200);  // the pinned model is loaded and warm
  json int8 = model_row(c, "minilm-int8"), fp32 = model_row(c, "minilm-fp32");
  CHECK(int8["state"] == "ready");
  CHECK(int8["precision"] == "int8");
  CHECK(int8["pinned"] == true);
  CHECK(int8["loads"] == 1);
  CHECK(int8["bytes"].get<double>() > 10e6);
  CHECK(fp32["state"] == "unloaded");
  CHECK(fp32["loads"] == 0);
  CHECK(fp32["bytes"] == 0);

  // The first request to the fp32 model loads it (a cold start) and is answered by it.
  const std::vector<std::string> texts{"A model loaded on demand.", "Another sentence."};
  auto r = c.Post("/v1/embeddings", body(texts, "minilm-fp32"), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  const json j = json::parse(r->body);
  CHECK(j["model"] == "minilm-fp32");
  const auto want = bert::encoder::load(model_dir()).encode_texts(texts);
  for (std::size_t i = 0; i < texts.size(); ++i)
    CHECK(bert::cosine(j["data"][i]["embedding"].get<std::vector<float>>(), want[i]) > 0.99999);
  fp32 = model_row(c, "minilm-fp32");
  CHECK(fp32["loads"] == 1);
  CHECK(fp32["bytes"].get<double>() > int8["bytes"].get<double>());  // fp32 weights are larger
  // The int8 model answers its own requests, close to fp32 but not equal.
  r = c.Post("/v1/embeddings", body(texts[0], "minilm-int8"), "application/json");
  REQUIRE(r->status == 200);
  const double cos =
      bert::cosine(json::parse(r->body)["data"][0]["embedding"].get<std::vector<float>>(), want[0]);
  CHECK(cos > 0.98);
  CHECK(cos < 0.999999);

  // Idle for 0.5 s: unloaded, and its bytes leave the pool; the pinned one stays.
  REQUIRE(wait_state(c, "minilm-fp32", "unloaded", std::chrono::seconds(10)));
  fp32 = model_row(c, "minilm-fp32");
  CHECK(fp32["idle_unloads"] == 1);
  CHECK(fp32["bytes"] == 0);
  CHECK(model_row(c, "minilm-int8")["state"] == "ready");
  // The ledger records the unload after the model is destroyed, outside the pool's lock: it may trail the
  // state the model list shows, so wait for it.
  const std::string unloads = "frugal_model_unloads_total{device=\"cpu0\",gpu_class=\"cpu\"}";
  std::string m = wait_metric(c, unloads, 1, std::chrono::seconds(10));
  CHECK(metric(m, unloads) == 1);
  CHECK(metric(m, "frugal_pool_idle_unloads_total{model=\"minilm-fp32\"}") == 1);
  CHECK(metric(m, "frugal_pool_used_bytes") == int8["bytes"].get<double>());

  // A new request loads it again, and the reloaded model gives the encoder's answer.
  r = c.Post("/v1/embeddings", body(std::string("A third sentence."), "minilm-fp32"), "application/json");
  REQUIRE(r->status == 200);
  CHECK(bert::cosine(
            json::parse(r->body)["data"][0]["embedding"].get<std::vector<float>>(),
            bert::encoder::load(model_dir()).encode_texts(std::vector<std::string>{"A third sentence."})[0]) >
        0.99999);
  CHECK(model_row(c, "minilm-fp32")["loads"] == 2);
  m = c.Get("/metrics")->body;
  CHECK(metric(m, "frugal_model_loads_total{device=\"cpu0\",gpu_class=\"cpu\"}") == 3);
  // An unknown model is a 404 that lists the served ones.
  r = c.Post("/v1/embeddings", body("x", "minilm"), "application/json");
  CHECK(r->status == 404);
  CHECK(r->body.find("'minilm-int8', 'minilm-fp32'") != std::string::npos);
}

TEST_CASE("server: a pool budget of one model evicts the idle one for the next, and answers both" *
          needs(model())) {
  // Two fp32 models of about 90 MB each in a budget of 150 MB: one at a time.
  models_file mf(json{{"budget_mb", 150},
                      {"models",
                       {{{"name", "a"}, {"precision", "fp32"}, {"estimated_mb", 100}},
                        {{"name", "b"}, {"precision", "fp32"}, {"estimated_mb", 100}}}}},
                 "budget");
  server_proc s({"--models", mf.path.string()});
  auto c = s.client();
  int round = 0;
  for (const std::string name : {"a", "b", "a"}) {  // distinct texts: a repeat would be a cache hit
    CAPTURE(name);
    const auto r = c.Post("/v1/embeddings", body("budget sentence " + std::to_string(++round), name),
                          "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(model_row(c, name)["state"] == "ready");
  }
  const json a = model_row(c, "a"), b = model_row(c, "b");
  CHECK(a["loads"] == 2);
  CHECK(b["loads"] == 1);
  CHECK(a["evictions"] == 1);
  CHECK(b["evictions"] == 1);
  CHECK(b["state"] == "unloaded");
  const std::string m = c.Get("/metrics")->body;
  CHECK(metric(m, "frugal_pool_used_bytes") <= 150.0 * (1 << 20));
  CHECK(metric(m, "frugal_pool_evictions_total{model=\"a\"}") == 1);
}

TEST_CASE("server: a bad --models file is refused at start, naming the field's path; nothing is loaded" *
          needs(model())) {
  const auto refused = [](const json& j, const std::string& words) {
    CAPTURE(words);
    models_file mf(j, "bad");
    // Through sh, for the server's stderr on the pipe the test reads.
    child p({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", FRUGAL_SERVER_EXE, "--model", model_dir(), "--port",
             "0", "--models", mf.path.string()});
    std::string err;
    for (std::string l; !(l = p.line()).empty();) err += l;
    CHECK(p.wait_exit(std::chrono::seconds(20)) == 2);
    CHECK(err.find(words) != std::string::npos);
    CHECK(err.find("listening") == std::string::npos);
  };
  const json ok = {{"name", "m"}, {"precision", "fp32"}};
  refused(json{{"models", {ok, {{"name", "n"}, {"precison", "fp32"}}}}}, "models[1].precison: unknown key");
  refused(json{{"models", {{{"name", "m"}, {"precision", "int3"}}}}}, "models[0].precision");
  refused(json{{"models", {ok, ok}}}, "models[1].name: \"m\" is given twice");
  refused(json{{"models", {{{"name", "a b"}}}}}, "models[0].name");
  refused(json{{"models", {{{"name", "m"}, {"pinned", true}, {"idle_unload_s", 5}}}}},
          "models[0].idle_unload_s");
  refused(json{{"models", {{{"name", "m"}, {"path", "/nonexistent"}}}}}, "models[0].path");
  refused(json{{"models", {"m"}}}, "models[0]: must be an object");
  refused(json{{"model", {ok}}}, "model: unknown key");
  refused(json{{"models", json::array()}}, "needs at least one model");
  refused(json{{"budget_mb", 0}, {"models", {ok}}}, "budget_mb");
}
