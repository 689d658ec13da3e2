// A short, scripted run of the main demo: every request is answered, the ladder's figures agree with
// the ledger's own exports, and the exports are valid.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "../support/requires.hpp"
#include "serve.hpp"

namespace {

serve::json tiny_config() {
  return serve::json::parse(R"({
    "seed": 7,
    "model": {"name": "tiny", "dims": [128, 256, 128]},
    "gpu": {"name": "test-gpu", "hourly_usd": "3.60"},
    "batcher": {"window_ms": 1, "max_batch": 8, "latency_target_ms": 20},
    "cache": {"max_entries": 64, "max_bytes": 1048576},
    "traffic": {"pool": 200, "zipf_s": 1.1, "accuracy_sample": 64,
      "phases": [{"kind": "closed", "clients": 16, "requests": 300},
                 {"kind": "idle", "ms": 20},
                 {"kind": "poisson", "rate": 2000, "requests": 100}]},
    "ladder": [
      {"name": "fp32", "precision": "fp32", "batching": false},
      {"name": "batched", "precision": "fp32"},
      {"name": "int8", "precision": "int8"},
      {"name": "cache", "precision": "int8", "cache": true},
      {"name": "adaptive", "precision": "int8", "cache": true, "policy": "adaptive"}]
  })");
}

// The value of a Prometheus sample line `name{labels} value`, or -1.
double prom_value(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

}  // namespace

TEST_CASE("serve: a scripted ladder answers every request and its figures agree with the ledger's exports") {
  const serve::config cfg = serve::parse_config(tiny_config());
  const auto plan = serve::make_plan(cfg);
  REQUIRE(plan.size() == 400);
  const auto results = serve::run(cfg);
  REQUIRE(results.size() == 5);
  const bool promtool = frugal_test::available(frugal_test::tool("promtool", FRUGAL_PROMTOOL));

  for (std::size_t i = 0; i < results.size(); ++i) {
    CAPTURE(i);
    const auto& r = results[i];
    CHECK(r.answered == plan.size());
    CHECK(r.failed == 0);
    CHECK(r.requests == plan.size());
    // Every request is either a cache hit or rode in a model call.
    CHECK(r.snapshot.total.batched_items + r.cache_hits == plan.size());
    CHECK(r.model_calls == r.snapshot.total.batches);
    // Paid = busy + overhead + idle, exactly, in nano-dollars.
    CHECK(r.snapshot.total_cost == r.snapshot.busy_cost + r.snapshot.overhead_cost + r.snapshot.idle_cost);
    CHECK(r.cost_per_1k == r.snapshot.total_cost.mul_div(1000, static_cast<std::int64_t>(plan.size())));
    CHECK(r.utilization > 0);
    CHECK(r.utilization <= 1);

    const serve::json j = serve::json::parse(r.json_export);
    CHECK(j.dump().find("\"requests\"") != std::string::npos);
    CHECK(prom_value(r.prometheus, "frugal_requests_total{feature=\"tiny\",outcome=\"ok\"}") ==
          doctest::Approx(400));
    CHECK(r.prometheus.find("frugal_cost_usd_total") != std::string::npos);
    if (promtool) {
      const std::string path =
          (std::filesystem::temp_directory_path() / ("frugal_test_serve_step" + std::to_string(i) + ".prom"))
              .string();
      std::ofstream(path) << r.prometheus;
      CHECK(std::system(
                (std::string(FRUGAL_PROMTOOL) + " check metrics < " + path + " > /dev/null 2>&1").c_str()) ==
            0);
    }
  }
  // One request per call without batching; batches of more than one with it.
  CHECK(results[0].mean_batch == doctest::Approx(1.0));
  CHECK(results[1].mean_batch > 1.0);
  // fp32 with and without batching computes the same function; int8 stays close to it.
  CHECK(results[1].cosine_mean > 0.99999);
  CHECK(results[2].cosine_mean > 0.999);
  CHECK(results[2].cosine_mean < 1.0);
  // No cache, no hits; with the cache, Zipf traffic repeats and the ledger counts the hits.
  CHECK(results[2].cache_hits == 0);
  CHECK(results[3].cache_hits > 0);
  CHECK(results[3].hit_ratio == doctest::Approx(static_cast<double>(results[3].cache_hits) / plan.size()));
}

