// One GEMM, C = X * W^T, in every precision frugal serves on the CPU, timed in one binary against the
// Eigen fp32 baseline, with each run's weight bytes and accuracy against fp32 reported as counters so
// the JSON carries speed, memory and accuracy together. Single-threaded: this is per-core throughput.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "frugal/quant.hpp"

// The fused fp16/bf16 kernel below is AVX-512 code compiled with a target attribute, as frugal's own.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#  define BENCH_X86 1
#  include <immintrin.h>
#else
#  define BENCH_X86 0
#endif

namespace {

namespace fq = frugal::quant;
using fq::row_matrix;

// _r7: the same with 7-bit activations (quantize_rows' reduce_range), which AVX2 without VNNI runs through
// vpmaddubsw; the row shows what that bit costs.
enum class precision { fp32, fp16, bf16, w8a8, w8a8_sq, w8a8_r7, w8a8_sq_r7, w8a16, w4a16 };

const char* name_of(precision p) {
  switch (p) {
    case precision::fp32:
      return "fp32";
    case precision::fp16:
      return "fp16";
    case precision::bf16:
      return "bf16";
    case precision::w8a8:
      return "int8_w8a8";
    case precision::w8a8_sq:
      return "int8_w8a8_smoothquant";
    case precision::w8a8_r7:
      return "int8_w8a8_reduce_range";
    case precision::w8a8_sq_r7:
      return "int8_w8a8_smoothquant_reduce_range";
    case precision::w8a16:
      return "w8a16";
    case precision::w4a16:
      return "w4a16_g128";
  }
  return "?";
}

constexpr std::size_t max_m = 256;
constexpr std::size_t calibration_rows = 64;  // after the max_m timed rows, never timed

// Weights look like a transformer layer's: Gaussian, with 0.5% of output channels 3-8x larger.
// Activations have 0.2% outlier features 10-30x larger, as LLM hidden states do (LLM.int8()); they
// stretch each token's int8 range, which is what W8A8 pays for and weight-only schemes do not.
struct problem {
  std::size_t n, k;
  row_matrix w;         // N x K
  row_matrix x;         // max_m + calibration_rows x K
  row_matrix x_smooth;  // X with column j divided by the SmoothQuant factor s_j
  std::vector<fq::half> w_f16, x_f16;
  std::vector<fq::bfloat16> w_bf16, x_bf16;
  fq::quantized_weights w_i8, w_i8_smooth;
  fq::int4_weights w_i4;
  std::map<std::size_t, row_matrix> reference;  // M -> the fp32 output

  problem(std::size_t n_, std::size_t k_) : n(n_), k(k_), w(n_, k_), x(max_m + calibration_rows, k_) {
    std::mt19937_64 rng(0x5eed0000u + n * 31 + k);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    const float w_sd = 1.0f / std::sqrt(static_cast<float>(k));
    for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = w_sd * gauss(rng);
    std::uniform_int_distribution<std::size_t> pick_n(0, n - 1), pick_k(0, k - 1);
    std::uniform_real_distribution<float> boost(3.0f, 8.0f);
    for (std::size_t i = 0; i < std::max<std::size_t>(1, n / 200); ++i)
      w.row(static_cast<Eigen::Index>(pick_n(rng))) *= boost(rng);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = gauss(rng);
    std::uniform_real_distribution<float> outlier(10.0f, 30.0f);
    for (std::size_t i = 0; i < std::max<std::size_t>(1, k / 512); ++i)
      x.col(static_cast<Eigen::Index>(pick_k(rng))) *= outlier(rng);

    const std::span<const float> wf(w.data(), n * k), xf(x.data(), max_m * k);
    w_f16.resize(n * k);
    w_bf16.resize(n * k);
    x_f16.resize(max_m * k);
    x_bf16.resize(max_m * k);
    fq::convert(wf, std::span<fq::half>(w_f16));
    fq::convert(wf, std::span<fq::bfloat16>(w_bf16));
    fq::convert(xf, std::span<fq::half>(x_f16));
    fq::convert(xf, std::span<fq::bfloat16>(x_bf16));
    w_i8 = fq::quantize_weights_per_channel(wf, n, k);
    w_i4 = fq::quantize_int4(wf, n, k, {.group_size = 128});

    // SmoothQuant (alpha 0.5) calibrated on rows the benchmark never times; at serving time 1 / s is
    // folded into the previous layer's norm, so the timed path is plain W8A8 on pre-smoothed X.
    std::vector<float> act_absmax(k);
    for (std::size_t j = 0; j < k; ++j)
      act_absmax[j] = x.bottomRows(static_cast<Eigen::Index>(calibration_rows))
                          .col(static_cast<Eigen::Index>(j))
                          .cwiseAbs()
                          .maxCoeff();
    const fq::smoothquant_result sq = fq::smoothquant(w, act_absmax, 0.5f);
    x_smooth = x.topRows(static_cast<Eigen::Index>(max_m));
    fq::smooth_activations(x_smooth, sq.factors);
    w_i8_smooth = fq::quantize_weights_per_channel(sq.weights);
  }

