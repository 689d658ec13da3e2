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

FRUGAL_BEGIN_NAMESPACE
namespace quant {
namespace detail {

inline void check_same_size(std::size_t a, std::size_t b, const char* who) {
  if (a != b)
    throw std::invalid_argument(std::string(who) + ": the reference has " + std::to_string(a) +
                                " elements but the approximation has " + std::to_string(b));
}

// Sums in double so that the metric itself adds no error worth mentioning.
struct error_sums {
  double ref2 = 0, approx2 = 0, dot = 0, err2 = 0, max_abs = 0;
};

inline error_sums sums_of(std::span<const float> ref, std::span<const float> approx, const char* who) {
  check_same_size(ref.size(), approx.size(), who);
  error_sums s;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double r = ref[i], a = approx[i], e = a - r;
    s.ref2 += r * r;
    s.approx2 += a * a;
    s.dot += r * a;
    s.err2 += e * e;
    s.max_abs = std::max(s.max_abs, std::abs(e));
  }
  return s;
}

template <class A, class B>
error_sums sums_of(const Eigen::MatrixBase<A>& ref, const Eigen::MatrixBase<B>& approx, const char* who) {
  if (ref.rows() != approx.rows() || ref.cols() != approx.cols())
    throw std::invalid_argument(std::string(who) + ": the reference is " + std::to_string(ref.rows()) +
                                " x " + std::to_string(ref.cols()) + " but the approximation is " +
                                std::to_string(approx.rows()) + " x " + std::to_string(approx.cols()));
  const Eigen::MatrixXd r = ref.template cast<double>(), a = approx.template cast<double>();
  error_sums s;
  s.ref2 = r.squaredNorm();
  s.approx2 = a.squaredNorm();
  s.dot = r.cwiseProduct(a).sum();
  s.err2 = (a - r).squaredNorm();
  s.max_abs = r.size() ? (a - r).cwiseAbs().maxCoeff() : 0.0;
  return s;
}

inline double relative_of(const error_sums& s) {
  if (s.ref2 == 0) return s.err2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(s.err2 / s.ref2);
}
inline double sqnr_of(const error_sums& s) {
  if (s.err2 == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(s.ref2 / s.err2);
}
inline double cosine_of(const error_sums& s) {
  if (s.ref2 == 0 || s.approx2 == 0) return s.ref2 == s.approx2 ? 1.0 : 0.0;
  return s.dot / std::sqrt(s.ref2 * s.approx2);
}

}  // namespace detail

/// @brief Relative Frobenius error ||approx - ref|| / ||ref|| (0 for equal tensors).
inline double relative_error(std::span<const float> ref, std::span<const float> approx) {
  return detail::relative_of(detail::sums_of(ref, approx, "frugal::quant::relative_error"));
}
/// @brief Signal-to-quantization-noise ratio in dB: 10 log10(||ref||^2 / ||approx - ref||^2).
inline double sqnr_db(std::span<const float> ref, std::span<const float> approx) {
  return detail::sqnr_of(detail::sums_of(ref, approx, "frugal::quant::sqnr_db"));
}
/// @brief Cosine similarity <a, b> / (||a|| ||b||).
inline double cosine_similarity(std::span<const float> a, std::span<const float> b) {
  return detail::cosine_of(detail::sums_of(a, b, "frugal::quant::cosine_similarity"));
}
/// @brief max |approx - ref|.
inline double max_abs_error(std::span<const float> ref, std::span<const float> approx) {
  return detail::sums_of(ref, approx, "frugal::quant::max_abs_error").max_abs;
}

/// @brief relative_error on Eigen matrices (any storage order).
template <class A, class B>
double relative_error(const Eigen::MatrixBase<A>& ref, const Eigen::MatrixBase<B>& approx) {
  return detail::relative_of(detail::sums_of(ref, approx, "frugal::quant::relative_error"));
}
/// @brief sqnr_db on Eigen matrices.
template <class A, class B>
double sqnr_db(const Eigen::MatrixBase<A>& ref, const Eigen::MatrixBase<B>& approx) {
  return detail::sqnr_of(detail::sums_of(ref, approx, "frugal::quant::sqnr_db"));
}
/// @brief cosine_similarity on Eigen matrices.
template <class A, class B>
double cosine_similarity(const Eigen::MatrixBase<A>& a, const Eigen::MatrixBase<B>& b) {
  return detail::cosine_of(detail::sums_of(a, b, "frugal::quant::cosine_similarity"));
}
/// @brief max_abs_error on Eigen matrices.
template <class A, class B>
double max_abs_error(const Eigen::MatrixBase<A>& ref, const Eigen::MatrixBase<B>& approx) {
  return detail::sums_of(ref, approx, "frugal::quant::max_abs_error").max_abs;
}

/// @brief A histogram of approx - ref over [lo, hi] in equal bins; the ends are the extreme errors.
struct histogram {
  double lo = 0;
  double hi = 0;
  std::vector<std::size_t> counts;
  /// @brief The centre of bin i.
  double center(std::size_t i) const noexcept {
    return lo + (hi - lo) * (static_cast<double>(i) + 0.5) / static_cast<double>(counts.size());
  }
};

/// @brief The histogram of the quantization error approx - ref, in `bins` bins.
inline histogram error_histogram(std::span<const float> ref, std::span<const float> approx,
                                 std::size_t bins = 64) {
  constexpr const char* who = "frugal::quant::error_histogram";
  detail::check_same_size(ref.size(), approx.size(), who);
  if (bins == 0) throw std::invalid_argument(std::string(who) + ": bins must be > 0");
  histogram h;
  h.counts.assign(bins, 0);
  if (ref.empty()) return h;
  h.lo = std::numeric_limits<double>::infinity();
  h.hi = -h.lo;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = static_cast<double>(approx[i]) - ref[i];
    h.lo = std::min(h.lo, e);
    h.hi = std::max(h.hi, e);
  }
  const double width = h.hi > h.lo ? (h.hi - h.lo) / static_cast<double>(bins) : 1.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double e = static_cast<double>(approx[i]) - ref[i];
    const auto b = std::min(bins - 1, static_cast<std::size_t>((e - h.lo) / width));
    ++h.counts[b];
  }
  return h;
}

}  // namespace quant
FRUGAL_END_NAMESPACE
