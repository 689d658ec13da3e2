// The cost advisors with every numeric input taken from the fuzzer's bytes, biased towards NaN, +-Inf,
// zero, the largest and smallest doubles, durations at +-max and ints at their ends. Property: no undefined
// behaviour; an advisor either refuses with std::invalid_argument (always for a non-finite input), throws
// money's overflow_error for an amount money cannot hold, or answers within the documented bounds.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/cost.hpp"

namespace fc = frugal::cost;
using ns = std::chrono::nanoseconds;

namespace {

[[noreturn]] void fail(const char* what, double a = 0, double b = 0) {
  std::fprintf(stderr, "fuzz_advisors: %s (%.17g vs %.17g)\n", what, a, b);
  std::abort();
}

double extreme_double(FuzzedDataProvider& fdp) {
  constexpr double values[] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::max(),
                               -std::numeric_limits<double>::max(),
                               std::numeric_limits<double>::denorm_min(),
                               std::numeric_limits<double>::min(),
                               0.0,
                               -0.0,
                               1e300,
                               1e-300,
                               1e10,
                               1.0,
                               0.7};
  const int k = fdp.ConsumeIntegralInRange<int>(0, 16);
  if (k < static_cast<int>(std::size(values))) return values[k];
  if (k == 14) return fdp.ConsumeProbability<double>() * 10;
  return fdp.ConsumeFloatingPoint<double>();
}

ns extreme_ns(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:
      return ns::max();
    case 1:
      return ns::min();
    case 2:
      return ns::zero();
    case 3:
      return ns(fdp.ConsumeIntegralInRange<std::int64_t>(1, 3'600'000'000'000));
    case 4:
      return std::chrono::hours(fdp.ConsumeIntegralInRange<int>(1, 100));
    default:
      return ns(fdp.ConsumeIntegral<std::int64_t>());
  }
}

int extreme_int(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      return INT_MAX;
    case 1:
      return INT_MIN;
    case 2:
      return 0;
    case 3:
      return fdp.ConsumeIntegralInRange<int>(1, 16);
    default:
      return fdp.ConsumeIntegral<int>();
  }
}

