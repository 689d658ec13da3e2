#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "frugal/element_type.hpp"
#include "frugal/namespace.hpp"
#include "frugal/quant/activation.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda {

// Operand and output types are frugal::element_type; kernel names keep PTX's spelling (gemm_s8s8_s32_...), as
// the instructions do.

/// @brief The kernel and tile of the TN GEMMs: mma.sync 128×128 (8 warps) or 32×64 (4 warps, for small M or
/// too few large tiles to fill the SMs), or the sm_90a wgmma 128×128 kernel (opt-in until checked on a GPU).
/// `automatic` picks an mma.sync tile by shape; the others are for tuning sweeps.
enum class gemm_tile { automatic, large, small, wgmma_sm90 };

/// @brief W8A8: C = act((acc - zero_a[m]*colsum_b[n]) * scale_a[m] * scale_b[n] + bias[n]), acc = sum_k
/// A[m][k]*B[n][k] exact in int32. A is M×K row-major int8 (activations), B is N×K row-major int8 (weights,
/// K-major). With `c_type == element_type::i32` the raw int32 accumulators are written and the epilogue
/// fields are ignored.
struct gemm_w8a8_arguments {
  int m = 0, n = 0, k = 0;
  const std::int8_t* a = nullptr;
  int lda = 0;  ///< elements; multiple of 16
  const std::int8_t* b = nullptr;
  int ldb = 0;                             ///< elements; multiple of 16
  const float* scale_a = nullptr;          ///< [M] per-token scales
  const float* scale_b = nullptr;          ///< [N] per-channel scales
  const std::int32_t* zero_a = nullptr;    ///< optional [M] activation zero points (asymmetric A)
  const std::int32_t* colsum_b = nullptr;  ///< [N] sum_k B[n][k]; required with zero_a
  const float* bias = nullptr;             ///< optional [N]
  quant::activation_kind act = quant::activation_kind::none;  ///< none, relu or gelu (tanh); not gelu_erf
  void* c = nullptr;
  int ldc = 0;                              ///< elements
  element_type c_type = element_type::f16;  ///< f32, f16, bf16 or i32
  gemm_tile tile = gemm_tile::automatic;
};

/// @brief fp16/bf16 GEMM with fp32 accumulation: C = act(alpha * acc * scale_a[m] * scale_b[n] + bias[n]);
/// every scale and the bias are optional (null means 1 or 0). A is M×K row-major, B is N×K row-major.
struct gemm_f16_arguments {
  int m = 0, n = 0, k = 0;
  element_type ab_type = element_type::f16;  ///< f16 or bf16, for both A and B
  const void* a = nullptr;
  int lda = 0;  ///< elements; multiple of 8
  const void* b = nullptr;
  int ldb = 0;  ///< elements; multiple of 8
  float alpha = 1.0f;
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  const float* bias = nullptr;
  quant::activation_kind act = quant::activation_kind::none;  ///< none, relu or gelu (tanh); not gelu_erf
  void* c = nullptr;
  int ldc = 0;
  element_type c_type = element_type::f16;  ///< f32, f16 or bf16
  gemm_tile tile = gemm_tile::automatic;
};

/// @brief W8A16 weight-only: C = act(sum_k X[m][k] * W[n][k] * scale[n] + bias[n]). X is M×K fp16/bf16
/// row-major; W is N×K int8 row-major with symmetric per-channel float scales. Tuned for M = 1..16.
struct gemm_w8a16_arguments {
  int m = 0, n = 0, k = 0;
  element_type x_type = element_type::f16;  ///< f16 or bf16
  const void* x = nullptr;
  int ldx = 0;  ///< elements; multiple of 8
  const std::int8_t* w = nullptr;
  int ldw = 0;                                                ///< elements (bytes); multiple of 16
  const float* scale = nullptr;                               ///< [N]
  const float* bias = nullptr;                                ///< optional [N]
  quant::activation_kind act = quant::activation_kind::none;  ///< none, relu or gelu (tanh); not gelu_erf
  void* c = nullptr;
  int ldc = 0;
  element_type c_type = element_type::f16;  ///< f32, or the same as x_type
  int split_k = 0;            ///< K slices reduced through the workspace; 0 picks one for the device
  int block_n = 0;            ///< weight rows per block, 32 or 64; 0 picks by N
  void* workspace = nullptr;  ///< get_workspace_size(args) bytes when split_k resolves to more than 1
  std::size_t workspace_bytes = 0;
};

/// @brief W4A16 weight-only, groupwise: C = act(sum_k X[m][k] * (q[n][k] - zp[n][g]) * scale[n][g] +
/// bias[n]), g = k / group_size. W is N rows of K/2 bytes: byte j holds k = 2j in its low nibble and k = 2j+1
/// in its high nibble; symmetric weights are two's-complement -8..7 (zero_point null), asymmetric ones 0..15
/// with a uint8 zero point per group. Scales are fp16, N×(K/G) row-major; zero points have the same shape.
struct gemm_w4a16_arguments {
  int m = 0, n = 0, k = 0;
  element_type x_type = element_type::f16;  ///< f16 or bf16
  const void* x = nullptr;
  int ldx = 0;  ///< elements; multiple of 8
  const std::uint8_t* w = nullptr;
  int ldw = 0;           ///< bytes per packed row (>= K/2); multiple of 16
  int group_size = 128;  ///< 32, 64 or 128; K must be a multiple of it
  const __half* scale = nullptr;
  const std::uint8_t* zero_point = nullptr;  ///< optional: asymmetric weights
  const float* bias = nullptr;
  quant::activation_kind act = quant::activation_kind::none;  ///< none, relu or gelu (tanh); not gelu_erf
  void* c = nullptr;
  int ldc = 0;
  element_type c_type = element_type::f16;
  int split_k = 0;
  int block_n = 0;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

/// @brief quantize_rows stores 8 int8 per 8-byte vector: q must be aligned to this many bytes and ldq a
/// multiple of it.
inline constexpr int quantize_rows_q_align = 8;

/// @brief Dynamic per-token int8 quantization: scale[m] = max_k |X[m][k]| / 127 (0 for an all-zero row) and
/// Q[m][k] = clamp(rint(X[m][k] / scale[m]), -127, 127), rounding to nearest even, in one pass.
struct quantize_rows_arguments {
  int m = 0, k = 0;
  element_type x_type = element_type::f16;  ///< f16 or bf16
  const void* x = nullptr;
  int ldx = 0;  ///< elements; multiple of 8
  std::int8_t* q = nullptr;
  int ldq = 0;             ///< elements; >= K, a multiple of 8 (quantize_rows_q_align); q 8-byte aligned
  float* scale = nullptr;  ///< [M]
};

/// @brief What a kernel needs to know about the device: compute capability and SM count.
struct device_info {
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
};

}  // namespace cuda
FRUGAL_END_NAMESPACE
