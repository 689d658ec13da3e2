// gemm_ggml (GGUF Q4_1 / Q8_0 blocks kept quantized) on SmolLM2-135M's shapes, at M = 1 (decode: weights
// streamed once, reported in GB/s against this machine's read bandwidth measured in the same run) and
// M = 512 (prefill, GMAC/s), on 1 and 2 threads, wall time; the int8 per-channel W8A8 GEMM (activations
// quantized in the loop, as a layer does) on the same shapes as the rival.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "frugal/quant.hpp"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  include <immintrin.h>
#endif

namespace q = frugal::quant;

namespace {

// The sum of n 64-bit words, with 256-bit loads where the CPU has them: the loop must not be the bound.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) std::uint64_t sum_avx2(const std::uint64_t* p, std::size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

std::uint64_t sum_words(const std::uint64_t* p, std::size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx2")) return sum_avx2(p, n);
#endif
  std::uint64_t a = 0, b = 0;
  for (std::size_t i = 0; i + 2 <= n; i += 2) {
    a += p[i];
    b += p[i + 1];
  }
  return a + b;
}

// The read bandwidth: a sum over 256 MiB (beyond the caches a process can count on), in halves on 2 threads.
void BM_read_bandwidth(benchmark::State& st) {
  static const std::vector<std::uint64_t> buf(std::size_t{32} << 20, 1);
  const auto threads = static_cast<std::size_t>(st.range(0));
  q::thread_pool pool(threads);
  std::uint64_t sums[2] = {0, 0};
  for (auto _ : st) {
    pool.parallel_for(threads, [&](std::size_t t) {
      const std::size_t n = buf.size() / threads;
      sums[t] = sum_words(buf.data() + t * n, n);
    });
    benchmark::DoNotOptimize(sums);
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) *
                       static_cast<std::int64_t>(buf.size() * sizeof(std::uint64_t)));
  st.SetLabel(std::to_string(threads) + " thread" + (threads > 1 ? "s" : ""));
}
BENCHMARK(BM_read_bandwidth)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

struct shape {
  q::ggml_format format;
  std::size_t n, k;
  const char* name;
};
const shape shapes[] = {{q::ggml_format::q4_1, 1536, 576, "ffn up/gate Q4_1"},
                        {q::ggml_format::q4_1, 576, 1536, "ffn down Q4_1"},
                        {q::ggml_format::q8_0, 49152, 576, "output Q8_0"}};

std::vector<std::byte> random_raw(q::ggml_format f, std::size_t n, std::size_t k) {
  const std::size_t bb = f == q::ggml_format::q4_1 ? 20 : 34, blocks = n * k / 32;
  std::vector<std::byte> raw(blocks * bb);
  std::mt19937 rng(1);
  for (auto& b : raw) b = static_cast<std::byte>(rng() & 0xff);
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::uint16_t d = q::detail::float_to_half_bits(0.01f), m = q::detail::float_to_half_bits(-0.08f);
    std::memcpy(&raw[i * bb], &d, 2);
    if (f == q::ggml_format::q4_1) std::memcpy(&raw[i * bb + 2], &m, 2);
  }
  return raw;
}

std::vector<float> random_x(std::size_t m, std::size_t k) {
  std::vector<float> x(m * k);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x) v = nd(rng);
  return x;
}

void report(benchmark::State& st, std::size_t m, std::size_t n, std::size_t k, std::size_t weight_bytes,
            const std::string& label) {
  const auto it = static_cast<double>(st.iterations());
  st.counters["GMAC/s"] =
      benchmark::Counter(it * static_cast<double>(m * n * k) / 1e9, benchmark::Counter::kIsRate);
  st.counters["weight GB/s"] =
      benchmark::Counter(it * static_cast<double>(weight_bytes) / 1e9, benchmark::Counter::kIsRate);
  st.SetLabel(label);
}

// Args: shape, M, threads, path.
void BM_gemm_ggml(benchmark::State& st) {
  const shape& s = shapes[st.range(0)];
  const auto m = static_cast<std::size_t>(st.range(1)), threads = static_cast<std::size_t>(st.range(2));
  const auto path = static_cast<q::simd_path>(st.range(3));
  const auto w = q::make_ggml_weights(s.format, random_raw(s.format, s.n, s.k), s.n, s.k);
  const auto x = random_x(m, s.k);
  std::vector<float> out(m * s.n);
  q::thread_pool pool(threads);
  for (auto _ : st) {
    q::gemm_ggml(x, m, w, out, {.path = path, .threads = threads > 1 ? &pool : nullptr});
    benchmark::ClobberMemory();
  }
  report(st, m, s.n, s.k, w.bytes(),
         std::string(s.name) + ", " + q::to_string(path) + ", " + std::to_string(threads) + "t");
}

void BM_gemm_w8a8(benchmark::State& st) {
  const shape& s = shapes[st.range(0)];
  const auto m = static_cast<std::size_t>(st.range(1)), threads = static_cast<std::size_t>(st.range(2));
  const auto wf = q::dequantize(q::make_ggml_weights(s.format, random_raw(s.format, s.n, s.k), s.n, s.k));
  const auto qw = q::quantize_weights_per_channel(wf, s.n, s.k);
  const auto x = random_x(m, s.k);
  std::vector<float> out(m * s.n);
  q::thread_pool pool(threads);
  for (auto _ : st) {
    const auto qa = q::quantize_rows(x, m, s.k);
    q::gemm_w8a8(qa, qw, out, {.threads = threads > 1 ? &pool : nullptr});
    benchmark::ClobberMemory();
  }
  report(st, m, s.n, s.k, qw.packed.size() + qw.scales.size() * 4,
         std::string(s.name) + " as int8 per channel, " + std::to_string(threads) + "t");
}

void ggml_args(benchmark::internal::Benchmark* b) {
  for (int sh = 0; sh < 3; ++sh)
    for (int m : {1, 512})
      for (int t : {1, 2}) b->Args({sh, m, t, static_cast<int>(q::simd_path::automatic)});
  // Each path at decode on one thread.
  for (auto p : {q::simd_path::portable, q::simd_path::avx2, q::simd_path::avx_vnni, q::simd_path::avx512})
    if (q::is_supported(p)) b->Args({0, 1, 1, static_cast<int>(p)});
  // AVX-512 VNNI and AMX at prefill on one thread.
  for (auto p : {q::simd_path::avx512_vnni, q::simd_path::amx})
    if (q::is_supported(p))
      for (int sh : {0, 2}) b->Args({sh, 512, 1, static_cast<int>(p)});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_gemm_ggml)->Apply(ggml_args);

void w8a8_args(benchmark::internal::Benchmark* b) {
  for (int sh = 0; sh < 3; ++sh)
    for (int m : {1, 512})
      for (int t : {1, 2}) b->Args({sh, m, t});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_gemm_w8a8)->Apply(w8a8_args);

}  // namespace

BENCHMARK_MAIN();
