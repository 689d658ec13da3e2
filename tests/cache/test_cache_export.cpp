#include <doctest/doctest.h>

#include <string>

#include "../support/prometheus.hpp"
#include "frugal/cache.hpp"

using frugal_test::prom_lines;
using frugal_test::prom_value;

TEST_CASE("cache: an LRU's and a W-TinyLFU's stats export as Prometheus text in one text, by cache label") {
  const auto k = [](int i) { return frugal::hash_key(i); };
  frugal::lru_cache<std::string> lru({.max_entries = 2, .shards = 1});
  frugal::tinylfu_cache<std::string> lfu({.max_entries = 100});
  lru.put(k(1), "one");
  lru.put(k(2), "two");
  lru.put(k(3), "three");  // pushes 1 out
  CHECK(lru.get(k(3)));
  CHECK_FALSE(lru.get(k(1)));
  lru.erase(k(2));
  lfu.put(k(1), "uno");
  lfu.put(k(1), "eins");
  CHECK(lfu.get(k(1)));

  frugal::prometheus_writer w;
  frugal::append_prometheus(w, lru.stats(), {.labels = {{"cache", "a"}}});
  frugal::append_prometheus(w, lfu.stats(), {.labels = {{"cache", "b"}}});
  const std::string t = w.str();
  CHECK(prom_value(t, R"(frugal_result_cache_hits_total{cache="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_result_cache_misses_total{cache="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_result_cache_puts_total{cache="a"})") == "3");
  CHECK(prom_value(t, R"(frugal_result_cache_evictions_total{cache="a",cause="size"})") == "1");
  CHECK(prom_value(t, R"(frugal_result_cache_evictions_total{cache="a",cause="explicit"})") == "1");
  CHECK(prom_value(t, R"(frugal_result_cache_entries{cache="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_result_cache_hit_ratio{cache="a"})") == "0.5");
  CHECK(prom_value(t, R"(frugal_result_cache_shards{cache="a"})") == "1");
  CHECK(prom_value(t, R"(frugal_result_cache_hits_total{cache="b"})") == "1");
  CHECK(prom_value(t, R"(frugal_result_cache_replacements_total{cache="b"})") == "1");
  CHECK(prom_value(t, R"(frugal_result_cache_entries{cache="b"})") == "1");
  CHECK(std::stoull(prom_value(t, R"(frugal_result_cache_metadata_bytes{cache="b"})")) ==
        lfu.stats().metadata_bytes);
  CHECK(prom_lines(t, "# TYPE frugal_result_cache_hits_total counter") == 1);
  CHECK(prom_lines(t, "# TYPE frugal_result_cache_entries gauge") == 1);
  FRUGAL_CHECK_PROMTOOL(t);
  // Two instances with the same labels would be one series written twice: refused, not garbled.
  CHECK_THROWS_AS(frugal::append_prometheus(w, lru.stats(), {.labels = {{"cache", "a"}}}),
                  std::invalid_argument);
}
