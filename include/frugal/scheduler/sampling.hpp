#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "frugal/kv/salt.hpp"
#include "frugal/namespace.hpp"
#include "frugal/scheduler/options.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace detail {
inline std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace detail

/// @brief Draw n of a seed: uniform in [0, 1), a function of (seed, n) alone (counter-based, so a
/// sequence's draws do not depend on what ran beside it or on the order of calls).
inline double sampling_uniform(std::uint64_t seed, std::uint64_t n) noexcept {
  const std::uint64_t x = detail::splitmix64(detail::splitmix64(seed) ^ (n * 0xd1b54a32d192ed03ull));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

/// @brief The token that `p` picks from one row of logits with uniform draw `u` in [0, 1) (see
/// sampling_params). Non-finite logits are never picked; empty when no logit is finite. The reductions run
/// in one fixed order over the row, so equal rows give equal tokens.
inline std::optional<kv_token> sample_token(std::span<const float> logits, const sampling_params& p,
                                            double u) {
  std::size_t best = logits.size();
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i]) && (best == logits.size() || logits[i] > logits[best])) best = i;
  if (best == logits.size()) return std::nullopt;
  if (p.temperature <= 0) return static_cast<kv_token>(best);
  const double top = logits[best], inv_t = 1.0 / static_cast<double>(p.temperature);
  auto weight = [&](std::size_t i) {
    return std::isfinite(logits[i]) ? std::exp((static_cast<double>(logits[i]) - top) * inv_t) : 0.0;
  };
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) total += weight(i);
  if (p.top_p >= 1) {
    const double target = u * total;
    double acc = 0;
    std::size_t last = best;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const double w = weight(i);
      if (w == 0) continue;
      acc += w;
      last = i;
      if (acc > target) return static_cast<kv_token>(i);
    }
    return static_cast<kv_token>(last);
  }
  // The nucleus: most likely first (lower id first among equals). The top 64 usually hold it; the whole
  // row is sorted only when they do not.
  std::vector<std::uint32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0u);
  auto more_likely = [&](std::uint32_t a, std::uint32_t b) {
    const double wa = weight(a), wb = weight(b);
    return wa != wb ? wa > wb : a < b;
  };
  const double need = static_cast<double>(p.top_p) * total;
  std::size_t k = std::min<std::size_t>(64, order.size());
  for (;;) {
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      more_likely);
    double acc = 0;
    std::size_t n = 0;
    while (n < k && acc < need) acc += weight(order[n++]);
    if (acc >= need || k == order.size()) {
      const double target = u * acc;
      double run = 0;
      for (std::size_t i = 0; i < n; ++i) {
        run += weight(order[i]);
        if (run > target) return static_cast<kv_token>(order[i]);
      }
      return static_cast<kv_token>(order[n - 1]);
    }
    k = order.size();
  }
}

FRUGAL_END_NAMESPACE
