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

#include <bit>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ranges>
#include <span>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "frugal/namespace.hpp"

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
    // x87's long double is 10 bytes of value in 16: its padding is not content.
    (!std::is_same_v<std::remove_cv_t<T>, long double> || sizeof(long double) == sizeof(double)) &&
    (std::is_arithmetic_v<T> || std::is_enum_v<T> || std::has_unique_object_representations_v<T>);

template <class T>
concept char_type = std::is_same_v<T, char> || std::is_same_v<T, char8_t> || std::is_same_v<T, char16_t> ||
    std::is_same_v<T, char32_t> || std::is_same_v<T, wchar_t>;

template <class T>
concept text_range =
    std::ranges::sized_range<const T> && char_type<std::remove_cv_t<std::ranges::range_value_t<const T>>>;

template <class T>
concept scalar_range =
    std::ranges::sized_range<const T> && bytewise_hashable<std::ranges::range_value_t<const T>>;

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

/// @brief The version of the byte format hash_key hashes (see key_hasher). Every change of format
/// changes every key: caches shared across processes (the Redis tier) must not mix versions under one
/// namespace; bump the namespace's version (redis options `version`) when rolling out a new one. A
/// mixed fleet only misses, since keys of different formats are unrelated hashes. Version 1 (frugal up
/// to 2026-12) framed variable-size parts only; version 2 tags every part with its kind and width.
inline constexpr unsigned key_format_version = 2;

namespace detail {
// The first byte of each part's encoding. Scalars: the kind in the high nibble, log2 of the width in
// the low one. The other kinds are followed by their own framing (see key_hasher).
enum class key_tag : unsigned char {
  boolean = 0x10,
  character = 0x20,  // a lone char, char8_t, char16_t, char32_t or wchar_t (low nibble: which)
  signed_int = 0x30,
  unsigned_int = 0x40,
  floating = 0x50,
  enumeration = 0x60,
  object = 0x70,      // a padding-free struct: its size (u64), then its bytes
  text = 0x80,        // low nibble: the character type; then length (u64) and the characters
  array = 0x90,       // the element's tag (and size for objects), length (u64), the elements' bytes
  sequence = 0xa0,    // length (u64), then each element encoded
  tuple = 0xb0,       // member count (u64), then each member encoded
  user_begin = 0xc0,  // a type with its own hash_append: what it appends, then user_end
  user_end = 0xc1,
};

template <class T>
constexpr unsigned char char_code() noexcept {
  if constexpr (std::is_same_v<T, char>)
    return 0;
  else if constexpr (std::is_same_v<T, char8_t>)
    return 1;
  else if constexpr (std::is_same_v<T, char16_t>)
    return 2;
  else if constexpr (std::is_same_v<T, char32_t>)
    return 3;
  else
    return 4;  // wchar_t
}

template <class T>
constexpr unsigned char width_code() noexcept {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  return static_cast<unsigned char>(std::countr_zero(sizeof(T)));
}

// The tag of a bytewise-hashable type (object types add their size after it).
template <class T>
constexpr unsigned char scalar_tag() noexcept {
  const auto t = [](key_tag k) { return static_cast<unsigned char>(k); };
  if constexpr (std::is_same_v<T, bool>)
    return t(key_tag::boolean);
  else if constexpr (char_type<T>)
    return t(key_tag::character) | char_code<T>();
  else if constexpr (std::is_floating_point_v<T>)
    return t(key_tag::floating) | width_code<T>();
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>)
    return t(key_tag::signed_int) | width_code<T>();
  else if constexpr (std::is_integral_v<T>)
    return t(key_tag::unsigned_int) | width_code<T>();
  else if constexpr (std::is_enum_v<T>)
    return t(key_tag::enumeration) | width_code<T>();
  else
    return t(key_tag::object);
}
}  // namespace detail

/// @brief Streaming XXH3 over the parts of a key, in order. `append` encodes each part so that distinct
/// argument lists give distinct bytes (format version key_format_version): each part starts with a tag
/// byte naming its kind and width, so `hash_key(std::uint64_t)` differs from `hash_key(std::uint32_t,
/// std::uint32_t)`, `int` from `unsigned`, `float` from `std::int32_t`; a variable-size part carries its
/// length, so ("ab","c") and ("a","bc") differ. Text (std::string, string_view, const char*, char arrays,
/// any range of a character type) is one kind per character type, so equal text in different containers
/// gives one key; a char array is text of its whole extent, less one terminating NUL if its last
/// element is NUL (a string literal equals its string; embedded NULs are kept; nothing is read past
/// it). A null `const char*` throws std::invalid_argument. Ranges of scalars are one kind whatever the
/// container (vector, span, array, list); other ranges are sequences of encoded elements; tuples and
/// pairs carry their member count; a user type's hash_append output is enclosed in begin and end tags.
/// Two padding-free structs (or two enums) of one size with equal bytes still hash alike: give them a
/// hash_append to tell the types apart. `update` adds raw bytes with no tag or framing, for one large
/// input fed in chunks; inside a hash_append use `append`. Small keys are buffered and hashed in one
/// shot; past the buffer it switches to XXH3's streaming state, and both paths give the same hash for
/// the same bytes. A user type is hashed through a free function `hash_append(frugal::key_hasher&,
/// const T&)` found by ADL, which appends the type's parts. key_bytes(parts...) returns the encoding.
class key_hasher {
 public:
  explicit key_hasher(std::uint64_t seed = 0) noexcept : seed_(seed) {}
  key_hasher(const key_hasher&) = delete;
  key_hasher& operator=(const key_hasher&) = delete;

