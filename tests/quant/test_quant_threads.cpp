// GEMMs on an executor: every split gives the bits of one thread, on every kernel path; thread_pool runs
// every task once, propagates exceptions and stays usable (run this file under TSan: the tsan build).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../support/cpu_paths.hpp"
#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

// An executor that claims many threads and runs the tasks backwards on the caller: the results may
// depend neither on the number of parts nor on their order.
struct reversed_executor final : q::executor {
  std::size_t parts;
  std::size_t calls = 0, tasks = 0;
  explicit reversed_executor(std::size_t p) : parts(p) {}
  std::size_t concurrency() const noexcept override { return parts; }
  void parallel_for(std::size_t count, const std::function<void(std::size_t)>& task) override {
    ++calls;
    tasks += count;
    for (std::size_t i = count; i-- > 0;) task(i);
  }
};

struct failing_executor final : q::executor {
  std::size_t concurrency() const noexcept override { return 4; }
  void parallel_for(std::size_t, const std::function<void(std::size_t)>&) override {
    throw std::runtime_error("no threads today");
  }
};

std::vector<q::simd_path> supported(std::initializer_list<q::simd_path> all) {
  return frugal_test::cpu_paths(all);
}

struct shape {
  std::size_t m, n, k;
};
// All above the size below which a GEMM stays on one thread; M = 1, 3, 17 and N, K off the vector widths.
constexpr shape shapes[] = {{1, 1100, 256}, {3, 333, 512}, {17, 100, 256}, {64, 33, 256}, {70, 21, 384}};

struct problem {
  q::row_matrix x, w;  // M x K activations, N x K weights
  std::vector<float> bias;
};
// Normal(0, 1) activations, weights and bias of shape s.
problem random_problem(const shape& s, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  problem p{q::row_matrix(static_cast<int>(s.m), static_cast<int>(s.k)),
            q::row_matrix(static_cast<int>(s.n), static_cast<int>(s.k)), std::vector<float>(s.n)};
  for (int i = 0; i < p.x.size(); ++i) p.x.data()[i] = nd(rng);
  for (int i = 0; i < p.w.size(); ++i) p.w.data()[i] = nd(rng);
  for (auto& b : p.bias) b = nd(rng);
  return p;
}

}  // namespace

TEST_CASE("quant threads: W8A8 on 2, 3 and 7 parts gives the bits of one thread on every int8 path") {
  std::mt19937 rng(25);
  q::thread_pool two(2), three(3);
  for (const shape& s : shapes) {
    CAPTURE(s.m);
    CAPTURE(s.n);
    CAPTURE(s.k);
    const auto [x, w, bias] = random_problem(s, rng);
    const auto qw = q::quantize_weights_per_channel(w);
    const auto qa = q::quantize_rows(x, {.symmetric = false});
    for (auto path : supported({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx_vnni,
                                q::simd_path::avx512_vnni, q::simd_path::amx})) {
      CAPTURE(q::to_string(path));
      std::vector<std::int32_t> acc1(s.m * s.n);
      std::vector<float> f1(s.m * s.n);
      std::vector<q::bfloat16> b1(s.m * s.n);
      std::vector<std::int8_t> i1(s.m * s.n);
      q::gemm_w8a8_s32(qa, qw, acc1, path);
      q::gemm_w8a8(qa, qw, f1, {.bias = bias, .activation = q::activation_kind::gelu, .path = path});
      q::gemm_w8a8(qa, qw, b1, {.bias = bias, .path = path});
      q::gemm_w8a8(qa, qw, i1, q::requantize_options{.output_scale = 0.05f, .bias = bias, .path = path});
      reversed_executor seven(7);
      for (q::executor* ex : {static_cast<q::executor*>(&two), static_cast<q::executor*>(&three),
                              static_cast<q::executor*>(&seven)}) {
        std::vector<std::int32_t> acc(s.m * s.n);
        std::vector<float> f(s.m * s.n);
        std::vector<q::bfloat16> b(s.m * s.n);
        std::vector<std::int8_t> i8(s.m * s.n);
        q::gemm_w8a8_s32(qa, qw, acc, path, ex);
        q::gemm_w8a8(qa, qw, f,
                     {.bias = bias, .activation = q::activation_kind::gelu, .path = path, .threads = ex});
        q::gemm_w8a8(qa, qw, b, {.bias = bias, .path = path, .threads = ex});
        q::gemm_w8a8(qa, qw, i8,
                     q::requantize_options{.output_scale = 0.05f, .bias = bias, .path = path, .threads = ex});
        CHECK(acc == acc1);
        CHECK(f == f1);
        CHECK(b == b1);
        CHECK(i8 == i1);
      }
      CHECK(seven.calls == 4);  // the split happened, every time
      CHECK(seven.tasks > 4);
    }
  }
}

