// Calibration observers at the edges of their input: empty batches, and values at +-Inf, NaN, zero and the
// ends of the float range, for every observer kind, granularity and axis.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

constexpr float flt_max = std::numeric_limits<float>::max();
constexpr float finf = std::numeric_limits<float>::infinity();

q::observer_options per_channel(int axis) {
  return {.granularity = q::granularity::per_channel, .axis = axis};
}

// Runs `check(make)` with a factory of each observer kind for the given granularity and axis.
template <class Check>
void for_each_kind(q::observer_options o, Check check) {
  std::string kind = "minmax";
  CAPTURE(kind);
  check([o] { return q::minmax_observer(o); });
  kind = "moving average";
  check([o] { return q::moving_average_minmax_observer({.observer = o, .averaging_constant = 0.5f}); });
  kind = "percentile";
  check(
      [o] { return q::percentile_observer({.histogram = {.observer = o, .bins = 64}, .percentile = 99.0}); });
  kind = "mse";
  check([o] { return q::mse_observer({.histogram = {.observer = o, .bins = 64}, .candidates = 8}); });
  kind = "entropy";
  check([o] { return q::entropy_observer({.histogram = {.observer = o, .bins = 64}, .quantized_bins = 8}); });
}

q::scheme scheme_for(q::observer_options o, bool symmetric) {
  return {.granularity = o.granularity, .axis = o.axis, .symmetric = symmetric};
}

}  // namespace

TEST_CASE("quant observers: an empty batch changes nothing, first or later, for every kind and granularity") {
  const std::vector<float> real = {-3.0f, 0.5f, 2.0f, 1.0f, -1.0f, 4.0f};  // 2 x 3
  const std::vector<float> none;
  for (q::observer_options o : {q::observer_options{}, per_channel(0), per_channel(1)}) {
    CAPTURE(static_cast<int>(o.granularity));
    CAPTURE(o.axis);
    for_each_kind(o, [&](auto make) {
      auto reference = make();
      reference.observe(real, 2, 3);
      reference.observe(real, 2, 3);
      auto obs = make();
      // Empty batches of every shape, before, between and after the real ones.
      obs.observe(none, 0, 0);
      obs.observe(none, 0, 3);
      obs.observe(none, 2, 0);
      obs.observe(none, 0, 7);
      CHECK(obs.stats().batches == 0);
      CHECK(obs.channels() == 0);
      obs.observe(real, 2, 3);
      obs.observe(none, 0, 0);
      obs.observe(none, 5, 0);
      obs.observe(real, 2, 3);
      obs.observe(none, 0, 3);
      CHECK(obs.stats().batches == reference.stats().batches);
      CHECK(obs.stats().values == reference.stats().values);
      CHECK(obs.channels() == reference.channels());
      for (bool symmetric : {true, false}) {
        const q::scheme s = scheme_for(o, symmetric);
        const q::quant_params want = reference.compute_params(s);
        const q::quant_params got = obs.compute_params(s);
        CHECK(got.scales == want.scales);
        CHECK(got.zero_points == want.zero_points);
      }
      // Only empty batches: still nothing observed.
      auto empty = make();
      empty.observe(none, 0, 4);
      CHECK_THROWS_WITH_AS(empty.compute_params(scheme_for(o, true)), doctest::Contains("no batch observed"),
                           std::invalid_argument);
      // The data size is still checked for an empty shape.
      CHECK_THROWS_AS(empty.observe(real, 0, 3), std::invalid_argument);
    });
  }
}

TEST_CASE(
    "quant observers: values at +-Inf, NaN, zero and the ends of the float range give finite parameters") {
  const float qnan = std::nanf("");
  const float dmin = std::numeric_limits<float>::denorm_min();
  const float lowest = std::numeric_limits<float>::lowest();
  const std::vector<std::vector<float>> batches = {
      {flt_max, lowest, 0.0f, -0.0f, dmin, -dmin},
      {finf, -finf, qnan, flt_max, flt_max, flt_max},
      {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},
      {dmin, dmin, dmin, -dmin, -dmin, -dmin},
      {lowest, lowest, lowest, lowest, lowest, lowest},
  };
  for (q::observer_options o : {q::observer_options{}, per_channel(0), per_channel(1)}) {
    CAPTURE(o.axis);
    for_each_kind(o, [&](auto make) {
      auto obs = make();
      for (const auto& b : batches) {
        obs.observe(b, 2, 3);
        for (bool symmetric : {true, false}) {
          const q::quant_params p = obs.compute_params(scheme_for(o, symmetric));
          for (float sc : p.scales) {
            CHECK(std::isfinite(sc));
            CHECK(sc > 0);
          }
        }
      }
      CHECK(obs.stats().nonfinite == 3);
    });
  }
}

TEST_CASE("quant observers: every kind can be destroyed through a base and kept by value in a std::variant") {
  // Without a virtual destructor clang's -Wdelete-non-abstract-non-virtual-dtor stops a -Werror build that
  // keeps histogram observers in a std::variant.
  static_assert(std::has_virtual_destructor_v<q::minmax_observer>);
  static_assert(std::has_virtual_destructor_v<q::moving_average_minmax_observer>);
  static_assert(std::has_virtual_destructor_v<q::percentile_observer>);
  static_assert(std::has_virtual_destructor_v<q::mse_observer>);
  static_assert(std::has_virtual_destructor_v<q::entropy_observer>);
  std::variant<q::minmax_observer, q::percentile_observer, q::mse_observer, q::entropy_observer> v =
      q::entropy_observer();
  const std::vector<float> x = {1.0f, -2.0f};
  std::visit([&](auto& o) { o.observe(x, 1, 2); }, v);
  v = q::percentile_observer();
  CHECK(std::visit([](const auto& o) { return o.stats().batches; }, v) == 0);
}
