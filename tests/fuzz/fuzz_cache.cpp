// A random sequence of cache operations on one shard (one exact LRU order) and a manual clock, run
// against a plain list model: LRU order, entry and byte limits, TTLs, eviction causes and counters.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/cache.hpp"
#include "frugal/clock.hpp"

using namespace std::chrono_literals;

namespace {

const bool tracing = std::getenv("FUZZ_TRACE") != nullptr;
#define TRACE(...) (tracing ? (void)std::fprintf(stderr, __VA_ARGS__) : (void)0)

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_cache: %s (%lld vs %lld)\n", what, a, b);
  std::abort();
}

using cache_t = frugal::lru_cache64<std::string, frugal::manual_clock>;

struct entry {
  std::uint64_t key;
  std::string value;
  std::int64_t expiry;  // ns on the manual clock; 0 for never
};

struct evicted {
  std::uint64_t key;
  std::string value;
  frugal::eviction_cause cause;
};

struct model {
  std::size_t max_entries, max_bytes;
  std::chrono::nanoseconds ttl;
  std::list<entry> lru;  // front is the most recently used
  std::vector<evicted> expected;
  frugal::cache_stats st{};

  std::size_t bytes() const {
    std::size_t b = 0;
    for (const auto& e : lru) b += e.value.size();
    return b;
  }
  std::list<entry>::iterator find(std::uint64_t k) {
    for (auto it = lru.begin(); it != lru.end(); ++it)
      if (it->key == k) return it;
    return lru.end();
  }
  void remove(std::list<entry>::iterator it, frugal::eviction_cause c) {
    expected.push_back({it->key, it->value, c});
    lru.erase(it);
  }
  std::int64_t expiry(std::int64_t now, std::chrono::nanoseconds t) const {
    const auto eff = t == 0ns ? ttl : t;
    if (eff <= 0ns || eff == std::chrono::nanoseconds::max()) return 0;
    return now + eff.count();
  }
  bool live(const entry& e, std::int64_t now) const { return e.expiry == 0 || now < e.expiry; }

  std::optional<std::string> get(std::uint64_t k, std::int64_t now) {
    auto it = find(k);
    if (it == lru.end()) {
      ++st.misses;
      return std::nullopt;
    }
    if (!live(*it, now)) {
      remove(it, frugal::eviction_cause::expired);
      ++st.evictions_expired;
      ++st.misses;
      return std::nullopt;
    }
    lru.splice(lru.begin(), lru, it);
    ++st.hits;
    return lru.front().value;
  }
  bool put(std::uint64_t k, std::string v, std::int64_t exp) {
    auto it = find(k);
    if (max_bytes != 0 && v.size() > max_bytes) {
      if (it != lru.end()) {
        remove(it, frugal::eviction_cause::replaced);
        ++st.replacements;
      }
      ++st.rejected_oversize;
      return false;
    }
    ++st.puts;
    if (it != lru.end()) {
      remove(it, frugal::eviction_cause::replaced);
      ++st.replacements;
    }
    lru.push_front({k, std::move(v), exp});
    while (lru.size() > 1 &&
           ((max_entries != 0 && lru.size() > max_entries) || (max_bytes != 0 && bytes() > max_bytes))) {
      remove(std::prev(lru.end()), frugal::eviction_cause::size);
      ++st.evictions_size;
    }
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider fdp(bytes, size);
  const std::size_t max_entries = fdp.ConsumeIntegralInRange<std::size_t>(0, 8);
  std::size_t max_bytes = fdp.ConsumeIntegralInRange<std::size_t>(0, 40);
  if (max_entries == 0 && max_bytes == 0) max_bytes = 1;
  const auto ttl = std::chrono::nanoseconds(
      fdp.ConsumeIntegralInRange<int>(0, 3) == 0 ? 0 : fdp.ConsumeIntegralInRange<int>(1, 100));

  frugal::manual_clock clock;
  std::vector<evicted> seen;
  cache_t::options_type o{.max_entries = max_entries, .max_bytes = max_bytes, .ttl = ttl, .shards = 1};
  o.weigher = [](const std::string& s) { return s.size(); };
  o.on_evict = [&seen](const frugal::key64& k, const std::shared_ptr<const std::string>& v,
                       frugal::eviction_cause c) {
    seen.push_back({k.value, v ? *v : std::string("<null>"), c});
  };
  cache_t cache(o, clock);
  TRACE("max_entries %zu max_bytes %zu ttl %lld\n", max_entries, max_bytes,
        static_cast<long long>(ttl.count()));
  model m{max_entries, max_bytes, ttl, {}, {}, {}};

  auto now = [&] { return clock.now().time_since_epoch().count(); };
  auto value_of = [&](std::size_t len) {
    return std::string(len, static_cast<char>('a' + fdp.ConsumeIntegralInRange<int>(0, 25)));
  };
  auto take_ttl = [&]() -> std::chrono::nanoseconds {
    switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
        return 0ns;
      case 1:
        return std::chrono::nanoseconds::max();
      default:
        return std::chrono::nanoseconds(fdp.ConsumeIntegralInRange<int>(1, 100));
    }
  };

