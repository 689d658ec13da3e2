// frugal::model_pool's hot path: acquire() of a model that is already loaded and the lease's release,
// against the cheapest way to share a loaded model, a std::shared_ptr<Model> copied and dropped, in one
// binary, at 1 and 2 threads (both threads on the same model and the same shared_ptr, so that they contend).
// The pool is timed by name (a hash lookup first) and by handle (model_pool::find, done once). A ready
// model is leased without a lock: a compare-and-swap on its gate, another at release, and a coarse clock
// read when the last lease ends. References: a std::mutex locked and unlocked twice and steady_clock::now()
// twice (what the locked path used to cost), and the pool on a manual clock. After the runs, the ratio
// acquire/shared_ptr of the medians over repetitions is printed for each thread count; the goal is
// under 2x.
//
//   bench_pool [--benchmark_repetitions=3] [other Google Benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "frugal/clock.hpp"
#include "frugal/pool.hpp"

namespace {

struct model {
  std::vector<float> weights = std::vector<float>(1024, 1.0f);
};

using pool_t = frugal::model_pool<model>;

// Built once, before any timed loop (a function-local static is initialised by the first thread to get
// here; the others wait), and loaded up front so that every timed acquire finds the model ready.
pool_t& shared_pool() {
  static pool_t pool({.budget_bytes = 1 << 20,
                      .models = {{.name = "m", .estimated_bytes = 4096}},
                      .load = [](const frugal::model_spec<>&) {
                        return frugal::loaded_model<model>{std::make_unique<model>()};
                      }});
  static const bool loaded = (pool.preload("m"), true);
  (void)loaded;
  return pool;
}

// The same pool on a manual clock: the release stamp becomes an atomic load instead of the coarse clock.
using manual_pool_t = frugal::model_pool<model, frugal::model_args, frugal::manual_clock>;
manual_pool_t& shared_manual_pool() {
  static manual_pool_t pool({.budget_bytes = 1 << 20,
                             .models = {{.name = "m", .estimated_bytes = 4096}},
                             .load = [](const frugal::model_spec<>&) {
                               return frugal::loaded_model<model>{std::make_unique<model>()};
                             }});
  static const bool loaded = (pool.preload("m"), true);
  (void)loaded;
  return pool;
}

const std::shared_ptr<model>& shared_model() {
  static const auto m = std::make_shared<model>();
  return m;
}

std::mutex& shared_mutex() {
  static std::mutex m;
  return m;
}

// acquire + release of the loaded model "m" of the pool that get() returns (steady or manual clock).
template <auto& get>
void BM_acquire_release(benchmark::State& state) {
  auto& pool = get();
  for (auto _ : state) {
    auto lease = pool.acquire("m");
    benchmark::DoNotOptimize(lease.get());
  }
  state.SetItemsProcessed(state.iterations());
}

// The same through a handle found once, as a server's worker or a cascade holds it.
void BM_acquire_release_handle(benchmark::State& state) {
  auto& pool = shared_pool();
  const auto m = pool.find("m");
  for (auto _ : state) {
    auto lease = pool.acquire(m);
    benchmark::DoNotOptimize(lease.get());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_shared_ptr_copy_drop(benchmark::State& state) {
  const std::shared_ptr<model>& m = shared_model();
  for (auto _ : state) {
    std::shared_ptr<model> copy = m;
    benchmark::DoNotOptimize(copy.get());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_mutex_lock_unlock_x2(benchmark::State& state) {
  std::mutex& m = shared_mutex();
  for (auto _ : state) {
    m.lock();
    m.unlock();
    m.lock();
    m.unlock();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_steady_clock_now_x2(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
    benchmark::DoNotOptimize(std::chrono::steady_clock::now());
  }
  state.SetItemsProcessed(state.iterations());
}

// Real time at 2 threads is the wall time over both threads' iterations (Google Benchmark divides it by the
// thread count), i.e. the inverse of the combined throughput; the ratio compares like with like.
BENCHMARK(BM_acquire_release<shared_pool>)
    ->Name("pool_acquire_release")
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_acquire_release_handle)
    ->Name("pool_acquire_release_handle")
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_shared_ptr_copy_drop)->Name("shared_ptr_copy_drop")->UseRealTime()->Threads(1)->Threads(2);
BENCHMARK(BM_acquire_release<shared_manual_pool>)
    ->Name("reference/pool_acquire_release_manual_clock")
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_mutex_lock_unlock_x2)
    ->Name("reference/mutex_lock_unlock_x2")
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);
BENCHMARK(BM_steady_clock_now_x2)
    ->Name("reference/steady_clock_now_x2")
    ->UseRealTime()
    ->Threads(1)
    ->Threads(2);

// The console reporter, keeping every repetition's real time per benchmark and thread count for the ratio.
class ratio_reporter : public benchmark::ConsoleReporter {
 public:
  ratio_reporter() : benchmark::ConsoleReporter(OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs)
      if (r.run_type == Run::RT_Iteration && !r.error_occurred)
        times_[{r.run_name.function_name, r.threads}].push_back(r.GetAdjustedRealTime());
  }

  void print_ratios() const {
    std::printf("\nratio acquire/shared_ptr (median real time over repetitions; goal: under 2x)\n");
    for (const std::int64_t threads : {1, 2}) {
      const double pool = median("pool_acquire_release", threads);
      const double handle = median("pool_acquire_release_handle", threads);
      const double ptr = median("shared_ptr_copy_drop", threads);
      if (pool <= 0 || ptr <= 0) continue;
      std::printf(
          "  threads %lld: pool by name %.1f ns, by handle %.1f ns, shared_ptr %.1f ns, ratio %.2fx by name, "
          "%.2fx by handle (pool on a manual clock %.1f ns, mutex x2 %.1f ns, now() x2 %.1f ns)\n",
          static_cast<long long>(threads), pool, handle, ptr, pool / ptr, handle / ptr,
          median("reference/pool_acquire_release_manual_clock", threads),
          median("reference/mutex_lock_unlock_x2", threads),
          median("reference/steady_clock_now_x2", threads));
    }
  }

 private:
  double median(const std::string& name, std::int64_t threads) const {
    const auto it = times_.find({name, threads});
    if (it == times_.end() || it->second.empty()) return 0;
    std::vector<double> v = it->second;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }

  std::map<std::pair<std::string, std::int64_t>, std::vector<double>> times_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ratio_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
