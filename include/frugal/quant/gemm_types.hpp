#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "frugal/namespace.hpp"
#include "frugal/quant/activation.hpp"
#include "frugal/quant/aligned.hpp"
#include "frugal/quant/cpu.hpp"
#include "frugal/quant/parallel.hpp"

/// @file
/// @brief The operands and options of the CPU GEMMs of frugal/quant/gemm.hpp.

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief Activations A (M x K int8 row-major) with one scale per row (per token) and, if
/// asymmetric, one int32 zero point per row: real = (q - za[m]) * sa[m].
struct quantized_activations {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<std::int8_t> data;
  std::vector<float> scales;
  std::vector<std::int32_t> zero_points;  ///< empty when symmetric
};

/// @brief Options of dynamic per-token activation quantization.
struct quantize_rows_options {
  /// symmetric: absmax / 127, q in -127..127; else min-max with a zero point, -128..127
  bool symmetric = true;
  /// Static quantization: when > 0, every row uses this calibrated symmetric scale (e.g. SmoothQuant's
  /// act_scale) instead of its own absmax; values beyond it saturate.
  float static_scale = 0.0f;
  /// Seven-bit activations, FBGEMM's and onnxruntime's "reduce range": symmetric in -63..63 (absmax / 63),
  /// asymmetric in -64..63. On a CPU with AVX2 but no VNNI the int8 GEMM then takes a vpmaddubsw kernel
  /// (1.3-1.5x the int16 one on the shapes in benchmarks/RESULTS.md) instead of widening to int16; both give
  /// the exact integer sum. The price is one bit of activation precision, measured in the precision benchmark
  /// (benchmarks/RESULTS.md). With static_scale, the calibrated range stays covered: the scale used is
  /// static_scale * 127 / 63.
  bool reduce_range = false;
  simd_path path = simd_path::automatic;
};

/// @brief Weights B (N x K int8 row-major: each output channel's K weights contiguous) with one
/// symmetric fp32 scale per output channel, their int32 column sums sum_k B[n][k], and a CPU-only
/// re-packed copy for the SIMD kernels (see detail/gemm_int8.hpp). Every GEMM checks the fields it
/// reads against rows and cols first (std::invalid_argument naming the field); col_sums, packed and
/// packed_corr are needed by the int8 GEMM only, and make_quantized_weights leaves them empty for
/// K > max_gemm_k.
struct quantized_weights {
  std::size_t rows = 0;  ///< N, output channels
  std::size_t cols = 0;  ///< K, the reduction
  std::vector<std::int8_t> data;
  std::vector<float> scales;
  std::vector<std::int32_t> col_sums;
  aligned_bytes packed;                   ///< panels of 16 channels x K/4 x 64 bytes, on a cache line
  std::vector<std::int32_t> packed_corr;  ///< 128 * col_sums, padded to the panels
  /// @brief Bytes a deployment stores: int8 weights and fp32 scales (not the packed CPU copy).
  std::size_t memory_bytes() const noexcept { return data.size() + scales.size() * sizeof(float); }
};

/// @brief The output epilogue: C = (acc - za[m] * colsum[n]) * sa[m] * sb[n] + bias[n], then the activation.
struct gemm_options {
  std::span<const float> bias = {};  ///< N floats, or empty
  activation_kind activation = activation_kind::none;
  simd_path path = simd_path::automatic;  ///< forces a kernel (tests, benchmarks)
  /// Threads to split the GEMM over (along N, or M when it has more blocks); null: the calling thread
  /// only. Any split gives the bits of one thread.
  executor* threads = nullptr;
};

/// @brief Requantization to int8 with gemmlowp's fixed-point arithmetic.
struct requantize_options {
  float output_scale = 1.0f;
  std::int32_t output_zero_point = 0;
  std::span<const float> bias = {};  ///< N floats in real units, rounded to int32 at scale sa * sb
  activation_kind activation = activation_kind::none;  ///< none or relu
  simd_path path = simd_path::automatic;
  executor* threads = nullptr;  ///< as gemm_options::threads (the int32 GEMM; the requantization is O(M N))
};

/// @brief Options of the weight-only GEMM: C = X * dequant(W)^T + bias, then the activation.
struct weight_only_options {
  std::span<const float> bias = {};
  activation_kind activation = activation_kind::none;
  simd_path path = simd_path::automatic;
  executor* threads = nullptr;  ///< as gemm_options::threads
};

}  // namespace quant
FRUGAL_END_NAMESPACE
