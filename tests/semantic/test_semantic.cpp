#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <list>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <frugal/clock.hpp>
#include <frugal/semantic.hpp>

#include "../support/prometheus.hpp"

using namespace std::chrono_literals;

namespace {

using vec = std::vector<float>;
using cache = frugal::semantic_cache<int>;

vec random_unit(std::mt19937& rng, std::size_t dim) {
  std::normal_distribution<float> n;
  vec v(dim);
  double sum = 0;
  for (auto& x : v) {
    x = n(rng);
    sum += double(x) * x;
  }
  for (auto& x : v) x = float(x / std::sqrt(sum));
  return v;
}

// A unit vector at exactly cosine c to unit vector v: c v + sqrt(1 - c^2) u, u a unit orthogonal to v.
vec at_cosine(const vec& v, float c, std::mt19937& rng) {
  vec u = random_unit(rng, v.size());
  double dot = 0;
  for (std::size_t i = 0; i < v.size(); ++i) dot += double(u[i]) * v[i];
  double sum = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    u[i] = float(u[i] - dot * v[i]);
    sum += double(u[i]) * u[i];
  }
  const double s = std::sqrt(1.0 - double(c) * c) / std::sqrt(sum);
  vec q(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) q[i] = float(c * v[i] + s * u[i]);
  return q;
}

float cosine(const vec& a, const vec& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += double(a[i]) * b[i];
  return float(d);
}

}  // namespace

