#pragma once

// Calibration observers see batches of a tensor and produce its quantization parameters. All are
// deterministic: the same batches in the same order give the same parameters.
//
// NaN and Inf: every observer skips them and counts them in stats().nonfinite; they never move a range
// or a histogram. compute_params() is std::invalid_argument naming the channel when a channel has seen
// no finite value at all (it used to get scale 1 silently). Finite values up to +-FLT_MAX are exact:
// the histogram observers keep their range in double, so doubling it past FLT_MAX does not make it Inf,
// and the clip ranges they return are clamped to +-FLT_MAX. An empty batch (0 rows or 0 columns) changes
// nothing: it is not counted, and it neither sets nor checks the number of channels.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/eigen.hpp"
#include "frugal/quant/quantize.hpp"
#include "frugal/quant/scheme.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief Per tensor or per channel; a channel is a row (axis 0) or a column (axis 1) of each batch.
struct observer_options {
  quant::granularity granularity = quant::granularity::per_tensor;
  int axis = 1;  ///< per_channel: 1 = columns (activations' features), 0 = rows (weights' output channels)
};

/// @brief A snapshot of what an observer has seen.
struct observer_stats {
  std::size_t batches = 0;
  std::size_t values = 0;
  std::size_t nonfinite = 0;  ///< NaN and Inf, skipped (not in `values`)
};

namespace detail {

class observer_base {
 public:
  explicit observer_base(observer_options o, const char* who) : opt_(o), who_(who) {
    if (o.granularity != granularity::per_tensor && o.granularity != granularity::per_channel)
      throw std::invalid_argument(std::string(who) +
                                  ": options.granularity must be per_tensor or per_channel");
    if (o.granularity == granularity::per_channel && o.axis != 0 && o.axis != 1)
      throw std::invalid_argument(std::string(who) + ": options.axis must be 0 or 1");
  }
  observer_stats stats() const noexcept { return stats_; }
  std::size_t channels() const noexcept { return channels_; }

 protected:
  // Calls f(channel, value) for every finite value and sizes the channels on the first batch. An empty
  // batch (no row or no column) carries no data and no trustworthy shape: it changes nothing, and visit
  // returns false so that the caller skips it too.
  template <class F>
  bool visit(std::span<const float> x, std::size_t rows, std::size_t cols, F&& f) {
    check_data_size(x.size(), rows, cols, who_);
    if (x.empty()) return false;
    const std::size_t ch = opt_.granularity == granularity::per_tensor ? 1 : opt_.axis == 0 ? rows : cols;
    if (stats_.batches == 0) {
      channels_ = ch;
    } else if (ch != channels_) {
      throw std::invalid_argument(std::string(who_) + ": a batch has " + std::to_string(ch) +
                                  " channels, earlier ones " + std::to_string(channels_));
    }
    ++stats_.batches;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) {
        const float v = x[r * cols + c];
        if (!std::isfinite(v)) {
          ++stats_.nonfinite;
          continue;
        }
        ++stats_.values;
        f(opt_.granularity == granularity::per_tensor ? 0 : opt_.axis == 0 ? r : c, v);
      }
    return true;
  }

  void check_scheme(const scheme& s) const {
    const bool ok = s.granularity == opt_.granularity &&
                    (s.granularity == granularity::per_tensor || s.axis == opt_.axis);
    if (!ok)
      throw std::invalid_argument(std::string(who_) +
                                  ": the scheme's granularity and axis differ from the observer's");
    if (stats_.batches == 0) throw std::invalid_argument(std::string(who_) + ": no batch observed yet");
  }

  [[noreturn]] void throw_no_finite(std::size_t c) const {
    throw std::invalid_argument(std::string(who_) + ": channel " + std::to_string(c) +
                                " has seen no finite value (" + std::to_string(stats_.nonfinite) +
                                " NaN or Inf skipped)");
  }

  quant_params params_from(const std::vector<float>& lo, const std::vector<float>& hi,
                           const scheme& s) const {
    quant_params p;
    for (std::size_t c = 0; c < lo.size(); ++c) {
      if (!(lo[c] <= hi[c])) throw_no_finite(c);  // still +Inf, -Inf: nothing finite seen
      const auto [scale, zp] = params_from_range(lo[c], hi[c], s);
      p.scales.push_back(scale);
      p.zero_points.push_back(zp);
    }
    return p;
  }

