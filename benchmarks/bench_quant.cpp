// Quantization toolkit benchmarks: conversion and quantization throughput against memcpy, and the
// CPU GEMMs against Eigen fp32 (default flags and -march=native) and oneDNN when it is found.
// Everything is single-threaded (OMP_NUM_THREADS=1 for oneDNN), so the ratios compare one core, except
// BM_gemm_threads, which times frugal's GEMMs on 1 and 2 threads (wall time).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "frugal/quant.hpp"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  include <immintrin.h>
#endif
#include "quant/eigen_native.hpp"

#ifdef FRUGAL_BENCH_HAVE_DNNL
#  include <oneapi/dnnl/dnnl.h>
#endif

namespace q = frugal::quant;

namespace {

constexpr std::size_t stream_elems = std::size_t{8} << 20;  // 32 MiB of fp32: beyond the caches

const std::vector<float>& stream_data() {
  static const std::vector<float> v = [] {
    std::vector<float> x(stream_elems);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& e : x) e = nd(rng);
    return x;
  }();
  return v;
}

q::simd_path path_arg(std::int64_t i) { return static_cast<q::simd_path>(i); }

void set_bytes(benchmark::State& st, std::size_t bytes) {
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(bytes));
}

void BM_memcpy(benchmark::State& st) {
  const auto& x = stream_data();
  std::vector<float> y(x.size());
  for (auto _ : st) {
    std::memcpy(y.data(), x.data(), x.size() * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_bytes(st, x.size() * sizeof(float));
}
BENCHMARK(BM_memcpy)->Unit(benchmark::kMillisecond);

void BM_convert_f32_to_f16(benchmark::State& st) {
  const auto& x = stream_data();
  std::vector<q::half> y(x.size());
  const auto path = path_arg(st.range(0));
  for (auto _ : st) {
    q::convert(x, y, path);
    benchmark::ClobberMemory();
  }
  st.SetLabel(q::to_string(path));
  set_bytes(st, x.size() * sizeof(float));
}
void BM_convert_f16_to_f32(benchmark::State& st) {
  std::vector<q::half> x(stream_elems);
  q::convert(stream_data(), x);
  std::vector<float> y(x.size());
  const auto path = path_arg(st.range(0));
  for (auto _ : st) {
    q::convert(x, y, path);
    benchmark::ClobberMemory();
  }
  st.SetLabel(q::to_string(path));
  set_bytes(st, x.size() * sizeof(q::half));
}
void BM_convert_f32_to_bf16(benchmark::State& st) {
  const auto& x = stream_data();
  std::vector<q::bfloat16> y(x.size());
  const auto path = path_arg(st.range(0));
  for (auto _ : st) {
    q::convert(x, y, path);
    benchmark::ClobberMemory();
  }
  st.SetLabel(q::to_string(path));
  set_bytes(st, x.size() * sizeof(float));
}
void float_paths(benchmark::internal::Benchmark* b) {
  for (auto p : {q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx512})
    if (q::is_supported(p)) b->Arg(static_cast<int>(p));
}
BENCHMARK(BM_convert_f32_to_f16)->Apply(float_paths)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_convert_f16_to_f32)->Apply(float_paths)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_convert_f32_to_bf16)->Apply(float_paths)->Unit(benchmark::kMillisecond);

// Quantization of a 2048 x 4096 fp32 matrix (32 MiB); GB/s counts the fp32 input.
constexpr std::size_t qrows = 2048, qcols = 4096;

q::scheme scheme_arg(std::int64_t i) {
  switch (i) {
    case 0:
      return {};
    case 1:
      return {.granularity = q::granularity::per_channel, .axis = 0};
    case 2:
      return {.granularity = q::granularity::per_group, .group_size = 128};
    case 3:
      return {
          .type = frugal::element_type::u8, .granularity = q::granularity::per_channel, .symmetric = false};
    default:
      return {.type = frugal::element_type::i4, .granularity = q::granularity::per_group, .group_size = 128};
  }
}
const char* scheme_name(std::int64_t i) {
  static const char* names[] = {"i8 per-tensor", "i8 per-channel", "i8 per-group128", "u8 asym per-channel",
                                "i4 per-group128"};
  return names[i];
}

