#pragma once

// Dynamic per-token int8 quantisation, one block per row: the row is read once into registers (rows longer
// than threads x 8 x cache_chunks elements re-read the rest, which then comes from L1/L2), reduced to its
// absmax, and written as int8 with the IEEE division the host reference uses, so the result is bit-exact.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "frugal/cuda/gemm/arguments.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda::kernel {

struct quantize_rows_params {
  const void* x;
  int ldx;
  std::int8_t* q;
  int ldq;
  float* scale;
  int m, k;
};

template <class X>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const X* h = reinterpret_cast<const X*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    if constexpr (std::is_same_v<X, __half>) {
      f[i] = __half2float(h[i]);
    } else {
      f[i] = __bfloat162float(h[i]);
    }
  }
}

template <class X>
__global__ void __launch_bounds__(256) quantize_rows_s8_sm80(quantize_rows_params p) {
  constexpr int threads = 256, cache_chunks = 4;
  __shared__ float warp_max[threads / 32];
  const int row = blockIdx.x;
  const int chunks = p.k / 8;
  const uint4* x =
      reinterpret_cast<const uint4*>(static_cast<const X*>(p.x) + static_cast<std::size_t>(row) * p.ldx);

  uint4 cache[cache_chunks];
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < cache_chunks; ++c) {
    const int i = threadIdx.x + c * threads;
    cache[c] = i < chunks ? __ldg(x + i) : make_uint4(0, 0, 0, 0);
    float f[8];
    unpack8<X>(cache[c], f);
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(f[e]));
  }
  for (int i = threadIdx.x + cache_chunks * threads; i < chunks; i += threads) {
    float f[8];
    unpack8<X>(__ldg(x + i), f);
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(f[e]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = warp_max[0];
#pragma unroll
  for (int w = 1; w < threads / 32; ++w) amax = fmaxf(amax, warp_max[w]);

  const float s = amax / 127.0f;
  if (threadIdx.x == 0) p.scale[row] = s;
  std::int8_t* q = p.q + static_cast<std::size_t>(row) * p.ldq;
  auto emit = [&](const uint4& v, int i) {
    float f[8];
    unpack8<X>(v, f);
    std::uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      int qi = 0;
      if (amax > 0.0f) qi = max(-127, min(127, __float2int_rn(__fdiv_rn(f[e], s))));
      packed[e >> 2] |= (static_cast<std::uint32_t>(qi) & 0xFFu) << (8 * (e & 3));
    }
    static_assert(sizeof(uint2) == quantize_rows_q_align, "can_implement checks q for this store");
    *reinterpret_cast<uint2*>(q + 8 * i) = make_uint2(packed[0], packed[1]);
  };
#pragma unroll
  for (int c = 0; c < cache_chunks; ++c) {
    const int i = threadIdx.x + c * threads;
    if (i < chunks) emit(cache[c], i);
  }
  for (int i = threadIdx.x + cache_chunks * threads; i < chunks; i += threads) emit(__ldg(x + i), i);
}

}  // namespace cuda::kernel
FRUGAL_END_NAMESPACE
