#pragma once

// The state type is needed by value, so the static part of the header is asked for. xxhash.h guards
// that part separately, so this works even if the header was included before without the macro.
#ifndef XXH_STATIC_LINKING_ONLY
#  define XXH_STATIC_LINKING_ONLY
#  define FRUGAL_DETAIL_UNDEF_XXH_STATIC
#endif
#include <xxhash.h>
#ifdef FRUGAL_DETAIL_UNDEF_XXH_STATIC
#  undef XXH_STATIC_LINKING_ONLY
#  undef FRUGAL_DETAIL_UNDEF_XXH_STATIC
#endif

#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ranges>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "frugal/config.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A 128-bit XXH3 hash of a request: the default cache key. Collisions are practically
/// impossible (see key64 for the numbers).
struct key128 {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  friend constexpr bool operator==(const key128&, const key128&) noexcept = default;
  friend constexpr auto operator<=>(const key128&, const key128&) noexcept = default;
};

/// @brief A 64-bit XXH3 hash, opt-in for small caches. A cache never compares the original inputs,
/// so a collision serves a wrong answer. With n entries, each lookup of an absent key collides with
/// probability about n / 2^64: at 1M entries and 100k lookups a second that is one wrong answer every
/// ~6 years. With key128 the same load gives one every ~10^26 years.
struct key64 {
  std::uint64_t value = 0;
  friend constexpr bool operator==(const key64&, const key64&) noexcept = default;
  friend constexpr auto operator<=>(const key64&, const key64&) noexcept = default;
};

class key_hasher;

namespace detail {

// Bytes are hashed as they lie in memory only when equal values have equal bytes: no padding, no
// pointers (an address is not content), no views (string_view, span: their content is hashed, as a
// range). Floating point is allowed; -0.0 and 0.0 then differ. A struct holding a raw pointer cannot
// be told apart here: give it a hash_append.
template <class T>
concept bytewise_hashable =
    std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> && !std::is_member_pointer_v<T> &&
    !std::is_array_v<T> && !std::ranges::range<T> &&
    (std::is_arithmetic_v<T> || std::is_enum_v<T> || std::has_unique_object_representations_v<T>);

template <class T>
concept char_type = std::is_same_v<T, char> || std::is_same_v<T, char8_t> || std::is_same_v<T, char16_t> ||
    std::is_same_v<T, char32_t> || std::is_same_v<T, wchar_t>;

template <class T>
concept contiguous_bytes = std::ranges::contiguous_range<const T> && std::ranges::sized_range<const T> &&
    bytewise_hashable<std::ranges::range_value_t<const T>>;

template <class T>
concept tuple_like = requires {
  std::tuple_size<T>::value;
}
&&!std::ranges::range<T>;

namespace adl {
// Blocks unqualified lookup from finding anything but the user's overload, found by ADL.
void hash_append() = delete;
template <class T>
concept has_hash_append = requires(key_hasher& h, const T& v) {
  hash_append(h, v);
};
template <class T>
void call(key_hasher& h, const T& v) {
  hash_append(h, v);
}
}  // namespace adl

}  // namespace detail

/// @brief Streaming XXH3 over the parts of a key, in order. `append` frames each part (a length prefix
/// on every variable-size part, so ("ab","c") and ("a","bc") differ); `update` adds raw bytes with no
/// framing, for one large input fed in chunks. Small keys are buffered and hashed in one shot; past
/// the buffer it switches to XXH3's streaming state, and both paths give the same hash for the same
/// bytes. A user type is hashed through a free function `hash_append(frugal::key_hasher&, const T&)`
/// found by ADL, which appends the type's parts.
class key_hasher {
 public:
  explicit key_hasher(std::uint64_t seed = 0) noexcept : seed_(seed) {}
  key_hasher(const key_hasher&) = delete;
  key_hasher& operator=(const key_hasher&) = delete;

  /// @brief Adds raw bytes, unframed.
  key_hasher& update(const void* data, std::size_t size) noexcept {
    if (streaming_) {
      XXH3_128bits_update(&state_, data, size);
    } else if (size <= buffer_size - used_) {
      if (size != 0) std::memcpy(buffer_ + used_, data, size);
      used_ += size;
    } else {
      XXH3_128bits_reset_withSeed(&state_, seed_);
      XXH3_128bits_update(&state_, buffer_, used_);
      XXH3_128bits_update(&state_, data, size);
      streaming_ = true;
    }
    return *this;
  }
  key_hasher& update(std::span<const std::byte> bytes) noexcept { return update(bytes.data(), bytes.size()); }

