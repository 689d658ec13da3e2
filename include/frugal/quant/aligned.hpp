#pragma once

// Cache-line-aligned storage for the buffers the int8 kernels stream: packed weights and packed
// activations. Free of Eigen and of intrinsics, so that the detail kernel headers can include it.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief Alignment of packed buffers: one cache line. An AMX tile row or an AVX-512 load that straddles
/// two lines costs two; the AMX int8 kernel ran at a third of its speed on buffers 16 bytes off a line
/// (benchmarks/RESULTS.md, AMX), where glibc's malloc puts large blocks.
inline constexpr std::size_t cache_line_bytes = 64;

/// @brief A std::allocator whose every allocation starts on a cache line (cache_line_bytes).
template <class T>
struct cache_aligned_allocator {
  using value_type = T;
  cache_aligned_allocator() noexcept = default;
  template <class U>
  cache_aligned_allocator(const cache_aligned_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{cache_line_bytes}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{cache_line_bytes}); }
  friend bool operator==(const cache_aligned_allocator&, const cache_aligned_allocator&) noexcept {
    return true;
  }
};

/// @brief Bytes on a cache line: the type of quantized_weights::packed.
using aligned_bytes = std::vector<std::int8_t, cache_aligned_allocator<std::int8_t>>;

namespace detail {

struct aligned_delete {
  void operator()(void* p) const noexcept { ::operator delete (p, std::align_val_t{cache_line_bytes}); }
};

/// n uninitialised elements of a trivial type on a cache line (the kernels' scratch: every byte is
/// written before it is read).
template <class T>
std::unique_ptr<T[], aligned_delete> aligned_scratch(std::size_t n) {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);
  if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
  return std::unique_ptr<T[], aligned_delete>(
      static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{cache_line_bytes})));
}

}  // namespace detail
}  // namespace quant
FRUGAL_END_NAMESPACE