  /// @brief Adds raw bytes, untagged and unframed.
  key_hasher& update(const void* data, std::size_t size) {
    if (sink_ != nullptr) [[unlikely]] {
      const auto* b = static_cast<const std::byte*>(data);
      if (size != 0) sink_->insert(sink_->end(), b, b + size);
    } else if (streaming_) {
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
  key_hasher& update(std::span<const std::byte> bytes) { return update(bytes.data(), bytes.size()); }

  /// @brief Appends each argument, tagged and framed (see the class).
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
  template <class... Ts>
  friend std::vector<std::byte> key_bytes(const Ts&... parts);

  static constexpr std::size_t buffer_size = 512;

  void tag(unsigned char t) { update(&t, 1); }
  void tag(detail::key_tag t) { tag(static_cast<unsigned char>(t)); }

  template <class T>
  void append_length(const T& n) {
    const auto len = static_cast<std::uint64_t>(n);
    update(&len, sizeof(len));
  }

  template <class E>
  void scalar_header() {
    tag(detail::scalar_tag<E>());
    if constexpr (detail::scalar_tag<E>() == static_cast<unsigned char>(detail::key_tag::object))
      append_length(sizeof(E));
  }

  template <class C>
  void text(const C* data, std::size_t n) {
    tag(static_cast<unsigned char>(static_cast<unsigned char>(detail::key_tag::text) |
                                   detail::char_code<C>()));
    append_length(n);
    update(data, n * sizeof(C));
  }

  template <class T>
  void append_one(const T& v) {
    if constexpr (detail::adl::has_hash_append<T>) {
      tag(detail::key_tag::user_begin);
      detail::adl::call(*this, v);
      tag(detail::key_tag::user_end);
    } else if constexpr (std::is_array_v<T> && detail::char_type<std::remove_cv_t<std::remove_extent_t<T>>>) {
      // Its extent, not a C string: no read past the end, no cut at an embedded NUL.
      constexpr std::size_t extent = std::extent_v<T>;
      const std::size_t n = extent > 0 && v[extent - 1] == 0 ? extent - 1 : extent;
      text(&v[0], n);
    } else if constexpr (std::is_pointer_v<T> &&
                         detail::char_type<std::remove_cv_t<std::remove_pointer_t<T>>>) {
      if (v == nullptr)
        throw std::invalid_argument(
            "frugal::hash_key: a null character pointer is not text; pass a string_view or an "
            "optional part instead");
      using C = std::remove_cv_t<std::remove_pointer_t<T>>;
      const std::basic_string_view<C> s(v);
      text(s.data(), s.size());
    } else if constexpr (detail::bytewise_hashable<T>) {
      scalar_header<T>();
      update(&v, sizeof(T));
    } else if constexpr (detail::text_range<T>) {
      using C = std::remove_cv_t<std::ranges::range_value_t<const T>>;
      if constexpr (std::ranges::contiguous_range<const T>) {
        text(std::ranges::data(v), std::ranges::size(v));
      } else {
        tag(static_cast<unsigned char>(static_cast<unsigned char>(detail::key_tag::text) |
                                       detail::char_code<C>()));
        append_length(std::ranges::size(v));
        for (const C& c : v) update(&c, sizeof(C));
      }
    } else if constexpr (detail::scalar_range<T>) {
      using E = std::ranges::range_value_t<const T>;
      tag(detail::key_tag::array);
      scalar_header<E>();
      const auto n = std::ranges::size(v);
      append_length(n);
      if constexpr (std::ranges::contiguous_range<const T>) {
        update(std::ranges::data(v), static_cast<std::size_t>(n) * sizeof(E));
      } else {
        for (const E& e : v) update(&e, sizeof(E));
      }
    } else if constexpr (std::ranges::sized_range<const T>) {
      tag(detail::key_tag::sequence);
      append_length(std::ranges::size(v));
      for (const auto& e : v) append_one(e);
    } else if constexpr (detail::tuple_like<T>) {
      tag(detail::key_tag::tuple);
      append_length(std::tuple_size_v<T>);
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
  std::vector<std::byte>* sink_ = nullptr;
  unsigned char buffer_[buffer_size];
};

/// @brief The bytes hash_key(parts...) hashes: for tests, and to see why two processes' keys differ.
template <class... Ts>
std::vector<std::byte> key_bytes(const Ts&... parts) {
  std::vector<std::byte> out;
  key_hasher h;
  h.sink_ = &out;
  h.append(parts...);
  return out;
}

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