  /// @brief Appends each argument, framed: trivially copyable values by their bytes, strings and
  /// contiguous ranges with their length first, other ranges element by element, tuples and pairs
  /// member by member, user types through their hash_append.
  template <class... Ts>
  key_hasher& append(const Ts&... parts) {
    (append_one(parts), ...);
    return *this;
  }

  /// @brief The 128-bit hash of everything added so far. The hasher may keep going afterwards.
  key128 finish() const noexcept {
    XXH128_hash_t h =
        streaming_ ? XXH3_128bits_digest(&state_) : XXH3_128bits_withSeed(buffer_, used_, seed_);
    return key128{h.low64, h.high64};
  }
  /// @brief The 64-bit hash of everything added so far.
  key64 finish64() const noexcept {
    return key64{streaming_ ? XXH3_64bits_digest(&state_) : XXH3_64bits_withSeed(buffer_, used_, seed_)};
  }

 private:
  static constexpr std::size_t buffer_size = 512;

  template <class T>
  void append_length(const T& n) noexcept {
    const auto len = static_cast<std::uint64_t>(n);
    update(&len, sizeof(len));
  }

  template <class T>
  void append_one(const T& v) {
    if constexpr (detail::adl::has_hash_append<T>) {
      detail::adl::call(*this, v);
    } else if constexpr (std::is_array_v<T> && detail::char_type<std::remove_extent_t<T>>) {
      // A string literal: hashed as text up to its terminator, like the string_view it spells.
      append_one(std::basic_string_view<std::remove_extent_t<T>>(v));
    } else if constexpr (std::is_pointer_v<T> &&
                         detail::char_type<std::remove_cv_t<std::remove_pointer_t<T>>>) {
      append_one(std::basic_string_view<std::remove_cv_t<std::remove_pointer_t<T>>>(v));
    } else if constexpr (detail::bytewise_hashable<T>) {
      update(&v, sizeof(T));
    } else if constexpr (detail::contiguous_bytes<T>) {
      using E = std::ranges::range_value_t<const T>;
      const auto n = std::ranges::size(v);
      append_length(n);
      update(std::ranges::data(v), n * sizeof(E));
    } else if constexpr (std::ranges::sized_range<const T>) {
      append_length(std::ranges::size(v));
      for (const auto& e : v) append_one(e);
    } else if constexpr (detail::tuple_like<T>) {
      std::apply([this](const auto&... e) { (this->append_one(e), ...); }, v);
    } else {
      static_assert(sizeof(T) == 0,
                    "frugal::key_hasher: this type has no hash; give it a free function "
                    "hash_append(frugal::key_hasher&, const T&) that appends its parts (pointers, "
                    "types with padding and unsized ranges are not hashed by their bytes)");
    }
  }

  XXH3_state_t state_;
  std::uint64_t seed_;
  std::size_t used_ = 0;
  bool streaming_ = false;
  unsigned char buffer_[buffer_size];
};

/// @brief The 128-bit key of the arguments, in order (see key_hasher::append for what is accepted).
template <class... Ts>
key128 hash_key(const Ts&... parts) {
  key_hasher h;
  h.append(parts...);
  return h.finish();
}

/// @brief As hash_key, scoped by a seed (a tenant, a model version): equal arguments under different
/// seeds give unrelated keys.
template <class... Ts>
key128 hash_key_seeded(std::uint64_t seed, const Ts&... parts) {
  key_hasher h(seed);
  h.append(parts...);
  return h.finish();
}

/// @brief The 64-bit key of the arguments; see key64 for the collision risk.
template <class... Ts>
key64 hash_key64(const Ts&... parts) {
  key_hasher h;
  h.append(parts...);
  return h.finish64();
}

/// @brief As hash_key64, scoped by a seed.
template <class... Ts>
key64 hash_key64_seeded(std::uint64_t seed, const Ts&... parts) {
  key_hasher h(seed);
  h.append(parts...);
  return h.finish64();
}

namespace detail {
// The bits a cache spreads keys by. XXH3 output is uniform, so no further mixing is needed.
inline constexpr std::uint64_t key_low(const key128& k) noexcept { return k.lo; }
inline constexpr std::uint64_t key_high(const key128& k) noexcept { return k.hi; }
inline constexpr std::uint64_t key_low(const key64& k) noexcept { return k.value; }
inline constexpr std::uint64_t key_high(const key64& k) noexcept { return k.value; }
}  // namespace detail

FRUGAL_END_NAMESPACE

template <>
struct std::hash<frugal::key128> {
  std::size_t operator()(const frugal::key128& k) const noexcept { return static_cast<std::size_t>(k.lo); }
};
template <>
struct std::hash<frugal::key64> {
  std::size_t operator()(const frugal::key64& k) const noexcept { return static_cast<std::size_t>(k.value); }
};
