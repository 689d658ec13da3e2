#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The bytes a cached value holds, for capacity by bytes. Defined for trivially copyable types,
/// std::basic_string and std::vector of weighable elements; specialize it for your own types, or pass
/// options.weigher. Only the value is weighed: the cache's own metadata is not part of the budget.
template <class T>
struct default_weigher {};

template <class T>
requires std::is_trivially_copyable_v<T>
struct default_weigher<T> {
  std::size_t operator()(const T&) const noexcept { return sizeof(T); }
};

template <class C, class Tr, class A>
struct default_weigher<std::basic_string<C, Tr, A>> {
  std::size_t operator()(const std::basic_string<C, Tr, A>& s) const noexcept {
    // A short string lives inside the object; only a heap buffer adds bytes.
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const auto* self = reinterpret_cast<const unsigned char*>(std::addressof(s));
    const bool inline_buffer = p >= self && p < self + sizeof(s);
    return sizeof(s) + (inline_buffer ? 0 : (s.capacity() + 1) * sizeof(C));
  }
};

template <class T, class A>
requires requires(const T& t) { default_weigher<T>{}(t); }
struct default_weigher<std::vector<T, A>> {
  std::size_t operator()(const std::vector<T, A>& v) const noexcept {
    if constexpr (std::is_trivially_copyable_v<T>) {
      return sizeof(v) + v.capacity() * sizeof(T);
    } else {
      std::size_t n = sizeof(v) + (v.capacity() - v.size()) * sizeof(T);
      for (const auto& e : v) n += default_weigher<T>{}(e);
      return n;
    }
  }
};

namespace detail {
template <class T>
concept has_default_weigher = requires(const T& t) {
  { default_weigher<T>{}(t) } -> std::convertible_to<std::size_t>;
};
}  // namespace detail

FRUGAL_END_NAMESPACE
