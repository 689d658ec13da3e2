// A short version of the language-model demo's ladder on SmolLM2 (FRUGAL_GGUF_MODEL): every step answers
// every request; batching, prefix caching and the response cache change the cost, never the tokens; the
// ledger's token counts equal the requests' usage; and the loop's response cache answers a repeated greedy
// request without a model step.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "../common/config.hpp"
#include "../common/write.hpp"
#include "../support/errors.hpp"
#include "../support/prometheus.hpp"
#include "../support/requires.hpp"
#include "chat_demo.hpp"

namespace {

using frugal_test::needs;

std::string model_path() { return frugal_test::gguf_model_path(); }

// Under the sanitizers the ladder serves 6 requests from 2 clients instead of 10 from 3: the same checks,
// with fewer fp32 steps (instrumented, an fp32 GEMM is most of the sanitizer build's time).
#if FRUGAL_CHAT_DEMO_QUICK
constexpr std::size_t requests = 6, clients = 2;
#else
constexpr std::size_t requests = 10, clients = 3;
#endif

examples::config_document short_config() {
  return examples::config_document::from_text(R"({
    "seed": 3,
    "model": {"kind": "smollm2", "threads": 2, "kv_budget_mb": 64},
    "gpu": {"name": "test-gpu", "hourly_usd": "3.60"},
    "traffic": {"requests": 10, "clients": 3, "system_prompts": 1, "new_conversation": 0.6, "max_turns": 3,
                "repeat_share": 0.5, "questions": 2, "answer_median": 5, "answer_sigma": 0.3,
                "answer_min": 3, "answer_max": 8},
    "scheduler": {"max_running": 4, "step_tokens": 64},
    "accuracy": {"ctx": 64, "chunks": 1},
    "ladder": [
      {"name": "fp32 alone", "precision": "fp32", "batching": false},
      {"name": "fp32 batched", "precision": "fp32"},
      {"name": "native", "precision": "native"},
      {"name": "prefix", "precision": "native", "prefix_cache": true},
      {"name": "response", "precision": "native", "prefix_cache": true, "response_cache": true}]
  })",
                                              "short config");
}

}  // namespace

TEST_CASE(
    "chat demo: each step answers every request, with the tokens of the step before it in its precision, "
    "and the ledger's tokens equal the usage" *
    needs(frugal_test::gguf_model())) {
  auto doc = short_config();
  doc.apply_override("--model.path=" + model_path());
  doc.apply_override("--traffic.requests=" + std::to_string(requests));
  doc.apply_override("--traffic.clients=" + std::to_string(clients));
  const demo::chat_config cfg = demo::parse_chat_config(doc);
  demo::chat_traffic traffic;
  const auto rs = demo::run_chat(cfg, {}, &traffic);
  REQUIRE(rs.size() == 5);
  REQUIRE(traffic.requests.size() == requests);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const auto& r = rs[i];
    CAPTURE(r.step.name);
    CHECK(r.answered == r.requests);
    std::uint64_t prompt = 0;
    for (const auto& q : traffic.requests) prompt += q.prompt.size();
    CHECK(r.prompt_tokens == prompt);
    CHECK(r.ledger_tokens.at("prompt_tokens").get<std::uint64_t>() == r.prompt_tokens);
    CHECK(r.ledger_tokens.at("cached_prompt_tokens").get<std::uint64_t>() == r.cached_prompt_tokens);
    CHECK(r.ledger_tokens.at("generated_tokens").get<std::uint64_t>() == r.generated_tokens);
    CHECK(r.ledger_tokens.at("response_hits").get<std::uint64_t>() == r.response_hits);
    for (std::size_t q = 0; q < r.answers.size(); ++q) {
      CHECK(!r.answers[q].empty());
      CHECK(r.answers[q].size() <= traffic.requests[q].max_tokens);
    }
    CHECK(r.cost_per_million_output > 0);
    CHECK(r.perplexity > 1);
    CHECK(r.perplexity < 1000);
    FRUGAL_CHECK_PROMTOOL(r.prometheus);
  }
  // Batching, prefix caching and the response cache never change a greedy answer.
  CHECK(rs[1].answers == rs[0].answers);
  CHECK(rs[3].answers == rs[2].answers);
  CHECK(rs[4].answers == rs[2].answers);
  CHECK(rs[1].agreement_answers == 1.0);
  CHECK(rs[2].perplexity == rs[4].perplexity);
  // One request at a time runs one sequence per step; batching runs more.
  CHECK(rs[0].mean_step_sequences == 1.0);
  CHECK(rs[1].mean_step_sequences > 1.0);
  // One system prompt for every request: every request admitted after the first step finds it cached.
  CHECK(rs[2].cached_prompt_tokens == 0);
  CHECK(rs[3].cached_prompt_tokens > 0);
  CHECK(rs[3].prefill_computed < rs[2].prefill_computed);
  const nlohmann::json j = demo::chat_results_json(cfg, traffic, rs);
  CHECK(j.at("steps").size() == 5);
  const std::string report = demo::format_chat_report(cfg, j);
  CHECK(report.find("prefill tokens computed fell") != std::string::npos);
  CHECK(report.find("Cost per 1M output tokens: step 5 is") != std::string::npos);

  // The plot of the ladder: one PNG.
  const auto dir =
      std::filesystem::temp_directory_path() / ("frugal_chat_demo_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  examples::write_file((dir / "ladder.json").string(), j.dump());
  const std::string cmd = "/usr/bin/python3 " FRUGAL_DEMO_PLOT " " + (dir / "ladder.json").string() + " " +
                          (dir / "ladder.png").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream png(dir / "ladder.png", std::ios::binary);
  char magic[8] = {};
  png.read(magic, 8);
  CHECK(std::string(magic + 1, 3) == "PNG");
  CHECK(std::filesystem::file_size(dir / "ladder.png") > 10000);
  std::filesystem::remove_all(dir);
}

