#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
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
// The lowest index of the largest finite value of v, or v.size() when none is finite. Sixteen lanes each
// keep their largest value and its first index (strict >, so the first of equals), which compilers turn
// into vector compares and blends; the lanes are merged by (value, lowest index). The result is the scalar
// scan's, in any order of lanes. x - x == 0 is false exactly for infinities and NaN.
inline std::size_t argmax_finite(std::span<const float> v) noexcept {
  constexpr std::size_t L = 16;
  const float none = -std::numeric_limits<float>::infinity();
  float best[L];
  std::uint32_t at[L];
  for (std::size_t l = 0; l < L; ++l) {
    best[l] = none;
    at[l] = 0;
  }
  const std::size_t n = v.size(), body = n / L * L;
  for (std::size_t i = 0; i < body; i += L)
    for (std::size_t l = 0; l < L; ++l) {
      const float x = v[i + l];
      const bool gt = x - x == 0.0f && x > best[l];
      best[l] = gt ? x : best[l];
      at[l] = gt ? static_cast<std::uint32_t>(i + l) : at[l];
    }
  for (std::size_t i = body; i < n; ++i) {
    const float x = v[i];
    const std::size_t l = i - body;
    if (x - x == 0.0f && x > best[l]) {
      best[l] = x;
      at[l] = static_cast<std::uint32_t>(i);
    }
  }
  std::size_t r = n;
  float top = none;
  for (std::size_t l = 0; l < L; ++l) {
    if (best[l] == none) continue;  // no finite value in this lane (-inf itself is not finite)
    if (r == n || best[l] > top || (best[l] == top && at[l] < r)) {
      top = best[l];
      r = at[l];
    }
  }
  return r;
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
  const std::size_t best = detail::argmax_finite(logits);
  if (best == logits.size()) return std::nullopt;
  if (p.temperature <= 0) return static_cast<kv_token>(best);
  const double top = logits[best], inv_t = 1.0 / static_cast<double>(p.temperature);
  std::vector<double> w(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    w[i] = std::isfinite(logits[i]) ? std::exp((static_cast<double>(logits[i]) - top) * inv_t) : 0.0;
    total += w[i];
  }
  if (p.top_p >= 1) {
    const double target = u * total;
    double acc = 0;
    std::size_t last = best;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0) continue;
      acc += w[i];
      last = i;
      if (acc > target) return static_cast<kv_token>(i);
    }
    return static_cast<kv_token>(last);
  }
  // The nucleus is the shortest run, most likely first (lower id first among equals), whose weight reaches
  // top_p of the total: every token above a threshold weight tau, then tokens at tau in id order. tau is
  // found by a weighted quickselect, O(vocab) expected, with no sort; the draw then walks the nucleus in id
  // order.
  const double need = static_cast<double>(p.top_p) * total;
  std::vector<std::uint32_t> cand, next;
  cand.reserve(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (w[i] > 0) cand.push_back(static_cast<std::uint32_t>(i));
  double above = 0;  // weight of the tokens known to lie above every candidate
  double tau = 0;
  while (!cand.empty()) {
    const double a = w[cand.front()], b = w[cand[cand.size() / 2]], c = w[cand.back()];
    const double pivot = std::max(std::min(a, b), std::min(std::max(a, b), c));
    double greater = 0, equal = 0;
    next.clear();
    for (const std::uint32_t i : cand) {
      if (w[i] > pivot) {
        greater += w[i];
        next.push_back(i);
      } else if (w[i] == pivot) {
        equal += w[i];
      }
    }
    if (above + greater >= need) {
      cand.swap(next);
      continue;
    }
    tau = pivot;
    if (above + greater + equal >= need) break;
    above += greater + equal;
    tau = 0;
    next.clear();
    for (const std::uint32_t i : cand)
      if (w[i] < pivot) next.push_back(i);
    cand.swap(next);
  }
  double nucleus = 0;
  for (std::size_t i = 0; i < w.size(); ++i)
    if (w[i] > tau) nucleus += w[i];
  std::size_t ties = 0;  // tokens at tau in the nucleus, the lowest ids
  if (tau > 0)
    for (std::size_t i = 0; i < w.size() && nucleus < need; ++i)
      if (w[i] == tau) {
        nucleus += w[i];
        ++ties;
      }
  const double target = u * nucleus;
  double run = 0;
  std::size_t last = best;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] < tau || w[i] == 0) continue;
    if (w[i] == tau) {
      if (ties == 0) continue;
      --ties;
    }
    run += w[i];
    last = i;
    if (run > target) return static_cast<kv_token>(i);
  }
  return static_cast<kv_token>(last);
}

FRUGAL_END_NAMESPACE