// Min-max parameters and the integers: two passes over the data, as dynamic quantization does.
void BM_quantize_dynamic(benchmark::State& st) {
  const auto& x = stream_data();
  const q::scheme s = scheme_arg(st.range(0));
  for (auto _ : st) benchmark::DoNotOptimize(q::quantize(x, qrows, qcols, s));
  st.SetLabel(scheme_name(st.range(0)));
  set_bytes(st, x.size() * sizeof(float));
}
BENCHMARK(BM_quantize_dynamic)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The baseline for dynamic per-group int8: a plain AVX2 loop, group by group, with absmax / 127 scales
// and x * (1 / scale) rounded by the MXCSR mode (no tie handling, no NaN checks). What frugal's
// quantize must match while also being exact for ties and checking NaN and Inf.
__attribute__((target("avx2,fma"))) void plain_absmax_i8_avx2(const float* x, std::size_t n, std::size_t g,
                                                              std::int8_t* q, float* scales) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (std::size_t b = 0; b < n; b += g) {
    __m256 m0 = _mm256_setzero_ps(), m1 = m0;
    for (std::size_t i = 0; i < g; i += 16) {
      m0 = _mm256_max_ps(m0, _mm256_and_ps(_mm256_loadu_ps(x + b + i), absmask));
      m1 = _mm256_max_ps(m1, _mm256_and_ps(_mm256_loadu_ps(x + b + i + 8), absmask));
    }
    alignas(32) float l[8];
    _mm256_store_ps(l, _mm256_max_ps(m0, m1));
    float a = 0.0f;
    for (float v : l) a = std::max(a, v);
    const float s = a > 0.0f ? a / 127.0f : 1.0f;
    scales[b / g] = s;
    const __m256 r = _mm256_set1_ps(1.0f / s);
    for (std::size_t i = 0; i < g; i += 32) {
      const float* p = x + b + i;
      const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p), r)),
                    i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 8), r)),
                    i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 16), r)),
                    i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 24), r));
      const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b + i), _mm256_permutevar8x32_epi32(w, order));
    }
  }
}

