// Overhead and throughput of frugal::batcher against a naive queue and a batch-by-count queue, in one
// binary. Producers submit int requests; one worker runs an identity model. Time runs from the start of
// submission until every result is in the producers' hands. Args: {producers, max_batch}.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <thread>
#include <vector>

#include "batcher/baselines.hpp"
#include "frugal/batcher.hpp"

namespace {

using namespace std::chrono_literals;
constexpr int requests_total = 200'000;

struct alignas(64) counter {
  std::atomic<std::int64_t> value{0};
};

template <class Run>
void timed(benchmark::State& state, Run run) {
  const int producers = static_cast<int>(state.range(0));
  const int per_producer = requests_total / producers;
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    run(producers, per_producer);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds += s;
    state.SetIterationTime(s);
  }
  const double n = static_cast<double>(state.iterations()) * producers * per_producer;
  state.SetItemsProcessed(static_cast<std::int64_t>(n));
  // Wall time per request: the inverse of throughput, i.e. the batcher's cost per request on this machine.
  state.counters["ns_per_req"] = 1e9 * seconds / n;
}

void frugal_worker(frugal::batcher<int, int>& b) {
  while (auto batch = b.next_batch()) {
    auto r = batch->requests();
    batch->fulfill(std::vector<int>(r.begin(), r.end()));
  }
}

frugal::batcher_options bench_options(benchmark::State& state) {
  return {.window = 100us, .max_batch = static_cast<std::size_t>(state.range(1))};
}

void BM_frugal_callback(benchmark::State& state) {
  std::int64_t checksum = 0;
  double fill = 0;
  timed(state, [&](int producers, int per_producer) {
    frugal::batcher<int, int> b{bench_options(state)};
    std::thread worker(frugal_worker, std::ref(b));
    std::vector<counter> sums(static_cast<std::size_t>(producers));
    std::vector<std::thread> ps;
    for (int p = 0; p < producers; ++p) {
      ps.emplace_back([&, p] {
        auto& sum = sums[static_cast<std::size_t>(p)].value;
        for (int i = 0; i < per_producer; ++i)
          b.submit(i, [&sum](frugal::result<int> o) { sum.fetch_add(*o, std::memory_order_relaxed); });
      });
    }
    for (auto& t : ps) t.join();
    b.close();
    worker.join();
    for (auto& s : sums) checksum += s.value.load();
    fill = b.stats().mean_fill_ratio;
  });
  benchmark::DoNotOptimize(checksum);
  state.counters["fill"] = fill;
}

// The futures of batcher::submit (light_future, its default) or, converted, std::future.
template <class Future>
void frugal_futures(benchmark::State& state) {
  std::int64_t checksum = 0;
  double fill = 0;
  timed(state, [&](int producers, int per_producer) {
    frugal::batcher<int, int> b{bench_options(state)};
    std::thread worker(frugal_worker, std::ref(b));
    std::vector<counter> sums(static_cast<std::size_t>(producers));
    std::vector<std::thread> ps;
    for (int p = 0; p < producers; ++p) {
      ps.emplace_back([&, p] {
        std::vector<Future> fs;
        fs.reserve(static_cast<std::size_t>(per_producer));
        for (int i = 0; i < per_producer; ++i) fs.push_back(b.submit(i));
        std::int64_t s = 0;
        for (auto& f : fs) s += f.get();
        sums[static_cast<std::size_t>(p)].value = s;
      });
    }
    for (auto& t : ps) t.join();
    b.close();
    worker.join();
    for (auto& s : sums) checksum += s.value.load();
    fill = b.stats().mean_fill_ratio;
  });
  benchmark::DoNotOptimize(checksum);
  state.counters["fill"] = fill;
}

void BM_frugal_future(benchmark::State& state) { frugal_futures<frugal::light_future<int>>(state); }
void BM_frugal_std_future(benchmark::State& state) { frugal_futures<std::future<int>>(state); }

template <class Queue, class Worker>
void baseline_run(Queue& q, Worker work, int producers, int per_producer, std::int64_t& checksum) {
  std::thread worker(work);
  std::vector<counter> sums(static_cast<std::size_t>(producers));
  std::vector<std::thread> ps;
  for (int p = 0; p < producers; ++p) {
    ps.emplace_back([&, p] {
      std::vector<std::future<int>> fs;
      fs.reserve(static_cast<std::size_t>(per_producer));
      for (int i = 0; i < per_producer; ++i) fs.push_back(q.submit(i));
      std::int64_t s = 0;
      for (auto& f : fs) s += f.get();
      sums[static_cast<std::size_t>(p)].value = s;
    });
  }
  for (auto& t : ps) t.join();
  q.close();
  worker.join();
  for (auto& s : sums) checksum += s.value.load();
}

void BM_naive_queue(benchmark::State& state) {
  std::int64_t checksum = 0;
  timed(state, [&](int producers, int per_producer) {
    baseline::naive_queue<int, int> q;
    auto work = [&q] {
      while (auto item = q.pop()) item->second.set_value(item->first);
    };
    baseline_run(q, work, producers, per_producer, checksum);
  });
  benchmark::DoNotOptimize(checksum);
}

void BM_count_batcher(benchmark::State& state) {
  std::int64_t checksum = 0;
  timed(state, [&](int producers, int per_producer) {
    baseline::count_batcher<int, int> q(static_cast<std::size_t>(state.range(1)));
    auto work = [&q] {
      std::vector<int> requests;
      std::vector<std::promise<int>> promises;
      while (q.pop(requests, promises)) {
        std::vector<int> out(requests.begin(), requests.end());
        for (std::size_t i = 0; i < out.size(); ++i) promises[i].set_value(out[i]);
      }
    };
    baseline_run(q, work, producers, per_producer, checksum);
  });
  benchmark::DoNotOptimize(checksum);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int producers : {1, 2, 4})
    for (int batch : {1, 8, 32}) b->Args({producers, batch});
  b->ArgNames({"producers", "batch"})->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_frugal_callback)->Apply(shapes);
BENCHMARK(BM_frugal_future)->Apply(shapes);
BENCHMARK(BM_frugal_std_future)->Apply(shapes);
BENCHMARK(BM_count_batcher)->Apply(shapes);
BENCHMARK(BM_naive_queue)
    ->ArgNames({"producers", "batch"})
    ->Args({1, 1})
    ->Args({2, 1})
    ->Args({4, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
