// The result cache against a locked unordered_map + list LRU and oneTBB's concurrent_lru_cache, in
// one binary: hits, misses with insert, a 90/10 read/write Zipf(0.99) mix (over 1M keys, and over
// 1024 keys that are all cached) and the same reads without the writes at 1 and 2 threads, metadata
// bytes per entry, and hash_key against raw XXH3-128.

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "frugal/cache.hpp"
#include "reference_lru.hpp"
#include "traces.hpp"
#ifdef FRUGAL_BENCH_HAVE_TBB
#  include "tbb_adapter.hpp"
#endif

namespace {

using value = std::uint64_t;
using frugal_lru = frugal::lru_cache<value>;
using frugal_tinylfu = frugal::tinylfu_cache<value>;
using reference = cache_bench::reference_lru<value>;

template <class C>
std::unique_ptr<C> make_cache(std::size_t capacity) {
  if constexpr (std::is_same_v<C, frugal_lru> || std::is_same_v<C, frugal_tinylfu>) {
    return std::make_unique<C>(typename C::options_type{.max_entries = capacity});
  } else {
    return std::make_unique<C>(capacity);
  }
}

const std::vector<frugal::key128>& keys(std::size_t n) {
  static std::vector<frugal::key128> k;
  while (k.size() < n) k.push_back(frugal::hash_key(static_cast<std::uint64_t>(k.size())));
  return k;
}

// Lookups in random order, drawn before timing so that the loop measures the cache alone.
std::vector<std::uint32_t> uniform_order(std::size_t n, std::size_t count) {
  std::mt19937_64 rng(11);
  std::vector<std::uint32_t> order(count);
  for (auto& i : order) i = static_cast<std::uint32_t>(rng() % n);
  return order;
}

// One warm cache per type, rebuilt only when the size changes; built by thread 0 before the timed
// loop, whose start is a barrier for all threads.
template <class C>
struct warm {
  static inline std::unique_ptr<C> cache;
  static inline std::size_t size = 0;
  static C& get(std::size_t capacity, std::size_t filled) {
    if (!cache || size != capacity) {
      cache.reset();
      cache = make_cache<C>(capacity);
      size = capacity;
      const auto& k = keys(filled);
      for (std::size_t i = 0; i < filled; ++i) cache->put(k[i], i);
    }
    return *cache;
  }
};

// Reads with get (a shared_ptr copy: two atomic updates on the value's count) or with visit (the
// value read in place under the reader's flag, no count touched).
enum class read_with { get, visit };

template <class C, read_with R = read_with::get>
void BM_hit(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  C& c = warm<C>::get(n, n);
  const auto& k = keys(n);
  const auto order = uniform_order(n, std::size_t{1} << 20);
  std::size_t i = 0;
  for (auto _ : state) {
    const auto& key = k[order[i++ & (order.size() - 1)]];
    if constexpr (R == read_with::visit) {
      c.visit(key, [](const value& v) { benchmark::DoNotOptimize(v); });
    } else {
      auto v = c.get(key);
      benchmark::DoNotOptimize(v);
    }
  }
  state.SetItemsProcessed(state.iterations());
}

template <class C>
void BM_miss_insert(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto c = make_cache<C>(n);
  const std::size_t stream = 4 * n;  // never in the cache when it comes round again
  const auto& k = keys(stream);
  for (std::size_t i = 0; i < n; ++i) c->put(k[i], i);
  std::size_t i = n;
  for (auto _ : state) {
    const auto& key = k[i++ % stream];
    if (!c->get(key)) c->put(key, i);
  }
  state.SetItemsProcessed(state.iterations());
}

constexpr std::size_t mix_keys = 1 << 20;
constexpr std::size_t mix_capacity = 100'000;

template <std::size_t key_space = mix_keys>
const std::vector<std::uint32_t>& zipf_order() {
  static const std::vector<std::uint32_t> order = [] {
    const auto t = cache_traces::zipf(key_space, std::size_t{1} << 21, 0.99, 5);
    return std::vector<std::uint32_t>(t.begin(), t.end());
  }();
  return order;
}

// The timed loop of the mix: thread t starts at its own offset in the shared Zipf order over
// key_space keys. One operation in `put_every` is a put (0: none, reads only).
template <read_with R, class C, unsigned put_every = 10, std::size_t key_space = mix_keys>
void run_mix(benchmark::State& state, C& c) {
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 977'123;
  std::uint64_t writes = 0;
  const auto& order = zipf_order<key_space>();
  for (auto _ : state) {
    const auto& key = keys(0)[order[i & (order.size() - 1)]];
    const bool put = put_every != 0 && i % put_every == put_every - 1;
    ++i;
    if (put) {
      c.put(key, ++writes);
    } else if constexpr (R == read_with::visit) {
      c.visit(key, [](const value& v) { benchmark::DoNotOptimize(v); });
    } else {
      auto v = c.get(key);
      benchmark::DoNotOptimize(v);
    }
  }
  state.SetItemsProcessed(state.iterations());
}

// The shared cache of the mix, warmed by mix_setup, which Google Benchmark runs once before the
// threads of each run start, so that no thread can read it half built.
template <class C>
C* mix_cache = nullptr;

template <class C>
void mix_setup(const benchmark::State&) {
  mix_cache<C> = &warm<C>::get(mix_capacity, mix_capacity);
  zipf_order();
  keys(mix_keys);
}

template <class C, read_with R = read_with::get, unsigned put_every = 10>
void BM_mix(benchmark::State& state) {
  run_mix<R, C, put_every>(state, *mix_cache<C>);
}

// The mix in the manner of Caffeine's benchmark: Zipf(0.99) over 1024 keys that are all cached, so
// every read hits and every put replaces a hot value. Two threads then meet on the same few entries
// all the time: the worst case for a shared exact LRU.
constexpr std::size_t hot_keys = 1024;

template <class C>
std::unique_ptr<C> hot_cache;

template <class C>
void hot_setup(const benchmark::State&) {
  if (!hot_cache<C>) {
    hot_cache<C> = make_cache<C>(4 * hot_keys);
    const auto& k = keys(mix_keys);
    for (std::size_t j = 0; j < hot_keys; ++j) hot_cache<C>->put(k[j], j);
  }
  zipf_order<hot_keys>();
}

template <class C, read_with R = read_with::get>
void BM_mix_hot(benchmark::State& state) {
  run_mix<R, C, 10, hot_keys>(state, *hot_cache<C>);
}

// The same mix with one private cache per thread: nothing is shared, so its 2-thread/1-thread ratio
// is what this machine allows for this work (memory bandwidth, core frequency, the hypervisor), the
// ceiling against which the shared caches' scaling is read.
template <class C, read_with R = read_with::get>
void BM_mix_private(benchmark::State& state) {
  static std::vector<std::unique_ptr<C>> caches(8);
  static const bool ready = (keys(mix_keys), zipf_order(), true);  // thread-safe static init
  benchmark::DoNotOptimize(ready);
  const auto t = static_cast<std::size_t>(state.thread_index());
  if (!caches[t]) {
    caches[t] = make_cache<C>(mix_capacity);
    const auto& k = keys(0);
    for (std::size_t j = 0; j < mix_capacity; ++j) caches[t]->put(k[j], j);
  }
  run_mix<R>(state, *caches[t]);
}

// Heap bytes per entry beyond the value itself, from malloc's own count: a full cache of a million
// 8-byte values. For frugal the cache's own structures (slots, index) are reported apart from the
// shared_ptr control block and malloc's header, which live in each value's allocation.
template <class C>
void BM_metadata(benchmark::State& state) {
  constexpr std::size_t n = 1'000'000;
  const auto& k = keys(n);
  for (auto _ : state) {
    const std::size_t before = mallinfo2().uordblks;
    auto c = make_cache<C>(n);
    for (std::size_t i = 0; i < n; ++i) c->put(k[i], i);
    const std::size_t after = mallinfo2().uordblks;
    state.counters["heap_B_per_entry"] = static_cast<double>(after - before - n * sizeof(value)) / n;
    if constexpr (requires { c->stats(); }) {
      const auto st = c->stats();
      state.counters["cache_struct_B_per_entry"] = static_cast<double>(st.metadata_bytes) / st.entries;
    }
  }
}

std::string payload(std::size_t n) {
  std::string s(n, '\0');
  std::mt19937_64 rng(1);
  for (auto& ch : s) ch = static_cast<char>(rng());
  return s;
}

void BM_hash_key(benchmark::State& state) {
  const std::string s = payload(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(frugal::hash_key(std::string_view(s)));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_hash_key_model_and_input(benchmark::State& state) {
  const std::string s = payload(static_cast<std::size_t>(state.range(0)));
  const std::string model = "llama-3-8b-instruct@2024-06";
  for (auto _ : state) benchmark::DoNotOptimize(frugal::hash_key(model, std::string_view(s)));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void BM_xxh3_128_raw(benchmark::State& state) {
  const std::string s = payload(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(XXH3_128bits(s.data(), s.size()));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

}  // namespace

// The concurrent benchmarks run at 1 and 2 threads, timed by the wall clock.
static void one_and_two_threads(benchmark::internal::Benchmark* b) {
  b->Threads(1)->Threads(2)->UseRealTime();
}

BENCHMARK(BM_hit<frugal_lru>)->Name("hit/frugal_lru")->Arg(10'000)->Arg(1'000'000);
BENCHMARK(BM_hit<frugal_lru, read_with::visit>)->Name("hit/frugal_lru_visit")->Arg(10'000)->Arg(1'000'000);
BENCHMARK(BM_hit<frugal_tinylfu>)->Name("hit/frugal_tinylfu")->Arg(10'000)->Arg(1'000'000);
BENCHMARK(BM_hit<reference>)->Name("hit/reference_map_list_mutex")->Arg(10'000)->Arg(1'000'000);
BENCHMARK(BM_miss_insert<frugal_lru>)->Name("miss_insert/frugal_lru")->Arg(10'000);
BENCHMARK(BM_miss_insert<frugal_tinylfu>)->Name("miss_insert/frugal_tinylfu")->Arg(10'000);
BENCHMARK(BM_miss_insert<reference>)->Name("miss_insert/reference_map_list_mutex")->Arg(10'000);
BENCHMARK(BM_mix<frugal_lru>)
    ->Name("mix90_10_zipf0.99/frugal_lru")
    ->Setup(mix_setup<frugal_lru>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix<frugal_lru, read_with::visit>)
    ->Name("mix90_10_zipf0.99/frugal_lru_visit")
    ->Setup(mix_setup<frugal_lru>)
    ->Apply(one_and_two_threads);
// The same Zipf(0.99) reads with no puts: how the read path alone scales.
BENCHMARK(BM_mix<frugal_lru, read_with::get, 0>)
    ->Name("reads_zipf0.99/frugal_lru")
    ->Setup(mix_setup<frugal_lru>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix<frugal_lru, read_with::visit, 0>)
    ->Name("reads_zipf0.99/frugal_lru_visit")
    ->Setup(mix_setup<frugal_lru>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix<reference, read_with::get, 0>)
    ->Name("reads_zipf0.99/reference_map_list_mutex")
    ->Setup(mix_setup<reference>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix_hot<frugal_lru>)
    ->Name("mix90_10_zipf0.99_1k_keys/frugal_lru")
    ->Setup(hot_setup<frugal_lru>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix_hot<frugal_lru, read_with::visit>)
    ->Name("mix90_10_zipf0.99_1k_keys/frugal_lru_visit")
    ->Setup(hot_setup<frugal_lru>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix_hot<reference>)
    ->Name("mix90_10_zipf0.99_1k_keys/reference_map_list_mutex")
    ->Setup(hot_setup<reference>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix_private<frugal_lru>)
    ->Name("mix90_10_zipf0.99/frugal_lru_private_per_thread")
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix_private<frugal_lru, read_with::visit>)
    ->Name("mix90_10_zipf0.99/frugal_lru_visit_private_per_thread")
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix_private<reference>)
    ->Name("mix90_10_zipf0.99/reference_private_per_thread")
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix<frugal_tinylfu>)
    ->Name("mix90_10_zipf0.99/frugal_tinylfu")
    ->Setup(mix_setup<frugal_tinylfu>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_mix<reference>)
    ->Name("mix90_10_zipf0.99/reference_map_list_mutex")
    ->Setup(mix_setup<reference>)
    ->Apply(one_and_two_threads);
#ifdef FRUGAL_BENCH_HAVE_TBB
using tbb_cache = cache_bench::tbb_lru<value>;
BENCHMARK(BM_hit<tbb_cache>)->Name("hit/tbb_concurrent_lru_cache")->Arg(10'000)->Arg(1'000'000);
BENCHMARK(BM_miss_insert<tbb_cache>)->Name("miss_insert/tbb_concurrent_lru_cache")->Arg(10'000);
BENCHMARK(BM_mix<tbb_cache>)
    ->Name("mix90_10_zipf0.99/tbb_concurrent_lru_cache")
    ->Setup(mix_setup<tbb_cache>)
    ->Apply(one_and_two_threads);
BENCHMARK(BM_metadata<tbb_cache>)->Name("metadata/tbb_concurrent_lru_cache")->Iterations(1);
#endif
BENCHMARK(BM_metadata<frugal_lru>)->Name("metadata/frugal_lru")->Iterations(1);
BENCHMARK(BM_metadata<frugal_tinylfu>)->Name("metadata/frugal_tinylfu")->Iterations(1);
BENCHMARK(BM_metadata<reference>)->Name("metadata/reference_map_list_mutex")->Iterations(1);
BENCHMARK(BM_hash_key)->Name("hash/hash_key")->Arg(16)->Arg(256)->Arg(4096)->Arg(1 << 20);
BENCHMARK(BM_hash_key_model_and_input)
    ->Name("hash/hash_key_model_and_input")
    ->Arg(16)
    ->Arg(256)
    ->Arg(4096)
    ->Arg(1 << 20);
BENCHMARK(BM_xxh3_128_raw)->Name("hash/xxh3_128_raw")->Arg(16)->Arg(256)->Arg(4096)->Arg(1 << 20);

BENCHMARK_MAIN();
