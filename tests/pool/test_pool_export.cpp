#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "../support/prometheus.hpp"
#include "frugal/clock.hpp"
#include "frugal/pool.hpp"

using namespace std::chrono_literals;
using frugal_test::prom_lines;
using frugal_test::prom_value;

namespace {
struct weights {};
}  // namespace

TEST_CASE("pool: stats export as Prometheus text, per model and for the pool, cold starts as a histogram") {
  frugal::manual_clock clock;
  using pool_t = frugal::model_pool<weights, frugal::model_args, frugal::manual_clock>;
  pool_t pool({.budget_bytes = 15,
               .models = {{.name = "a", .estimated_bytes = 10}, {.name = "b", .estimated_bytes = 10}},
               .load =
                   [&](const frugal::model_spec<>&) {
                     clock.advance(2s);  // each cold start takes 2 s
                     return frugal::loaded_model<weights>{std::make_unique<weights>(), 10};
                   }},
              clock);
  { auto l = pool.acquire("a"); }
  { auto l = pool.acquire("b"); }  // a goes to make room
  auto held = pool.acquire("b");

  const std::string t = frugal::to_prometheus(pool.stats(), {.labels = {{"pool", "main"}}});
  CHECK(prom_value(t, R"(frugal_pool_model_ready{pool="main",model="a"})") == "0");
  CHECK(prom_value(t, R"(frugal_pool_model_ready{pool="main",model="b"})") == "1");
  CHECK(prom_value(t, R"(frugal_pool_model_state{pool="main",model="a",state="unloaded"})") == "1");
  CHECK(prom_value(t, R"(frugal_pool_model_state{pool="main",model="a",state="ready"})") == "0");
  CHECK(prom_value(t, R"(frugal_pool_model_users{pool="main",model="b"})") == "1");
  CHECK(prom_value(t, R"(frugal_pool_model_bytes{pool="main",model="b"})") == "10");
  CHECK(prom_value(t, R"(frugal_pool_loads_total{pool="main",model="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_pool_evictions_total{pool="main",model="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_pool_unloads_total{pool="main",model="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_pool_evictions_total{pool="main",model="b"})") == "0");
  CHECK(prom_value(t, R"(frugal_pool_load_seconds_total{pool="main",model="a"})") == "2.00");
  CHECK(prom_value(t, R"(frugal_pool_last_load_seconds{pool="main",model="b"})") == "2.00");
  CHECK(prom_value(t, R"(frugal_pool_budget_bytes{pool="main"})") == "15");
  CHECK(prom_value(t, R"(frugal_pool_used_bytes{pool="main"})") == "10");
  CHECK(prom_value(t, R"(frugal_pool_acquires_total{pool="main"})") == "3");
  CHECK(prom_value(t, R"(frugal_pool_load_starts_total{pool="main"})") == "2");
  CHECK(prom_value(t, R"(frugal_pool_acquire_failures_total{pool="main",reason="exhausted"})") == "0");
  CHECK(prom_value(t, R"(frugal_pool_leases{pool="main"})") == "1");
  CHECK(prom_value(t, R"(frugal_pool_cold_start_seconds_bucket{pool="main",le="1"})") == "0");
  CHECK(prom_value(t, R"(frugal_pool_cold_start_seconds_bucket{pool="main",le="2.5"})") == "2");
  CHECK(prom_value(t, R"(frugal_pool_cold_start_seconds_bucket{pool="main",le="+Inf"})") == "2");
  CHECK(prom_value(t, R"(frugal_pool_cold_start_seconds_sum{pool="main"})") == "4");
  CHECK(prom_value(t, R"(frugal_pool_cold_start_seconds_count{pool="main"})") == "2");
  CHECK(prom_lines(t, "# TYPE frugal_pool_loads_total counter") == 1);
  FRUGAL_CHECK_PROMTOOL(t);
}