  observer_options opt_;
  const char* who_;
  observer_stats stats_;
  std::size_t channels_ = 0;
};

}  // namespace detail

/// @brief Min-max calibration: the range of everything seen.
class minmax_observer : public detail::observer_base {
 public:
  explicit minmax_observer(observer_options o = {}) : observer_base(o, "frugal::quant::minmax_observer") {}
  virtual ~minmax_observer() = default;
  minmax_observer(const minmax_observer&) = default;
  minmax_observer& operator=(const minmax_observer&) = default;

  /// @brief Sees one batch, rows x cols row-major.
  void observe(std::span<const float> x, std::size_t rows, std::size_t cols) {
    std::vector<float> lo, hi;
    const bool first = stats_.batches == 0;
    const bool seen = visit(x, rows, cols, [&](std::size_t c, float v) {
      if (lo.empty()) {
        lo.assign(channels_, std::numeric_limits<float>::infinity());
        hi.assign(channels_, -std::numeric_limits<float>::infinity());
      }
      lo[c] = std::min(lo[c], v);
      hi[c] = std::max(hi[c], v);
    });
    if (!seen) return;
    if (lo.empty()) {
      lo.assign(channels_, std::numeric_limits<float>::infinity());
      hi.assign(channels_, -std::numeric_limits<float>::infinity());
    }
    merge(lo, hi, first);
  }
  void observe(const Eigen::Ref<const row_matrix>& x) {
    detail::with_contiguous(x, [&](std::span<const float> d) {
      observe(d, static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()));
      return 0;
    });
  }
  /// @brief The parameters for `s`, whose granularity must be the observer's.
  quant_params compute_params(const scheme& s) const {
    check_scheme(s);
    return params_from(lo_, hi_, s);
  }
  const std::vector<float>& min_values() const noexcept { return lo_; }
  const std::vector<float>& max_values() const noexcept { return hi_; }

 protected:
  minmax_observer(observer_options o, const char* who) : observer_base(o, who) {}
  virtual void merge(const std::vector<float>& lo, const std::vector<float>& hi, bool first) {
    if (first) {
      lo_ = lo;
      hi_ = hi;
      return;
    }
    for (std::size_t c = 0; c < lo.size(); ++c) {
      lo_[c] = std::min(lo_[c], lo[c]);
      hi_[c] = std::max(hi_[c], hi[c]);
    }
  }
  std::vector<float> lo_, hi_;
};

/// @brief Options of the moving-average min-max observer.
struct moving_average_options {
  observer_options observer = {};
  float averaging_constant = 0.01f;  ///< c in range = range + c * (batch_range - range), as PyTorch
};

/// @brief Moving-average min-max (for activations): the first batch sets the range, later ones move it.
class moving_average_minmax_observer : public minmax_observer {
 public:
  explicit moving_average_minmax_observer(moving_average_options o = {})
      : minmax_observer(o.observer, "frugal::quant::moving_average_minmax_observer"),
        c_(o.averaging_constant) {
    if (!(c_ > 0.0f && c_ <= 1.0f))
      throw std::invalid_argument(
          "frugal::quant::moving_average_minmax_observer: options.averaging_constant must be in (0, 1]");
  }

 private:
  void merge(const std::vector<float>& lo, const std::vector<float>& hi, bool first) override {
    if (first) {
      lo_ = lo;
      hi_ = hi;
      return;
    }
    // A channel that has seen no finite value yet still holds +-Inf: its first finite batch sets it
    // (Inf + c * (x - Inf) was NaN). x - range can overflow float: then the step is taken in double.
    const auto step = [this](float& r, float x) {
      if (!std::isfinite(x)) return;
      if (!std::isfinite(r)) {
        r = x;
        return;
      }
      const float d = x - r;
      r = std::isfinite(d) ? r + c_ * d
                           : static_cast<float>(r + static_cast<double>(c_) * (static_cast<double>(x) - r));
    };
    for (std::size_t c = 0; c < lo.size(); ++c) {
      step(lo_[c], lo[c]);
      step(hi_[c], hi[c]);
    }
  }
  float c_;
};