fc::money extreme_price(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return fc::money::from_nanos(std::numeric_limits<std::int64_t>::max());
    case 1:
      return fc::money::from_nanos(fdp.ConsumeIntegralInRange<std::int64_t>(0, 10));
    case 2:
      return fc::money::from_nanos(fdp.ConsumeIntegralInRange<std::int64_t>(0, 100'000'000'000));
    default:
      return fc::money::from_nanos(
          fdp.ConsumeIntegralInRange<std::int64_t>(0, std::numeric_limits<std::int64_t>::max()));
  }
}

fc::rate extreme_time_rate(FuzzedDataProvider& fdp) {
  const fc::money p = extreme_price(fdp);
  return fdp.ConsumeBool() ? fc::rate::per_hour(p) : fc::rate::per_second(p);
}

enum class expect { refusal, answer, either };

// Runs f; an invalid_argument is a refusal, an overflow_error must be money's (an amount it cannot hold)
// and is allowed whatever is expected. A non-finite input expects a refusal; valid inputs an answer.
template <class F>
void attempt(F f, expect e, const char* who) {
  try {
    f();
  } catch (const std::invalid_argument& x) {
    if (std::string(x.what()).find("frugal::") != 0) fail(who);
    if (e == expect::answer) {
      std::fprintf(stderr, "fuzz_advisors: %s refused valid inputs: %s\n", who, x.what());
      std::abort();
    }
    return;
  } catch (const std::overflow_error& x) {
    if (std::string(x.what()).find("frugal::cost::money: overflow") != 0) fail(who);
    return;
  }
  if (e == expect::refusal) {
    std::fprintf(stderr, "fuzz_advisors: %s accepted a non-finite input\n", who);
    std::abort();
  }
}

expect expecting(bool nonfinite, bool valid) {
  return nonfinite ? expect::refusal : valid ? expect::answer : expect::either;
}

void replicas(FuzzedDataProvider& fdp) {
  const int current = extreme_int(fdp);
  const double u = extreme_double(fdp);
  fc::replica_policy p;
  if (fdp.ConsumeBool()) {
    p.target_utilization = extreme_double(fdp);
    p.tolerance = extreme_double(fdp);
    p.min_replicas = extreme_int(fdp);
    p.max_replicas = extreme_int(fdp);
    p.scale_to_zero_after = extreme_ns(fdp);
  }
  const ns idle = extreme_ns(fdp);
  const bool nonfinite = !std::isfinite(u) || !std::isfinite(p.target_utilization);
  const bool valid = p.target_utilization > 0 && p.target_utilization <= 1 && p.tolerance >= 0 &&
                     p.min_replicas >= 0 && p.max_replicas >= std::max(1, p.min_replicas) && current >= 0 &&
                     u >= 0 && idle >= ns::zero() && p.scale_to_zero_after >= ns::zero();
  attempt(
      [&] {
        const fc::replica_advice a = fc::advise_replicas(current, u, p, idle);
        if (a.desired < 0 || a.desired > p.max_replicas) fail("replicas out of [0, max]", a.desired);
        if (a.desired != 0 && a.desired < p.min_replicas) fail("replicas below min", a.desired);
      },
      expecting(nonfinite, valid), "advise_replicas");
}

void right_size(FuzzedDataProvider& fdp) {
  fc::right_size_request r;
  r.parameters_billions = extreme_double(fdp);
  r.weights = static_cast<frugal::element_type>(fdp.ConsumeIntegralInRange<int>(0, 16));
  r.headroom = extreme_double(fdp);
  r.required_throughput = extreme_double(fdp);
  r.max_gpus = extreme_int(fdp);
  r.spot = fdp.ConsumeBool();
  std::vector<fc::gpu_type> catalog;
  const int n = fdp.ConsumeIntegralInRange<int>(0, 3);
  bool nonfinite = !std::isfinite(r.parameters_billions) || !std::isfinite(r.headroom) ||
                   !std::isfinite(r.required_throughput);
  bool valid = r.parameters_billions > 0 && r.headroom >= 0 && r.required_throughput > 0 && r.max_gpus >= 1 &&
               frugal::element_bits(r.weights) != 0 && n > 0;
  for (int i = 0; i < n; ++i) {
    fc::gpu_type g;
    g.name = "g" + std::to_string(i);
    g.memory_bytes =
        fdp.ConsumeBool() ? std::numeric_limits<std::uint64_t>::max() : fdp.ConsumeIntegral<std::uint64_t>();
    g.relative_throughput = extreme_double(fdp);
    nonfinite = nonfinite || !std::isfinite(g.relative_throughput);
    g.on_demand = fc::rate::per_hour(extreme_price(fdp));
    g.spot = fc::rate::per_hour(extreme_price(fdp));
    valid = valid && g.memory_bytes > 0 && g.relative_throughput > 0 &&
            (r.spot && g.spot.price().nanos() > 0 ? g.spot : g.on_demand).price().nanos() > 0;
    catalog.push_back(g);
  }
  attempt(
      [&] {
        const fc::right_size_advice a = fc::advise_right_size(r, catalog);
        if (a.candidates.size() != catalog.size()) fail("a candidate per catalog entry");
        for (std::size_t i = 0; i < a.candidates.size(); ++i) {
          const auto& c = a.candidates[i];
          if (c.gpus < 1 || c.fits != (c.gpus <= r.max_gpus)) fail("candidate gpus", c.gpus);
          if (i > 0 && a.candidates[i - 1].fits < c.fits) fail("a fitting candidate after one that does not");
        }
        if (a.found != a.candidates.front().fits) fail("found");
      },
      expecting(nonfinite, valid), "advise_right_size");
}

void spot(FuzzedDataProvider& fdp) {
  fc::spot_job j;
  j.length = extreme_ns(fdp);
  j.on_demand = extreme_time_rate(fdp);
  j.spot = extreme_time_rate(fdp);
  j.preemptions_per_hour = extreme_double(fdp);
  j.checkpoint_interval = extreme_ns(fdp);
  j.checkpoint_cost = extreme_ns(fdp);
  j.restart_overhead = extreme_ns(fdp);
  if (fdp.ConsumeBool()) j.redo_per_preemption = extreme_ns(fdp);
  const double lambda = j.preemptions_per_hour / 3.6e12;
  const bool valid =
      j.length > ns::zero() && j.checkpoint_interval > ns::zero() && j.checkpoint_cost >= ns::zero() &&
      j.restart_overhead >= ns::zero() && j.preemptions_per_hour >= 0 && j.on_demand.price().nanos() > 0 &&
      j.spot.price().nanos() > 0 &&
      (!j.redo_per_preemption ||
       (*j.redo_per_preemption >= ns::zero() &&
        lambda * (double(j.redo_per_preemption->count()) + double(j.restart_overhead.count())) < 1));
  attempt(
      [&] {
        const fc::spot_advice a = fc::advise_spot(j);
        // E >= length, up to the rounding of length to a double.
        if (double(a.expected_spot_time.count()) < double(j.length.count()) * (1 - 1e-12))
          fail("expected spot time below the job's length", double(a.expected_spot_time.count()));
        if (a.expected_spot_cost.nanos() < 0 || a.on_demand_cost.nanos() < 0 || a.price_ceiling.nanos() < 0)
          fail("a negative amount");
        if (std::isnan(a.expected_preemptions) || a.expected_preemptions < 0) fail("expected preemptions");
        if (!(a.break_even_discount >= -1e-9 && a.break_even_discount <= 1))
          fail("break-even discount outside [0, 1]", a.break_even_discount);
        if (a.use_spot != (a.expected_spot_cost < a.on_demand_cost)) fail("use_spot");
      },
      expecting(!std::isfinite(j.preemptions_per_hour), valid), "advise_spot");
}

void batch_window(FuzzedDataProvider& fdp) {
  fc::batch_window_request r;
  r.arrival_rate_per_s = extreme_double(fdp);
  r.model = {.valid = fdp.ConsumeIntegralInRange<int>(0, 7) != 0,
             .a_ns = extreme_double(fdp),
             .b_ns = extreme_double(fdp)};
  r.latency_target = extreme_ns(fdp);
  r.max_batch_limit = fdp.ConsumeBool() ? UINT32_MAX : fdp.ConsumeIntegral<std::uint32_t>();
  const bool nonfinite =
      !std::isfinite(r.arrival_rate_per_s) || !std::isfinite(r.model.a_ns) || !std::isfinite(r.model.b_ns);
  attempt(
      [&] {
        const fc::batch_window_advice a = fc::advise_batch_window(r);
        if (a.max_batch < 1 || a.max_batch > r.max_batch_limit) fail("max_batch", a.max_batch);
        if (a.min_stable_batch < 1) fail("min_stable_batch");
        if (a.window < ns::zero() || a.batch_time < ns::zero() || a.worst_latency < a.window ||
            a.worst_latency < a.batch_time)
          fail("window, batch time and worst latency");
        if (std::isnan(a.utilization) || a.utilization < 0) fail("utilization", a.utilization);
        if (a.feasible && a.max_batch < a.min_stable_batch) fail("feasible below the stable batch");
      },
      expecting(nonfinite, r.arrival_rate_per_s > 0 && r.model.valid && r.latency_target > ns::zero() &&
                               r.max_batch_limit > 0),
      "advise_batch_window");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider fdp(bytes, size);
  while (fdp.remaining_bytes() > 0) {
    switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
        replicas(fdp);
        break;
      case 1:
        right_size(fdp);
        break;
      case 2:
        spot(fdp);
        break;
      default:
        batch_window(fdp);
        break;
    }
  }
  return 0;
}
