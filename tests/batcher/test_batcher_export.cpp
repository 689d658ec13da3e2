#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/prometheus.hpp"
#include "frugal/batcher.hpp"
#include "frugal/clock.hpp"

using namespace std::chrono_literals;
using frugal_test::prom_lines;
using frugal_test::prom_value;

TEST_CASE("batcher: stats export as Prometheus text, two batchers in one text told apart by a label") {
  frugal::manual_clock clk;
  frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock> a({.window = 10ms, .max_batch = 4},
                                                                          clk);
  frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock> b({.window = 10ms, .max_batch = 4},
                                                                          clk);
  std::vector<frugal::light_future<int>> fs;
  for (int i = 0; i < 5; ++i) fs.push_back(a.submit(i));
  auto full = a.try_next_batch();
  REQUIRE(full);
  full->fulfill({0, 2, 4, 6});
  clk.advance(10ms);
  auto rest = a.try_next_batch();
  REQUIRE(rest);
  rest->fail(std::make_exception_ptr(std::runtime_error("model down")));
  fs.push_back(a.submit(9));  // still queued

  frugal::prometheus_writer w;
  frugal::append_prometheus(w, a.stats(), {.labels = {{"model", "a"}}});
  frugal::append_prometheus(w, b.stats(), {.labels = {{"model", "b"}}});
  const std::string t = w.str();
  CHECK(prom_value(t, R"(frugal_batcher_submitted_total{model="a"})") == "6");
  CHECK(prom_value(t, R"(frugal_batcher_completed_total{model="a"})") == "4");
  CHECK(prom_value(t, R"(frugal_batcher_failed_total{model="a",cause="model_error"})") == "1");
  CHECK(prom_value(t, R"(frugal_batcher_failed_total{model="a",cause="deadline_exceeded"})") == "0");
  CHECK(prom_value(t, R"(frugal_batcher_batches_total{model="a"})") == "2");
  // Batches of 4 and 1.
  CHECK(prom_value(t, R"(frugal_batcher_batch_size_bucket{model="a",le="1"})") == "1");
  CHECK(prom_value(t, R"(frugal_batcher_batch_size_bucket{model="a",le="2"})") == "1");
  CHECK(prom_value(t, R"(frugal_batcher_batch_size_bucket{model="a",le="4"})") == "2");
  CHECK(prom_value(t, R"(frugal_batcher_batch_size_bucket{model="a",le="+Inf"})") == "2");
  CHECK(prom_value(t, R"(frugal_batcher_batch_size_sum{model="a"})") == "5");
  CHECK(prom_value(t, R"(frugal_batcher_batch_size_count{model="a"})") == "2");
  // Four requests handed out at once, the fifth after the 10 ms window.
  CHECK(prom_value(t, R"(frugal_batcher_queue_wait_seconds_count{model="a"})") == "5");
  CHECK(prom_value(t, R"(frugal_batcher_queue_wait_seconds{model="a",quantile="0.5"})") == "0.00");
  CHECK(prom_value(t, R"(frugal_batcher_queue_wait_max_seconds{model="a"})") == "0.01");
  CHECK(prom_value(t, R"(frugal_batcher_request_duration_seconds_count{model="a"})") == "4");
  CHECK(prom_value(t, R"(frugal_batcher_queue_depth{model="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_batcher_mean_batch_size{model="a"})") == "2.5");
  CHECK(prom_value(t, R"(frugal_batcher_submitted_total{model="b"})") == "0");
  CHECK(prom_lines(t, "# TYPE frugal_batcher_submitted_total counter") == 1);
  CHECK(prom_lines(t, "# TYPE frugal_batcher_batch_size histogram") == 1);
  CHECK(prom_lines(t, "# TYPE frugal_batcher_queue_wait_seconds summary") == 1);
  FRUGAL_CHECK_PROMTOOL(t);

  // One batcher alone, under another prefix.
  const std::string alone = frugal::to_prometheus(a.stats(), {.prefix = "embedder"});
  CHECK(prom_value(alone, "embedder_submitted_total") == "6");
  CHECK(alone.find("frugal_batcher") == std::string::npos);
  FRUGAL_CHECK_PROMTOOL(alone);
}
