#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {
namespace detail {
__extension__ typedef unsigned __int128 uint128;
}  // namespace detail

/// @brief A read-only copy of a histogram: the non-empty buckets in index order, their count and exact sum.
/// Percentiles are nearest-rank and report the middle of the bucket that holds the rank, so the error is at
/// most half a bucket: exact below 2048, and at most value/2048 (better than 3 significant digits) above.
struct histogram_snapshot {
  std::vector<std::pair<std::uint32_t, std::uint64_t>> buckets;  ///< (bucket index, count), index ascending
  std::uint64_t count = 0;
  std::uint64_t sum = 0;  ///< exact sum of the recorded values (before clamping)

  /// @brief The smallest value of bucket `index`.
  static constexpr std::uint64_t bucket_lowest(std::uint32_t index) noexcept {
    if (index < 2048) return index;
    const unsigned e = index / 1024 - 1;
    return std::uint64_t(index - 1024 * e) << e;
  }
  /// @brief The number of values bucket `index` holds.
  static constexpr std::uint64_t bucket_width(std::uint32_t index) noexcept {
    return index < 2048 ? 1 : std::uint64_t(1) << (index / 1024 - 1);
  }
  /// @brief The bucket that holds value `v`: v itself below 2048, then 1024 buckets per power of two.
  static constexpr std::uint32_t bucket_of(std::uint64_t v) noexcept {
    if (v < 2048) return static_cast<std::uint32_t>(v);
    const unsigned e = static_cast<unsigned>(std::bit_width(v)) - 11;
    return static_cast<std::uint32_t>(1024 * e + (v >> e));
  }

  /// @brief The value at quantile q in [0, 1] (nearest rank); 0 when empty.
  std::uint64_t value_at(double q) const {
    if (q < 0 || q > 1 || std::isnan(q))
      throw std::invalid_argument("frugal::cost::histogram: quantile must be in [0, 1]");
    if (count == 0) return 0;
    auto rank = static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(count)));
    rank = std::clamp<std::uint64_t>(rank, 1, count);
    std::uint64_t seen = 0;
    for (auto [index, n] : buckets) {
      seen += n;
      if (seen >= rank) return bucket_lowest(index) + bucket_width(index) / 2;
    }
    return bucket_lowest(buckets.back().first) + bucket_width(buckets.back().first) / 2;
  }
  /// @brief How many values fall in buckets that lie wholly at or below `v` (for cumulative `le` buckets).
  std::uint64_t count_at_or_below(std::uint64_t v) const noexcept {
    std::uint64_t n = 0;
    for (auto [index, c] : buckets) {
      if (bucket_lowest(index) + bucket_width(index) - 1 > v) break;
      n += c;
    }
    return n;
  }
  /// @brief Adds another snapshot's counts to this one.
  void merge(const histogram_snapshot& o) {
    std::vector<std::pair<std::uint32_t, std::uint64_t>> out;
    out.reserve(buckets.size() + o.buckets.size());
    auto a = buckets.begin();
    auto b = o.buckets.begin();
    while (a != buckets.end() || b != o.buckets.end()) {
      if (b == o.buckets.end() || (a != buckets.end() && a->first < b->first)) {
        out.push_back(*a++);
      } else if (a == buckets.end() || b->first < a->first) {
        out.push_back(*b++);
      } else {
        out.emplace_back(a->first, a->second + b->second);
        ++a, ++b;
      }
    }
    buckets = std::move(out);
    // Sums saturate as the ledger's counters do, so a merged total never falls below a part.
    count = count > UINT64_MAX - o.count ? UINT64_MAX : count + o.count;
    sum = sum > UINT64_MAX - o.sum ? UINT64_MAX : sum + o.sum;
  }
  /// @brief This snapshot minus an earlier one of the same histogram (the values recorded in between).
  histogram_snapshot minus(const histogram_snapshot& earlier) const {
    histogram_snapshot d;
    auto e = earlier.buckets.begin();
    for (auto [index, n] : buckets) {
      while (e != earlier.buckets.end() && e->first < index) ++e;
      std::uint64_t before = (e != earlier.buckets.end() && e->first == index) ? e->second : 0;
      if (n > before) d.buckets.emplace_back(index, n - before);
    }
    d.count = count - earlier.count;
    d.sum = sum - earlier.sum;
    return d;
  }
};

