#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "../support/prometheus.hpp"
#include "frugal/clock.hpp"
#include "sched_support.hpp"

using namespace std::chrono_literals;
using frugal_test::prom_value;

TEST_CASE("scheduler: stats export as Prometheus text with latency histograms, promtool-clean") {
  frugal::kv_cache kv(sched_test::kv_options(16));
  frugal::manual_clock clock;
  frugal::scheduler<frugal::manual_clock> s(kv, {.max_running = 2, .step_tokens = 4, .vocab_size = 16},
                                            clock);
  sched_test::fake_model m(kv, 16);
  auto a = s.submit({.prompt = {1, 2, 3}, .max_tokens = 3});
  auto b = s.submit({.prompt = {1, 2, 3}, .max_tokens = 3, .deadline = clock.now() + 1ms});
  for (int i = 0; i < 2; ++i) {
    auto st = s.try_next_step();
    REQUIRE(st);
    s.complete(*st, m.run(*st));
    clock.advance(20ms);
  }
  while (auto st = s.try_next_step()) {
    s.complete(*st, m.run(*st));
    clock.advance(20ms);
  }
  CHECK(a.result.get().tokens.size() == 3);
  const std::string t = frugal::to_prometheus(s.stats(), {.labels = {{"model", "m"}}});
  CHECK(prom_value(t, R"(frugal_scheduler_submitted_total{model="m"})") == "2");
  CHECK(prom_value(t, R"(frugal_scheduler_finished_total{model="m",reason="length"})") == "1");
  CHECK(prom_value(t, R"(frugal_scheduler_failed_total{model="m",cause="deadline_exceeded"})") == "1");
  CHECK(prom_value(t, R"(frugal_scheduler_tokens_total{model="m",kind="prefill"})") == "4");
  CHECK(prom_value(t, R"(frugal_scheduler_tokens_total{model="m",kind="generated"})") == "3");
  CHECK(prom_value(t, R"(frugal_scheduler_time_to_first_token_seconds_count{model="m"})") == "1");
  CHECK(prom_value(t, R"(frugal_scheduler_time_to_first_token_seconds_bucket{model="m",le="0.001"})") == "1");
  CHECK(prom_value(t, R"(frugal_scheduler_inter_token_latency_seconds_bucket{model="m",le="0.01"})") == "0");
  CHECK(prom_value(t, R"(frugal_scheduler_inter_token_latency_seconds_bucket{model="m",le="0.025"})") == "2");
  CHECK(prom_value(t, R"(frugal_scheduler_inter_token_latency_seconds_count{model="m"})") == "2");
  CHECK(prom_value(t, R"(frugal_scheduler_running{model="m"})") == "0");
  FRUGAL_CHECK_PROMTOOL(t);
}
