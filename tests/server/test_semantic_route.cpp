// The server's semantic route (examples/server/semantic_route.hpp) as its users run it: frugal_server
// --semantic as a child process on 127.0.0.1, with the real MiniLM model, and a real HTTP client.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../support/process.hpp"
#include "../support/requires.hpp"

#include <httplib.h>

namespace {

using json = nlohmann::json;

using frugal_test::model;
using frugal_test::model_dir;
using frugal_test::needs;

constexpr const char* token = "semantic-route-test-token";

// One frugal_server --semantic for the whole file (the model loads once), killed when the tests end.
struct semantic_server {
  frugal_test::child proc;
  int port = 0;
  semantic_server() {
    ::setenv("FRUGAL_SERVER_TOKEN", token, 1);
    proc = frugal_test::child::spawn({FRUGAL_SERVER_EXE, "--model", model_dir(), "--port", "0", "--precision",
                                      "fp32", "--semantic", "--semantic-model-ms", "50"});
    ::unsetenv("FRUGAL_SERVER_TOKEN");
    const std::string l = proc.read_line();
    if (l.rfind("listening on 127.0.0.1:", 0) == 0) port = std::stoi(l.substr(l.rfind(':') + 1));
  }
  ~semantic_server() {
    if (proc.pid > 0) ::kill(proc.pid, SIGKILL);
    proc.wait();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    c.set_bearer_token_auth(token);
    return c;
  }
};

semantic_server& server() {
  static semantic_server s;
  REQUIRE_MESSAGE(s.port > 0, "frugal_server --semantic did not start");
  return s;
}

json ask(httplib::Client& c, const json& body, int want_status = 200) {
  const auto r = c.Post("/v1/semantic/answer", body.dump(), "application/json");
  REQUIRE(r);
  CHECK_MESSAGE(r->status == want_status, r->body);
  CHECK(r->get_header_value("Content-Type") == "application/json");
  return json::parse(r->body);
}

// The value of one series in Prometheus text; 0 when it is absent.
double metric(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size() + 2));
}

std::string get(httplib::Client& c, const char* path) {
  const auto r = c.Get(path);
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return r->body;
}

}  // namespace

TEST_CASE(
    "semantic route: a repeat is an exact hit, a near-duplicate gets the first answer, a near miss "
    "reaches the model, and the ledger counts exact and semantic hits apart" *
    needs(model())) {
  auto c = server().client();
  const std::string m0 = get(c, "/v1/semantic/metrics");
  const json l0 = json::parse(get(c, "/v1/semantic/ledger"));
  const std::string q = "How do I cancel my order?";
  const json first = ask(c, {{"input", q}});
  CHECK(first["cache"] == "miss");
  CHECK(first["answer"] == "stand-in answer to: " + q);
  CHECK(first["answered_for"] == q);
  CHECK(first["similarity"].is_null());

  const json again = ask(c, {{"input", q}});
  CHECK(again["cache"] == "exact");
  CHECK(again["answer"] == first["answer"]);

  // MiniLM's tokenizer is uncased: the same tokens, another exact key.
  const json shouted = ask(c, {{"input", "HOW DO I CANCEL MY ORDER?"}});
  CHECK(shouted["cache"] == "semantic");
  CHECK(shouted["answered_for"] == q);
  CHECK(shouted["answer"] == first["answer"]);
  CHECK(shouted["similarity"].get<double>() >= 0.98);

  const json other = ask(c, {{"input", "How do I track my order?"}});
  CHECK(other["cache"] == "miss");
  CHECK(other["answered_for"] == "How do I track my order?");

  // Namespaces never answer for each other.
  const json billing = ask(c, {{"input", q}, {"namespace", "billing"}});
  CHECK(billing["cache"] == "miss");

  const std::string m1 = get(c, "/v1/semantic/metrics");
  const json l1 = json::parse(get(c, "/v1/semantic/ledger"));
  const auto delta = [&](const std::string& series) { return metric(m1, series) - metric(m0, series); };
  CHECK(delta("frugal_semantic_hits_total{feature=\"answer\"}") == 1);
  CHECK(delta("frugal_cache_hits_total{feature=\"answer\"}") == 2);
  CHECK(delta("frugal_batches_total{feature=\"answer\"}") == 3);
  CHECK(delta("frugal_requests_total{feature=\"answer\",outcome=\"ok\"}") == 5);
  CHECK(delta("frugal_semantic_cache_lookups_total{result=\"exact\"}") == 1);
  CHECK(delta("frugal_semantic_cache_lookups_total{result=\"semantic\"}") == 1);
  CHECK(delta("frugal_semantic_cache_lookups_total{result=\"miss\"}") == 3);
  CHECK(delta("frugal_batches_total{feature=\"embed\"}") == 5);

  // The route's exposition is valid, by Prometheus' own checker.
  if (frugal_test::available(frugal_test::tool("promtool", FRUGAL_PROMTOOL))) {
    const std::string path = std::filesystem::temp_directory_path() /
                             ("frugal_semantic_route." + std::to_string(::getpid()) + ".prom");
    std::ofstream(path) << m1;
    CHECK(std::system((std::string(FRUGAL_PROMTOOL) + " check metrics < " + path).c_str()) == 0);
    std::filesystem::remove(path);
  }

  const auto field = [](const json& l, std::size_t i, const char* k) {
    const json& v = l["features"][i][k];
    return v.is_string() ? std::stod(v.get<std::string>()) : v.get<double>();
  };
  REQUIRE(l1["features"][0]["name"] == "answer");
  REQUIRE(l1["features"][1]["name"] == "embed");
  // Each stand-in call is booked at 50 ms, so every hit saves one average miss: 50 ms.
  CHECK(field(l1, 0, "busy_seconds") - field(l0, 0, "busy_seconds") == doctest::Approx(0.15));
  CHECK(field(l1, 0, "semantic_saved_seconds") - field(l0, 0, "semantic_saved_seconds") ==
        doctest::Approx(0.05));
  CHECK(field(l1, 0, "semantic_saved") > field(l0, 0, "semantic_saved"));
  CHECK(field(l1, 0, "cache_saved") > field(l1, 0, "semantic_saved"));
  CHECK(field(l1, 1, "busy_seconds") > field(l0, 1, "busy_seconds"));  // the MiniLM embeddings, timed
}

