// Regression tests for the bugs the fuzzers and the soak found, one per bug, named after it: each input
// that once crashed, over-read or miscounted, with the behaviour the fix gives it. The fuzz harnesses run
// the same inputs again as part of their search.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <vector>

#include "demo.hpp"
#include "frugal/batcher.hpp"
#include "frugal/clock.hpp"
#include "frugal/quant.hpp"

using namespace std::chrono_literals;

TEST_CASE("quant: dequantize rejects a tensor whose data or parameters do not match its shape") {
  // quantized_tensor is a public aggregate (e.g. read back from disk); dequantize indexed it by its shape
  // without checking, reading past data and scales. Found by fuzz_quant (mode 3, inconsistent tensors).
  frugal::quant::quantized_tensor t;
  t.rows = 4;
  t.cols = 4;
  t.data = {1};
  t.scales = {1.0f};
  t.zero_points = {0};
  std::vector<float> out(16);
  CHECK_THROWS_AS(frugal::quant::dequantize(t, out), std::invalid_argument);
  t.data.assign(16, 1);
  t.scheme.granularity = frugal::quant::granularity::per_channel;  // needs 4 scales, has 1
  CHECK_THROWS_AS(frugal::quant::dequantize(t, out), std::invalid_argument);
}

TEST_CASE("batcher: a per-item fulfill or fail shows in stats at once") {
  // stats() documents completed as "requests whose result was delivered" and in_flight as "not yet
  // resolved", but items resolved one by one were only counted once the whole batch was. Found by
  // fuzz_batcher.
  frugal::manual_clock clock;
  frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock> b({.max_batch = 3}, clock);
  std::vector<std::future<int>> f;
  for (int i = 0; i < 3; ++i) f.push_back(b.submit(i));
  auto batch = b.try_next_batch();
  REQUIRE(batch);
  batch->fulfill(0, 10);
  batch->fail(1, std::make_exception_ptr(std::runtime_error("bad input")));
  CHECK(f[0].get() == 10);
  const frugal::batcher_stats s = b.stats();
  CHECK(s.completed == 1);
  CHECK(s.failed.model_error == 1);
  CHECK(s.in_flight == 1);
  CHECK(s.submitted == s.completed + s.failed.total() + s.queue_depth + s.in_flight);
  batch->fulfill(2, 12);
}

TEST_CASE("demo: parse_config rejects numbers that do not fit their field") {
  // nlohmann's get<int>() static_casts a double, which is undefined behaviour out of int's range; the
  // field then held whatever the CPU produced (INT_MIN on x86). Found by fuzz_config under UBSan.
  auto cfg = nlohmann::json::parse(R"({"traffic": {"phases": [{"kind": "idle", "ms": 1}]}, "ladder": [{}]})");
  CHECK_NOTHROW(demo::parse_config(cfg));
  cfg["traffic"]["accuracy_sample"] = 1e10;
  CHECK_THROWS_AS(demo::parse_config(cfg), std::invalid_argument);
}

TEST_CASE("demo: parse_config rejects a window or latency target too long to express in nanoseconds") {
  // window_ms = 1e300 passed parse_config (it only checks >= 0), and run_step's duration_cast to
  // nanoseconds then overflowed int64, which is undefined behaviour. Found by fuzz_config.
  auto cfg = nlohmann::json::parse(R"({"traffic": {"phases": [{"kind": "idle", "ms": 1}]}, "ladder": [{}]})");
  SUBCASE("window_ms") { cfg["batcher"]["window_ms"] = 1e300; }
  SUBCASE("latency_target_ms") { cfg["batcher"]["latency_target_ms"] = 1e300; }
  SUBCASE("idle ms") { cfg["traffic"]["phases"][0]["ms"] = 1e300; }
  CHECK_THROWS_AS(demo::parse_config(cfg), std::invalid_argument);
}

// Last: today it crashes the process, which would hide the results of the tests after it.
TEST_CASE("quant: a shape whose rows * cols overflows is rejected") {
  // 2^32 x 2^32 wraps to 0 elements, so an empty span passed the size check and the kernels then read
  // 2^32 rows of 2^32 floats from it. Found by fuzz_quant.
  const std::vector<float> none;
  const std::size_t big = std::size_t{1} << 32;
  frugal::quant::scheme s;
  SUBCASE("quantize") { CHECK_THROWS_AS(frugal::quant::quantize(none, big, big, s), std::invalid_argument); }
  SUBCASE("choose_params") {
    CHECK_THROWS_AS(frugal::quant::choose_params(none, big, big, s), std::invalid_argument);
  }
}
