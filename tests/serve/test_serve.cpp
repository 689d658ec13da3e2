// A short, scripted run of the main demo: every request is answered, the ladder's figures agree with
// the ledger's own exports, and the exports are valid.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

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
    CHECK(prom_value(r.prometheus, "frugal_requests_total{feature=\"tiny\",outcome=\"ok\"}") == doctest::Approx(400));
    CHECK(r.prometheus.find("frugal_cost_usd_total") != std::string::npos);
#ifdef FRUGAL_PROMTOOL
    const std::string path =
        (std::filesystem::temp_directory_path() / ("frugal_test_serve_step" + std::to_string(i) + ".prom")).string();
    std::ofstream(path) << r.prometheus;
    CHECK(std::system((std::string(FRUGAL_PROMTOOL) + " check metrics < " + path + " > /dev/null 2>&1").c_str()) == 0);
#endif
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
  serve::json j = tiny_config();
  CHECK_THROWS_WITH_AS(serve::apply_override(j, "max_batch=3"),
                       doctest::Contains("--key.path=value"), std::invalid_argument);
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