/// @brief Options of the histogram observers.
struct histogram_options {
  observer_options observer = {};
  std::size_t bins =
      2048;  ///< bins over [0, max|x|] (TensorRT uses 2048); the histogram keeps 2 * bins signed
};

namespace detail {

// A signed histogram over [-R, R] in 2 * bins bins. When a batch exceeds R, R doubles and pairs of
// bins merge, which is exact, so the histogram never depends on how the data was split into batches
// beyond the range it has grown to.
class histogram_observer_base : public observer_base {
 public:
  static constexpr std::size_t max_bins = std::size_t{1} << 24;  // 2 * bins doubles per channel

  histogram_observer_base(histogram_options o, const char* who)
      : observer_base(o.observer, who), bins_(o.bins) {
    if (bins_ < 8 || bins_ % 2 != 0 || bins_ > max_bins)
      throw std::invalid_argument(std::string(who) + ": options.bins must be even and in [8, " +
                                  std::to_string(max_bins) + "], not " + std::to_string(bins_));
  }
  // Virtual like minmax_observer's: destroying an observer kept by value in a std::variant or a container
  // otherwise trips clang's -Wdelete-non-abstract-non-virtual-dtor in users' -Werror builds.
  virtual ~histogram_observer_base() = default;
  histogram_observer_base(const histogram_observer_base&) = default;
  histogram_observer_base& operator=(const histogram_observer_base&) = default;
  void observe(std::span<const float> x, std::size_t rows, std::size_t cols) {
    // First pass: the batch's per-channel absmax, to grow the ranges before binning.
    std::vector<float> amax;
    const observer_stats before = stats_;
    const bool seen = visit(x, rows, cols, [&](std::size_t c, float v) {
      if (amax.empty()) amax.assign(channels_, 0.0f);
      amax[c] = std::max(amax[c], std::abs(v));
    });
    if (!seen) return;
    stats_ = before;
    if (hist_.empty()) {
      hist_.assign(channels_, std::vector<double>(2 * bins_, 0.0));
      range_.assign(channels_, 0.0);
    }
    for (std::size_t c = 0; c < amax.size(); ++c) grow(c, amax[c]);
    visit(x, rows, cols, [&](std::size_t c, float v) {
      const double r = range_[c];
      if (r == 0.0) {
        hist_[c][bins_] += 1;  // only zeros seen so far in this channel
        return;
      }
      const double pos = (static_cast<double>(v) + r) / (2.0 * r) * static_cast<double>(2 * bins_);  // finite
      const auto b = std::min<std::size_t>(2 * bins_ - 1, static_cast<std::size_t>(std::max(0.0, pos)));
      hist_[c][b] += 1;
    });
  }
  void observe(const Eigen::Ref<const row_matrix>& x) {
    with_contiguous(x, [&](std::span<const float> d) {
      observe(d, static_cast<std::size_t>(x.rows()), static_cast<std::size_t>(x.cols()));
      return 0;
    });
  }
  /// @brief The parameters for `s`, whose granularity must be the observer's.
  quant_params compute_params(const scheme& s) const {
    check_scheme(s);
    std::vector<float> lo(channels_), hi(channels_);
    for (std::size_t c = 0; c < channels_; ++c) {
      double total = 0;
      for (double v : hist_[c]) total += v;
      if (total == 0) throw_no_finite(c);
      std::tie(lo[c], hi[c]) = clip_range(c, s);
    }
    return params_from(lo, hi, s);
  }
  /// @brief The range of channel c, [-R, R], clamped to FLT_MAX (R is kept in double and can reach
  /// 2 * FLT_MAX).
  float range(std::size_t c) const { return to_float(range_.at(c)); }

 protected:
  virtual std::pair<float, float> clip_range(std::size_t c, const scheme& s) const = 0;

  // |x| histogram of channel c: bin i covers [i, i + 1) * R / bins.
  std::vector<double> folded(std::size_t c) const {
    std::vector<double> f(bins_, 0.0);
    for (std::size_t i = 0; i < bins_; ++i) f[i] = hist_[c][bins_ + i] + hist_[c][bins_ - 1 - i];
    return f;
  }
  double bin_width(std::size_t c) const { return range_[c] / static_cast<double>(bins_); }