void BM_quantize_plain_absmax_avx2(benchmark::State& st) {
  if (!q::is_supported(q::simd_path::avx2)) return st.SkipWithError("no AVX2");
  const auto& x = stream_data();
  for (auto _ : st) {
    std::vector<std::int8_t> out(x.size());
    std::vector<float> scales(x.size() / 128);
    plain_absmax_i8_avx2(x.data(), x.size(), 128, out.data(), scales.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.SetLabel("baseline: i8 per-group128, plain AVX2");
  set_bytes(st, x.size() * sizeof(float));
}
BENCHMARK(BM_quantize_plain_absmax_avx2)->Unit(benchmark::kMillisecond);
#endif

// Dynamic i8 per-group128 on each float path, against BM_quantize_plain_absmax_avx2.
void BM_quantize_i8_group128(benchmark::State& st) {
  const auto& x = stream_data();
  const q::scheme s{.granularity = q::granularity::per_group, .group_size = 128};
  const auto path = path_arg(st.range(0));
  for (auto _ : st) benchmark::DoNotOptimize(q::quantize(x, qrows, qcols, s, path));
  st.SetLabel(q::to_string(path));
  set_bytes(st, x.size() * sizeof(float));
}
BENCHMARK(BM_quantize_i8_group128)->Apply(float_paths)->Unit(benchmark::kMillisecond);

// With calibrated parameters: one pass, the number to hold against memcpy.
void BM_quantize_static(benchmark::State& st) {
  const auto& x = stream_data();
  const q::scheme s = scheme_arg(st.range(0));
  const q::quant_params p = q::choose_params(x, qrows, qcols, s);
  for (auto _ : st) benchmark::DoNotOptimize(q::quantize(x, qrows, qcols, s, p));
  st.SetLabel(scheme_name(st.range(0)));
  set_bytes(st, x.size() * sizeof(float));
}
BENCHMARK(BM_quantize_static)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

void BM_quantize_rows(benchmark::State& st) {
  const auto& x = stream_data();
  for (auto _ : st) benchmark::DoNotOptimize(q::quantize_rows(x, qrows, qcols));
  st.SetLabel("per-token i8 (W8A8 activations)");
  set_bytes(st, x.size() * sizeof(float));
}
BENCHMARK(BM_quantize_rows)->Unit(benchmark::kMillisecond);

// GB/s counts the fp32 output.
void BM_dequantize(benchmark::State& st) {
  const auto& x = stream_data();
  const auto t = q::quantize(x, qrows, qcols, scheme_arg(st.range(0)));
  std::vector<float> y(x.size());
  for (auto _ : st) {
    q::dequantize(t, y);
    benchmark::ClobberMemory();
  }
  st.SetLabel(scheme_name(st.range(0)));
  set_bytes(st, y.size() * sizeof(float));
}
BENCHMARK(BM_dequantize)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

struct gemm_case {
  std::size_t m, n, k;
  q::row_matrix x, w;
  std::vector<float> out;
};

gemm_case make_case(std::int64_t m, std::int64_t nk) {
  const auto k = nk == 1024 ? 1024 : 4096;
  gemm_case c{
      static_cast<std::size_t>(m), static_cast<std::size_t>(nk), static_cast<std::size_t>(k), {}, {}, {}};
  c.x.resize(m, k);
  c.w.resize(nk, k);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int i = 0; i < c.x.size(); ++i) c.x.data()[i] = nd(rng);
  for (int i = 0; i < c.w.size(); ++i) c.w.data()[i] = 0.02f * nd(rng);
  c.out.resize(c.m * c.n);
  return c;
}

void set_flops(benchmark::State& st, const gemm_case& c) {
  st.counters["GFLOPS"] =
      benchmark::Counter(2.0 * static_cast<double>(c.m * c.n * c.k),
                         benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// Shapes as (M, N=K): 1 x 4096 x 4096, 16 x 4096 x 4096, 1024 x 1024 x 1024.
void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->Args({1, 4096})->Args({16, 4096})->Args({64, 4096})->Args({1024, 1024})->Unit(benchmark::kMillisecond);
}

void BM_gemm_eigen_fp32(benchmark::State& st) {
  auto c = make_case(st.range(0), st.range(1));
  q::row_matrix out(c.m, c.n);
  for (auto _ : st) {
    out.noalias() = c.x * c.w.transpose();
    benchmark::ClobberMemory();
  }
  st.SetLabel(Eigen::SimdInstructionSetsInUse());
  set_flops(st, c);
}
BENCHMARK(BM_gemm_eigen_fp32)->Apply(gemm_shapes);

void BM_gemm_eigen_fp32_native(benchmark::State& st) {
  auto c = make_case(st.range(0), st.range(1));
  for (auto _ : st) {
    frugal_bench::eigen_native_gemm(c.x.data(), c.w.data(), c.out.data(), static_cast<long>(c.m),
                                    static_cast<long>(c.n), static_cast<long>(c.k));
    benchmark::ClobberMemory();
  }
  st.SetLabel(frugal_bench::eigen_native_simd());
  set_flops(st, c);
}
BENCHMARK(BM_gemm_eigen_fp32_native)->Apply(gemm_shapes);

// Pre-quantized activations: the GEMM with its fused f32 epilogue.
void BM_gemm_w8a8(benchmark::State& st) {
  auto c = make_case(st.range(0), st.range(1));
  const auto qw = q::quantize_weights_per_channel(c.w);
  // Argument 3: 1 for 7-bit activations (reduce_range), which AVX2 runs through vpmaddubsw.
  const bool reduce = st.range(3) != 0;
  const auto qa = q::quantize_rows(c.x, {.reduce_range = reduce});
  const auto path = static_cast<q::simd_path>(st.range(2));
  for (auto _ : st) {
    q::gemm_w8a8(qa, qw, c.out, {.path = path});
    benchmark::ClobberMemory();
  }
  st.SetLabel(std::string(q::to_string(path)) + (reduce ? " reduce_range" : ""));
  set_flops(st, c);
}
void w8a8_args(benchmark::internal::Benchmark* b) {
  for (auto shape : {std::pair{1, 4096}, std::pair{16, 4096}, std::pair{64, 4096}, std::pair{1024, 1024}}) {
    for (auto p : {q::simd_path::amx, q::simd_path::avx512_vnni, q::simd_path::avx_vnni, q::simd_path::avx2})
      if (q::is_supported(p)) b->Args({shape.first, shape.second, static_cast<int>(p), 0});
    if (q::is_supported(q::simd_path::avx2))
      b->Args({shape.first, shape.second, static_cast<int>(q::simd_path::avx2), 1});
  }
  b->ArgNames({"m", "nk", "path", "reduce"})->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_gemm_w8a8)->Apply(w8a8_args);

// The whole W8A8 step as a layer runs it: per-token quantization of fp32 X, then the GEMM.
void BM_gemm_w8a8_with_quantize(benchmark::State& st) {
  auto c = make_case(st.range(0), st.range(1));
  const auto qw = q::quantize_weights_per_channel(c.w);
  for (auto _ : st) {
    const auto qa = q::quantize_rows(c.x);
    q::gemm_w8a8(qa, qw, c.out);
    benchmark::ClobberMemory();
  }
  set_flops(st, c);
}
BENCHMARK(BM_gemm_w8a8_with_quantize)->Apply(gemm_shapes);

void BM_gemm_weight_only_int8(benchmark::State& st) {
  auto c = make_case(st.range(0), st.range(1));
  const auto qw = q::quantize_weights_per_channel(c.w);
  const std::span<const float> x(c.x.data(), static_cast<std::size_t>(c.x.size()));
  for (auto _ : st) {
    q::gemm_weight_only(x, c.m, qw, c.out);
    benchmark::ClobberMemory();
  }
  set_flops(st, c);
}
BENCHMARK(BM_gemm_weight_only_int8)->Apply(gemm_shapes);

// W4A16 g128 (symmetric unless the fourth argument is 1) on each float path this CPU has.
void BM_gemm_weight_only_int4(benchmark::State& st) {
  auto c = make_case(st.range(0), st.range(1));
  const bool sym = st.range(3) == 0;
  const auto qw = q::quantize_int4(c.w, {.group_size = 128, .symmetric = sym});
  const std::span<const float> x(c.x.data(), static_cast<std::size_t>(c.x.size()));
  const auto path = path_arg(st.range(2));
  for (auto _ : st) {
    q::gemm_weight_only(x, c.m, qw, c.out, {.path = path});
    benchmark::ClobberMemory();
  }
  st.SetLabel(std::string(q::to_string(path)) + (sym ? " sym" : " asym"));
  set_flops(st, c);
}
void int4_args(benchmark::internal::Benchmark* b) {
  for (auto shape : {std::pair{1, 4096}, std::pair{16, 4096}, std::pair{1024, 1024}})
    for (auto p : {q::simd_path::avx512, q::simd_path::avx2, q::simd_path::portable})
      if (q::is_supported(p) && (p != q::simd_path::portable || shape.first == 1))
        for (int asym : {0, 1})
          if (asym == 0 || shape.first == 1) b->Args({shape.first, shape.second, static_cast<int>(p), asym});
  b->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_gemm_weight_only_int4)->Apply(int4_args);

// The W4A16 layout from fp32 weights, one pass; GB/s counts the fp32 input, as for memcpy.
void BM_quantize_int4(benchmark::State& st) {
  const auto& x = stream_data();
  for (auto _ : st) benchmark::DoNotOptimize(q::quantize_int4(x, qrows, qcols, {.group_size = 128}));
  st.SetLabel("W4A16 g128 symmetric");
  set_bytes(st, x.size() * sizeof(float));
}
BENCHMARK(BM_quantize_int4)->Unit(benchmark::kMillisecond);

// The GEMMs on 1 thread (no executor) and on a thread_pool of 2, wall time. Kinds: 0 W8A8 f32 output,
// 1 W8A8 int32, 2 weight-only int8, 3 weight-only int4 g128.
void BM_gemm_threads(benchmark::State& st) {
  auto c = make_case(st.range(1), st.range(2));
  const int kind = static_cast<int>(st.range(0));
  const auto threads = static_cast<std::size_t>(st.range(3));
  q::thread_pool pool(threads);
  q::executor* ex = threads > 1 ? &pool : nullptr;
  const auto qw = q::quantize_weights_per_channel(c.w);
  const auto qa = q::quantize_rows(c.x);
  const auto w4 = q::quantize_int4(c.w, {.group_size = 128});
  const std::span<const float> x(c.x.data(), static_cast<std::size_t>(c.x.size()));
  std::vector<std::int32_t> acc(c.m * c.n);
  for (auto _ : st) {
    switch (kind) {
      case 0:
        q::gemm_w8a8(qa, qw, c.out, {.threads = ex});
        break;
      case 1:
        q::gemm_w8a8_s32(qa, qw, acc, q::simd_path::automatic, ex);
        break;
      case 2:
        q::gemm_weight_only(x, c.m, qw, c.out, {.threads = ex});
        break;
      default:
        q::gemm_weight_only(x, c.m, w4, c.out, {.threads = ex});
    }
    benchmark::ClobberMemory();
  }
  static const char* names[] = {"w8a8 f32", "w8a8 s32", "weight-only int8", "weight-only int4 g128"};
  st.SetLabel(std::string(names[kind]) + ", " + std::to_string(threads) + " thread" +
              (threads > 1 ? "s" : ""));
  set_flops(st, c);
}
void thread_args(benchmark::internal::Benchmark* b) {
  for (int kind : {0, 1, 2, 3})
    for (auto shape : {std::pair{1, 4096}, std::pair{16, 4096}, std::pair{1024, 1024}})
      for (int t : {1, 2}) b->Args({kind, shape.first, shape.second, t});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_gemm_threads)->Apply(thread_args);

#ifdef FRUGAL_BENCH_HAVE_DNNL
// oneDNN's s8s8s32 GEMM (raw int32 output: no epilogue), the peer to chase.
void BM_gemm_onednn_s8s8s32(benchmark::State& st) {
  auto c = make_case(st.range(0), st.range(1));
  const auto qw = q::quantize_weights_per_channel(c.w);
  const auto qa = q::quantize_rows(c.x);
  std::vector<std::int32_t> acc(c.m * c.n);
  const std::int32_t co = 0;
  const auto M = static_cast<dnnl_dim_t>(c.m), N = static_cast<dnnl_dim_t>(c.n),
             K = static_cast<dnnl_dim_t>(c.k);
  for (auto _ : st) {
    dnnl_gemm_s8s8s32('N', 'T', 'F', M, N, K, 1.0f, qa.data.data(), K, 0, qw.data.data(), K, 0, 0.0f,
                      acc.data(), N, &co);
    benchmark::ClobberMemory();
  }
  set_flops(st, c);
}
BENCHMARK(BM_gemm_onednn_s8s8s32)->Apply(gemm_shapes);

void BM_gemm_onednn_sgemm(benchmark::State& st) {
  auto c = make_case(st.range(0), st.range(1));
  const auto M = static_cast<dnnl_dim_t>(c.m), N = static_cast<dnnl_dim_t>(c.n),
             K = static_cast<dnnl_dim_t>(c.k);
  for (auto _ : st) {
    dnnl_sgemm('N', 'T', M, N, K, 1.0f, c.x.data(), K, c.w.data(), K, 0.0f, c.out.data(), N);
    benchmark::ClobberMemory();
  }
  set_flops(st, c);
}
BENCHMARK(BM_gemm_onednn_sgemm)->Apply(gemm_shapes);
#endif

}  // namespace

BENCHMARK_MAIN();