/// @brief A log-linear histogram of non-negative integers after HdrHistogram's design with 3 significant
/// digits: 2048 exact buckets, then 1024 buckets per power of two. Recording is one relaxed atomic increment,
/// so any number of threads may record at once. Values above `highest` are clamped to it and counted in
/// `clamped()`.
class log_linear_histogram {
 public:
  /// @brief A histogram for values in [0, highest]; the default covers one hour in nanoseconds (~34k
  /// buckets).
  explicit log_linear_histogram(std::uint64_t highest = 3'600'000'000'000)
      : highest_(highest),
        size_(histogram_snapshot::bucket_of(highest) + 1),
        counts_(std::make_unique<std::atomic<std::uint64_t>[]>(size_)) {
    if (highest < 2048)
      throw std::invalid_argument("frugal::cost::log_linear_histogram: highest must be >= 2048");
  }

  /// @brief Records one value.
  void record(std::uint64_t v) noexcept {
    sum_.fetch_add(v, std::memory_order_relaxed);
    count_only(v);
  }

  /// @brief Records one value into its bucket but not into sum(), for a caller that keeps the sum itself
  /// (the ledger does, per thread, to spare a shared atomic).
  void count_only(std::uint64_t v) noexcept {
    if (v > highest_) {
      v = highest_;
      clamped_.fetch_add(1, std::memory_order_relaxed);
    }
    counts_[histogram_snapshot::bucket_of(v)].fetch_add(1, std::memory_order_relaxed);
  }

  /// @brief Records `v`, and, as HdrHistogram does against coordinated omission, the values v - interval,
  /// v - 2·interval, ... down to `interval`: the requests a stalled closed-loop client did not send.
  void record_corrected(std::uint64_t v, std::uint64_t expected_interval) noexcept {
    record(v);
    sum_.fetch_add(count_series(v, expected_interval), std::memory_order_relaxed);
  }

  /// @brief Counts v - step, v - 2·step, ... down to `step` (not into sum()) and returns their sum, saturated
  /// at 2^64 - 1. The work is bounded by the buckets the series spans, never by its length.
  std::uint64_t count_series(std::uint64_t v, std::uint64_t step) noexcept {
    if (step == 0 || v <= step) return 0;
    const std::uint64_t m = v / step - 1;  // the number of values, all >= step
    std::uint64_t left = m;
    std::uint64_t x = v - step;
    while (left != 0) {
      std::uint64_t c;
      if (x > highest_) {
        c = std::min(left, (x - highest_ - 1) / step + 1);
        counts_[size_ - 1].fetch_add(c, std::memory_order_relaxed);
        clamped_.fetch_add(c, std::memory_order_relaxed);
      } else {
        const std::uint32_t b = histogram_snapshot::bucket_of(x);
        c = std::min(left, (x - histogram_snapshot::bucket_lowest(b)) / step + 1);
        counts_[b].fetch_add(c, std::memory_order_relaxed);
      }
      left -= c;
      if (left != 0) x -= c * step;
    }
    // The sum of v - k·step for k = 1..m, exactly, in 128 bits.
    const detail::uint128 total =
        detail::uint128(m) * v - detail::uint128(step) * m * (detail::uint128(m) + 1) / 2;
    return total > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(total);
  }

  /// @brief A consistent-enough copy: exact once recording threads have stopped (e.g. joined).
  histogram_snapshot snapshot() const {
    histogram_snapshot s;
    for (std::uint32_t i = 0; i < size_; ++i) {
      std::uint64_t n = counts_[i].load(std::memory_order_relaxed);
      if (n != 0) {
        s.buckets.emplace_back(i, n);
        s.count += n;
      }
    }
    s.sum = sum_.load(std::memory_order_relaxed);
    return s;
  }

  std::uint64_t highest() const noexcept { return highest_; }
  std::uint64_t clamped() const noexcept { return clamped_.load(std::memory_order_relaxed); }
  std::size_t bucket_count() const noexcept { return size_; }

 private:
  std::uint64_t highest_;
  std::uint32_t size_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;
  std::atomic<std::uint64_t> sum_{0};
  std::atomic<std::uint64_t> clamped_{0};
};

}  // namespace cost
FRUGAL_END_NAMESPACE
