#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace detail {

template <class T>
concept redis_plain =
    std::is_trivially_copyable_v<T> && !std::is_pointer_v<T> && !std::is_member_pointer_v<T>;

template <class T>
struct is_plain_vector : std::false_type {};
template <class T, class A>
struct is_plain_vector<std::vector<T, A>> : std::bool_constant<redis_plain<T>> {};

constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) noexcept {
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// The compiler's spelling of T: equal across builds by one compiler, so a replica built by another
// compiler, or with another T under the same namespace, reads a header mismatch (a miss), never garbage.
template <class T>
constexpr std::string_view type_spelling() noexcept {
  return __PRETTY_FUNCTION__;
}

}  // namespace detail

/// @brief The default codec of redis_tier: a trivially copyable T by its bytes, and std::vector of one
/// by its elements' bytes. Replicas must share the architecture (byte order is checked in the header) and
/// the compiler (the type tag is the compiler's spelling of T). A user codec is a type with
/// `static constexpr std::uint64_t type_tag`, `static constexpr std::uint32_t version`,
/// `static void encode(const V&, std::string& out)` that appends the payload, and
/// `static std::optional<V> decode(std::string_view payload)` that returns nullopt on bad input; raise
/// `version` whenever the payload format changes.
template <class V>
struct redis_codec {
  static_assert(detail::redis_plain<V> || detail::is_plain_vector<V>::value,
                "frugal::redis_codec: the default codec takes trivially copyable types and std::vector of "
                "them; give redis_tier a codec for other types");
  static constexpr std::uint64_t type_tag =
      detail::fnv1a(detail::type_spelling<V>()) ^ (std::uint64_t{sizeof(V)} << 56);
  static constexpr std::uint32_t version = 1;

  static void encode(const V& v, std::string& out) {
    if constexpr (detail::redis_plain<V>) {
      out.append(reinterpret_cast<const char*>(&v), sizeof(V));
    } else {
      using E = typename V::value_type;
      if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(E));
    }
  }

  static std::optional<V> decode(std::string_view in) {
    if constexpr (detail::redis_plain<V>) {
      if (in.size() != sizeof(V)) return std::nullopt;
      V v;
      std::memcpy(static_cast<void*>(&v), in.data(), sizeof(V));
      return v;
    } else {
      using E = typename V::value_type;
      if (in.size() % sizeof(E) != 0) return std::nullopt;
      V v(in.size() / sizeof(E));
      if (!in.empty()) std::memcpy(static_cast<void*>(v.data()), in.data(), in.size());
      return v;
    }
  }
};

/// @brief What redis_tier needs of a codec for V.
template <class C, class V>
concept redis_codec_for = requires(const V& v, std::string& out, std::string_view in) {
  { C::type_tag } -> std::convertible_to<std::uint64_t>;
  { C::version } -> std::convertible_to<std::uint32_t>;
  C::encode(v, out);
  { C::decode(in) } -> std::same_as<std::optional<V>>;
};

namespace detail {

// Every value in Redis starts with this 24-byte header, little-endian:
//   magic "FRGV" | u16 format | u16 flags (bit 0: big-endian writer) | u64 codec type_tag |
//   u32 codec version | u32 payload length
// A value whose header does not match what this replica's codec writes is a miss, never decoded.
inline constexpr std::size_t redis_header_size = 24;
inline constexpr std::uint16_t redis_header_format = 1;

inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}
inline constexpr std::uint16_t redis_flags() noexcept {
  return std::endian::native == std::endian::big ? 1 : 0;
}

template <class V, class Codec>
std::string redis_encode(const V& v) {
  std::string out;
  out.reserve(redis_header_size + 64);
  out.append("FRGV", 4);
  put_le(out, redis_header_format, 2);
  put_le(out, redis_flags(), 2);
  put_le(out, static_cast<std::uint64_t>(Codec::type_tag), 8);
  put_le(out, static_cast<std::uint32_t>(Codec::version), 4);
  put_le(out, 0, 4);
  Codec::encode(v, out);
  const std::uint64_t len = out.size() - redis_header_size;
  if (len > 0xffffffffull) return {};
  for (int i = 0; i < 4; ++i) out[20 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out;
}

enum class decode_result { ok, header_mismatch, decode_error };

template <class V, class Codec>
decode_result redis_decode(std::string_view in, std::optional<V>& out) {
  if (in.size() < redis_header_size || std::memcmp(in.data(), "FRGV", 4) != 0 ||
      get_le(in.data() + 4, 2) != redis_header_format || get_le(in.data() + 6, 2) != redis_flags() ||
      get_le(in.data() + 8, 8) != static_cast<std::uint64_t>(Codec::type_tag) ||
      get_le(in.data() + 16, 4) != static_cast<std::uint32_t>(Codec::version) ||
      get_le(in.data() + 20, 4) != in.size() - redis_header_size)
    return decode_result::header_mismatch;
  try {
    out = Codec::decode(in.substr(redis_header_size));
  } catch (...) {
    out.reset();
  }
  return out ? decode_result::ok : decode_result::decode_error;
}

}  // namespace detail

FRUGAL_END_NAMESPACE