TEST_CASE("semantic_cache: options that cannot work are refused, naming the field") {
  using opts = cache::options;
  CHECK_THROWS_WITH_AS(cache(opts{.max_entries = 0}), doctest::Contains("options.max_entries"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cache(opts{.dimension = 0, .max_entries = 10}), doctest::Contains("options.dimension"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cache(opts{.threshold = 1.5f, .max_entries = 10}),
                       doctest::Contains("options.threshold"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cache(opts{.threshold = std::nanf(""), .max_entries = 10}),
                       doctest::Contains("options.threshold"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cache(opts{.namespace_thresholds = {{"billing", 0.0f}}, .max_entries = 10}),
                       doctest::Contains("namespace_thresholds[\"billing\"]"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cache(opts{.max_entries = 10, .ttl = -1s}), doctest::Contains("options.ttl"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cache(opts{.max_entries = 10, .hnsw_m = 1}), doctest::Contains("options.hnsw_m"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cache(opts{.max_entries = 10, .hnsw_ef_search = 0}),
                       doctest::Contains("options.hnsw_ef_search"), std::invalid_argument);
  cache c(opts{.max_entries = 10});
  CHECK_THROWS_WITH_AS(c.set_ef_search(0), doctest::Contains("set_ef_search"), std::invalid_argument);
}

TEST_CASE("semantic_cache: a key of the wrong dimension, with NaN or infinity, or of zero norm is refused") {
  cache c({.dimension = 8, .max_entries = 10});
  CHECK_THROWS_WITH_AS(c.get(vec(7, 1.0f)), doctest::Contains("has 7 dimensions, expected 8"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(c.put(vec(9, 1.0f), 1), doctest::Contains("put: embedding has 9 dimensions"),
                       std::invalid_argument);
  vec nan(8, 1.0f);
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(c.get(nan), doctest::Contains("embedding[3] is not finite"), std::invalid_argument);
  vec inf(8, 1.0f);
  inf[5] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(c.put(inf, 1), doctest::Contains("embedding[5] is not finite"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(c.put(vec(8, 0.0f), 1), doctest::Contains("zero norm"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(c.put(vec(8, 1.0f), 1, "", -1s), doctest::Contains("ttl"), std::invalid_argument);
  CHECK(c.size() == 0);
  CHECK(c.stats().puts == 0);
}

TEST_CASE("semantic_cache: an exact key is answered first, with similarity 1, whatever the embedding") {
  std::mt19937 rng(1);
  cache c({.dimension = 32, .max_entries = 10});
  const vec v = random_unit(rng, 32);
  const auto key = frugal::hash_key("what is my balance");
  REQUIRE(c.put(v, key, 7));
  const auto h = c.get(random_unit(rng, 32), key);
  REQUIRE(h);
  CHECK(*h->value == 7);
  CHECK(h->match == frugal::semantic_match::exact);
  CHECK(h->similarity == 1.0f);
  // Without the key the unrelated embedding misses; the key's own embedding is a semantic hit.
  CHECK_FALSE(c.get(random_unit(rng, 32)));
  const auto s = c.get(v);
  REQUIRE(s);
  CHECK(s->match == frugal::semantic_match::semantic);
  CHECK(s->similarity == doctest::Approx(1.0).epsilon(1e-5));
  const auto st = c.stats();
  CHECK(st.exact_hits == 1);
  CHECK(st.semantic_hits == 1);
  CHECK(st.misses == 1);
}

TEST_CASE("semantic_cache: the nearest entry is a hit at or above the threshold and a miss below it") {
  std::mt19937 rng(2);
  cache c({.dimension = 384, .threshold = 0.9f, .max_entries = 100});
  std::vector<vec> keys;
  for (int i = 0; i < 50; ++i) {
    keys.push_back(random_unit(rng, 384));
    REQUIRE(c.put(keys.back(), i));
  }
  for (int i = 0; i < 50; ++i) {
    const auto near = c.get(at_cosine(keys[i], 0.96f, rng));
    REQUIRE(near);
    CHECK(*near->value == i);
    CHECK(near->match == frugal::semantic_match::semantic);
    CHECK(near->similarity == doctest::Approx(0.96).epsilon(1e-4));
    CHECK_FALSE(c.get(at_cosine(keys[i], 0.85f, rng)));
  }
  // Not normalised by the caller: the cache normalises.
  vec scaled = keys[3];
  for (auto& x : scaled) x *= 40.0f;
  const auto h = c.get(scaled);
  REQUIRE(h);
  CHECK(*h->value == 3);
  const auto st = c.stats();
  CHECK(st.semantic_hits == 51);
  CHECK(st.misses == 50);
  // 0.96 falls in the bucket [0.95, 0.975), 1.0 in the last.
  CHECK(st.similarity_histogram[18] == 50);
  CHECK(st.similarity_histogram[19] == 1);
  CHECK(st.hit_ratio == doctest::Approx(51.0 / 101.0));
}

TEST_CASE("semantic_cache: each namespace has its threshold, and none answers for another") {
  std::mt19937 rng(3);
  cache c(
      {.dimension = 32, .threshold = 0.9f, .namespace_thresholds = {{"refunds", 0.98f}}, .max_entries = 10});
  CHECK(c.threshold() == 0.9f);
  CHECK(c.threshold("refunds") == 0.98f);
  CHECK(c.threshold("other") == 0.9f);
  const vec v = random_unit(rng, 32);
  REQUIRE(c.put(v, 1));
  REQUIRE(c.put(v, 2, "refunds"));
  const vec q = at_cosine(v, 0.95f, rng);
  const auto general = c.get(q);
  REQUIRE(general);
  CHECK(*general->value == 1);
  CHECK_FALSE(c.get(q, "refunds"));
  const auto close = c.get(at_cosine(v, 0.99f, rng), "refunds");
  REQUIRE(close);
  CHECK(*close->value == 2);
  CHECK_FALSE(c.get(v, "travel"));
  const auto key = frugal::hash_key("k");
  REQUIRE(c.put(v, key, 3, "travel"));
  CHECK_FALSE(c.get(v, key, "banking"));
  CHECK(c.stats().namespaces == 3);
}

TEST_CASE(
    "semantic_cache: an evicted entry is never returned, and 10x capacity inserts reuse the index's slots") {
  std::mt19937 rng(4);
  constexpr std::size_t capacity = 64;
  // A threshold this low makes every lookup return the nearest live entry, whatever it is.
  cache c({.dimension = 32, .threshold = 1e-6f, .max_entries = capacity, .hnsw_ef_search = 128});
  // The test's own LRU, front most recent: what the cache must hold.
  std::list<int> model;
  const auto touch = [&](int id) {
    model.remove(id);
    model.push_front(id);
  };
  const auto live = [&](int id) { return std::find(model.begin(), model.end(), id) != model.end(); };
  std::vector<vec> keys;
  int returned_evicted = 0;
  int hits = 0;
  for (int i = 0; i < int(10 * capacity); ++i) {
    keys.push_back(random_unit(rng, 32));
    REQUIRE(c.put(keys.back(), i));
    touch(i);
    if (model.size() > capacity) model.pop_back();
    const auto st = c.stats();
    CHECK(st.entries == model.size());
    CHECK(st.index_slots <= capacity);
    // Probes near any key ever put, evicted or not (a negative nearest cosine is a miss).
    for (int probe = 0; probe < 4; ++probe) {
      const auto h = c.get(at_cosine(keys[rng() % keys.size()], 0.8f, rng));
      if (!h) continue;
      ++hits;
      returned_evicted += !live(*h->value);
      touch(*h->value);
    }
  }
  CHECK(returned_evicted == 0);
  CHECK(hits > int(3 * capacity));
  int found = 0;
  for (int i = 0; i < int(10 * capacity); ++i) {
    const bool was_live = live(i);
    const auto h = c.get(keys[i]);
    REQUIRE(h);
    if (was_live) {
      found += *h->value == i;
    } else {
      CHECK(live(*h->value));
      CHECK(h->similarity < 0.99f);
    }
    touch(*h->value);
  }
  // Every live entry is still found by its own key after the slots were reused nine times.
  CHECK(found == int(capacity));
  const auto st = c.stats();
  CHECK(st.evictions_size == 9 * capacity);
  CHECK(st.index_slots == capacity);
  CHECK(st.index_deleted == 0);
}

TEST_CASE(
    "semantic_cache: after 10x churn through reused slots, live entries are still found by their keys") {
  // Reusing a slot relinks its node at the new vector; this checks the graph stays searchable.
  std::mt19937 rng(9);
  constexpr std::size_t capacity = 300;
  cache c({.dimension = 16, .threshold = 0.999f, .max_entries = capacity});
  std::vector<vec> keys;
  for (std::size_t i = 0; i < 10 * capacity; ++i) {
    keys.push_back(random_unit(rng, 16));
    REQUIRE(c.put(keys.back(), int(i)));
  }
  std::size_t found = 0;
  for (std::size_t i = 9 * capacity; i < 10 * capacity; ++i) {
    const auto h = c.get(keys[i]);
    found += h && *h->value == int(i);
  }
  MESSAGE("recall of the live entries after churn: " << found << " of " << capacity);
  CHECK(found >= capacity * 99 / 100);
  CHECK(c.stats().index_slots == capacity);
}

TEST_CASE("semantic_cache: max_bytes counts the weigher's bytes and refuses values heavier than it") {
  std::mt19937 rng(5);
  frugal::semantic_cache<std::string> c(
      {.dimension = 16, .max_entries = 100, .max_bytes = 100, .weigher = [](const std::string& s) {
         return s.size();
       }});
  std::vector<vec> keys;
  for (int i = 0; i < 10; ++i) {
    keys.push_back(random_unit(rng, 16));
    REQUIRE(c.put(keys.back(), std::string(30, char('a' + i))));
    CHECK(c.stats().bytes <= 100);
  }
  CHECK(c.size() == 3);
  CHECK(c.stats().evictions_size == 7);
  CHECK_FALSE(c.put(random_unit(rng, 16), std::string(101, 'x')));
  CHECK(c.stats().rejected_oversize == 1);
  CHECK(c.size() == 3);
  const auto h = c.get(keys[9]);
  REQUIRE(h);
  CHECK(*h->value == std::string(30, 'j'));
}

TEST_CASE("semantic_cache: entries expire on the injected clock, and the expired slot is reused") {
  std::mt19937 rng(6);
  frugal::manual_clock clock;
  frugal::semantic_cache<int, frugal::manual_clock> c({.dimension = 16, .max_entries = 10, .ttl = 10s},
                                                      clock);
  const vec a = random_unit(rng, 16);
  const auto key = frugal::hash_key(1);
  REQUIRE(c.put(a, key, 1));
  clock.advance(9s);
  CHECK(c.get(a));
  CHECK(c.get(a, key));
  clock.advance(1s);
  CHECK_FALSE(c.get(a));
  CHECK_FALSE(c.get(a, key));
  auto st = c.stats();
  CHECK(st.evictions_expired == 1);
  CHECK(st.entries == 0);
  CHECK(st.index_deleted == 1);
  // A per-entry ttl overrides the cache's; max() never expires.
  const vec b = random_unit(rng, 16);
  REQUIRE(c.put(b, 2, "", std::chrono::nanoseconds::max()));
  REQUIRE(c.put(a, 3, "", 1s));
  st = c.stats();
  CHECK(st.index_slots == 2);
  clock.advance(1h);
  CHECK_FALSE(c.get(a));
  const auto h = c.get(b);
  REQUIRE(h);
  CHECK(*h->value == 2);
}

TEST_CASE("semantic_cache: a put on a cached exact key replaces its value and its embedding") {
  std::mt19937 rng(7);
  cache c({.dimension = 32, .max_entries = 10});
  const vec v1 = random_unit(rng, 32);
  const vec v2 = random_unit(rng, 32);
  REQUIRE(cosine(v1, v2) < 0.5f);
  const auto key = frugal::hash_key("q");
  REQUIRE(c.put(v1, key, 1));
  REQUIRE(c.put(v2, key, 2));
  CHECK(c.size() == 1);
  CHECK(c.stats().replacements == 1);
  CHECK(*c.get(v1, key)->value == 2);
  CHECK_FALSE(c.get(v1));
  const auto h = c.get(v2);
  REQUIRE(h);
  CHECK(*h->value == 2);
}

TEST_CASE("semantic_cache: concurrent gets and puts keep the counts and the bounds") {
  constexpr int threads = 4;
  constexpr int ops = 1500;
  constexpr std::size_t capacity = 100;
  std::mt19937 rng(8);
  std::vector<vec> pool;
  for (int i = 0; i < 300; ++i) pool.push_back(random_unit(rng, 32));
  cache c({.dimension = 32, .threshold = 0.99f, .max_entries = capacity});
  std::atomic<std::uint64_t> gets{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 r(100 + t);
      std::uniform_int_distribution<int> pick(0, int(pool.size()) - 1);
      for (int i = 0; i < ops; ++i) {
        const int id = pick(r);
        if (i % 3 == 0) {
          c.put(pool[id], frugal::hash_key(id), id);
        } else {
          const auto h = (i % 3 == 1) ? c.get(pool[id]) : c.get(pool[id], frugal::hash_key(id));
          gets.fetch_add(1, std::memory_order_relaxed);
          if (h && *h->value != id) wrong.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (auto& th : ts) th.join();
  CHECK(wrong.load() == 0);
  const auto st = c.stats();
  CHECK(st.exact_hits + st.semantic_hits + st.misses == gets.load());
  CHECK(st.puts == std::uint64_t(threads * ops / 3));
  CHECK(st.entries <= capacity);
  CHECK(st.index_slots <= capacity);
  CHECK(st.entries + st.index_deleted == st.index_slots);
}

TEST_CASE("semantic_cache: stats export as Prometheus text, the hits' similarity as a histogram") {
  std::mt19937 rng(9);
  cache c({.dimension = 64, .threshold = 0.7f, .max_entries = 10});
  const vec v = random_unit(rng, 64);
  const auto key = frugal::hash_key("exact");
  REQUIRE(c.put(v, key, 1));
  CHECK(c.get(random_unit(rng, 64), key));  // exact
  CHECK(c.get(at_cosine(v, 0.81f, rng)));   // semantic, in [0.8, 0.825)
  CHECK(c.get(at_cosine(v, 0.96f, rng)));   // semantic, in [0.95, 0.975)
  CHECK_FALSE(c.get(at_cosine(v, 0.3f, rng)));

  frugal::prometheus_writer w;
  frugal::append_prometheus(w, c.stats(), {.labels = {{"cache", "answers"}}});
  const std::string t = w.str();
  using frugal_test::prom_value;
  CHECK(prom_value(t, R"(frugal_semantic_cache_lookups_total{cache="answers",result="exact"})") == "1");
  CHECK(prom_value(t, R"(frugal_semantic_cache_lookups_total{cache="answers",result="semantic"})") == "2");
  CHECK(prom_value(t, R"(frugal_semantic_cache_lookups_total{cache="answers",result="miss"})") == "1");
  CHECK(prom_value(t, R"(frugal_semantic_cache_puts_total{cache="answers"})") == "1");
  CHECK(prom_value(t, R"(frugal_semantic_cache_entries{cache="answers"})") == "1");
  CHECK(prom_value(t, R"(frugal_semantic_cache_namespaces{cache="answers"})") == "1");
  CHECK(prom_value(t, R"(frugal_semantic_cache_hit_ratio{cache="answers"})") == "0.75");
  CHECK(prom_value(t, R"(frugal_semantic_cache_similarity_bucket{cache="answers",le="0.525"})") == "0");
  CHECK(prom_value(t, R"(frugal_semantic_cache_similarity_bucket{cache="answers",le="0.8"})") == "0");
  CHECK(prom_value(t, R"(frugal_semantic_cache_similarity_bucket{cache="answers",le="0.825"})") == "1");
  CHECK(prom_value(t, R"(frugal_semantic_cache_similarity_bucket{cache="answers",le="0.95"})") == "1");
  CHECK(prom_value(t, R"(frugal_semantic_cache_similarity_bucket{cache="answers",le="0.975"})") == "2");
  CHECK(prom_value(t, R"(frugal_semantic_cache_similarity_bucket{cache="answers",le="1"})") == "2");
  CHECK(prom_value(t, R"(frugal_semantic_cache_similarity_bucket{cache="answers",le="+Inf"})") == "2");
  CHECK(prom_value(t, R"(frugal_semantic_cache_similarity_count{cache="answers"})") == "2");
  CHECK(t.find("frugal_semantic_cache_similarity_sum") == std::string::npos);
  FRUGAL_CHECK_PROMTOOL(t);
}
