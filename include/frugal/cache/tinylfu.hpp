#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Admission policy: plain LRU. Every put is cached and the least recently used entry goes
/// first. The default.
struct lru_admission {};

/// @brief Admission policy: W-TinyLFU (Einziger, Friedman and Manes, as in Caffeine). New entries enter
/// a small LRU window; leaving it, an entry joins the main space only if a count-min sketch says it is
/// used more often than the entry it would push out. The main space is a segmented LRU: probation, and
/// protected for entries hit again. It keeps frequent keys through scans and one-hit wonders, at the
/// price of 4 bits x 4 rows of sketch per entry of capacity. Entries are never refused on the way in, so
/// a get right after a put hits.
struct tinylfu_admission {
  /// Share of the capacity given to the window, in percent: raise it for workloads dominated by
  /// recency (bursts), lower it for stable popularity.
  static constexpr std::size_t window_percent = 1;
  /// Share of the main space kept for entries hit at least twice, in percent.
  static constexpr std::size_t protected_percent = 80;
};

namespace detail {

// A count-min sketch with 4-bit counters, 4 rows, and aging: after 10 x width increments every
// counter is halved, so old popularity fades (TinyLFU's "reset").
class frequency_sketch {
 public:
  explicit frequency_sketch(std::size_t capacity = 16) { resize(capacity); }

  void resize(std::size_t capacity) {
    width_ = std::bit_ceil(std::max<std::size_t>(capacity, 16));
    table_.assign(4 * width_ / 16, 0);
    sample_size_ = 10 * width_;
    additions_ = 0;
  }
  std::size_t width() const noexcept { return width_; }
  std::size_t bytes() const noexcept { return table_.size() * sizeof(std::uint64_t); }

  void increment(std::uint64_t hash) noexcept {
    bool added = false;
    for (unsigned row = 0; row < 4; ++row) {
      const std::size_t i = index(hash, row);
      std::uint64_t& word = table_[i / 16];
      const unsigned shift = static_cast<unsigned>(i % 16) * 4;
      if (((word >> shift) & 0xF) != 0xF) {
        word += std::uint64_t{1} << shift;
        added = true;
      }
    }
    if (added && ++additions_ >= sample_size_) age();
  }

  unsigned estimate(std::uint64_t hash) const noexcept {
    unsigned f = 15;
    for (unsigned row = 0; row < 4; ++row) {
      const std::size_t i = index(hash, row);
      f = std::min(f, static_cast<unsigned>((table_[i / 16] >> ((i % 16) * 4)) & 0xF));
    }
    return f;
  }

 private:
  // Each row sees the key through a different odd multiplier, so rows collide independently.
  std::size_t index(std::uint64_t hash, unsigned row) const noexcept {
    static constexpr std::uint64_t seeds[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full,
                                               0x165667B19E3779F9ull, 0xD6E8FEB86659FD93ull};
    const std::uint64_t h = (hash ^ (hash >> 29)) * seeds[row];
    const std::size_t row_base = row * width_;
    return row_base + static_cast<std::size_t>((h >> 32) & (width_ - 1));
  }

  void age() noexcept {
    for (auto& word : table_) word = (word >> 1) & 0x7777777777777777ull;
    additions_ /= 2;
  }

  std::vector<std::uint64_t> table_;
  std::size_t width_ = 0;
  std::size_t sample_size_ = 0;
  std::size_t additions_ = 0;
};

}  // namespace detail

FRUGAL_END_NAMESPACE
