#include <doctest/doctest.h>

#include <string>

#include "../support/prometheus.hpp"
#include "frugal/kv.hpp"
#include "kv_support.hpp"

using frugal_test::prom_value;

TEST_CASE("kv_cache: stats export as Prometheus text, blocks by state and prefix lookups in tokens") {
  frugal::kv_cache c(kv_test::small(4));
  const auto a = c.open(kv_test::iota(9)).id;
  REQUIRE(c.append(a, kv_test::iota(9)).ok);
  c.commit(a);
  const auto b = c.open(kv_test::iota(10));
  REQUIRE(b.cached_tokens == 8);
  CHECK_FALSE(c.append(b.id, kv_test::iota(5, 8)).ok);
  c.release(a);

  const std::string t = frugal::to_prometheus(c.stats(), {.labels = {{"model", "m"}}});
  CHECK(prom_value(t, R"(frugal_kv_cache_blocks{model="m",state="used"})") == "2");
  CHECK(prom_value(t, R"(frugal_kv_cache_blocks{model="m",state="cached"})") == "0");
  CHECK(prom_value(t, R"(frugal_kv_cache_blocks{model="m",state="free"})") == "2");
  CHECK(prom_value(t, R"(frugal_kv_cache_block_bytes{model="m"})") == "512");
  CHECK(prom_value(t, R"(frugal_kv_cache_bytes{model="m"})") == "2048");
  CHECK(prom_value(t, R"(frugal_kv_cache_used_bytes{model="m"})") == "1024");
  CHECK(prom_value(t, R"(frugal_kv_cache_sequences{model="m"})") == "1");
  CHECK(prom_value(t, R"(frugal_kv_cache_stored_tokens{model="m"})") == "8");
  CHECK(prom_value(t, R"(frugal_kv_cache_appended_tokens_total{model="m"})") == "9");
  CHECK(prom_value(t, R"(frugal_kv_cache_allocation_failures_total{model="m"})") == "1");
  CHECK(prom_value(t, R"(frugal_kv_cache_prefix_query_tokens_total{model="m"})") == "19");
  CHECK(prom_value(t, R"(frugal_kv_cache_prefix_hit_tokens_total{model="m"})") == "8");
  CHECK(prom_value(t, R"(frugal_kv_cache_evictions_total{model="m"})") == "0");
  CHECK(prom_value(t, R"(frugal_kv_cache_cow_copies_total{model="m"})") == "0");
  FRUGAL_CHECK_PROMTOOL(t);
}