  const row_matrix& reference_for(std::size_t m) {
    auto it = reference.find(m);
    if (it == reference.end()) {
      row_matrix r = x.topRows(static_cast<Eigen::Index>(m)) * w.transpose();
      it = reference.emplace(m, std::move(r)).first;
    }
    return it->second;
  }

  std::size_t weight_bytes(precision p) const {
    switch (p) {
      case precision::fp32:
        return n * k * sizeof(float);
      case precision::fp16:
      case precision::bf16:
        return n * k * 2;
      case precision::w8a8:
      case precision::w8a8_sq:
      case precision::w8a8_r7:
      case precision::w8a8_sq_r7:
      case precision::w8a16:
        return w_i8.memory_bytes();
      case precision::w4a16:
        return w_i4.memory_bytes();
    }
    return 0;
  }
};

problem& problem_for(std::size_t n, std::size_t k) {
  static std::map<std::pair<std::size_t, std::size_t>, std::unique_ptr<problem>> cache;
  auto& p = cache[{n, k}];
  if (!p) p = std::make_unique<problem>(n, k);
  return *p;
}

// fp16/bf16 weights computed in fp32. The toolkit has no 16-bit-weight GEMM, so the benchmark brings
// two: for M <= 16 a fused AVX-512 loop that widens each 16-weight vector in registers (decode is
// bandwidth-bound, so the weights are read once, as 16-bit); above that, the weights are widened with
// the toolkit's bulk conversion one 1 MiB panel at a time (it stays in L2) and Eigen multiplies the panel.
#if BENCH_X86
template <bool bf16, int mr>
__attribute__((target("avx512f,avx512bw,avx512dq,fma,f16c"))) void half_block_avx512(
    const float* x, std::size_t k, const std::uint16_t* const* w, float* sums) {
  __m512 acc[mr][4];
  for (int a = 0; a < mr; ++a)
    for (int b = 0; b < 4; ++b) acc[a][b] = _mm512_setzero_ps();
  std::size_t t = 0;
  for (; t + 16 <= k; t += 16) {
    __m512 wv[4];
    for (int b = 0; b < 4; ++b) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b] + t));
      wv[b] =
          bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
    }
    for (int a = 0; a < mr; ++a) {
      const __m512 xv = _mm512_loadu_ps(x + static_cast<std::size_t>(a) * k + t);
      for (int b = 0; b < 4; ++b) acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
    }
  }
  for (int a = 0; a < mr; ++a)
    for (int b = 0; b < 4; ++b) {
      float s = _mm512_reduce_add_ps(acc[a][b]);
      for (std::size_t r = t; r < k; ++r)
        s += x[static_cast<std::size_t>(a) * k + r] *
             (bf16 ? fq::detail::bf16_bits_to_float(w[b][r]) : fq::detail::half_bits_to_float(w[b][r]));
      sums[a * 4 + b] = s;
    }
}