TEST_CASE(
    "serve: a timed closed-loop phase serves until its deadline, and every request it issued is answered") {
  serve::json j = tiny_config();
  serve::apply_override(j, R"(--traffic.phases=[{"kind": "closed", "clients": 16, "seconds": 0.3},
                                               {"kind": "poisson", "rate": 2000, "requests": 50}])");
  serve::apply_override(j, R"(--ladder=[{"name": "fp32", "precision": "fp32", "batching": false},
                                       {"name": "int8", "precision": "int8", "cache": true, "policy": "adaptive"}])");
  const serve::config cfg = serve::parse_config(j);
  CHECK(serve::make_plan(cfg).size() == 50);  // the timed phase's count is not known before the run
  const auto results = serve::run(cfg);
  REQUIRE(results.size() == 2);
  for (const auto& r : results) {
    CAPTURE(r.name);
    CHECK(r.failed == 0);
    CHECK(r.answered == r.requests);
    CHECK(r.requests == r.closed_requests + 50);
    CHECK(r.closed_requests > 16);
    // The phase lasts its 0.3 s plus the drain of what was in flight at the deadline.
    CHECK(r.closed_seconds >= 0.3);
    CHECK(r.closed_seconds < 5.0);
    CHECK(r.throughput == doctest::Approx(static_cast<double>(r.closed_requests) / r.closed_seconds));
    // The worker's tally of saturated batches is part of the ledger's.
    CHECK(r.closed_calls <= r.model_calls);
    CHECK(r.closed_batched <= r.snapshot.total.batched_items);
    CHECK(r.closed_busy_s <= r.busy_s + 1e-9);
    CHECK(r.closed_cpu_s > 0);
    CHECK(r.closed_cpu_s <=
          r.closed_busy_s + 0.05);  // CPU time cannot exceed wall time (clock granularity aside)
    CHECK(r.snapshot.total.batched_items + r.cache_hits == r.requests);
    CHECK(r.cost_per_1k == r.snapshot.total_cost.mul_div(1000, static_cast<std::int64_t>(r.requests)));
  }
  CHECK(results[0].closed_mean_batch == doctest::Approx(1.0));
  CHECK(results[1].cache_hits > 0);
  const std::string report = serve::format_report(cfg, results);
  CHECK(report.find("16 closed-loop clients for 0.3 s") != std::string::npos);
  CHECK(report.find("cost per 1k x") != std::string::npos);
}

TEST_CASE("serve: each phase draws the same request stream at every step, whatever the others consumed") {
  const serve::config cfg = serve::parse_config(tiny_config());
  const serve::zipf_inputs z(cfg);
  serve::phase_stream a(z, cfg, 0), b(z, cfg, 0), other(z, cfg, 2);
  int same = 0, differs = 0;
  for (int i = 0; i < 200; ++i) {
    const auto x = a.next(), y = b.next(), w = other.next();
    same += x.input == y.input;
    differs += x.input != w.input;
    CHECK(x.input >= 0);
    CHECK(x.input < cfg.pool);
  }
  CHECK(same == 200);
  CHECK(differs > 100);
  // Poisson offsets grow at about 1/rate per request (rate 2000/s for phase 2).
  serve::phase_stream p(z, cfg, 2);
  serve::planned_request last{};
  for (int i = 0; i < 2000; ++i) last = p.next();
  CHECK(std::chrono::duration<double>(last.offset).count() == doctest::Approx(1.0).epsilon(0.1));
}

TEST_CASE("serve: the batched fp32 path (column-major GEMM) computes what one request at a time does") {
  serve::model_config mc;
  mc.dims = {128, 256, 128};
  mc.seed = 3;
  const serve::mlp m(mc, serve::precision::fp32);
  const serve::matrix x = serve::make_input_pool(9, 128, 3);
  const serve::matrix batched = m.forward(x);
  REQUIRE(batched.rows() == 9);
  REQUIRE(batched.cols() == 128);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    CAPTURE(r);
    const serve::matrix one = m.forward(x.row(r));
    CHECK((one.row(0) - batched.row(r)).norm() <= 1e-5f * batched.row(r).norm());
  }
}

TEST_CASE("serve: bad configs are refused with the field named") {
  auto expect = [](const std::string& patch_key, const serve::json& v, const std::string& words) {
    serve::json j = tiny_config();
    serve::apply_override(j, "--" + patch_key + "=" + v.dump());
    CAPTURE(patch_key);
    try {
      (void)serve::parse_config(j);
      FAIL("no error");
    } catch (const std::exception& e) {
      CHECK(std::string(e.what()).find(words) != std::string::npos);
    }
  };
  expect("batcher.max_batch", 0, "batcher.max_batch");
  expect("traffic.pool", -1, "traffic.pool");
  expect("ladder", serve::json::parse(R"([{"precision": "fp8"}])"), "fp8");
  expect("traffic.phases", serve::json::parse(R"([{"kind": "burst"}])"), "traffic.phases[0].kind");
  expect("gpu.hourly_usd", "cheap", "cheap");
  expect("traffic.phases", serve::json::parse(R"([{"kind": "closed", "clients": 4}])"), "seconds > 0");
  expect("traffic.phases",
         serve::json::parse(R"([{"kind": "closed", "clients": 4, "seconds": -1, "requests": 3}])"),
         "traffic.phases[0].seconds");
  expect("batcher.max_batc", 3, "unknown key \"batcher.max_batc\"");
  expect("traffic.phases", serve::json::parse(R"([{"kind": "idle", "ms": 1, "msec": 2}])"),
         "traffic.phases[0].msec");
  expect("ladder", serve::json::parse(R"([{"precision": "fp32", "cach": true}])"), "ladder[0].cach");
  expect("model.kind", "gpt", "model.kind");
  expect("modle", 1, "unknown key \"modle\"");
  serve::json j = tiny_config();
  CHECK_THROWS_WITH_AS(serve::apply_override(j, "max_batch=3"), doctest::Contains("--key.path=value"),
                       std::invalid_argument);
}