  // A clip bound in float: beyond +-FLT_MAX (the range may be up to 2 * FLT_MAX) it is clamped, not Inf,
  // which the cast would make (and which params_from_range rejects).
  static float to_float(double v) noexcept {
    constexpr double m = std::numeric_limits<float>::max();
    return static_cast<float>(std::clamp(v, -m, m));
  }

  // The value below which a fraction q of channel c lies (signed histogram, bin upper edges).
  float quantile(std::size_t c, double q) const {
    const auto& h = hist_[c];
    double total = 0;
    for (double v : h) total += v;
    double acc = 0;
    for (std::size_t i = 0; i < h.size(); ++i) {
      acc += h[i];
      if (acc >= q * total) return to_float(-range_[c] + (static_cast<double>(i) + 1) * bin_width(c));
    }
    return to_float(range_[c]);
  }

  std::size_t bins_;
  std::vector<std::vector<double>> hist_;
  std::vector<double> range_;  // double: doubling a float range near FLT_MAX made it Inf

 private:
  void grow(std::size_t c, float amax) {
    if (amax <= range_[c]) return;
    if (range_[c] == 0.0) {
      const double zeros = hist_[c][bins_];
      range_[c] = amax;
      std::fill(hist_[c].begin(), hist_[c].end(), 0.0);
      hist_[c][bins_] = zeros;  // zero falls in the first bin above 0
      return;
    }
    auto& h = hist_[c];
    const std::size_t n = 2 * bins_;
    while (range_[c] < amax) {
      // Old bin j maps to n/4 + j/2 when the range doubles (n divisible by 4 keeps the edges aligned).
      std::vector<double> merged(n, 0.0);
      for (std::size_t j = 0; j < n; ++j) merged[n / 4 + j / 2] += h[j];
      h.swap(merged);
      range_[c] *= 2.0;
    }
  }
};

}  // namespace detail

/// @brief Options of the percentile observer.
struct percentile_options {
  histogram_options histogram = {};
  double percentile = 99.99;  ///< in (0, 100]
};

/// @brief Percentile calibration: symmetric schemes clip |x| at the percentile; asymmetric ones clip
/// x at the (100 - p)th and pth percentiles.
class percentile_observer : public detail::histogram_observer_base {
 public:
  explicit percentile_observer(percentile_options o = {})
      : histogram_observer_base(o.histogram, "frugal::quant::percentile_observer"), p_(o.percentile) {
    if (!(p_ > 0.0 && p_ <= 100.0))
      throw std::invalid_argument(
          "frugal::quant::percentile_observer: options.percentile must be in (0, 100]");
  }

 private:
  std::pair<float, float> clip_range(std::size_t c, const scheme& s) const override {
    if (!s.symmetric) return {quantile(c, 1.0 - p_ / 100.0), quantile(c, p_ / 100.0)};
    const std::vector<double> f = folded(c);
    double total = 0;
    for (double v : f) total += v;
    double acc = 0;
    for (std::size_t i = 0; i < f.size(); ++i) {
      acc += f[i];
      if (acc >= p_ / 100.0 * total) {
        const float a = to_float((static_cast<double>(i) + 1) * bin_width(c));
        return {-a, a};
      }
    }
    return {-to_float(range_[c]), to_float(range_[c])};
  }
  double p_;
};

/// @brief Options of the MSE observer.
struct mse_options {
  histogram_options histogram = {};
  int candidates = 100;  ///< clip ratios tried, evenly from min_ratio to 1
  float min_ratio = 0.2f;
};

/// @brief MSE-optimal clipping: tries clip ratios r of the range and keeps the one whose
/// quantize-dequantize error, estimated on the histogram's bin centres, is least.
class mse_observer : public detail::histogram_observer_base {
 public:
  explicit mse_observer(mse_options o = {})
      : histogram_observer_base(o.histogram, "frugal::quant::mse_observer"),
        n_(o.candidates),
        min_(o.min_ratio) {
    if (n_ < 1) throw std::invalid_argument("frugal::quant::mse_observer: options.candidates must be >= 1");
    if (!(min_ > 0.0f && min_ <= 1.0f))
      throw std::invalid_argument("frugal::quant::mse_observer: options.min_ratio must be in (0, 1]");
  }

