#pragma once

// Integer and std::chrono arithmetic that stops at the ends of the representable range instead of
// overflowing: a signed overflow is undefined behaviour, and time values here come from users (a window
// of nanoseconds::max(), a worker's reported duration) and from injected clocks that may jump anywhere.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <ratio>
#include <type_traits>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

template <std::integral T>
constexpr T saturating_add(T a, T b) noexcept {
  constexpr T hi = std::numeric_limits<T>::max(), lo = std::numeric_limits<T>::min();
  if (b > 0 && a > hi - b) return hi;
  if (b < 0 && a < lo - b) return lo;
  return static_cast<T>(a + b);
}

template <std::integral T>
constexpr T saturating_sub(T a, T b) noexcept {
  constexpr T hi = std::numeric_limits<T>::max(), lo = std::numeric_limits<T>::min();
  if (b < 0 && a > hi + b) return hi;
  if (b > 0 && a < lo + b) return lo;
  return static_cast<T>(a - b);
}

template <class Rep, class Period>
constexpr std::chrono::duration<Rep, Period> saturating_add(std::chrono::duration<Rep, Period> a,
                                                            std::chrono::duration<Rep, Period> b) noexcept {
  if constexpr (std::is_floating_point_v<Rep>)
    return a + b;
  else
    return std::chrono::duration<Rep, Period>(saturating_add(a.count(), b.count()));
}

template <class Rep, class Period>
constexpr std::chrono::duration<Rep, Period> saturating_sub(std::chrono::duration<Rep, Period> a,
                                                            std::chrono::duration<Rep, Period> b) noexcept {
  if constexpr (std::is_floating_point_v<Rep>)
    return a - b;
  else
    return std::chrono::duration<Rep, Period>(saturating_sub(a.count(), b.count()));
}

/// duration_cast to an integral duration that saturates where the plain cast overflows (e.g. seconds::max()
/// in nanoseconds); a floating-point NaN becomes zero.
template <class To, class Rep, class Period>
constexpr To saturating_cast(std::chrono::duration<Rep, Period> d) noexcept {
  using to_rep = typename To::rep;
  static_assert(std::is_integral_v<to_rep>, "saturating_cast converts to an integral duration");
  using r = std::ratio_divide<Period, typename To::period>;
  constexpr to_rep hi = std::numeric_limits<to_rep>::max(), lo = std::numeric_limits<to_rep>::min();
  if constexpr (std::is_floating_point_v<Rep>) {
    const long double v = static_cast<long double>(d.count()) * r::num / r::den;
    if (v != v) return To::zero();
    if (v >= static_cast<long double>(hi)) return To::max();
    if (v <= static_cast<long double>(lo)) return To::min();
    return To(static_cast<to_rep>(v));
  } else {
    // duration_cast computes count * num / den; it cannot overflow while |count| <= max / num.
    constexpr std::intmax_t limit = static_cast<std::intmax_t>(hi) / r::num;
    if (d.count() > 0 && static_cast<std::uintmax_t>(d.count()) > static_cast<std::uintmax_t>(limit))
      return To::max();
    if constexpr (std::is_signed_v<Rep>)
      if (d.count() < 0 && d.count() < -limit) return To::min();
    const std::intmax_t v = static_cast<std::intmax_t>(d.count()) * r::num / r::den;
    if (v > static_cast<std::intmax_t>(hi)) return To::max();
    if (v < static_cast<std::intmax_t>(lo)) return To::min();
    return To(static_cast<to_rep>(v));
  }
}

/// t + d, at the clock's first or last representable time where that would overflow.
template <class Clock, class Duration, class Rep, class Period>
constexpr std::chrono::time_point<Clock, Duration> saturating_add(
    std::chrono::time_point<Clock, Duration> t, std::chrono::duration<Rep, Period> d) noexcept {
  return std::chrono::time_point<Clock, Duration>(
      saturating_add(t.time_since_epoch(), saturating_cast<Duration>(d)));
}

/// a - b as a duration, saturated: a clock that jumped from one end of its range to the other gives the
/// largest or smallest duration rather than a wrapped one.
template <class Clock, class Duration>
constexpr Duration saturating_sub(std::chrono::time_point<Clock, Duration> a,
                                  std::chrono::time_point<Clock, Duration> b) noexcept {
  return saturating_sub(a.time_since_epoch(), b.time_since_epoch());
}

/// a - b in nanoseconds, saturated, for any clock's time points.
template <class Clock, class Duration>
constexpr std::chrono::nanoseconds elapsed_ns(std::chrono::time_point<Clock, Duration> from,
                                              std::chrono::time_point<Clock, Duration> to) noexcept {
  return saturating_cast<std::chrono::nanoseconds>(saturating_sub(to, from));
}

/// A time in nanoseconds computed in double, as a duration: NaN and negatives give 0, and values beyond the
/// int64 range saturate (the plain cast is undefined there, e.g. a learned slope times a large n).
inline std::chrono::nanoseconds clamp_ns(double ns) noexcept {
  if (!(ns > 0)) return std::chrono::nanoseconds::zero();
  if (ns >= 0x1p63) return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
}

}  // namespace detail
FRUGAL_END_NAMESPACE
