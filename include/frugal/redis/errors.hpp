#pragma once

#include <cstdint>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Why a call to Redis got no reply; the tier counts these and falls back to the model, so they
/// never reach the caller.
enum class redis_errc : std::uint8_t {
  none,        ///< no fault: every command was answered
  skipped,     ///< not sent, because the circuit breaker is open
  timeout,     ///< no reply within command_timeout
  connection,  ///< the connect failed or the connection was lost
  auth,        ///< AUTH was refused
};

/// @brief A short name for the code, e.g. "timeout".
inline constexpr const char* to_string(redis_errc c) noexcept {
  switch (c) {
    case redis_errc::none:
      return "none";
    case redis_errc::skipped:
      return "skipped";
    case redis_errc::timeout:
      return "timeout";
    case redis_errc::connection:
      return "connection";
    case redis_errc::auth:
      return "auth";
  }
  return "unknown";
}

FRUGAL_END_NAMESPACE