TEST_CASE("quant threads: weight-only int8 and int4 on 2, 3 and 7 parts give the bits of one thread") {
  std::mt19937 rng(26);
  q::thread_pool two(2), three(3);
  for (const shape& s : shapes) {
    CAPTURE(s.m);
    CAPTURE(s.n);
    CAPTURE(s.k);
    const auto [x, w, bias] = random_problem(s, rng);
    const std::span<const float> xs(x.data(), static_cast<std::size_t>(x.size()));
    const auto w8 = q::quantize_weights_per_channel(w);
    const auto w4s = q::quantize_int4(w, {.group_size = 128});
    const auto w4a = q::quantize_int4(w, {.group_size = 64, .symmetric = false});
    for (auto path : supported({q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx512})) {
      CAPTURE(q::to_string(path));
      const q::weight_only_options one{.bias = bias, .activation = q::activation_kind::relu, .path = path};
      std::vector<float> r8(s.m * s.n), r4s(s.m * s.n), r4a(s.m * s.n);
      q::gemm_weight_only(xs, s.m, w8, r8, one);
      q::gemm_weight_only(xs, s.m, w4s, r4s, one);
      q::gemm_weight_only(xs, s.m, w4a, r4a, one);
      reversed_executor seven(7);
      for (q::executor* ex : {static_cast<q::executor*>(&two), static_cast<q::executor*>(&three),
                              static_cast<q::executor*>(&seven)}) {
        q::weight_only_options opt = one;
        opt.threads = ex;
        std::vector<float> o8(s.m * s.n), o4s(s.m * s.n), o4a(s.m * s.n);
        q::gemm_weight_only(xs, s.m, w8, o8, opt);
        q::gemm_weight_only(xs, s.m, w4s, o4s, opt);
        q::gemm_weight_only(xs, s.m, w4a, o4a, opt);
        CHECK(o8 == r8);
        CHECK(o4s == r4s);
        CHECK(o4a == r4a);
      }
      CHECK(seven.calls == 3);
    }
  }
}

TEST_CASE("quant threads: a GEMM too small to split never calls the executor") {
  q::thread_pool pool(2);
  reversed_executor ex(8);
  std::vector<float> x(4 * 64, 0.5f), out(4 * 8);
  std::vector<std::int8_t> d(8 * 64, 3);
  const std::vector<float> sc(8, 0.1f);
  const auto w = q::make_quantized_weights(d, 8, 64, sc);
  q::gemm_weight_only(x, 4, w, out, {.threads = &ex});
  CHECK(ex.calls == 0);
  CHECK(out[0] == doctest::Approx(0.5f * 3 * 64 * 0.1f));
}

TEST_CASE("quant threads: the pool runs every task once, on several threads, and inline when nested") {
  q::thread_pool pool(3);
  CHECK(pool.concurrency() == 3);
  for (std::size_t count : {1u, 2u, 3u, 5u, 100u}) {
    std::vector<std::atomic<int>> hits(count);
    pool.parallel_for(count, [&](std::size_t i) { hits[i].fetch_add(1); });
    for (auto& h : hits) CHECK(h.load() == 1);
  }
  // Nested: the inner loop runs on the thread of the outer task, with no deadlock.
  std::atomic<int> inner{0};
  pool.parallel_for(4, [&](std::size_t) { pool.parallel_for(3, [&](std::size_t) { inner.fetch_add(1); }); });
  CHECK(inner.load() == 12);
  // Two callers at once: the pool serves one loop at a time, both complete.
  std::atomic<long> sum{0};
  std::thread other([&] {
    for (int r = 0; r < 50; ++r) pool.parallel_for(8, [&](std::size_t i) { sum += static_cast<long>(i); });
  });
  for (int r = 0; r < 50; ++r) pool.parallel_for(8, [&](std::size_t i) { sum += static_cast<long>(i); });
  other.join();
  CHECK(sum.load() == 100 * 28);
  q::thread_pool single(1);
  CHECK(single.concurrency() == 1);
  int n = 0;
  single.parallel_for(5, [&](std::size_t) { ++n; });
  CHECK(n == 5);
  CHECK_THROWS_WITH_AS(q::thread_pool(0),
                       doctest::Contains("frugal::quant::thread_pool: threads must be >= 1"),
                       std::invalid_argument);
}

TEST_CASE("quant threads: an exception from a task reaches the caller, and the pool stays usable") {
  q::thread_pool pool(2);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH_AS(pool.parallel_for(16,
                                           [&](std::size_t i) {
                                             ran.fetch_add(1);
                                             if (i == 5) throw std::runtime_error("task 5 failed");
                                           }),
                         "task 5 failed", std::runtime_error);
    CHECK(ran.load() >= 1);
    CHECK(ran.load() <= 16);
  }
  std::atomic<int> after{0};
  pool.parallel_for(10, [&](std::size_t) { after.fetch_add(1); });
  CHECK(after.load() == 10);
  // Single-task and nested loops throw on the caller's thread directly.
  CHECK_THROWS_AS(pool.parallel_for(1, [](std::size_t) { throw std::logic_error("one"); }), std::logic_error);
  // An executor that fails makes the GEMM fail with its exception.
  failing_executor bad;
  std::vector<float> x(8 * 512, 1.0f), out(8 * 256);
  std::vector<std::int8_t> d(256 * 512, 1);
  const std::vector<float> sc(256, 1.0f);
  const auto w = q::make_quantized_weights(d, 256, 512, sc);
  CHECK_THROWS_WITH_AS(q::gemm_weight_only(x, 8, w, out, {.threads = &bad}), "no threads today",
                       std::runtime_error);
}
