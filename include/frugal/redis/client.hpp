#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The circuit breaker's state: closed (Redis is used), open (skipped until the backoff ends),
/// half_open (one caller is probing with a reconnect).
enum class breaker_state : std::uint8_t { closed, open, half_open };

inline constexpr const char* to_string(breaker_state s) noexcept {
  return s == breaker_state::closed ? "closed" : s == breaker_state::open ? "open" : "half_open";
}

/// @brief Counters of the connection to Redis.
struct redis_client_stats {
  std::uint64_t round_trips = 0;        ///< pipelines sent and answered in full (one per batch)
  std::uint64_t commands = 0;           ///< commands in those round trips
  std::uint64_t timeouts = 0;           ///< replies that did not come within command_timeout
  std::uint64_t connection_errors = 0;  ///< failed connects and lost connections
  std::uint64_t auth_failures = 0;      ///< AUTH refused (the credentials are never recorded)
  std::uint64_t reply_errors = 0;       ///< error replies, e.g. OOM under maxmemory with noeviction
  std::uint64_t breaker_skips = 0;      ///< calls not sent because the breaker was open
  std::uint64_t breaker_opens = 0;
  std::uint64_t connects = 0;  ///< successful connects, the first ones and the reconnects
  breaker_state breaker = breaker_state::closed;
  std::chrono::nanoseconds breaker_backoff{0};  ///< the wait before the next probe, while open
  std::chrono::nanoseconds latency_mean{0}, latency_p50{0}, latency_p99{0},
      latency_max{0};        ///< per round trip
  std::string last_error{};  ///< what went wrong last, in words; never holds credentials
};

FRUGAL_END_NAMESPACE

// The connection itself (detail::redis_client), which reports through the types above.
#include "frugal/redis/detail/client.hpp"
