#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Credentials for Redis AUTH: a password, and an ACL user for Redis 6+ (empty for the default
/// user). They are never logged, never put in an error message and never in stats.
struct redis_auth {
  std::string user{};
  std::string password{};

  bool empty() const noexcept { return password.empty(); }

  /// @brief The password from environment variable `password_var` and the user from `user_var` (unset or
  /// empty: the default user). Throws std::invalid_argument when `password_var` is unset.
  static redis_auth from_env(const char* password_var = "FRUGAL_REDIS_PASSWORD",
                             const char* user_var = "FRUGAL_REDIS_USER") {
    const char* p = std::getenv(password_var);
    if (!p || !*p)
      throw std::invalid_argument(std::string("frugal::redis_auth::from_env: environment variable ") +
                                  password_var + " is not set");
    redis_auth a;
    a.password = p;
    if (const char* u = user_var ? std::getenv(user_var) : nullptr) a.user = u;
    return a;
  }

  /// @brief Credentials from a file (e.g. a mounted secret): one line `password`, or `user password`;
  /// a trailing newline is ignored. Throws std::invalid_argument naming the file (not its content).
  static redis_auth from_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument("frugal::redis_auth::from_file: cannot read " + path);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    redis_auth a;
    const auto sp = line.find(' ');
    if (sp == std::string::npos) {
      a.password = line;
    } else {
      a.user = line.substr(0, sp);
      a.password = line.substr(sp + 1);
    }
    if (a.password.empty() || a.password.find(' ') != std::string::npos)
      throw std::invalid_argument("frugal::redis_auth::from_file: " + path +
                                  " must hold one line, `password` or `user password`");
    return a;
  }
};

/// @brief Where Redis is and how a redis_tier talks to it; a plain aggregate, validated by redis_tier.
struct redis_options {
  /// Server address. TLS is not offered: Debian's libhiredis-dev 0.14 has no hiredis_ssl; reach a remote
  /// Redis through a TLS tunnel (stunnel, a service mesh) until hiredis >= 1.0 is packaged.
  std::string host = "127.0.0.1";
  int port = 6379;
  /// A Unix socket path; when set, host and port are not used.
  std::string unix_socket{};
  redis_auth auth{};
  /// Keys are `prefix:model:version:` then the 16 bytes of the key128. The prefix may carry a Redis
  /// Cluster hash tag, e.g. "{frugal}"; model and version must not be empty or hold ':'.
  std::string prefix = "frugal";
  std::string model{};
  std::string version{};
  /// TTL of every value written (SET ... PX); > 0. Results of one model version do not change, so this
  /// bounds memory rather than staleness.
  std::chrono::milliseconds ttl = std::chrono::hours(1);
  /// Limits on connect and on each command's reply (SO_RCVTIMEO/SO_SNDTIMEO). A lookup that runs past
  /// them falls back to the model: keep them near the round trip (1-5 ms in one zone), far under the
  /// model's time.
  std::chrono::milliseconds connect_timeout{5};
  std::chrono::milliseconds command_timeout{5};
  /// Connections kept open; a thread takes a free one, or waits for one. About the number of threads
  /// that look up at once.
  std::size_t connections = 4;
  /// The breaker opens after this many faults (timeouts, lost connections) in a row, and then sends
  /// nothing for `breaker_backoff`, doubled after every failed probe up to `breaker_max_backoff`, with
  /// +-`breaker_jitter` of it at random so replicas do not reconnect in step.
  std::uint32_t breaker_failures = 3;
  std::chrono::milliseconds breaker_backoff{100};
  std::chrono::milliseconds breaker_max_backoff{10'000};
  double breaker_jitter = 0.2;
  /// Cross-replica single flight: a miss takes `SET lock NX PX lock_ttl` before it computes; another
  /// replica that finds the lock polls for the value every `lock_poll`, up to `lock_wait`, then computes
  /// itself. lock_ttl should cover the model's time, and lock_wait bounds what a waiter may lose.
  bool cross_replica_single_flight = false;
  std::chrono::milliseconds lock_ttl{2'000};
  std::chrono::milliseconds lock_wait{500};
  std::chrono::milliseconds lock_poll{2};
  /// Values larger than this (encoded) are not written to Redis.
  std::size_t max_value_bytes = 16u << 20;
};

namespace detail {
inline void validate(const redis_options& o) {
  const std::string who = "frugal::redis_tier: options.";
  auto fail = [&](const std::string& what) { throw std::invalid_argument(who + what); };
  if (o.unix_socket.empty() && o.host.empty()) fail("host must not be empty (or set unix_socket)");
  if (o.unix_socket.empty() && (o.port <= 0 || o.port > 65535)) fail("port must be in 1..65535");
  if (o.prefix.empty()) fail("prefix must not be empty");
  if (o.model.empty() || o.model.find(':') != std::string::npos)
    fail("model must not be empty or hold ':' (it names the key namespace)");
  if (o.version.empty() || o.version.find(':') != std::string::npos)
    fail("version must not be empty or hold ':' (it names the key namespace)");
  if (o.ttl <= std::chrono::milliseconds::zero()) fail("ttl must be > 0");
  if (o.connect_timeout <= std::chrono::milliseconds::zero()) fail("connect_timeout must be > 0");
  if (o.command_timeout <= std::chrono::milliseconds::zero()) fail("command_timeout must be > 0");
  if (o.connections == 0 || o.connections > 256) fail("connections must be in 1..256");
  if (o.breaker_failures == 0) fail("breaker_failures must be > 0");
  if (o.breaker_backoff <= std::chrono::milliseconds::zero()) fail("breaker_backoff must be > 0");
  if (o.breaker_max_backoff < o.breaker_backoff) fail("breaker_max_backoff must be >= breaker_backoff");
  if (!(o.breaker_jitter >= 0 && o.breaker_jitter < 1)) fail("breaker_jitter must be in [0, 1)");
  if (o.cross_replica_single_flight) {
    if (o.lock_ttl <= std::chrono::milliseconds::zero()) fail("lock_ttl must be > 0");
    if (o.lock_wait < std::chrono::milliseconds::zero()) fail("lock_wait must be >= 0");
    if (o.lock_poll <= std::chrono::milliseconds::zero()) fail("lock_poll must be > 0");
  }
  if (o.max_value_bytes == 0 || o.max_value_bytes > (512u << 20))
    fail("max_value_bytes must be in 1..512 MiB (Redis's limit on a string)");
  if (!o.auth.user.empty() && o.auth.password.empty()) fail("auth.user is set but auth.password is empty");
}
}  // namespace detail

FRUGAL_END_NAMESPACE
