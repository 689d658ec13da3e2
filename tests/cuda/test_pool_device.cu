// frugal::model_pool with its budget in device memory: the loader measures what a load really took with
// cudaMemGetInfo, and the test checks that eviction and idle unload give the device memory back. Skipped
// without a device.
#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "frugal/clock.hpp"
#include "frugal/pool.hpp"
#include "gpu_test.hpp"

using namespace std::chrono_literals;

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

std::size_t device_free() {
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

// A "model": device memory, written once so that it is really committed.
struct device_blob {
  explicit device_blob(std::size_t bytes) {
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    check(cudaMemset(p, 1, bytes), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  device_blob(const device_blob&) = delete;
  device_blob& operator=(const device_blob&) = delete;
  ~device_blob() { (void)cudaFree(p); }
  void* p = nullptr;
};

using pool_t = frugal::model_pool<device_blob, frugal::model_args, frugal::manual_clock>;

// The bytes a load takes on the device, as cudaMemGetInfo sees them (allocation granularity included).
frugal::loaded_model<device_blob> load_on_device(std::size_t bytes) {
  const std::size_t before = device_free();
  auto m = std::make_unique<device_blob>(bytes);
  const std::size_t after = device_free();
  return {std::move(m), before > after ? before - after : bytes};
}

std::size_t distance(std::size_t a, std::size_t b) { return a > b ? a - b : b - a; }

}  // namespace

TEST_CASE(
    "pool on a GPU: the budget is device memory measured at load; eviction and idle unload give it back" *
    FRUGAL_NEEDS_GPU) {
  constexpr std::size_t each = 256 * mib, slack = 64 * mib;
  frugal::manual_clock clock;
  auto spec = [&](const char* name) {
    return frugal::model_spec<>{.name = name, .estimated_bytes = each, .idle_unload_after = 1min};
  };
  pool_t pool({.budget_bytes = 3 * (each + slack),
               .models = {spec("a"), spec("b"), spec("c"), spec("d")},
               .load = [&](const frugal::model_spec<>&) { return load_on_device(each); }},
              clock);
  const std::size_t base = device_free();
  for (const char* name : {"a", "b", "c"}) {
    pool.preload(name);
    clock.advance(1s);
  }
  const auto loaded = pool.stats();
  CHECK(loaded.used_bytes >= 3 * each);  // measured on the device, not the estimate
  CHECK(distance(base - device_free(), loaded.used_bytes) <= slack);
  MESSAGE("three models: " << loaded.used_bytes / mib << " MiB charged, " << (base - device_free()) / mib
                           << " MiB taken on the device");

  pool.preload("d");  // does not fit: a, the least recently used, goes
  CHECK(pool.state("a") == frugal::model_state::unloaded);
  CHECK(pool.stats().evictions == 1);
  CHECK(distance(base - device_free(), 3 * each) <= 3 * slack);

  clock.advance(2min);
  CHECK(pool.collect_idle() == 3);
  CHECK(pool.stats().used_bytes == 0);
  CHECK(distance(device_free(), base) <= slack);  // the device memory came back
  MESSAGE("after idle unload: " << distance(device_free(), base) / mib << " MiB from where it started");
}
