// The advisors at the edges of their inputs: every numeric input at NaN, +-Inf, zero, its type's largest
// and smallest values. Each input is either refused with std::invalid_argument naming it, or answered.
#include <doctest/doctest.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/cost.hpp"
#include "frugal/job/failover.hpp"

using namespace std::chrono_literals;
namespace fc = frugal::cost;
using fc::money;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
const double qnan = std::nan("");
constexpr double dmax = std::numeric_limits<double>::max();
constexpr double dmin = std::numeric_limits<double>::denorm_min();
using ns = std::chrono::nanoseconds;

fc::rate per_hour(const char* p) { return fc::rate::per_hour(money::parse(p)); }

}  // namespace

TEST_CASE("advisors: advise_replicas refuses a non-finite utilization and caps a huge one at max_replicas") {
  for (double u : {inf, -inf, qnan})
    CHECK_THROWS_WITH_AS(fc::advise_replicas(3, u), doctest::Contains("utilization"), std::invalid_argument);
  for (double u : {1e10, dmax}) {
    const auto a = fc::advise_replicas(3, u);
    CHECK(a.desired == 6);
    CHECK(a.reason.find("capped at max_replicas") != std::string::npos);
  }
  CHECK(fc::advise_replicas(INT_MAX, 1.0, {.max_replicas = INT_MAX}).desired == INT_MAX);
  CHECK(fc::advise_replicas(INT_MAX, dmin).desired == 0);
  CHECK(fc::advise_replicas(5, dmin, {.min_replicas = 1}).desired == 1);
  CHECK(fc::advise_replicas(0, dmin, {.min_replicas = 1}).desired == 1);
  CHECK(fc::advise_replicas(3, 0.0, {}, ns::max()).desired == 0);
}

TEST_CASE("advisors: advise_replicas refuses a replica policy with a non-finite or negative field") {
  for (double t : {inf, qnan, dmax, -dmax, 0.0})
    CHECK_THROWS_WITH_AS(fc::advise_replicas(3, 0.5, {.target_utilization = t}),
                         doctest::Contains("target_utilization"), std::invalid_argument);
  for (double t : {qnan, -inf, -1.0})
    CHECK_THROWS_WITH_AS(fc::advise_replicas(3, 0.5, {.tolerance = t}), doctest::Contains("tolerance"),
                         std::invalid_argument);
  // An infinite tolerance is a policy that never scales: every ratio is within it.
  CHECK(fc::advise_replicas(3, 1e10, {.tolerance = inf}).desired == 3);
  CHECK_THROWS_WITH_AS(fc::advise_replicas(3, 0.5, {.scale_to_zero_after = ns::min()}),
                       doctest::Contains("scale_to_zero_after"), std::invalid_argument);
  CHECK(fc::advise_replicas(3, 0.0, {.scale_to_zero_after = ns::max()}, ns::max()).desired == 0);
  CHECK_THROWS_WITH_AS(fc::advise_replicas(3, 0.5, {}, ns::min()), doctest::Contains("idle_for"),
                       std::invalid_argument);
  CHECK_THROWS_AS(fc::advise_replicas(INT_MIN, 0.5), std::invalid_argument);
  CHECK_THROWS_AS(fc::advise_replicas(3, 0.5, {.min_replicas = INT_MIN}), std::invalid_argument);
}

