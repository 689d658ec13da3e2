#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/eigen.hpp"
#include "frugal/quant/types.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief SmoothQuant's per-input-channel factors s_j = max|X_j|^alpha / max|W_j|^(1 - alpha).
/// `act_absmax` has K entries (max |X[:, j]| from calibration), `w` is N x K (output x input channels),
/// so max|W_j| is over column j. A channel whose activation or weight maximum is 0 gets s_j = 1.
/// NaN or Inf in `act_absmax` or `w`, and a factor beyond FLT_MAX, are std::invalid_argument.
inline std::vector<float> smoothing_factors(std::span<const float> act_absmax,
                                            const Eigen::Ref<const row_matrix>& w, float alpha = 0.5f) {
  constexpr const char* who = "frugal::quant::smoothing_factors";
  if (!(alpha >= 0.0f && alpha <= 1.0f))
    throw std::invalid_argument(std::string(who) + ": alpha must be in [0, 1], not " + std::to_string(alpha));
  if (act_absmax.size() != static_cast<std::size_t>(w.cols()))
    throw std::invalid_argument(std::string(who) + ": act_absmax has " + std::to_string(act_absmax.size()) +
                                " entries, not K = " + std::to_string(w.cols()));
  std::vector<float> s(act_absmax.size(), 1.0f);
  for (std::size_t j = 0; j < s.size(); ++j) {
    const float a = act_absmax[j];
    if (!(a >= 0.0f) || !std::isfinite(a))
      throw std::invalid_argument(std::string(who) + ": act_absmax[" + std::to_string(j) +
                                  "] = " + std::to_string(a) + " must be finite and >= 0");
    const auto col = w.col(static_cast<Eigen::Index>(j));
    if (!col.allFinite())
      throw std::invalid_argument(std::string(who) + ": w column " + std::to_string(j) + " holds NaN or Inf");
    const float wmax = w.rows() ? col.cwiseAbs().maxCoeff() : 0.0f;
    if (a == 0.0f || wmax == 0.0f) continue;
    const double f =
        std::pow(static_cast<double>(a), alpha) / std::pow(static_cast<double>(wmax), 1.0 - alpha);
    if (!(f <= static_cast<double>(std::numeric_limits<float>::max())))  // the cast would be UB
      throw std::invalid_argument(std::string(who) + ": the factor of channel " + std::to_string(j) + " (" +
                                  std::to_string(f) + ") overflows fp32");
    if (f > 0) s[j] = static_cast<float>(f);
  }
  return s;
}

namespace detail {
inline void check_factors(std::span<const float> s, Eigen::Index k, const char* who) {
  if (s.size() != static_cast<std::size_t>(k))
    throw std::invalid_argument(std::string(who) + ": s has " + std::to_string(s.size()) +
                                " entries, not K = " + std::to_string(k));
  for (std::size_t j = 0; j < s.size(); ++j)
    if (!(s[j] > 0.0f) || !std::isfinite(s[j]))
      throw std::invalid_argument(std::string(who) + ": s[" + std::to_string(j) +
                                  "] = " + std::to_string(s[j]) + " must be finite and > 0");
}
}  // namespace detail

/// @brief W[:, j] *= s_j in place (W is N x K). Every s_j must be finite and > 0.
inline void smooth_weights(Eigen::Ref<row_matrix> w, std::span<const float> s) {
  detail::check_factors(s, w.cols(), "frugal::quant::smooth_weights");
  for (Eigen::Index j = 0; j < w.cols(); ++j) w.col(j) *= s[static_cast<std::size_t>(j)];
}

/// @brief X[:, j] /= s_j in place (X is M x K): with smooth_weights, X W^T is unchanged. Every s_j must
/// be finite and > 0 (a zero divided by it).
inline void smooth_activations(Eigen::Ref<row_matrix> x, std::span<const float> s) {
  detail::check_factors(s, x.cols(), "frugal::quant::smooth_activations");
  for (Eigen::Index j = 0; j < x.cols(); ++j) x.col(j) /= s[static_cast<std::size_t>(j)];
}

/// @brief The smoothed weights, factors and activation statistics of one linear layer.
struct smoothquant_result {
  row_matrix weights;             ///< W with column j multiplied by s_j
  std::vector<float> factors;     ///< s, K entries: divide activation column j by s_j at run time
  std::vector<float> act_absmax;  ///< max|X_j| / s_j, the statistics of the smoothed activations
  float act_scale = 1.0f;  ///< the static per-tensor int8 scale of the smoothed activations (absmax / 127)
};

/// @brief Applies SmoothQuant to a weight matrix and its activation statistics.
inline smoothquant_result smoothquant(const Eigen::Ref<const row_matrix>& w,
                                      std::span<const float> act_absmax, float alpha = 0.5f) {
  smoothquant_result r;
  r.factors = smoothing_factors(act_absmax, w, alpha);
  r.weights = w;
  smooth_weights(r.weights, r.factors);
  r.act_absmax.resize(act_absmax.size());
  float amax = 0.0f;
  for (std::size_t j = 0; j < act_absmax.size(); ++j) {
    r.act_absmax[j] = act_absmax[j] / r.factors[j];
    amax = std::max(amax, r.act_absmax[j]);
  }
  r.act_scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  return r;
}

}  // namespace quant
FRUGAL_END_NAMESPACE
