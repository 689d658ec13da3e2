#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include <frugal/redis.hpp>

#include "../support/prometheus.hpp"
#include "redis_server.hpp"

using frugal_test::prom_lines;
using frugal_test::prom_value;

TEST_CASE("redis_tier: stats export as Prometheus text, the LRU in front under its own prefix") {
  using tier = frugal::redis_tier<std::vector<float>>;
  frugal_test::redis_server srv;
  // Timeouts far above the defaults' 5 ms: the values checked here must not depend on the machine's load.
  const frugal::redis_options ro{.port = srv.port(),
                                 .model = "export-model",
                                 .version = "1",
                                 .connect_timeout = std::chrono::seconds(2),
                                 .command_timeout = std::chrono::seconds(2)};
  tier a(tier::options_type{.redis = ro});
  tier b(tier::options_type{.redis = ro});
  const frugal::key128 k{1, 77};
  CHECK(a.put(k, {1.f, 2.f}));
  CHECK(b.get(k));                            // from Redis
  CHECK(b.get(k));                            // from b's LRU
  CHECK_FALSE(b.get(frugal::key128{2, 77}));  // a miss

  frugal::prometheus_writer w;
  frugal::append_prometheus(w, a.stats(), {.labels = {{"replica", "a"}}});
  frugal::append_prometheus(w, b.stats(), {.labels = {{"replica", "b"}}});
  const std::string t = w.str();
  CHECK(prom_value(t, R"(frugal_redis_lookups_total{replica="b"})") == "3");
  CHECK(prom_value(t, R"(frugal_redis_hits_total{replica="b"})") == "1");
  CHECK(prom_value(t, R"(frugal_redis_local_hits_total{replica="b"})") == "1");
  CHECK(prom_value(t, R"(frugal_redis_misses_total{replica="b"})") == "1");
  CHECK(prom_value(t, R"(frugal_redis_writes_total{replica="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_redis_fallbacks_total{replica="b"})") == "0");
  CHECK(prom_value(t, R"(frugal_redis_round_trips_total{replica="b"})") ==
        std::to_string(b.stats().redis.round_trips));
  CHECK(prom_value(t, R"(frugal_redis_breaker_open{replica="b"})") == "0");
  CHECK(prom_value(t, R"(frugal_redis_breaker_state{replica="b",state="closed"})") == "1");
  CHECK(prom_value(t, R"(frugal_redis_local_cache_hits_total{replica="b"})") == "1");
  CHECK(prom_value(t, R"(frugal_redis_local_cache_entries{replica="b"})") == "1");
  CHECK(prom_lines(t, "# TYPE frugal_redis_hits_total counter") == 1);
  CHECK(prom_lines(t, "# TYPE frugal_redis_round_trip_seconds summary") == 1);
  FRUGAL_CHECK_PROMTOOL(t);

  // Redis gone: the breaker's state and the faults show.
  srv.kill();
  for (int i = 0; i < 5; ++i) b.get(frugal::key128{3, std::uint64_t(i)});
  const std::string down = frugal::to_prometheus(b.stats());
  CHECK(std::stoull(prom_value(down, "frugal_redis_fallbacks_total")) >= 1);
  CHECK(std::stoull(prom_value(down, "frugal_redis_connection_errors_total")) +
            std::stoull(prom_value(down, "frugal_redis_timeouts_total")) >=
        1);
  FRUGAL_CHECK_PROMTOOL(down);
}
