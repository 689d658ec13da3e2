#pragma once

// Percentiles of measured samples, for the examples' and benchmarks' reports.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace examples {

/// @brief The nearest-rank quantile @p q in [0, 1] of @p v (the smallest sample with at least q of the
/// samples at or below it); 0 for no samples.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(k, 1, v.size()) - 1];
}

}  // namespace examples
