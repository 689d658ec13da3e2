// The batch policies driven directly with views, reports and options from the fuzzer's bytes, biased
// towards the ends of every range: durations at +-max, a clock that jumps anywhere, request counts that go
// down, batch sizes up to SIZE_MAX. Properties: no undefined behaviour; fixed_window answers window minus
// wait, saturated; adaptive's estimates stay finite and non-negative, and it never waits on a full queue.
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>

#include "frugal/batcher.hpp"

namespace {

using ns = std::chrono::nanoseconds;

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_policy: %s (%lld vs %lld)\n", what, a, b);
  std::abort();
}

std::int64_t extreme_i64(FuzzedDataProvider& fdp) {
  constexpr std::int64_t hi = std::numeric_limits<std::int64_t>::max(),
                         lo = std::numeric_limits<std::int64_t>::min();
  switch (fdp.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return hi;
    case 1:
      return lo;
    case 2:
      return 0;
    case 3:
      return hi - fdp.ConsumeIntegralInRange<std::int64_t>(0, 1000);
    case 4:
      return lo + fdp.ConsumeIntegralInRange<std::int64_t>(0, 1000);
    case 5:
      return fdp.ConsumeIntegralInRange<std::int64_t>(-1'000'000'000, 1'000'000'000);
    default:
      return fdp.ConsumeIntegral<std::int64_t>();
  }
}

ns extreme_ns(FuzzedDataProvider& fdp) { return ns(extreme_i64(fdp)); }

template <class T>
T extreme_unsigned(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return std::numeric_limits<T>::max();
    case 1:
      return 0;
    case 2:
      return fdp.ConsumeIntegralInRange<T>(0, 64);
    default:
      return fdp.ConsumeIntegral<T>();
  }
}

double extreme_double(FuzzedDataProvider& fdp) {
  switch (fdp.ConsumeIntegralInRange<int>(0, 8)) {
    case 0:
      return std::numeric_limits<double>::quiet_NaN();
    case 1:
      return std::numeric_limits<double>::infinity();
    case 2:
      return -std::numeric_limits<double>::infinity();
    case 3:
      return std::numeric_limits<double>::max();
    case 4:
      return std::numeric_limits<double>::denorm_min();
    case 5:
      return 0.0;
    case 6:
      return fdp.ConsumeProbability<double>();
    default:
      return fdp.ConsumeFloatingPoint<double>();
  }
}

frugal::policy_view extreme_view(FuzzedDataProvider& fdp) {
  frugal::policy_view v;
  v.now = extreme_ns(fdp);
  v.oldest_wait = extreme_ns(fdp);
  v.queued = extreme_unsigned<std::size_t>(fdp);
  v.queued_cost = extreme_unsigned<std::uint64_t>(fdp);
  v.max_batch = extreme_unsigned<std::size_t>(fdp);
  v.max_batch_cost = extreme_unsigned<std::uint64_t>(fdp);
  v.window = extreme_ns(fdp);
  v.in_flight_batches = extreme_unsigned<std::size_t>(fdp);
  v.arrivals = extreme_unsigned<std::uint64_t>(fdp);
  return v;
}

void check_estimates(const frugal::adaptive& p) {
  for (double x : {p.arrival_rate(), p.slope_ns(), p.intercept_ns()})
    if (!std::isfinite(x) || x < 0) fail("an estimate is not finite and >= 0", static_cast<long long>(x));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider fdp(bytes, size);
  frugal::adaptive_options o;
  if (fdp.ConsumeBool()) {
    o.latency_target = extreme_ns(fdp);
    o.safety = extreme_double(fdp);
    o.headroom = extreme_double(fdp);
    o.learning_rate = extreme_double(fdp);
    o.rate_horizon = extreme_ns(fdp);
    o.shed_hopeless = fdp.ConsumeBool();
  }
  const bool valid = o.latency_target > ns::zero() && o.safety > 0 && o.safety <= 1 && o.headroom >= 1 &&
                     std::isfinite(o.headroom) && o.learning_rate > 0 && o.learning_rate <= 1 &&
                     o.rate_horizon >= ns::zero();
  std::optional<frugal::adaptive> p;
  bool threw = false;
  try {
    p.emplace(o);
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  if (threw == valid) fail(valid ? "valid adaptive options rejected" : "invalid adaptive options accepted");
  if (threw) p.emplace(frugal::adaptive_options{});
  const frugal::fixed_window fixed;
  while (fdp.remaining_bytes() > 0) {
    switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: {
        const frugal::policy_view v = extreme_view(fdp);
        const __int128 want = static_cast<__int128>(v.window.count()) - v.oldest_wait.count();
        const __int128 clamped =
            want > std::numeric_limits<std::int64_t>::max()   ? std::numeric_limits<std::int64_t>::max()
            : want < std::numeric_limits<std::int64_t>::min() ? std::numeric_limits<std::int64_t>::min()
                                                              : want;
        const ns got = fixed.wait_for(v);
        if (got.count() != static_cast<std::int64_t>(clamped))
          fail("fixed_window: not the saturated window minus wait", got.count(),
               static_cast<long long>(clamped));
        break;
      }
      case 1: {
        const frugal::policy_view v = extreme_view(fdp);
        const ns w = p->wait_for(v);
        if (w < ns::zero()) fail("adaptive: a negative wait", w.count());
        if (w > ns::zero() && (v.queued >= v.max_batch || !p->fitted()))
          fail("adaptive: waits with a full queue or before it has seen a batch", w.count());
        break;
      }
      case 2: {
        frugal::batch_report r;
        r.size = extreme_unsigned<std::size_t>(fdp);
        r.cost = extreme_unsigned<std::uint64_t>(fdp);
        r.run_time = extreme_ns(fdp);
        p->on_batch_done(r);
        break;
      }
      default: {
        const ns t = p->expected_run_time(extreme_unsigned<std::size_t>(fdp));
        if (t < ns::zero()) fail("adaptive: a negative expected run time", t.count());
        if (t > ns::zero() && (!p->fitted() || !p->options().shed_hopeless))
          fail("adaptive: predicts before it is fitted or without shed_hopeless", t.count());
        break;
      }
    }
    check_estimates(*p);
  }
  return 0;
}