TEST_CASE(
    "advisors: advise_right_size refuses non-finite sizes and finds nothing for a model too big for any "
    "catalog") {
  const std::vector<fc::gpu_type> catalog = {
      {"small", 24'000'000'000, 0.5, per_hour("$1.00"), per_hour("$0.40")},
      {"big", 80'000'000'000, 2.0, per_hour("$900000000.00"), per_hour("$1.50")},
  };
  for (double p : {inf, qnan, -inf, -1.0, 0.0})
    CHECK_THROWS_WITH_AS(fc::advise_right_size({.parameters_billions = p}, catalog),
                         doctest::Contains("parameters_billions"), std::invalid_argument);
  for (double h : {inf, qnan, -1.0})
    CHECK_THROWS_WITH_AS(fc::advise_right_size({.parameters_billions = 1, .headroom = h}, catalog),
                         doctest::Contains("headroom"), std::invalid_argument);
  for (double t : {inf, qnan, 0.0})
    CHECK_THROWS_WITH_AS(fc::advise_right_size({.parameters_billions = 1, .required_throughput = t}, catalog),
                         doctest::Contains("required_throughput"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      fc::advise_right_size({.parameters_billions = 1, .weights = static_cast<frugal::element_type>(99)},
                            catalog),
      doctest::Contains("weights"), std::invalid_argument);
  for (double t : {inf, qnan, 0.0}) {
    auto bad = catalog;
    bad[1].relative_throughput = t;
    CHECK_THROWS_WITH_AS(fc::advise_right_size({.parameters_billions = 1}, bad), doctest::Contains("\"big\""),
                         std::invalid_argument);
  }
  SUBCASE("1e300 billion parameters fit nowhere, and the memory they need saturates") {
    const auto a = fc::advise_right_size({.parameters_billions = 1e300, .headroom = dmax}, catalog);
    CHECK_FALSE(a.found);
    CHECK(a.memory_needed_bytes == std::numeric_limits<std::uint64_t>::max());
    REQUIRE(a.candidates.size() == 2);
    for (const auto& c : a.candidates) {
      CHECK_FALSE(c.fits);
      CHECK(c.gpus == INT_MAX);
    }
  }
  SUBCASE("an enormous throughput on a type with a tiny one fits nowhere") {
    auto slow = catalog;
    slow[0].relative_throughput = dmin;
    const auto a = fc::advise_right_size({.parameters_billions = 1, .required_throughput = dmax}, slow);
    CHECK_FALSE(a.found);
    for (const auto& c : a.candidates) CHECK(c.gpus == INT_MAX);
  }
  SUBCASE("the smallest model still needs one GPU") {
    const auto a = fc::advise_right_size(
        {.parameters_billions = dmin, .headroom = 0, .required_throughput = dmin, .max_gpus = INT_MAX},
        catalog);
    REQUIRE(a.found);
    CHECK(a.best.gpus == 1);
    CHECK(a.memory_needed_bytes == 1);
  }
}

TEST_CASE(
    "advisors: advise_spot at a preemption rate too high to ever finish answers on-demand instead of "
    "throwing") {
  const auto od = per_hour("$4.00");
  const auto spot = per_hour("$1.60");
  for (double rate : {1e6, 1e100, dmax}) {
    for (ns restart : {ns(0), ns(6min), ns::max()}) {
      CAPTURE(rate);
      const auto a = fc::advise_spot({.length = 10h,
                                      .on_demand = od,
                                      .spot = spot,
                                      .preemptions_per_hour = rate,
                                      .checkpoint_interval = 1h,
                                      .restart_overhead = restart});
      CHECK_FALSE(a.use_spot);
      CHECK(a.expected_spot_time == ns::max());
      CHECK(a.on_demand_cost == money::parse("$40.00"));
      CHECK(a.expected_spot_cost > a.on_demand_cost);
      CHECK(a.break_even_discount == doctest::Approx(1));
      CHECK(a.price_ceiling.nanos() >= 0);
      CHECK(a.price_ceiling < money::parse("$0.01"));
      CHECK(a.reason.find("on-demand") == 0);
    }
  }
  // The job is shorter than one checkpoint interval: no full segment, and no 0 x Inf.
  const auto a = fc::advise_spot({.length = 30min,
                                  .on_demand = od,
                                  .spot = spot,
                                  .preemptions_per_hour = 1e6,
                                  .checkpoint_interval = 1h});
  CHECK_FALSE(a.use_spot);
  CHECK(a.expected_spot_time == ns::max());
  CHECK(std::isfinite(a.break_even_discount));
}

TEST_CASE("advisors: advise_spot refuses a non-finite preemption rate and saturates maximal durations") {
  const auto od = per_hour("$4.00");
  const auto spot = per_hour("$1.60");
  for (double rate : {inf, qnan, -1.0, -inf})
    CHECK_THROWS_WITH_AS(fc::advise_spot({.length = 1h,
                                          .on_demand = od,
                                          .spot = spot,
                                          .preemptions_per_hour = rate,
                                          .checkpoint_interval = 1h}),
                         doctest::Contains("preemptions_per_hour"), std::invalid_argument);
  // Every duration at its maximum: interval plus checkpoint cost is twice the int64 range.
  const auto a = fc::advise_spot({.length = ns::max(),
                                  .on_demand = od,
                                  .spot = spot,
                                  .preemptions_per_hour = 0,
                                  .checkpoint_interval = ns::max(),
                                  .checkpoint_cost = ns::max(),
                                  .restart_overhead = ns::max()});
  CHECK(a.expected_spot_time == ns::max());
  CHECK(a.expected_preemptions == 0);
  CHECK(a.on_demand_cost == od.for_duration(ns::max()));
  CHECK(std::isfinite(a.break_even_discount));
  // With no preemptions and no checkpoint, spot runs as long as on-demand and costs less.
  const auto b = fc::advise_spot({.length = ns::max(),
                                  .on_demand = od,
                                  .spot = spot,
                                  .preemptions_per_hour = 0,
                                  .checkpoint_interval = ns::max()});
  CHECK(b.use_spot);
  CHECK(b.expected_spot_time == ns::max());
  // The smallest positive rate changes nothing measurable.
  const auto c = fc::advise_spot({.length = 10h,
                                  .on_demand = od,
                                  .spot = spot,
                                  .preemptions_per_hour = dmin,
                                  .checkpoint_interval = 1h});
  CHECK(c.use_spot);
  CHECK(c.expected_spot_time == 10h);
  // A rate so small that 1/lambda overflows a double: still the job's length, not infinity.
  const auto tiny = fc::advise_spot({.length = 10h,
                                     .on_demand = od,
                                     .spot = spot,
                                     .preemptions_per_hour = 1e-300,
                                     .checkpoint_interval = 1h,
                                     .restart_overhead = 6min});
  CHECK(tiny.use_spot);
  CHECK(tiny.expected_spot_time == 10h);
  // A measured loss just below 1 per preemption: an expected time past the range, on-demand.
  const auto d = fc::advise_spot({.length = 10h,
                                  .on_demand = od,
                                  .spot = spot,
                                  .preemptions_per_hour = 1,
                                  .checkpoint_interval = 1h,
                                  .redo_per_preemption = ns(3'599'999'999'999)});
  CHECK_FALSE(d.use_spot);
  CHECK(d.expected_spot_time == ns::max());
  CHECK_THROWS_WITH_AS(fc::advise_spot({.length = 10h,
                                        .on_demand = od,
                                        .spot = spot,
                                        .preemptions_per_hour = dmax,
                                        .checkpoint_interval = 1h,
                                        .redo_per_preemption = ns::max()}),
                       doctest::Contains("never to finish"), std::invalid_argument);
}

TEST_CASE("advisors: advise_batch_window refuses a non-finite rate or model and answers at extreme rates") {
  const fc::batch_model m{.valid = true, .a_ns = 0.5e6, .b_ns = 4e6};
  for (double r : {inf, qnan, -1.0, 0.0})
    CHECK_THROWS_WITH_AS(
        fc::advise_batch_window({.arrival_rate_per_s = r, .model = m, .latency_target = 50ms}),
        doctest::Contains("arrival_rate_per_s"), std::invalid_argument);
  for (double v : {inf, -inf, qnan}) {
    CHECK_THROWS_WITH_AS(fc::advise_batch_window({.arrival_rate_per_s = 10,
                                                  .model = {.valid = true, .a_ns = v, .b_ns = 1},
                                                  .latency_target = 50ms}),
                         doctest::Contains("model.a_ns"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(fc::advise_batch_window({.arrival_rate_per_s = 10,
                                                  .model = {.valid = true, .a_ns = 1, .b_ns = v},
                                                  .latency_target = 50ms}),
                         doctest::Contains("model.b_ns"), std::invalid_argument);
  }
  SUBCASE("an arrival rate so low the gap between requests overflows double: batches of one") {
    const auto a = fc::advise_batch_window({.arrival_rate_per_s = dmin, .model = m, .latency_target = 50ms});
    CHECK(a.feasible);
    CHECK(a.max_batch == 1);
    CHECK(a.window == 0ns);
    CHECK(a.batch_time == 4500us);
    CHECK(a.min_stable_batch == 1);
    CHECK(a.utilization == 0);
  }
  SUBCASE("a very low rate with a maximal target: a window of centuries") {
    const auto a = fc::advise_batch_window(
        {.arrival_rate_per_s = 1e-9, .model = {.valid = true}, .latency_target = ns::max()});
    CHECK(a.feasible);
    CHECK(a.max_batch == 10);
    CHECK(a.window == ns(9'000'000'000'000'000'000));
    CHECK(a.worst_latency == a.window);
  }
  SUBCASE("the highest rate: the GPU cannot keep up") {
    const auto a =
        fc::advise_batch_window({.arrival_rate_per_s = dmax, .model = m, .latency_target = ns::max()});
    CHECK_FALSE(a.feasible);
    CHECK(a.max_batch == 256);
    CHECK(a.min_stable_batch == UINT32_MAX);
  }
  SUBCASE("a model whose batch time is beyond the nanosecond range misses any target") {
    const auto a = fc::advise_batch_window({.arrival_rate_per_s = 10,
                                            .model = {.valid = true, .a_ns = dmax, .b_ns = dmax},
                                            .latency_target = ns::max()});
    CHECK_FALSE(a.feasible);
    CHECK(a.reason.find("batch of one") != std::string::npos);
  }
  SUBCASE("a window and batch time that add up to just past the nanosecond range saturate") {
    // gap = 2^60 ns exactly, b = 7 x 2^60: n = 2 meets the target (2^63 as a double), and the window plus
    // the batch time is 2^63 ns, one past the int64 range.
    const auto a = fc::advise_batch_window({.arrival_rate_per_s = 8.673617379884035e-10,
                                            .model = {.valid = true, .a_ns = 0, .b_ns = 0x1p63 - 0x1p60},
                                            .latency_target = ns::max()});
    CHECK(a.max_batch == 2);
    CHECK(a.window == ns(std::int64_t{1} << 60));
    CHECK(a.worst_latency == ns::max());
  }
  SUBCASE("a batch time of 2^63 ns, the target as a double, saturates instead of wrapping negative") {
    const auto a = fc::advise_batch_window(
        {.arrival_rate_per_s = 1, .model = {.valid = true, .b_ns = 0x1p63}, .latency_target = ns::max()});
    CHECK(a.max_batch == 1);
    CHECK(a.batch_time == ns::max());
    CHECK(a.worst_latency == ns::max());
  }
}

TEST_CASE("advisors: advise_failover counts preemptions across a clock's whole range without overflowing") {
  using tp = std::chrono::steady_clock::time_point;
  const std::vector<tp> preemptions = {tp::min(), tp::min(), tp::max(), tp::max() - 1min, tp::max() - 2h};
  const auto price = money::parse("$1.00");
  const auto a = frugal::job::advise_failover<tp>(preemptions, tp::max(), price, {.max_preemptions = 2});
  CHECK(a.preemptions_in_window == 2);
  CHECK(a.use_on_demand);
  const auto b = frugal::job::advise_failover<tp>(preemptions, tp::min(), price, {.window = ns::max()});
  CHECK(b.preemptions_in_window == 2);
  // From the epoch, tp::min() is 2^63 ns back: one past the longest window.
  const auto c = frugal::job::advise_failover<tp>(preemptions, tp(), price, {.window = ns::max()});
  CHECK(c.preemptions_in_window == 0);
}