 private:
  std::pair<float, float> clip_range(std::size_t c, const scheme& s) const override {
    const auto& h = hist_[c];
    const double w = bin_width(c);
    std::size_t first = 0, last = h.size() - 1;
    while (first < last && h[first] == 0) ++first;
    while (last > first && h[last] == 0) --last;
    float lo_all = to_float(-range_[c] + static_cast<double>(first) * w);
    float hi_all = to_float(-range_[c] + static_cast<double>(last + 1) * w);
    if (s.symmetric) {
      hi_all = std::max(-lo_all, hi_all);
      lo_all = -hi_all;
    }
    double best = std::numeric_limits<double>::infinity();
    std::pair<float, float> best_range{lo_all, hi_all};
    for (int t = 0; t < n_; ++t) {
      const float r =
          n_ == 1 ? 1.0f : min_ + (1.0f - min_) * static_cast<float>(t) / static_cast<float>(n_ - 1);
      const float lo = lo_all * r, hi = hi_all * r;
      const auto [scale, zp] = params_from_range(lo, hi, s);
      double err = 0;
      for (std::size_t i = 0; i < h.size(); ++i) {
        if (h[i] == 0) continue;
        const double x = -range_[c] + (static_cast<double>(i) + 0.5) * w;
        const std::int32_t q = detail::quantize_value(to_float(x), scale, zp, qmin(s), qmax(s), s.rounding);
        const double d = static_cast<double>(q - zp) * scale - x;
        err += h[i] * d * d;
      }
      if (err < best) {
        best = err;
        best_range = {lo, hi};
      }
    }
    return best_range;
  }
  int n_;
  float min_;
};

/// @brief Options of the entropy observer.
struct entropy_options {
  histogram_options histogram = {};
  std::size_t quantized_bins = 128;  ///< levels of |x| kept (128 for int8, as TensorRT)
};

/// @brief Entropy calibration in the TensorRT style: the |x| threshold whose clipped, 128-level
/// quantized distribution has the least KL divergence from the original. Symmetric result.
class entropy_observer : public detail::histogram_observer_base {
 public:
  explicit entropy_observer(entropy_options o = {})
      : histogram_observer_base(o.histogram, "frugal::quant::entropy_observer"), levels_(o.quantized_bins) {
    if (levels_ < 2 || levels_ > bins_)
      throw std::invalid_argument(
          "frugal::quant::entropy_observer: options.quantized_bins must be in [2, bins]");
  }

  /// @brief The KL-optimal |x| threshold of channel c.
  float threshold(std::size_t c) const {
    const std::vector<double> f = folded(c);
    const std::size_t nb = f.size();
    double best = std::numeric_limits<double>::infinity();
    std::size_t best_i = nb;
    std::vector<double> p, q;
    for (std::size_t i = levels_; i <= nb; ++i) {
      p.assign(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(i));
      double outliers = 0;
      for (std::size_t j = i; j < nb; ++j) outliers += f[j];
      p[i - 1] += outliers;
      // Q: merge the first i bins into `levels_` chunks and spread each chunk over its non-empty bins.
      q.assign(i, 0.0);
      for (std::size_t l = 0; l < levels_; ++l) {
        const std::size_t b0 = l * i / levels_, b1 = (l + 1) * i / levels_;
        double sum = 0;
        std::size_t nonzero = 0;
        for (std::size_t j = b0; j < b1; ++j) {
          sum += f[j];
          nonzero += f[j] > 0;
        }
        for (std::size_t j = b0; j < b1; ++j)
          if (f[j] > 0) q[j] = sum / static_cast<double>(nonzero);
      }
      double ps = 0, qs = 0;
      for (std::size_t j = 0; j < i; ++j) ps += p[j], qs += q[j];
      if (ps == 0 || qs == 0) continue;
      double kl = 0;
      for (std::size_t j = 0; j < i; ++j) {
        if (p[j] == 0) continue;
        const double pj = p[j] / ps, qj = q[j] > 0 ? q[j] / qs : 1e-12;
        kl += pj * std::log(pj / qj);
      }
      if (kl < best) {
        best = kl;
        best_i = i;
      }
    }
    return to_float(static_cast<double>(best_i) * bin_width(c));
  }

 private:
  std::pair<float, float> clip_range(std::size_t c, const scheme&) const override {
    const float t = threshold(c);
    return {-t, t};
  }
  std::size_t levels_;
};

}  // namespace quant
FRUGAL_END_NAMESPACE
