#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "frugal/cuda/gemm/arguments.cuh"
#include "frugal/namespace.hpp"
#include "frugal/quant/detail/gelu.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda::kernel {

// The fused epilogue shared by every GEMM: v = act(alpha * (acc - za[m]*colsum[n]) * sa[m] * sb[n] +
// bias[n]), stored as c_type. Null pointers mean "absent" (scale 1, bias 0, zero point 0). Everything is a
// runtime choice so that one kernel instantiation serves all epilogues; the branches are uniform across the
// grid.
struct epilogue_params {
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  const std::int32_t* zero_a = nullptr;
  const std::int32_t* colsum_b = nullptr;
  const float* bias = nullptr;
  float alpha = 1.0f;
  quant::activation_kind act = quant::activation_kind::none;
  void* c = nullptr;
  int ldc = 0;
  element_type c_type = element_type::f16;
  bool pair_store = false;  // ldc and c allow storing two adjacent columns at once
};

__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x *
         (1.0f + tanhf(quant::detail::gelu_tanh_scale * (x + quant::detail::gelu_tanh_cubic * x * x * x)));
}

// gelu_erf never reaches a kernel: detail::check_activation refuses it on the host.
__device__ __forceinline__ float apply_activation(float v, quant::activation_kind act) {
  if (act == quant::activation_kind::relu) return fmaxf(v, 0.0f);
  if (act == quant::activation_kind::gelu) return gelu_tanh(v);
  return v;
}

__device__ __forceinline__ float epilogue_value(const epilogue_params& p, float acc, int m, int n) {
  float v = acc * p.alpha;
  if (p.scale_a) v *= __ldg(p.scale_a + m);
  if (p.scale_b) v *= __ldg(p.scale_b + n);
  if (p.bias) v += __ldg(p.bias + n);
  return apply_activation(v, p.act);
}

__device__ __forceinline__ float epilogue_value_s32(const epilogue_params& p, int acc, int m, int n) {
  if (p.zero_a) acc -= __ldg(p.zero_a + m) * __ldg(p.colsum_b + n);
  return epilogue_value(p, static_cast<float>(acc), m, n);
}

// Stores columns n and n+1 (when n + 1 < N) of row m.
__device__ __forceinline__ void store_pair(const epilogue_params& p, int m, int n, int N, float v0,
                                           float v1) {
  const std::size_t off = static_cast<std::size_t>(m) * p.ldc + n;
  const bool both = n + 1 < N;
  switch (p.c_type) {
    case element_type::f32: {
      float* c = static_cast<float*>(p.c) + off;
      if (both && p.pair_store) {
        *reinterpret_cast<float2*>(c) = make_float2(v0, v1);
      } else {
        c[0] = v0;
        if (both) c[1] = v1;
      }
      break;
    }
    case element_type::bf16: {
      __nv_bfloat16* c = static_cast<__nv_bfloat16*>(p.c) + off;
      if (both && p.pair_store) {
        *reinterpret_cast<__nv_bfloat162*>(c) = __floats2bfloat162_rn(v0, v1);
      } else {
        c[0] = __float2bfloat16_rn(v0);
        if (both) c[1] = __float2bfloat16_rn(v1);
      }
      break;
    }
    default: {
      __half* c = static_cast<__half*>(p.c) + off;
      if (both && p.pair_store) {
        *reinterpret_cast<__half2*>(c) = __floats2half2_rn(v0, v1);
      } else {
        c[0] = __float2half_rn(v0);
        if (both) c[1] = __float2half_rn(v1);
      }
      break;
    }
  }
}

__device__ __forceinline__ void store_one(const epilogue_params& p, int m, int n, float v) {
  const std::size_t off = static_cast<std::size_t>(m) * p.ldc + n;
  switch (p.c_type) {
    case element_type::f32:
      static_cast<float*>(p.c)[off] = v;
      break;
    case element_type::bf16:
      static_cast<__nv_bfloat16*>(p.c)[off] = __float2bfloat16_rn(v);
      break;
    default:
      static_cast<__half*>(p.c)[off] = __float2half_rn(v);
      break;
  }
}

__device__ __forceinline__ void store_pair_s32(const epilogue_params& p, int m, int n, int N, int v0,
                                               int v1) {
  int* c = static_cast<int*>(p.c) + static_cast<std::size_t>(m) * p.ldc + n;
  if (n + 1 < N && p.pair_store) {
    *reinterpret_cast<int2*>(c) = make_int2(v0, v1);
  } else {
    c[0] = v0;
    if (n + 1 < N) c[1] = v1;
  }
}

}  // namespace cuda::kernel
FRUGAL_END_NAMESPACE
