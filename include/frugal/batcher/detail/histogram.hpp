#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "frugal/config.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

// Log-linear latency histogram: 16 sub-buckets per power of two (about 6% resolution), fixed memory.
class latency_histogram {
 public:
  void record(std::int64_t ns) noexcept {
    const std::uint64_t v = ns < 0 ? 0 : static_cast<std::uint64_t>(ns);
    ++counts_[index(v)];
    ++count_;
    if (v > max_) max_ = v;
  }
  std::uint64_t count() const noexcept { return count_; }
  std::uint64_t max() const noexcept { return max_; }
  // The smallest bucket bound below which a fraction q of the samples lie.
  std::uint64_t quantile(double q) const noexcept {
    if (count_ == 0) return 0;
    const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(count_ - 1)) + 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < buckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return upper(i) < max_ ? upper(i) : max_;
    }
    return max_;
  }

 private:
  static constexpr unsigned sub_bits = 4;
  static constexpr std::size_t subs = std::size_t{1} << sub_bits;
  static constexpr std::size_t buckets = (64 - sub_bits + 1) * subs;

  static std::size_t index(std::uint64_t v) noexcept {
    if (v < subs) return static_cast<std::size_t>(v);
    const unsigned e = 63u - static_cast<unsigned>(std::countl_zero(v));
    return (e - sub_bits + 1) * subs + ((v >> (e - sub_bits)) & (subs - 1));
  }
  static std::uint64_t upper(std::size_t i) noexcept {
    if (i < subs) return i;
    const std::size_t e = i / subs + sub_bits - 1, s = i % subs;
    if (e >= 63) return ~std::uint64_t{0};
    return ((subs + s + 1) << (e - sub_bits)) - 1;
  }

  std::uint64_t counts_[buckets] = {};
  std::uint64_t count_ = 0;
  std::uint64_t max_ = 0;
};

}  // namespace detail
FRUGAL_END_NAMESPACE
