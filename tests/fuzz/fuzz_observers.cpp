// Every calibration observer kind, granularity and axis fed a sequence of batches from the fuzzer's bytes:
// shapes with zero rows or columns, values at NaN, +-Inf, zero, subnormals and +-FLT_MAX. Properties: no
// undefined behaviour; an empty batch changes nothing (the observer ends up exactly as a twin fed only the
// non-empty batches); a batch with another channel count is refused; compute_params either refuses with
// std::invalid_argument or gives finite positive scales.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <variant>
#include <vector>

#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_observers: %s (%lld vs %lld)\n", what, a, b);
  std::abort();
}

float extreme_float(FuzzedDataProvider& fdp) {
  constexpr float values[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::lowest(),
                              std::numeric_limits<float>::denorm_min(),
                              -std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::min(),
                              0.0f,
                              -0.0f,
                              1.0f,
                              -1.0f};
  const int k = fdp.ConsumeIntegralInRange<int>(0, 15);
  if (k < static_cast<int>(std::size(values))) return values[k];
  return fdp.ConsumeFloatingPoint<float>();
}

using observer = std::variant<q::minmax_observer, q::moving_average_minmax_observer, q::percentile_observer,
                              q::mse_observer, q::entropy_observer>;

observer make(int kind, q::observer_options o, std::size_t bins) {
  switch (kind) {
    case 0:
      return q::minmax_observer(o);
    case 1:
      return q::moving_average_minmax_observer({.observer = o, .averaging_constant = 0.25f});
    case 2:
      return q::percentile_observer({.histogram = {.observer = o, .bins = bins}, .percentile = 99.0});
    case 3:
      return q::mse_observer({.histogram = {.observer = o, .bins = bins}, .candidates = 4});
    default:
      return q::entropy_observer({.histogram = {.observer = o, .bins = bins}, .quantized_bins = 8});
  }
}

// Whether observe threw invalid_argument.
bool observe(observer& obs, const std::vector<float>& x, std::size_t rows, std::size_t cols) {
  try {
    std::visit([&](auto& o) { o.observe(x, rows, cols); }, obs);
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

std::optional<q::quant_params> params(const observer& obs, const q::scheme& s) {
  try {
    return std::visit([&](const auto& o) { return o.compute_params(s); }, obs);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider fdp(bytes, size);
  const int kind = fdp.ConsumeIntegralInRange<int>(0, 4);
  q::observer_options o;
  if (fdp.ConsumeBool())
    o = {.granularity = q::granularity::per_channel, .axis = fdp.ConsumeIntegralInRange<int>(0, 1)};
  const std::size_t bins = std::size_t{8} << fdp.ConsumeIntegralInRange<int>(0, 3);
  observer obs = make(kind, o, bins);
  observer twin = make(kind, o, bins);  // sees only the non-empty batches
  std::size_t channels = 0;             // of the first non-empty batch
  std::size_t batches = 0;
  while (fdp.remaining_bytes() > 0 && batches < 16) {
    const auto rows = fdp.ConsumeIntegralInRange<std::size_t>(0, 5);
    const auto cols = fdp.ConsumeIntegralInRange<std::size_t>(0, 5);
    std::vector<float> x(rows * cols);
    for (float& v : x) v = extreme_float(fdp);
    const bool empty = x.empty();
    const std::size_t ch = o.granularity == q::granularity::per_tensor ? 1 : o.axis == 0 ? rows : cols;
    const bool mismatch = !empty && channels != 0 && ch != channels;
    const bool refused = observe(obs, x, rows, cols);
    if (refused != mismatch)
      fail("a batch refused exactly when its channel count differs", refused, mismatch);
    if (empty || mismatch) continue;
    if (observe(twin, x, rows, cols)) fail("the twin refused a batch");
    if (channels == 0) channels = ch;
    ++batches;
    const std::size_t seen = std::visit([](const auto& v) { return v.stats().batches; }, obs);
    if (seen != batches)
      fail("batches counted", static_cast<long long>(seen), static_cast<long long>(batches));
  }
  for (bool symmetric : {true, false}) {
    const q::scheme s{.granularity = o.granularity, .axis = o.axis, .symmetric = symmetric};
    const auto p = params(obs, s);
    const auto t = params(twin, s);
    if (p.has_value() != t.has_value()) fail("an empty batch changed whether parameters exist");
    if (!p) continue;
    if (p->scales != t->scales || p->zero_points != t->zero_points)
      fail("an empty batch changed the parameters");
    if (p->scales.size() != channels) fail("one scale per channel", p->scales.size(), channels);
    for (float sc : p->scales)
      if (!std::isfinite(sc) || !(sc > 0)) fail("a scale that is not finite and > 0");
  }
  return 0;
}
