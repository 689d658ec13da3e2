#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <list>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "frugal/cache.hpp"
#include "frugal/clock.hpp"
#include "traces.hpp"

using namespace std::chrono_literals;

namespace {

// Counts this thread's allocations, to show that get never allocates.
thread_local std::size_t allocations = 0;

frugal::key128 k(std::uint64_t i) { return frugal::hash_key(i); }

template <class Cache>
std::string must_throw(const typename Cache::options_type& o) {
  try {
    Cache c(o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

// The LRU the cache must match, entry for entry.
struct reference_lru {
  std::size_t capacity;
  std::list<std::pair<std::uint64_t, int>> order;  // most recent first
  std::unordered_map<std::uint64_t, std::list<std::pair<std::uint64_t, int>>::iterator> where;

  std::optional<int> get(std::uint64_t key) {
    auto it = where.find(key);
    if (it == where.end()) return std::nullopt;
    order.splice(order.begin(), order, it->second);
    return it->second->second;
  }
  std::optional<std::uint64_t> put(std::uint64_t key, int v) {  // returns the evicted key
    if (auto it = where.find(key); it != where.end()) {
      it->second->second = v;
      order.splice(order.begin(), order, it->second);
      return std::nullopt;
    }
    order.emplace_front(key, v);
    where[key] = order.begin();
    if (order.size() <= capacity) return std::nullopt;
    const std::uint64_t victim = order.back().first;
    where.erase(victim);
    order.pop_back();
    return victim;
  }
  bool erase(std::uint64_t key) {
    auto it = where.find(key);
    if (it == where.end()) return false;
    order.erase(it->second);
    where.erase(it);
    return true;
  }
};

}  // namespace

// GCC pairs the replaced new with free() and warns of a mismatch that is not there.
#if defined(__GNUC__) && !defined(__clang__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#  pragma GCC diagnostic pop
#endif

TEST_CASE("cache: bad options are refused with the field named") {
  using cache = frugal::lru_cache<int>;
  CHECK(must_throw<cache>({}).find("options.max_entries and options.max_bytes are both 0") !=
        std::string::npos);
  CHECK(must_throw<cache>({.max_entries = 100, .shards = 3}).find("options.shards must be a power of two") !=
        std::string::npos);
  CHECK(must_throw<cache>({.max_entries = 4, .shards = 8}).find("must not exceed options.max_entries") !=
        std::string::npos);
  CHECK(must_throw<cache>({.max_bytes = 4, .shards = 8}).find("must not exceed options.max_bytes") !=
        std::string::npos);
  CHECK(must_throw<cache>({.max_entries = 10, .ttl = -1s}).find("options.ttl") != std::string::npos);
  struct opaque {
    std::list<int> l;
  };
  CHECK(must_throw<frugal::lru_cache<opaque>>({.max_bytes = 1000}).find("options.weigher is required") !=
        std::string::npos);
  CHECK_NOTHROW(frugal::lru_cache<opaque>({.max_entries = 10}));
  cache ok({.max_entries = 10});
  CHECK_THROWS_WITH_AS(ok.put(k(1), 1, -1s), "frugal::basic_cache::put: ttl must be >= 0",
                       std::invalid_argument);
  CHECK(ok.options().shards == 1);
  CHECK(cache({.max_entries = 1'000'000}).options().shards == 64);
}

TEST_CASE("cache: put then get returns the value, and a put replaces it") {
  frugal::lru_cache<std::string> c({.max_entries = 10});
  CHECK_FALSE(c.get(k(1)));
  CHECK(c.put(k(1), "one"));
  REQUIRE(c.get(k(1)));
  CHECK(*c.get(k(1)) == "one");
  auto held = c.get(k(1));
  c.put(k(1), "uno");
  CHECK(*c.get(k(1)) == "uno");
  CHECK(*held == "one");  // a reader keeps its value after it is replaced
  const auto st = c.stats();
  CHECK(st.hits == 4);
  CHECK(st.misses == 1);
  CHECK(st.puts == 2);
  CHECK(st.replacements == 1);
  CHECK(st.entries == 1);
  CHECK(st.hit_ratio == doctest::Approx(0.8));
}

// Runs 100k random operations on a one-shard cache and the reference model side by side and returns
// the mismatches: a different hit, value, victim or size. `gets` of every 20 operations are reads
// (the rest mostly puts, some erases); with `skewed` keys, half the reads go to 8 hot keys, so a
// thread's buffer of reads holds the same entry several times before it is replayed; the size is
// compared every `size_every` operations (each comparison replays the buffered reads).
std::size_t reference_lru_mismatches(std::uint64_t seed, unsigned gets, bool skewed, int size_every) {
  constexpr std::size_t capacity = 64;
  std::vector<std::uint64_t> evicted;
  frugal::lru_cache<int> c({.max_entries = capacity,
                            .shards = 1,
                            .on_evict = [&](const frugal::key128& key, const std::shared_ptr<const int>& v,
                                            frugal::eviction_cause cause) {
                              if (cause == frugal::eviction_cause::size)
                                evicted.push_back(static_cast<std::uint64_t>(*v));
                              CHECK(key == k(static_cast<std::uint64_t>(*v) >> 20));
                            }});
  reference_lru ref{capacity, {}, {}};
  std::mt19937_64 rng(seed);
  std::size_t mismatches = 0;
  for (int op = 0; op < 100'000; ++op) {
    std::uint64_t key = rng() % 200;
    const auto dice = rng() % 20;
    if (dice < gets) {
      if (skewed && rng() % 2 == 0) key %= 8;
      const auto got = c.get(k(key));
      const auto want = ref.get(key);
      if (static_cast<bool>(got) != want.has_value() || (got && *got != *want)) ++mismatches;
    } else if (dice < 19) {
      const int v = static_cast<int>((key << 20) | static_cast<std::uint64_t>(op % 1'000'000));
      evicted.clear();
      c.put(k(key), v);
      const auto victim = ref.put(key, v);
      if (victim.has_value() != (evicted.size() == 1) || (victim && (evicted[0] >> 20) != *victim))
        ++mismatches;
    } else {
      if (c.erase(k(key)) != ref.erase(key)) ++mismatches;
    }
    if (op % size_every == 0 && c.size() != ref.order.size()) ++mismatches;
  }
  if (c.size() != capacity) ++mismatches;
  return mismatches;
}

TEST_CASE("cache: eviction follows a reference LRU over 100k random operations") {
  CHECK(reference_lru_mismatches(42, 10, false, 1) == 0);
}

TEST_CASE("cache: eviction follows a reference LRU when reads fill the buffer and repeat hot keys") {
  // 17 reads in 20: most puts come after a full buffer was replayed, and most buffers hold a hot
  // entry more than once.
  CHECK(reference_lru_mismatches(43, 17, true, 997) == 0);
  CHECK(reference_lru_mismatches(44, 14, true, 997) == 0);
}

TEST_CASE("cache: every shard stays within its share of the entry limit") {
  frugal::lru_cache<int> c({.max_entries = 1000, .shards = 8});
  for (int i = 0; i < 20'000; ++i) c.put(k(static_cast<std::uint64_t>(i)), i);
  const auto st = c.stats();
  CHECK(st.entries <= 1000);
  CHECK(st.entries > 900);
  CHECK(st.evictions_size == 20'000 - st.entries);
}

TEST_CASE("cache: a full sharded cache holds fewer than max_entries, within the bound stats() reports") {
  // 10,000 distinct keys into max_entries = 10,000: the shards fill unevenly, so some evict early.
  frugal::lru_cache<int> sharded({.max_entries = 10'000});
  for (int i = 0; i < 10'000; ++i) sharded.put(k(static_cast<std::uint64_t>(i)), i);
  auto st = sharded.stats();
  CHECK(st.shards == 64);
  CHECK(st.shard_max_entries == 157);  // 10,000 / 64 rounded up
  CHECK(st.shard_max_bytes == 0);
  CHECK(st.entries < 10'000);
  CHECK(st.entries > 9'300);  // the documented ~96.5%, with room for another hash
  CHECK(st.full_shards > 0);
  CHECK(st.evictions_size == 10'000 - st.entries);
  CHECK(st.entries <= st.shards * st.shard_max_entries);
  // One shard: the exact bound, every key kept.
  frugal::lru_cache<int> exact({.max_entries = 10'000, .shards = 1});
  for (int i = 0; i < 10'000; ++i) exact.put(k(static_cast<std::uint64_t>(i)), i);
  st = exact.stats();
  CHECK(st.entries == 10'000);
  CHECK(st.evictions_size == 0);
  CHECK(st.full_shards == 1);
  CHECK(st.shard_max_entries == 10'000);
  exact.put(k(10'000), 0);
  CHECK(exact.stats().evictions_size == 1);
}

TEST_CASE("cache: byte accounting always equals the sum of the live values") {
  constexpr std::size_t budget = 20'000;
  std::map<std::uint64_t, std::size_t> live;  // key id -> weight, kept from puts and evictions
  frugal::lru_cache<std::string> c(
      {.max_bytes = budget,
       .shards = 2,
       .weigher = [](const std::string& s) { return s.size(); },
       .on_evict =
           [&](const frugal::key128&, const std::shared_ptr<const std::string>& v,
               frugal::eviction_cause cause) {
             if (cause != frugal::eviction_cause::replaced)
               live.erase(std::stoull(v->substr(0, v->find(':'))));
           }});
  std::mt19937_64 rng(7);
  bool consistent = true;
  for (int op = 0; op < 20'000; ++op) {
    const std::uint64_t id = rng() % 300;
    if (rng() % 8 == 0) {
      c.erase(k(id));
    } else {
      std::string v = std::to_string(id) + ":" + std::string(rng() % 400, 'x');
      const std::size_t w = v.size();
      if (c.put(k(id), std::move(v))) live[id] = w;
    }
    std::size_t sum = 0;
    for (const auto& [_, w] : live) sum += w;
    const auto st = c.stats();
    consistent = consistent && st.bytes == sum && st.entries == live.size() && st.bytes <= budget;
  }
  CHECK(consistent);
}

TEST_CASE("cache: a value larger than the budget is returned but not cached") {
  frugal::lru_cache<std::string> c(
      {.max_bytes = 100, .shards = 1, .weigher = [](const std::string& s) { return s.size(); }});
  c.put(k(1), std::string(50, 'a'));
  CHECK_FALSE(c.put(k(1), std::string(101, 'b')));
  CHECK_FALSE(c.get(k(1)));  // the older value must not be served in place of the newer one
  const auto v = c.get_or_compute(k(2), [] { return std::string(200, 'c'); });
  REQUIRE(v);
  CHECK(v->size() == 200);
  CHECK_FALSE(c.get(k(2)));
  const auto st = c.stats();
  CHECK(st.rejected_oversize == 2);
  CHECK(st.entries == 0);
  CHECK(st.bytes == 0);
}

TEST_CASE("cache: values of 1 GiB or more are never cached, and a null put is refused") {
  frugal::lru_cache<int> c(
      {.max_entries = 10, .weigher = [](const int& v) { return v == 1 ? std::size_t{1} << 30 : 4; }});
  CHECK_FALSE(c.put(k(1), 1));
  CHECK(c.put(k(2), 2));
  CHECK(c.stats().rejected_oversize == 1);
  CHECK(c.stats().bytes == 4);
  CHECK_THROWS_AS(c.put(k(3), std::shared_ptr<const int>()), std::invalid_argument);
  const auto shared = std::make_shared<const int>(7);
  CHECK(c.put(k(3), shared));
  CHECK(c.get(k(3)) == shared);  // the same object, not a copy
}

TEST_CASE("cache: both limits hold at once") {
  frugal::lru_cache<std::vector<char>> c(
      {.max_entries = 10, .max_bytes = 1000, .shards = 1, .weigher = [](const std::vector<char>& v) {
         return v.size();
       }});
  for (int i = 0; i < 10; ++i) c.put(k(static_cast<std::uint64_t>(i)), std::vector<char>(10));
  CHECK(c.size() == 10);
  c.put(k(100), std::vector<char>(950));
  const auto st = c.stats();
  CHECK(st.bytes <= 1000);
  CHECK(c.get(k(100)));
  CHECK(st.entries == 6);  // 950 + 5 x 10
  CHECK_FALSE(c.get(k(0)));
  CHECK(c.get(k(9)));
}

TEST_CASE("cache: TTLs expire on a manual clock") {
  frugal::manual_clock clock;
  std::vector<frugal::eviction_cause> causes;
  frugal::lru_cache<int, frugal::manual_clock> c(
      {.max_entries = 100,
       .ttl = 10s,
       .on_evict = [&](const auto&, const auto&, auto cause) { causes.push_back(cause); }},
      clock);

  SUBCASE("the cache-wide ttl, lazily on access") {
    c.put(k(1), 1);
    clock.advance(10s - 1ns);
    CHECK(c.get(k(1)));
    clock.advance(1ns);
    CHECK_FALSE(c.get(k(1)));
    CHECK(causes == std::vector{frugal::eviction_cause::expired});
    CHECK(c.stats().evictions_expired == 1);
    CHECK(c.size() == 0);
  }
  SUBCASE("a per-entry ttl overrides it, and max() never expires") {
    c.put(k(1), 1, 2s);
    c.put(k(2), 2, std::chrono::nanoseconds::max());
    c.put(k(3), 3);
    clock.advance(3s);
    CHECK_FALSE(c.get(k(1)));
    CHECK(c.get(k(3)));
    clock.advance(1000h);
    CHECK(c.get(k(2)));
    CHECK_FALSE(c.get(k(3)));
  }
  SUBCASE("a put renews the ttl") {
    c.put(k(1), 1);
    clock.advance(8s);
    c.put(k(1), 2);
    clock.advance(8s);
    CHECK(c.get(k(1)));
  }
  SUBCASE("purge_expired drops every expired entry at once") {
    for (int i = 0; i < 10; ++i) c.put(k(static_cast<std::uint64_t>(i)), i, i < 6 ? 1s : 1min);
    clock.advance(2s);
    CHECK(c.purge_expired() == 6);
    CHECK(c.size() == 4);
    CHECK(c.stats().evictions_expired == 6);
    CHECK(c.purge_expired() == 0);
  }
  SUBCASE("get_or_compute takes a ttl too") {
    c.get_or_compute(
        k(5), [] { return 5; }, 1s);
    clock.advance(1s);
    int runs = 0;
    c.get_or_compute(k(5), [&] { return ++runs; });
    CHECK(runs == 1);
  }
}

TEST_CASE("cache: a compute that finishes after a put of its key replaces that value, as a put would") {
  std::vector<frugal::eviction_cause> causes;
  frugal::lru_cache<int> c(
      {.max_entries = 2, .shards = 1, .on_evict = [&](const auto&, const auto&, auto cause) {
         causes.push_back(cause);
       }});
  const auto r = c.get_or_compute(k(1), [&] {
    c.put(k(1), 1);
    c.put(k(2), 2);
    return 3;
  });
  REQUIRE(r);
  CHECK(*r == 3);
  CHECK(causes == std::vector{frugal::eviction_cause::replaced});
  // The replacement made k(1) the most recently used, so a third key pushes out k(2).
  c.put(k(3), 3);
  CHECK(c.get(k(2)) == nullptr);
  REQUIRE(c.get(k(1)));
  CHECK(*c.get(k(1)) == 3);
  const auto st = c.stats();
  CHECK(st.puts == 4);
  CHECK(st.replacements == 1);
  CHECK(st.loads == 1);
  CHECK(st.evictions_size == 1);
}

TEST_CASE("cache: single-flight runs the compute once for 8 concurrent misses") {
  constexpr int threads = 8;
  frugal::lru_cache<int> c({.max_entries = 100});
  const auto key = k(77);

  SUBCASE("a result reaches all 8 and is cached") {
    std::atomic<int> runs{0};
    std::barrier start(threads);
    std::vector<int> seen(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        start.arrive_and_wait();
        seen[t] = *c.get_or_compute(key, [&] {
          ++runs;
          while (c.stats().load_waits < threads - 1) std::this_thread::yield();  // all others are waiting
          return 1234;
        });
      });
    for (auto& th : pool) th.join();
    CHECK(runs == 1);
    CHECK(seen == std::vector<int>(threads, 1234));
    const auto st = c.stats();
    CHECK(st.loads == 1);
    CHECK(st.load_waits == threads - 1);
    CHECK(*c.get(key) == 1234);
  }
  SUBCASE("an exception reaches all 8 and is not cached") {
    std::atomic<int> runs{0};
    std::atomic<int> caught{0};
    std::barrier start(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        start.arrive_and_wait();
        try {
          c.get_or_compute(key, [&]() -> int {
            ++runs;
            while (c.stats().load_waits < threads - 1) std::this_thread::yield();
            throw std::runtime_error("model failed");
          });
        } catch (const std::runtime_error& e) {
          if (std::string(e.what()) == "model failed") ++caught;
        }
      });
    for (auto& th : pool) th.join();
    CHECK(runs == 1);
    CHECK(caught == threads);
    CHECK(c.stats().load_failures == 1);
    CHECK_FALSE(c.get(key));
    CHECK(*c.get_or_compute(key, [] { return 5; }) == 5);  // the next call computes again
  }
}

TEST_CASE("cache: get_or_compute_async shares one future per key") {
  frugal::lru_cache<int> c({.max_entries = 100});
  std::atomic<bool> release{false};
  std::atomic<int> runs{0};
  auto slow = [&] {
    ++runs;
    while (!release) std::this_thread::yield();
    return 9;
  };
  auto a = c.get_or_compute_async(k(1), slow);
  auto b = c.get_or_compute_async(k(1), slow);
  release = true;
  CHECK(*a.get() == 9);
  CHECK(*b.get() == 9);
  CHECK(runs == 1);
  auto hit = c.get_or_compute_async(k(1), slow);
  CHECK(hit.wait_for(0s) == std::future_status::ready);
  CHECK(*hit.get() == 9);

  auto failed = c.get_or_compute_async(k(2), []() -> int { throw std::logic_error("bad input"); });
  CHECK_THROWS_AS(failed.get(), std::logic_error);
  CHECK_FALSE(c.get(k(2)));

  std::vector<std::function<void()>> queue;  // a one-slot executor run by hand
  auto queued = c.get_or_compute_async(
      k(3), [] { return 3; }, [&](std::function<void()> task) { queue.push_back(std::move(task)); });
  CHECK(queued.wait_for(0s) == std::future_status::timeout);
  REQUIRE(queue.size() == 1);
  queue[0]();
  CHECK(*queued.get() == 3);
}

TEST_CASE("cache: erase, erase_if and clear remove entries and report them") {
  std::vector<frugal::eviction_cause> causes;
  frugal::lru_cache<std::string> c(
      {.max_entries = 100,
       .on_evict = [&](const auto&, const auto&, auto cause) { causes.push_back(cause); }});
  for (int i = 0; i < 10; ++i)
    c.put(k(static_cast<std::uint64_t>(i)), (i % 2 ? "model-a:" : "model-b:") + std::to_string(i));
  CHECK(c.erase(k(3)));
  CHECK_FALSE(c.erase(k(3)));
  CHECK(c.erase_if([](const std::string& v) { return v.starts_with("model-a"); }) == 4);
  CHECK(c.size() == 5);
  CHECK(c.erase_if([](const frugal::key128& key, const std::string&) { return key == k(0); }) == 1);
  c.clear();
  CHECK(c.size() == 0);
  CHECK(c.stats().bytes == 0);
  CHECK(causes == std::vector<frugal::eviction_cause>(10, frugal::eviction_cause::erased));
  CHECK(c.stats().evictions_explicit == 10);
  c.put(k(1), "again");
  CHECK(*c.get(k(1)) == "again");
}

TEST_CASE("cache: an erase_if whose predicate throws still reports what it removed") {
  std::vector<std::uint64_t> evicted;
  frugal::lru_cache<int> c(
      {.max_entries = 100, .shards = 1, .on_evict = [&](const auto&, const auto& v, auto cause) {
         CHECK(cause == frugal::eviction_cause::erased);
         evicted.push_back(static_cast<std::uint64_t>(*v));
       }});
  for (int i = 0; i < 10; ++i) c.put(k(static_cast<std::uint64_t>(i)), i);
  int seen = 0;
  CHECK_THROWS_WITH_AS(c.erase_if([&](const int&) {
    if (++seen == 6) throw std::runtime_error("predicate failed");
    return true;
  }),
                       "predicate failed", std::runtime_error);
  // Five entries were removed before the throw: each reaches on_evict, and the cache agrees.
  CHECK(evicted.size() == 5);
  CHECK(c.size() == 5);
  CHECK(c.stats().evictions_explicit == 5);
  c.put(k(100), 100);  // the shard's lock was released
  CHECK(c.get(k(100)));
}

TEST_CASE("cache: a cache call from inside an erase_if predicate throws instead of deadlocking") {
  frugal::lru_cache<int> c({.max_entries = 100, .shards = 1});
  frugal::lru_cache<int> other({.max_entries = 4});
  for (int i = 0; i < 4; ++i) c.put(k(static_cast<std::uint64_t>(i)), i);
  const auto inside = [&](auto&& call) {
    std::string what;
    c.erase_if([&](const int&) {
      try {
        call();
      } catch (const std::logic_error& e) {
        what = e.what();
      }
      return false;
    });
    return what;
  };
  CHECK(inside([&] { c.get(k(1)); }).find("inside a function passed to erase_if") != std::string::npos);
  CHECK(inside([&] { c.put(k(9), 9); }).find("erase_if") != std::string::npos);
  CHECK(inside([&] { c.erase(k(1)); }).find("erase_if") != std::string::npos);
  CHECK(inside([&] { other.put(k(1), 1); }).find("erase_if") != std::string::npos);
  CHECK(c.size() == 4);
  CHECK(c.erase_if([](const int& v) { return v < 2; }) == 2);  // usable again afterwards
}

TEST_CASE("cache: a get_or_compute whose fn asks for its own key throws instead of deadlocking") {
  frugal::lru_cache<int> c({.max_entries = 100});
  SUBCASE("directly") {
    CHECK_THROWS_WITH_AS(
        c.get_or_compute(k(1), [&] { return *c.get_or_compute(k(1), [] { return 2; }) + 1; }),
        doctest::Contains("fn asked for the key it is computing"), std::logic_error);
  }
  SUBCASE("through another key") {
    CHECK_THROWS_AS(c.get_or_compute(k(1),
                                     [&] {
                                       return *c.get_or_compute(
                                           k(2), [&] { return *c.get_or_compute(k(1), [] { return 0; }); });
                                     }),
                    std::logic_error);
    CHECK_FALSE(c.get(k(2)));
  }
  SUBCASE("asynchronously") {
    CHECK_THROWS_AS(
        c.get_or_compute(k(1), [&] { return *c.get_or_compute_async(k(1), [] { return 0; }).get(); }),
        std::logic_error);
  }
  // Nothing was cached and the key computes normally afterwards; nesting other keys is fine.
  CHECK_FALSE(c.get(k(1)));
  CHECK(*c.get_or_compute(k(1), [&] { return *c.get_or_compute(k(3), [] { return 3; }) + 1; }) == 4);
  CHECK(*c.get(k(3)) == 3);
}

TEST_CASE("cache: the eviction callback runs outside the lock and may use the cache") {
  frugal::lru_cache<int>* self = nullptr;
  int reentered = 0;
  frugal::lru_cache<int> c({.max_entries = 2, .shards = 1, .on_evict = [&](const auto&, const auto& v, auto) {
                              self->get(k(0));  // would deadlock under the shard's lock
                              if (*v > 0) self->put(k(1000 + static_cast<std::uint64_t>(*v)), -1);
                              ++reentered;
                            }});
  self = &c;
  c.put(k(1), 1);
  c.put(k(2), 2);
  c.put(k(3), 3);
  CHECK(reentered >= 1);
  CHECK(c.size() <= 2);
}

TEST_CASE("cache: get never allocates") {
  frugal::lru_cache<std::vector<float>> c({.max_entries = 4000, .ttl = 1h});
  for (int i = 0; i < 1000; ++i) c.put(k(static_cast<std::uint64_t>(i)), std::vector<float>(8));
  const std::size_t before = allocations;
  std::size_t found = 0;
  for (int i = 0; i < 2000; ++i) found += c.get(k(static_cast<std::uint64_t>(i))) ? 1 : 0;
  CHECK(allocations == before);
  CHECK(found == 1000);
}

TEST_CASE("cache: visit reads a value in place, like get") {
  frugal::lru_cache<std::vector<int>> c({.max_entries = 3, .shards = 1});
  for (int i = 0; i < 3; ++i) c.put(k(static_cast<std::uint64_t>(i)), std::vector<int>(4, i));
  int seen = -1;
  CHECK(c.visit(k(0), [&](const std::vector<int>& v) { seen = v.at(3); }));
  CHECK(seen == 0);
  bool called = false;
  CHECK_FALSE(c.visit(k(99), [&](const std::vector<int>&) { called = true; }));
  CHECK_FALSE(called);
  // The visit made 0 the most recent, so the next insert evicts 1, the oldest.
  c.put(k(3), std::vector<int>(4, 3));
  CHECK(c.get(k(0)));
  CHECK_FALSE(c.get(k(1)));
  const auto st = c.stats();
  CHECK(st.hits == 2);
  CHECK(st.misses == 2);

  SUBCASE("visit never allocates") {
    const std::size_t before = allocations;
    std::size_t total = 0;
    for (int i = 0; i < 100; ++i)
      c.visit(k(static_cast<std::uint64_t>(i % 5)), [&](const auto& v) { total += v.size(); });
    CHECK(allocations == before);
    CHECK(total == 60 * 4);  // keys 0, 2 and 3 hit, 20 times each
  }
  SUBCASE("a cache call from inside fn throws instead of deadlocking") {
    const auto inside = [&](auto&& call) {
      std::string what;
      c.visit(k(0), [&](const std::vector<int>&) {
        try {
          call();
        } catch (const std::logic_error& e) {
          what = e.what();
        }
      });
      return what;
    };
    CHECK(inside([&] { c.get(k(2)); }).find("inside a function passed to visit") != std::string::npos);
    CHECK(inside([&] { c.put(k(0), std::vector<int>{}); }).find("visit") != std::string::npos);
    CHECK(inside([&] { c.visit(k(2), [](const auto&) {}); }).find("visit") != std::string::npos);
    CHECK(inside([&] { (void)c.stats(); }).find("visit") != std::string::npos);
    frugal::lru_cache<int> other({.max_entries = 4});
    CHECK(inside([&] { other.put(k(1), 1); }).find("visit") != std::string::npos);
    c.put(k(0), std::vector<int>(1, 7));  // after visit returns, the cache is usable again
    CHECK(c.get(k(0))->front() == 7);
  }
  SUBCASE("an exception from fn propagates and releases the entry") {
    CHECK_THROWS_WITH_AS(c.visit(k(0), [](const std::vector<int>&) { throw std::runtime_error("boom"); }),
                         "boom", std::runtime_error);
    // A writer on the same shard would wait forever if the read flag were still up.
    std::thread writer([&] { c.put(k(0), std::vector<int>(1, 8)); });
    writer.join();
    CHECK(c.get(k(0))->front() == 8);
  }
  SUBCASE("the locked path, when the read buffer is full, still calls fn") {
    int sum = 0;
    for (int i = 0; i < 40; ++i) CHECK(c.visit(k(2), [&](const std::vector<int>& v) { sum += v[0]; }));
    CHECK(sum == 80);
    CHECK(c.stats().hits == 2 + 40);
  }
}

TEST_CASE("cache: key64 caches work the same way") {
  frugal::lru_cache64<int> c({.max_entries = 2, .shards = 1});
  c.put(frugal::hash_key64(1), 1);
  c.put(frugal::hash_key64(2), 2);
  c.get(frugal::hash_key64(1));
  c.put(frugal::hash_key64(3), 3);
  CHECK(c.get(frugal::hash_key64(1)));
  CHECK_FALSE(c.get(frugal::hash_key64(2)));
  CHECK(c.slot_bytes() < frugal::lru_cache<int>::slot_bytes());
}

TEST_CASE("cache: metadata stays within 64 bytes per entry at full capacity") {
  frugal::lru_cache<std::uint64_t> c({.max_entries = 100'000});
  for (std::uint64_t i = 0; i < 200'000; ++i) c.put(k(i), i);
  const auto st = c.stats();
  CHECK(st.entries == 100'000);
  CHECK(static_cast<double>(st.metadata_bytes) / static_cast<double>(st.entries) <= 64.0);
}

TEST_CASE("cache: W-TinyLFU admission") {
  SUBCASE("a get right after a put hits, even with a one-entry window") {
    frugal::tinylfu_cache<int> c({.max_entries = 20, .shards = 1});
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 20; ++j) c.get(k(static_cast<std::uint64_t>(j)));  // make 0..19 popular
    for (int j = 0; j < 20; ++j) c.put(k(static_cast<std::uint64_t>(j)), j);
    for (std::uint64_t i = 100; i < 200; ++i) {
      c.put(k(i), 0);
      CHECK(c.get(k(i)));
    }
    CHECK(c.size() <= 20);
  }
  SUBCASE("it beats LRU by 8 points on Zipf(1.0) at 1% of the keys") {
    const auto t = cache_traces::zipf(10'000, 200'000, 1.0);
    frugal::lru_cache<std::uint8_t> lru({.max_entries = 100, .shards = 1});
    frugal::tinylfu_cache<std::uint8_t> lfu({.max_entries = 100, .shards = 1});
    const double h_lru = cache_traces::replay_hit_ratio(lru, t);
    const double h_lfu = cache_traces::replay_hit_ratio(lfu, t);
    CHECK(h_lfu >= h_lru + 0.08);
    CHECK(h_lfu <= cache_traces::belady_hit_ratio(t, 100) + 1e-9);
  }
  SUBCASE("it does not fall below LRU on a loop or a scan 10x the cache") {
    for (const auto& t : {cache_traces::loop(1000, 50'000), cache_traces::scan(1000, 50'000)}) {
      frugal::lru_cache<std::uint8_t> lru({.max_entries = 100, .shards = 1});
      frugal::tinylfu_cache<std::uint8_t> lfu({.max_entries = 100, .shards = 1});
      CHECK(cache_traces::replay_hit_ratio(lfu, t) >= cache_traces::replay_hit_ratio(lru, t));
    }
  }
  SUBCASE("byte limits hold under admission") {
    frugal::tinylfu_cache<std::string> c(
        {.max_bytes = 5000, .shards = 1, .weigher = [](const std::string& s) { return s.size(); }});
    std::mt19937_64 rng(3);
    for (int i = 0; i < 5000; ++i) {
      const auto id = rng() % 500;
      if (!c.get(k(id))) c.put(k(id), std::string(1 + id % 97, 'x'));
      CHECK(c.stats().bytes <= 5000);
    }
  }
}

TEST_CASE("cache: concurrent gets, puts, erases and loads keep the cache consistent") {
  frugal::manual_clock clock;
  frugal::lru_cache<std::vector<int>, frugal::manual_clock> c(
      {.max_entries = 256, .max_bytes = 64 << 10, .ttl = 5s, .shards = 4}, clock);
  frugal::tinylfu_cache<std::vector<int>, frugal::manual_clock> t({.max_entries = 256, .shards = 4}, clock);
  constexpr int threads = 4;
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int id = 0; id < threads; ++id)
    pool.emplace_back([&, id] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(id));
      for (int op = 0; op < 4000; ++op) {
        const std::uint64_t key = rng() % 512;
        const auto make = [key] { return std::vector<int>(1 + key % 64, static_cast<int>(key)); };
        switch (rng() % 8) {
          case 0:
            c.put(k(key), make());
            break;
          case 1:
            c.erase(k(key));
            break;
          case 2:
            clock.advance(1ms);
            break;
          case 3:
            if (op % 500 == 0) c.purge_expired();
            break;
          default: {
            const auto v = c.get_or_compute(k(key), make);
            if (v->front() != static_cast<int>(key)) ++wrong;
            if (auto w = t.get(k(key)); w && w->front() != static_cast<int>(key)) ++wrong;
            if (!t.get(k(key))) t.put(k(key), make());
          }
        }
      }
    });
  for (auto& th : pool) th.join();
  CHECK(wrong == 0);
  const auto st = c.stats();
  CHECK(st.entries <= 256);
  CHECK(st.bytes <= (64 << 10));
  std::size_t sum = 0;
  c.erase_if([&](const std::vector<int>& v) {
    sum += frugal::default_weigher<std::vector<int>>{}(v);
    return false;
  });
  CHECK(sum == st.bytes);
  CHECK(t.size() <= 256);
}

TEST_CASE(
    "cache: reads buffered by several threads are replayed before an eviction, each thread's in order") {
  // One shard of 4. Thread x reads 2, then thread y reads 0, then x reads 1. These reads take no lock
  // and wait in two stripes until a put replays them: x's in its order (2 before 1), y's read placed
  // before or after them. Whatever the interleaving, 3 (never read) goes first and 2 before 1.
  std::vector<int> evicted;
  frugal::lru_cache<int> c({.max_entries = 4,
                            .shards = 1,
                            .on_evict = [&](const frugal::key128&, const std::shared_ptr<const int>& v,
                                            frugal::eviction_cause) { evicted.push_back(*v); }});
  for (int i = 0; i < 4; ++i) c.put(k(static_cast<std::uint64_t>(i)), i);  // oldest first: 0 1 2 3
  std::atomic<int> step{0};
  const auto wait_for = [&](int n) {
    while (step.load() != n) std::this_thread::yield();
  };
  std::thread x([&] {
    CHECK(c.get(k(2)));
    step = 1;
    wait_for(2);
    CHECK(c.get(k(1)));
  });
  std::thread y([&] {
    wait_for(1);
    CHECK(c.get(k(0)));
    step = 2;
  });
  x.join();
  y.join();
  for (int i = 0; i < 4; ++i) c.put(k(static_cast<std::uint64_t>(10 + i)), i);  // evicts 0 to 3
  REQUIRE(evicted.size() == 4);
  const auto at = [&](int key) { return std::find(evicted.begin(), evicted.end(), key) - evicted.begin(); };
  CHECK(evicted.front() == 3);
  CHECK(at(2) < at(1));
  const auto st = c.stats();
  CHECK(st.hits == 3);
  CHECK(st.misses == 0);
  CHECK(st.evictions_size == 4);
}

TEST_CASE("cache: more reads than a read buffer holds between two writes keep the exact LRU order") {
  frugal::lru_cache<int> c({.max_entries = 64, .shards = 1});
  for (int i = 0; i < 64; ++i) c.put(k(static_cast<std::uint64_t>(i)), i);
  // 63 reads, far more than one buffer of 16: the ones that find it full take the lock and replay.
  for (int i = 63; i >= 1; --i) CHECK(c.get(k(static_cast<std::uint64_t>(i))));
  // The order is now 0 63 62 ... 1: each put evicts 0, then 63, then 62.
  for (int i = 0; i < 3; ++i) c.put(k(static_cast<std::uint64_t>(100 + i)), i);
  CHECK_FALSE(c.get(k(0)));
  CHECK_FALSE(c.get(k(63)));
  CHECK_FALSE(c.get(k(62)));
  CHECK(c.get(k(61)));
  CHECK(c.stats().hits == 64);
}

TEST_CASE(
    "cache: reads handed to the shard's owner are all replayed, in each thread's order, before an eviction") {
  // Two live threads read one shard; one of them owns it, and the other's full buffers are copied to
  // the owner's pending buffer instead of being relinked by it. Each reads its keys four times over
  // (80 reads, five full buffers), more than pending holds, so the last buffers take the fallback:
  // the reader replays everything itself. Neither thread's reads may be lost or counted twice.
  frugal::lru_cache<int> c({.max_entries = 64, .shards = 1});
  for (int i = 0; i < 64; ++i) c.put(k(static_cast<std::uint64_t>(i)), i);
  std::atomic<int> turn{0};
  std::atomic<int> misses{0};
  const auto reader = [&](int id) {
    while (turn.load() != id) std::this_thread::yield();
    for (int round = 0; round < 4; ++round)
      for (int i = 20 * id; i < 20 * id + 20; ++i)
        if (!c.get(k(static_cast<std::uint64_t>(i)))) ++misses;
    ++turn;
    while (turn.load() != 3) std::this_thread::yield();  // both stay alive, on slots of their own
  };
  std::thread a(reader, 0);
  std::thread b(reader, 1);
  while (turn.load() != 2) std::this_thread::yield();
  // Keys 40-63 were never read: 24 new keys evict exactly them, and every read key stays.
  for (int i = 0; i < 24; ++i) c.put(k(static_cast<std::uint64_t>(100 + i)), i);
  turn = 3;
  a.join();
  b.join();
  CHECK(misses == 0);
  const auto st = c.stats();
  CHECK(st.hits == 160);
  CHECK(st.evictions_size == 24);
  for (int i = 0; i < 40; ++i) CHECK(c.get(k(static_cast<std::uint64_t>(i))));
  for (int i = 40; i < 64; ++i) CHECK_FALSE(c.get(k(static_cast<std::uint64_t>(i))));
}

TEST_CASE(
    "cache: lock-free gets racing puts, evictions and expiry return only the value stored under the key") {
  frugal::manual_clock clock;
  frugal::lru_cache<std::vector<int>, frugal::manual_clock> c({.max_entries = 128, .ttl = 50ms, .shards = 2},
                                                              clock);
  frugal::tinylfu_cache<std::vector<int>> t({.max_entries = 128, .shards = 2});
  constexpr int threads = 4;
  constexpr int ops = 20000;
  std::atomic<int> wrong{0};
  std::atomic<std::uint64_t> gets{0};
  std::vector<std::thread> pool;
  for (int id = 0; id < threads; ++id)
    pool.emplace_back([&, id] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(100 + id));
      std::uint64_t mine = 0;
      for (int op = 0; op < ops; ++op) {
        const std::uint64_t key = rng() % 300;
        const auto value = std::vector<int>(1 + key % 8, static_cast<int>(key));
        if (op % 10 == 0) {
          c.put(k(key), value);
          t.put(k(key), value);
          if (id == 0 && op % 100 == 0) clock.advance(1ms);
        } else {
          if (auto v = c.get(k(key)); v && v->front() != static_cast<int>(key)) ++wrong;
          if (auto v = t.get(k(key)); v && v->front() != static_cast<int>(key)) ++wrong;
          // visit reads the vector in place while puts and evictions on other threads wait for it.
          c.visit(k(key), [&](const std::vector<int>& v) {
            if (v.size() != 1 + key % 8 || v.back() != static_cast<int>(key)) ++wrong;
          });
          mine += 2;
        }
      }
      gets += mine;
    });
  for (auto& th : pool) th.join();
  CHECK(wrong == 0);
  const auto st = c.stats();
  CHECK(st.hits + st.misses == gets.load());  // every buffered read was replayed and counted once
  CHECK(st.entries <= 128);
  const auto tt = t.stats();
  CHECK(tt.hits + tt.misses == gets.load() / 2);  // t is read once per round, c twice
  CHECK(tt.entries <= 128);
}

TEST_CASE("cache: threads whose read buffers fill replay them while other threads read and write") {
  // One shard, few writes: each thread's buffer of reads fills long before a put replays it, so most
  // replays are a thread's own, under the writers' lock while the others go on reading.
  frugal::lru_cache<std::vector<int>> c({.max_entries = 64, .shards = 1});
  frugal::tinylfu_cache<std::vector<int>> t({.max_entries = 64, .shards = 1});
  for (std::uint64_t key = 0; key < 64; ++key) {
    c.put(k(key), std::vector<int>(1 + key % 8, static_cast<int>(key)));
    t.put(k(key), std::vector<int>(1 + key % 8, static_cast<int>(key)));
  }
  const auto before_c = c.stats();
  const auto before_t = t.stats();
  constexpr int threads = 4;
  constexpr int ops = 20000;
  std::atomic<int> wrong{0};
  std::atomic<std::uint64_t> reads{0};
  std::vector<std::thread> pool;
  for (int id = 0; id < threads; ++id)
    pool.emplace_back([&, id] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(200 + id));
      std::uint64_t mine = 0;
      for (int op = 0; op < ops; ++op) {
        const std::uint64_t key = rng() % 96;  // a third of the keys miss
        const auto check = [&](const std::vector<int>& v) {
          if (v.size() != 1 + key % 8 || v.back() != static_cast<int>(key)) ++wrong;
        };
        if (op % 200 == 0) {
          c.put(k(key), std::vector<int>(1 + key % 8, static_cast<int>(key)));
          t.put(k(key), std::vector<int>(1 + key % 8, static_cast<int>(key)));
        } else {
          if (auto v = c.get(k(key))) check(*v);
          c.visit(k(key), check);
          t.visit(k(key), check);
          mine += 2;
        }
      }
      reads += mine;
    });
  for (auto& th : pool) th.join();
  CHECK(wrong == 0);
  const auto sc = c.stats();
  const auto st = t.stats();
  // Every read was replayed and counted exactly once, whichever thread replayed it.
  CHECK(sc.hits + sc.misses - before_c.hits - before_c.misses == reads.load());
  CHECK(st.hits + st.misses - before_t.hits - before_t.misses == reads.load() / 2);
  CHECK(sc.hits > sc.misses);
  CHECK(sc.entries <= 64);
  CHECK(st.entries <= 64);
  // The LRU order is still one list over every entry: 64 new keys push each old one out exactly once.
  for (std::uint64_t key = 1000; key < 1064; ++key) c.put(k(key), std::vector<int>(1, 0));
  const auto after = c.stats();
  CHECK(after.entries == 64);
  CHECK(after.evictions_size - sc.evictions_size == sc.entries);
  for (std::uint64_t key = 0; key < 96; ++key) CHECK_FALSE(c.get(k(key)));
}