TEST_CASE("semantic route: bad input gets a 4xx status and a JSON error naming the field" * needs(model())) {
  auto c = server().client();
  const std::string m0 = get(c, "/v1/semantic/metrics");
  struct bad {
    std::string body;
    int status;
    const char* param;
  };
  const std::vector<bad> cases = {
      {"{not json", 400, nullptr},
      {"[\"How do I cancel my order?\"]", 400, nullptr},
      {"{}", 400, "input"},
      {R"({"input": 3})", 400, "input"},
      {R"({"input": ["a", "b"]})", 400, "input"},
      {R"({"input": ""})", 400, "input"},
      {R"({"input": "  \n "})", 400, "input"},
      {R"({"input": "hello", "namespace": 7})", 400, "namespace"},
      {json{{"input", std::string(5000, 'a')}}.dump(), 413, "input"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.body.substr(0, 40));
    const auto r = c.Post("/v1/semantic/answer", b.body, "application/json");
    REQUIRE(r);
    CHECK(r->status == b.status);
    CHECK(r->get_header_value("Content-Type") == "application/json");
    const json e = json::parse(r->body, nullptr, false);
    REQUIRE_FALSE(e.is_discarded());
    CHECK_FALSE(e["error"]["message"].get<std::string>().empty());
    CHECK(e["error"]["param"] == (b.param ? json(b.param) : json()));
  }
  // None of them reached the cache or the model.
  const std::string m1 = get(c, "/v1/semantic/metrics");
  for (const char* s :
       {"frugal_semantic_cache_lookups_total{result=\"miss\"}",
        "frugal_semantic_cache_lookups_total{result=\"exact\"}", "frugal_batches_total{feature=\"embed\"}",
        "frugal_batches_total{feature=\"answer\"}"})
    CHECK(metric(m1, s) == metric(m0, s));
}

TEST_CASE("semantic route: concurrent requests each get one answer, the one computed for their question" *
          needs(model())) {
  auto c0 = server().client();
  const std::string m0 = get(c0, "/v1/semantic/metrics");
  const std::vector<std::string> questions = {"Can I return a gift without a receipt?",
                                              "What are your opening hours on Sunday?",
                                              "Do you ship to Canada?"};
  constexpr int threads = 4, each = 6;
  std::vector<std::vector<json>> got(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      auto c = server().client();
      for (int i = 0; i < each; ++i) {
        const std::string& q = questions[std::size_t(t + i) % questions.size()];
        const auto r = c.Post("/v1/semantic/answer", json{{"input", q}}.dump(), "application/json");
        got[std::size_t(t)].push_back(r && r->status == 200 ? json::parse(r->body) : json());
      }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t)
    for (int i = 0; i < each; ++i) {
      const json& a = got[std::size_t(t)][std::size_t(i)];
      REQUIRE(a.is_object());
      const std::string& q = questions[std::size_t(t + i) % questions.size()];
      CHECK(a["answer"] == "stand-in answer to: " + q);
      CHECK(a["cache"] != "semantic");  // the three questions are far apart
    }
  const std::string m1 = get(c0, "/v1/semantic/metrics");
  const auto delta = [&](const std::string& series) { return metric(m1, series) - metric(m0, series); };
  const double lookups = delta("frugal_semantic_cache_lookups_total{result=\"exact\"}") +
                         delta("frugal_semantic_cache_lookups_total{result=\"semantic\"}") +
                         delta("frugal_semantic_cache_lookups_total{result=\"miss\"}");
  CHECK(lookups == threads * each);
  CHECK(delta("frugal_requests_total{feature=\"answer\",outcome=\"ok\"}") == threads * each);
  // Each question reaches the model at least once, and at most once per thread that missed it at the same
  // time.
  const double calls = delta("frugal_batches_total{feature=\"answer\"}");
  CHECK(calls >= 3);
  CHECK(calls <= 3 * threads);
}

TEST_CASE("semantic route: without the bearer token a request gets 401 and never reaches the model" *
          needs(model())) {
  httplib::Client c("127.0.0.1", server().port);
  c.set_read_timeout(30, 0);
  const auto r = c.Post("/v1/semantic/answer", R"({"input": "Where is my parcel?"})", "application/json");
  REQUIRE(r);
  CHECK(r->status == 401);
  CHECK(json::parse(r->body)["error"]["type"] == "authentication_error");
  CHECK(c.Get("/v1/semantic/metrics")->status == 401);
}

TEST_CASE("semantic route: bad --semantic-* flags stop the server at start-up with status 2") {
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--semantic-threshold", "1.5"},
                                                {"--semantic-threshold", "x"},
                                                {"--semantic-model-ms", "-1"},
                                                {"--semantic-entries", "0"},
                                                {"--semantic-gpu-usd", "lots"}}) {
    std::vector<std::string> args{FRUGAL_SERVER_EXE, "--model", model_dir(), "--port", "0", "--semantic"};
    args.insert(args.end(), flags.begin(), flags.end());
    CAPTURE(flags[0]);
    auto p = frugal_test::child::spawn(args);
    CHECK(p.wait() == 2);
  }
}