  while (fdp.remaining_bytes() > 0) {
    const std::uint64_t key = fdp.ConsumeIntegralInRange<std::uint64_t>(0, 11);
    const frugal::key64 k{key};
    const int op = fdp.ConsumeIntegralInRange<int>(0, 8);
    TRACE("t=%lld op %d key %llu\n", static_cast<long long>(now()), op, static_cast<unsigned long long>(key));
    switch (op) {
      case 0:
      case 1: {
        const auto got = cache.get(k);
        const auto want = m.get(key, now());
        if (bool(got) != bool(want)) fail("get: hit or miss", bool(got), bool(want));
        if (got && *got != *want) fail("get: wrong value");
        break;
      }
      case 2:
      case 3: {
        std::string v =
            value_of(fdp.ConsumeIntegralInRange<std::size_t>(0, max_bytes == 0 ? 20 : max_bytes + 2));
        const auto t = take_ttl();
        TRACE("  put len %zu ttl %lld\n", v.size(), static_cast<long long>(t.count()));
        const bool want = m.put(key, v, m.expiry(now(), t));
        const bool got = cache.put(k, std::move(v), t);
        if (got != want) fail("put: stored", got, want);
        break;
      }
      case 4: {
        const auto it = m.find(key);
        const bool want = it != m.lru.end();
        if (want) {
          m.remove(it, frugal::eviction_cause::erased);
          ++m.st.evictions_explicit;
        }
        if (cache.erase(k) != want) fail("erase");
        break;
      }
      case 5:
        clock.advance(std::chrono::nanoseconds(fdp.ConsumeIntegralInRange<int>(1, 60)));
        break;
      case 6: {
        std::size_t want = 0;
        for (auto it = m.lru.begin(); it != m.lru.end();) {
          auto next = std::next(it);
          if (!m.live(*it, now())) {
            m.remove(it, frugal::eviction_cause::expired);
            ++m.st.evictions_expired;
            ++want;
          }
          it = next;
        }
        if (cache.purge_expired() != want) fail("purge_expired count");
        break;
      }
      case 7: {
        const bool odd = fdp.ConsumeBool();
        std::size_t want = 0;
        for (auto it = m.lru.begin(); it != m.lru.end();) {
          auto next = std::next(it);
          if ((it->key % 2 == 1) == odd) {
            m.remove(it, frugal::eviction_cause::erased);
            ++m.st.evictions_explicit;
            ++want;
          }
          it = next;
        }
        if (cache.erase_if([odd](const frugal::key64& kk, const std::string&) {
              return (kk.value % 2 == 1) == odd;
            }) != want)
          fail("erase_if count");
        break;
      }
      case 8: {
        // get_or_compute: a hit, or a compute that may throw and is then not cached.
        const bool throws = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
        std::string v =
            value_of(fdp.ConsumeIntegralInRange<std::size_t>(0, max_bytes == 0 ? 20 : max_bytes + 2));
        const auto t = take_ttl();
        const auto hit = m.get(key, now());
        bool ran = false, threw = false;
        std::shared_ptr<const std::string> got;
        try {
          got = cache.get_or_compute(
              k,
              [&]() -> std::string {
                ran = true;
                if (throws) throw std::runtime_error("model down");
                return v;
              },
              t);
        } catch (const std::runtime_error&) {
          threw = true;
        }
        if (hit) {
          if (ran || !got || *got != *hit) fail("get_or_compute: a hit must not compute");
        } else {
          ++m.st.loads;
          if (!ran) fail("get_or_compute: a miss must compute");
          if (throws) {
            if (!threw) fail("get_or_compute: the compute's exception was lost");
            ++m.st.load_failures;
          } else {
            if (!got || *got != v) fail("get_or_compute: wrong result");
            m.put(key, v, m.expiry(now(), t));
          }
        }
        break;
      }
    }
    // Everything the model evicted was reported, in order, with its cause.
    if (op == 6 || op == 7) {
      // These visit slots, not the LRU order: compare what was removed, in key order.
      auto by_key = [](const evicted& a, const evicted& b) { return a.key < b.key; };
      std::sort(seen.begin(), seen.end(), by_key);
      std::sort(m.expected.begin(), m.expected.end(), by_key);
    }
    for (auto& e : seen)
      TRACE("  seen %llu %d\n", static_cast<unsigned long long>(e.key), static_cast<int>(e.cause));
    for (auto& e : m.expected)
      TRACE("  want %llu %d\n", static_cast<unsigned long long>(e.key), static_cast<int>(e.cause));
    if (seen.size() != m.expected.size()) fail("eviction callbacks", seen.size(), m.expected.size());
    for (std::size_t i = 0; i < seen.size(); ++i)
      if (seen[i].key != m.expected[i].key || seen[i].value != m.expected[i].value ||
          seen[i].cause != m.expected[i].cause)
        fail("eviction callback differs", static_cast<long long>(seen[i].key),
             static_cast<long long>(m.expected[i].key));
    seen.clear();
    m.expected.clear();
    const frugal::cache_stats s = cache.stats();
    if (s.entries != m.lru.size()) fail("entries", s.entries, m.lru.size());
    if (s.bytes != m.bytes()) fail("bytes", s.bytes, m.bytes());
    if (s.hits != m.st.hits || s.misses != m.st.misses) fail("hits/misses", s.hits, m.st.hits);
    if (s.puts != m.st.puts) fail("puts", s.puts, m.st.puts);
    if (s.evictions_size != m.st.evictions_size)
      fail("evictions_size", s.evictions_size, m.st.evictions_size);
    if (s.evictions_expired != m.st.evictions_expired)
      fail("evictions_expired", s.evictions_expired, m.st.evictions_expired);
    if (s.evictions_explicit != m.st.evictions_explicit)
      fail("evictions_explicit", s.evictions_explicit, m.st.evictions_explicit);
    if (s.replacements != m.st.replacements) fail("replacements", s.replacements, m.st.replacements);
    if (s.rejected_oversize != m.st.rejected_oversize)
      fail("rejected_oversize", s.rejected_oversize, m.st.rejected_oversize);
    if (s.loads != m.st.loads || s.load_failures != m.st.load_failures) fail("loads", s.loads, m.st.loads);
    if (max_entries != 0 && s.entries > max_entries) fail("over max_entries");
    if (max_bytes != 0 && s.bytes > max_bytes) fail("over max_bytes");
  }
  // Every key the model still holds is a hit, and one the model dropped is a miss.
  std::vector<std::uint64_t> order;
  for (auto it = m.lru.rbegin(); it != m.lru.rend(); ++it) order.push_back(it->key);
  for (std::uint64_t key : order) {
    const auto want = m.get(key, now());
    const auto got = cache.get(frugal::key64{key});
    if (bool(got) != bool(want)) fail("final get", static_cast<long long>(key));
  }
  return 0;
}