TEST_CASE("serve: command-line overrides reach nested fields and keep their JSON types") {
  serve::json j = tiny_config();
  serve::apply_override(j, "--batcher.max_batch=16");
  serve::apply_override(j, "--gpu.name=H200");
  serve::apply_override(j, "--traffic.zipf_s=0.5");
  const auto cfg = serve::parse_config(j);
  CHECK(cfg.max_batch == 16);
  CHECK(cfg.gpu_name == "H200");
  CHECK(cfg.zipf_s == doctest::Approx(0.5));
}

TEST_CASE("serve: the MiniLM ladder serves real sentences, counts tokens, and int8 stays close to fp32" *
          frugal_test::needs(frugal_test::model(),
                             frugal_test::file("fortunes", "/usr/share/games/fortunes"))) {
  const std::string dir = frugal_test::model_dir();
  serve::json j = serve::json::parse(R"({
    "seed": 3,
    "model": {"kind": "minilm", "name": "minilm", "calibration_sentences": 16},
    "batcher": {"window_ms": 2, "max_batch": 64, "max_batch_tokens": 64},
    "cache": {"max_entries": 64, "max_bytes": 1048576},
    "traffic": {"pool": 48, "zipf_s": 1.1, "accuracy_sample": 48,
      "phases": [{"kind": "closed", "clients": 32, "requests": 60}]},
    "ladder": [
      {"name": "fp32", "precision": "fp32"},
      {"name": "int8 cached", "precision": "int8", "cache": true}]
  })");
  serve::apply_override(j, "--model.path=" + dir);
  const auto cfg = serve::parse_config(j);
  const auto results = serve::run(cfg);
  REQUIRE(results.size() == 2);
  for (const auto& r : results) {
    CHECK(r.answered == 60);
    CHECK(r.failed == 0);
    CHECK(r.snapshot.total.batched_items + r.cache_hits == 60);
  }
  CHECK(results[0].cosine_mean > 0.99999);
  CHECK(results[1].precision == "int8 W8A8 SmoothQuant");
  CHECK(results[1].cosine_mean > 0.99);
  CHECK(results[1].cache_hits > 0);
  CHECK(results[1].weight_bytes * 3 < results[0].weight_bytes);
  // Cut by tokens: 32 clients would fill batches of up to 64 sentences, but a batch holds at most 64
  // tokens, so never more sentences than 64 over the pool's shortest sentence.
  const auto pool = serve::corpus_sentences(cfg.corpus, cfg.pool, cfg.model.seed);
  const auto enc = bert::encoder::load(dir);
  std::size_t shortest = 1000;
  for (const auto& t : pool) shortest = std::min(shortest, enc.tokenize(t).size());
  CHECK(results[0].closed_mean_batch > 0);
  CHECK(results[0].closed_mean_batch <= 64.0 / static_cast<double>(shortest));
  serve::apply_override(j, "--model.path=/nonexistent/minilm");
  CHECK_THROWS_WITH(serve::run(serve::parse_config(j)), doctest::Contains("/nonexistent/minilm/config.json"));
}

TEST_CASE("serve: identical misses at the same time make one model call (the cache's single flight)") {
  // One input asked by 16 clients at once: the first miss computes it, the other callers wait for that
  // computation instead of each reaching the model (a get followed by a put sent all 16 to the model).
  serve::json j = tiny_config();
  j["traffic"]["pool"] = 1;
  j["traffic"]["accuracy_sample"] = 1;
  j["traffic"]["phases"] = serve::json::parse(R"([{"kind": "closed", "clients": 16, "requests": 200}])");
  j["batcher"]["window_ms"] = 20;
  j["ladder"] = serve::json::parse(R"([{"name": "cache", "precision": "fp32", "cache": true}])");
  const auto results = serve::run(serve::parse_config(j));
  REQUIRE(results.size() == 1);
  const auto& r = results.front();
  CHECK(r.answered == 200);
  CHECK(r.failed == 0);
  CHECK(r.model_calls == 1);
  CHECK(r.snapshot.total.batched_items == 1);
  CHECK(r.cache_hits == 199);
  CHECK(r.cosine_mean > 0.99999);
}