template <bool bf16>
void gemm_half_fused(const float* x, std::size_t m, const std::uint16_t* w, std::size_t n, std::size_t k,
                     float* out) {
  float sums[16];
  for (std::size_t j = 0; j < n; j += 4) {
    const std::uint16_t* rows[4];
    for (std::size_t b = 0; b < 4; ++b) rows[b] = w + std::min(j + b, n - 1) * k;
    const std::size_t nj = std::min<std::size_t>(4, n - j);
    for (std::size_t i = 0; i < m; i += 4) {
      const std::size_t mi = std::min<std::size_t>(4, m - i);
      const float* xi = x + i * k;
      switch (mi) {
        case 4:
          half_block_avx512<bf16, 4>(xi, k, rows, sums);
          break;
        case 3:
          half_block_avx512<bf16, 3>(xi, k, rows, sums);
          break;
        case 2:
          half_block_avx512<bf16, 2>(xi, k, rows, sums);
          break;
        default:
          half_block_avx512<bf16, 1>(xi, k, rows, sums);
          break;
      }
      for (std::size_t a = 0; a < mi; ++a)
        for (std::size_t b = 0; b < nj; ++b) out[(i + a) * n + j + b] = sums[a * 4 + b];
    }
  }
}
#endif

template <class Half>
void gemm_half(const Half* x, std::size_t m, const Half* w, std::size_t n, std::size_t k, float* out,
               std::vector<float>& xbuf, std::vector<float>& wbuf) {
  xbuf.resize(m * k);
  fq::convert(std::span<const Half>(x, m * k), std::span<float>(xbuf));
#if BENCH_X86
  if (m <= 16 && fq::host_cpu_features().avx512) {
    return gemm_half_fused<std::is_same_v<Half, fq::bfloat16>>(
        xbuf.data(), m, reinterpret_cast<const std::uint16_t*>(w), n, k, out);
  }
#endif
  const std::size_t panel = std::max<std::size_t>(1, (std::size_t{1} << 20) / (k * sizeof(float)));
  wbuf.resize(panel * k);
  const Eigen::Map<const row_matrix> xm(xbuf.data(), static_cast<Eigen::Index>(m),
                                        static_cast<Eigen::Index>(k));
  Eigen::Map<row_matrix> c(out, static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(n));
  for (std::size_t n0 = 0; n0 < n; n0 += panel) {
    const std::size_t p = std::min(panel, n - n0);
    fq::convert(std::span<const Half>(w + n0 * k, p * k), std::span<float>(wbuf.data(), p * k));
    const Eigen::Map<const row_matrix> wp(wbuf.data(), static_cast<Eigen::Index>(p),
                                          static_cast<Eigen::Index>(k));
    c.middleCols(static_cast<Eigen::Index>(n0), static_cast<Eigen::Index>(p)).noalias() = xm * wp.transpose();
  }
}

// Reads a buffer twice the size of the largest L3 this is likely to meet, one load per cache line, so
// the next call finds its weights in DRAM, as a model's layers are when they take turns.
void evict_caches() {
  static std::vector<std::uint64_t> junk(std::size_t{512} << 17, 1);  // 512 MiB
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < junk.size(); i += 8) sum += junk[i];
  benchmark::DoNotOptimize(sum);
}