TEST_CASE("chat demo: the loop's response cache answers a repeated greedy request without a model step" *
          needs(frugal_test::gguf_model())) {
  auto m =
      llama::model::load(model_path(), {.weights = llama::precision::native, .kv_budget_bytes = 16 << 20});
  demo::chat_loop loop(*m, "smollm2/native",
                       {.max_running = 2,
                        .response_cache_entries = 8,
                        .price = frugal::cost::rate::per_hour(frugal::cost::money::parse("2.00")),
                        .threads = 1});
  const demo::chat_request q{.prompt = m->encode_chat("What is a cache?"), .max_tokens = 6};
  const demo::chat_answer a = loop.answer(q);
  const std::uint64_t steps = loop.scheduler_stats().steps;
  CHECK_FALSE(a.response_hit);
  CHECK(steps > 0);
  const demo::chat_answer b = loop.answer(q);
  CHECK(b.response_hit);
  CHECK(b.completion == a.completion);
  CHECK(loop.scheduler_stats().steps == steps);
  // Another max_tokens is another key.
  const demo::chat_answer c = loop.answer({.prompt = q.prompt, .max_tokens = 5});
  CHECK_FALSE(c.response_hit);
  loop.close();
  const auto s = loop.ledger().snapshot();
  CHECK(s.find("chat")->response_hits == 1);
  CHECK(s.find("chat")->requests == 3);
  CHECK(s.find("chat")->generations == 2);
}

TEST_CASE("chat demo: a config names what is wrong and where") {
  const auto bad = [](const std::string& text) {
    return demo::parse_chat_config(examples::config_document::from_text(text, "test"));
  };
  CHECK_THROWS_WITH(bad(R"({"model": {"kind": "smollm2"}, "ladder": []})"), doctest::Contains("ladder"));
  CHECK_THROWS_WITH(bad(R"({"model": {"kind": "smollm2"}, "traffic": {"pool": 3}, "ladder": [{}]})"),
                    doctest::Contains("traffic.pool"));
  CHECK_THROWS_WITH(bad(R"({"model": {"kind": "smollm2"}, "ladder": [{"precision": "fp64"}]})"),
                    doctest::Contains("ladder[0].precision"));
  CHECK_THROWS_WITH(bad(R"({"model": {"kind": "smollm2"}, "traffic": {"answer_min": 9, "answer_max": 4},
                            "ladder": [{}]})"),
                    doctest::Contains("traffic.answer_min"));
  CHECK_THROWS_WITH(bad(R"({"model": {"kind": "smollm2"}, "gpu": {"hourly_usd": "lots"}, "ladder": [{}]})"),
                    doctest::Contains("gpu.hourly_usd"));
  auto doc =
      examples::config_document::from_text(R"({"model": {"kind": "smollm2"}, "ladder": [{}]})", "test");
  doc.apply_override("--scheduler.max_runing=3");
  CHECK_THROWS_WITH(demo::parse_chat_config(doc), doctest::Contains("scheduler.max_runing"));
}