void bm_gemm(benchmark::State& state, precision prec, bool cold) {
  const auto m = static_cast<std::size_t>(state.range(0));
  const auto n = static_cast<std::size_t>(state.range(1));
  const auto k = static_cast<std::size_t>(state.range(2));
  problem& pb = problem_for(n, k);
  row_matrix out(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(n));
  const std::span<float> outs(out.data(), m * n);
  const auto xrows = pb.x.topRows(static_cast<Eigen::Index>(m));
  const std::span<const float> x32(pb.x.data(), m * k);
  const std::span<const float> xs32(pb.x_smooth.data(), m * k);
  const std::span<const fq::half> x16(pb.x_f16.data(), m * k);
  std::vector<float> xbuf, wbuf;

  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      evict_caches();
      state.ResumeTiming();
    }
    switch (prec) {
      case precision::fp32:
        out.noalias() = xrows * pb.w.transpose();
        break;
      case precision::fp16:
        gemm_half(pb.x_f16.data(), m, pb.w_f16.data(), n, k, out.data(), xbuf, wbuf);
        break;
      case precision::bf16:
        gemm_half(pb.x_bf16.data(), m, pb.w_bf16.data(), n, k, out.data(), xbuf, wbuf);
        break;
      case precision::w8a8: {
        // End to end: the per-token activation quantization is part of every call.
        const fq::quantized_activations qa = fq::quantize_rows(x32, m, k);
        fq::gemm_w8a8(qa, pb.w_i8, outs);
        break;
      }
      case precision::w8a8_sq: {
        const fq::quantized_activations qa = fq::quantize_rows(xs32, m, k);
        fq::gemm_w8a8(qa, pb.w_i8_smooth, outs);
        break;
      }
      case precision::w8a8_r7: {
        const fq::quantized_activations qa = fq::quantize_rows(x32, m, k, {.reduce_range = true});
        fq::gemm_w8a8(qa, pb.w_i8, outs);
        break;
      }
      case precision::w8a8_sq_r7: {
        const fq::quantized_activations qa = fq::quantize_rows(xs32, m, k, {.reduce_range = true});
        fq::gemm_w8a8(qa, pb.w_i8_smooth, outs);
        break;
      }
      case precision::w8a16:
        fq::gemm_weight_only(x16, m, pb.w_i8, outs);
        break;
      case precision::w4a16:
        fq::gemm_weight_only(x16, m, pb.w_i4, outs);
        break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }

  const row_matrix& ref = pb.reference_for(m);
  state.SetLabel(name_of(prec));
  state.SetItemsProcessed(
      static_cast<std::int64_t>(state.iterations() * m));  // tokens (rows of X) per second
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * static_cast<double>(m * n * k), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["M"] = static_cast<double>(m);
  state.counters["N"] = static_cast<double>(n);
  state.counters["K"] = static_cast<double>(k);
  state.counters["weight_bytes"] = static_cast<double>(pb.weight_bytes(prec));
  if (prec != precision::fp32) {  // fp32 is the reference itself: its SQNR would be infinite
    state.counters["sqnr_db"] = fq::sqnr_db(ref, out);
    state.counters["rel_err"] = fq::relative_error(ref, out);
    state.counters["cosine"] = fq::cosine_similarity(ref, out);
  }
}

struct shape {
  std::size_t n, k;
  std::vector<std::int64_t> ms;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const fq::cpu_features& f = fq::host_cpu_features();
  benchmark::AddCustomContext("eigen_simd", Eigen::SimdInstructionSetsInUse());
  benchmark::AddCustomContext("frugal_cpu_features",
                              std::string(f.avx512_vnni ? "avx512_vnni " : "") + (f.avx512 ? "avx512 " : "") +
                                  (f.avx_vnni ? "avx_vnni " : "") + (f.avx2 ? "avx2" : ""));
#ifdef FRUGAL_BENCH_MARCH_NATIVE
  benchmark::AddCustomContext("march_native", "yes");
#else
  benchmark::AddCustomContext("march_native", "no");
#endif
  // The square layer at every M; an LLM MLP up-projection (Llama-2-7B, 4096 -> 11008) at three.
  const shape shapes[] = {{4096, 4096, {1, 4, 16, 64, 256}}, {11008, 4096, {1, 16, 256}}};
  const precision all[] = {precision::fp32,       precision::fp16,    precision::bf16,
                           precision::w8a8,       precision::w8a8_sq, precision::w8a8_r7,
                           precision::w8a8_sq_r7, precision::w8a16,   precision::w4a16};
  for (const shape& s : shapes)
    for (precision p : all)
      for (std::int64_t m : s.ms)
        benchmark::RegisterBenchmark((std::string("gemm/") + name_of(p)).c_str(), bm_gemm, p, false)
            ->Args({m, static_cast<std::int64_t>(s.n), static_cast<std::int64_t>(s.k)})
            ->ArgNames({"M", "N", "K"})
            ->Unit(benchmark::kMicrosecond);
  // Decode with the weights in DRAM: a fixed count, since every iteration also pays an untimed eviction.
  for (const shape& s : shapes)
    for (precision p : all)
      benchmark::RegisterBenchmark((std::string("gemm_cold/") + name_of(p)).c_str(), bm_gemm, p, true)
          ->Args({1, static_cast<std::int64_t>(s.n), static_cast<std::int64_t>(s.k)})
          ->ArgNames({"M", "N", "K"})
          ->Iterations(8)
          ->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
