#pragma once

// Weight-only GEMM for decode (M = 1..16 per tile): the weights stream from HBM once, are dequantised in
// registers to fp16/bf16 and fed to mma.sync m16n8k16 with the tokens as the mma's M side (rows >= M are
// zeros). Each lane loads 16 contiguous bytes of one weight row; the mma only needs A and B to agree on which
// physical k sits in each k slot, so the int4 nibble pairs (k, k+4) that one LOP3 extracts are matched by a
// PRMT of the activations instead of being reordered. Four warps of a block split the block's K range and
// reduce through shared memory; grid.y splits K further (split-K) with fp32 partials reduced by a second
// kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "frugal/cuda/gemm/kernel/epilogue.cuh"
#include "frugal/cuda/gemm/kernel/mma_sm80.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda::kernel {

template <bool Int4, int NTiles>
struct weight_only_config {
  static constexpr int warps = 4;
  static constexpr int threads = warps * 32;
  static constexpr int n_tiles = NTiles;         // 8-row n-fragments per warp, each 16 B per lane in flight
  static constexpr int block_n = n_tiles * 8;    // weight rows per block
  static constexpr int lane_k = Int4 ? 32 : 16;  // k elements in one lane's 16-byte weight load
  static constexpr int step_k = 4 * lane_k;      // k covered by one warp iteration
  /// The first k of the 16 weight bytes lane group `tig` loads in warp iteration `step`.
  __host__ __device__ static constexpr int lane_k_begin(int step, int tig) {
    return step * step_k + tig * lane_k;
  }
};

// The register-level constants of the dequant, shared with the host model of it
// (tests/cuda/test_fragments.cu). One LOP3 with this mask takes nibbles q and q+4 (k and k+4) of a 32-bit
// weight word into the two halves.
inline constexpr std::uint32_t nibble_pair_mask = 0x000F000Fu;
// PRMT selectors pairing activations (k, k+4) from two registers: their low halves, and their high halves.
inline constexpr unsigned prmt_low_halves = 0x5410u, prmt_high_halves = 0x7632u;

struct weight_only_params {
  const void* x;
  int ldx;
  const void* w;
  int ldw_bytes;
  int m, n, k;
  const __half* group_scale;  // int4: N×(K/G)
  const std::uint8_t* zero_point;
  int group_size;
  int steps_per_split;  // warp iterations (of step_k) per grid.y slice
  int splits;
  float* partial;      // splits×M×N fp32 when splits > 1
  epilogue_params ep;  // scale_b = per-channel scale (int8), bias, activation, output
};

template <class X>
struct x_traits;
template <>
struct x_traits<__half> {
  static constexpr std::uint32_t magic = 0x64006400u;     // 1024.0 in each half
  static constexpr std::uint32_t magic_s4 = 0x64086408u;  // 1024 + 8: the xor turns signed -8..7 into 0..15
  static constexpr float bias_u4 = 1024.0f;  // magic's value: subtract it (+ zero point) from 0..15
  static constexpr float bias_s4 = 1032.0f;  // magic_s4's value less the xor's 8
  static constexpr std::uint32_t bias_s8 = 0x64806480u;  // 1152.0 in each half: 1024 + the xor's 128
  static __device__ __forceinline__ std::uint32_t sub(std::uint32_t a, std::uint32_t b) {
    __half2 r = __hsub2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<std::uint32_t*>(&r);
  }
  static __device__ __forceinline__ std::uint32_t mul(std::uint32_t a, std::uint32_t b) {
    __half2 r = __hmul2(*reinterpret_cast<__half2*>(&a), *reinterpret_cast<__half2*>(&b));
    return *reinterpret_cast<std::uint32_t*>(&r);
  }
  static __device__ __forceinline__ std::uint32_t splat(float v) {
    __half2 h = __float2half2_rn(v);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
  static __device__ __forceinline__ std::uint32_t splat_half(__half v) {
    __half2 h = __half2half2(v);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
  // int8 w (4 in u) -> two pairs, exact: 1024 + (w + 128) - 1152
  static __device__ __forceinline__ void s8x4(std::uint32_t u, std::uint32_t& lo, std::uint32_t& hi) {
    u ^= 0x80808080u;
    lo = sub(__byte_perm(u, 0x64646464u, 0x4140), bias_s8);
    hi = sub(__byte_perm(u, 0x64646464u, 0x4342), bias_s8);
  }
};
template <>
struct x_traits<__nv_bfloat16> {
  static constexpr std::uint32_t magic = 0x43004300u;     // 128.0 in each bf16
  static constexpr std::uint32_t magic_s4 = 0x43084308u;  // 128 + 8
  static constexpr float bias_u4 = 128.0f;
  static constexpr float bias_s4 = 136.0f;
  static __device__ __forceinline__ std::uint32_t sub(std::uint32_t a, std::uint32_t b) {
    __nv_bfloat162 r =
        __hsub2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<std::uint32_t*>(&r);
  }
  static __device__ __forceinline__ std::uint32_t mul(std::uint32_t a, std::uint32_t b) {
    __nv_bfloat162 r =
        __hmul2(*reinterpret_cast<__nv_bfloat162*>(&a), *reinterpret_cast<__nv_bfloat162*>(&b));
    return *reinterpret_cast<std::uint32_t*>(&r);
  }
  static __device__ __forceinline__ std::uint32_t splat(float v) {
    __nv_bfloat162 h = __float2bfloat162_rn(v);
    return *reinterpret_cast<std::uint32_t*>(&h);
  }
  static __device__ __forceinline__ std::uint32_t splat_half(__half v) { return splat(__half2float(v)); }
  // bf16 has too few mantissa bits for the 8-bit magic trick; go through fp32's (2^23 + byte) instead.
  static __device__ __forceinline__ void s8x4(std::uint32_t u, std::uint32_t& lo, std::uint32_t& hi) {
    u ^= 0x80808080u;
    const float off = 8388736.0f;  // 2^23 + 128
    const float f0 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440)) - off;
    const float f1 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7441)) - off;
    const float f2 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7442)) - off;
    const float f3 = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7443)) - off;
    __nv_bfloat162 a = __floats2bfloat162_rn(f0, f1), b = __floats2bfloat162_rn(f2, f3);
    lo = *reinterpret_cast<std::uint32_t*>(&a);
    hi = *reinterpret_cast<std::uint32_t*>(&b);
  }
};

__device__ __forceinline__ uint4 load_or_zero(const void* p, bool valid) {
  return valid ? __ldg(static_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}
// Weights are read once: keep them out of L1 so the activations stay there.
__device__ __forceinline__ uint4 load_stream_or_zero(const void* p, bool valid) {
  return valid ? __ldcs(static_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

template <class X, bool Int4, int NTiles>
__device__ __forceinline__ void weight_only_body(const weight_only_params& p) {
  using cfg = weight_only_config<Int4, NTiles>;
  using xt = x_traits<X>;
  __shared__ float red[cfg::warps][cfg::n_tiles * 4][32];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gid = lane >> 2, tig = lane & 3;
  const int n_block = blockIdx.x * cfg::block_n;
  const int m0 = blockIdx.z * 16;
  const int r0 = m0 + gid, r1 = m0 + gid + 8;
  const bool row0 = r0 < p.m, row1 = r1 < p.m;
  const X* x = static_cast<const X*>(p.x);
  const X* x0 = x + static_cast<std::size_t>(row0 ? r0 : 0) * p.ldx;
  const X* x1 = x + static_cast<std::size_t>(row1 ? r1 : 0) * p.ldx;
  const char* w = static_cast<const char*>(p.w);
  const int groups = Int4 ? p.k / p.group_size : 0;

  float acc[cfg::n_tiles][4];
#pragma unroll
  for (int j = 0; j < cfg::n_tiles; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.0f;

  const int total_steps = (p.k + cfg::step_k - 1) / cfg::step_k;
  const int s_begin = blockIdx.y * p.steps_per_split;
  const int s_end = min(total_steps, s_begin + p.steps_per_split);

  for (int s = s_begin + warp; s < s_end; s += cfg::warps) {
    const int k = cfg::lane_k_begin(s, tig);
    const bool kv = k < p.k;
    constexpr int xv = cfg::lane_k / 8;  // 16-byte activation loads per row
    uint4 xa[xv], xb[xv];
#pragma unroll
    for (int c = 0; c < xv; ++c) {
      xa[c] = load_or_zero(x0 + k + 8 * c, kv && row0);
      xb[c] = load_or_zero(x1 + k + 8 * c, kv && row1);
    }
    uint4 wv[cfg::n_tiles];
    int nrow[cfg::n_tiles];
#pragma unroll
    for (int j = 0; j < cfg::n_tiles; ++j) {
      nrow[j] = n_block + j * 8 + gid;
      const bool nv = nrow[j] < p.n && kv;
      wv[j] = load_stream_or_zero(
          w + static_cast<std::size_t>(nv ? nrow[j] : 0) * p.ldw_bytes + (Int4 ? k / 2 : k), nv);
    }
    const std::uint32_t* xra = reinterpret_cast<const std::uint32_t*>(xa);
    const std::uint32_t* xrb = reinterpret_cast<const std::uint32_t*>(xb);
#pragma unroll
    for (int j = 0; j < cfg::n_tiles; ++j) {
      const std::uint32_t wr[4] = {wv[j].x, wv[j].y, wv[j].z, wv[j].w};
      if constexpr (Int4) {
        const bool nv = nrow[j] < p.n && kv;
        const std::size_t gi =
            static_cast<std::size_t>(nv ? nrow[j] : 0) * groups + (kv ? k / p.group_size : 0);
        const std::uint32_t scale = xt::splat_half(nv ? p.group_scale[gi] : __half(0.0f));
        std::uint32_t zero;
        if (p.zero_point != nullptr) {
          const float zp = nv ? static_cast<float>(p.zero_point[gi]) : 0.0f;
          zero = xt::splat(xt::bias_u4 + zp);
        } else {
          zero = xt::splat(xt::bias_s4);
        }
#pragma unroll
        for (int wi = 0; wi < 4; ++wi) {
          const std::uint32_t u = wr[wi];
          std::uint32_t b[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const std::uint32_t sh = u >> (4 * q);
            const std::uint32_t v = p.zero_point != nullptr
                                        ? sm80::lop3_and_or(sh, nibble_pair_mask, xt::magic)
                                        : sm80::lop3_and_xor(sh, nibble_pair_mask, xt::magic_s4);
            b[q] = xt::mul(xt::sub(v, zero), scale);
          }
#pragma unroll
          for (int st = 0; st < 2; ++st) {
            const std::uint32_t lo0 = xra[4 * wi + st], hi0 = xra[4 * wi + st + 2];
            const std::uint32_t lo1 = xrb[4 * wi + st], hi1 = xrb[4 * wi + st + 2];
            const std::uint32_t a[4] = {
                __byte_perm(lo0, hi0, prmt_low_halves), __byte_perm(lo1, hi1, prmt_low_halves),
                __byte_perm(lo0, hi0, prmt_high_halves), __byte_perm(lo1, hi1, prmt_high_halves)};
            sm80::mma_f16<X>(acc[j], a, b[2 * st], b[2 * st + 1]);
          }
        }
      } else {
#pragma unroll
        for (int wi = 0; wi < 4; ++wi) {
          std::uint32_t b0, b1;
          xt::s8x4(wr[wi], b0, b1);
          const std::uint32_t a[4] = {xra[2 * wi], xrb[2 * wi], xra[2 * wi + 1], xrb[2 * wi + 1]};
          sm80::mma_f16<X>(acc[j], a, b0, b1);
        }
      }
    }
  }

#pragma unroll
  for (int j = 0; j < cfg::n_tiles; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) red[warp][j * 4 + r][lane] = acc[j][r];
  __syncthreads();
  for (int idx = threadIdx.x; idx < cfg::n_tiles * 4 * 32; idx += cfg::threads) {
    const int l = idx & 31, jr = idx >> 5, j = jr >> 2, r = jr & 3;
    float v = 0.0f;
#pragma unroll
    for (int wp = 0; wp < cfg::warps; ++wp) v += red[wp][jr][l];
    const int m = m0 + (l >> 2) + (r >= 2 ? 8 : 0);
    const int n = n_block + j * 8 + (l & 3) * 2 + (r & 1);
    if (m >= p.m || n >= p.n) continue;
    if (p.splits > 1) {
      p.partial[(static_cast<std::size_t>(blockIdx.y) * p.m + m) * p.n + n] = v;
    } else {
      store_one(p.ep, m, n, epilogue_value(p.ep, v, m, n));
    }
  }
}

template <class X, int NTiles>
__global__ void __launch_bounds__(128) gemm_w8a16_tensorop_sm80(weight_only_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  weight_only_body<X, false, NTiles>(p);
#else
  __trap();
#endif
}

template <class X, int NTiles>
__global__ void __launch_bounds__(128) gemm_w4a16_tensorop_sm80(weight_only_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  weight_only_body<X, true, NTiles>(p);
#else
  __trap();
#endif
}

// Sums the split-K partials in a fixed order (deterministic) and applies the epilogue. A template so that the
// header can be included by several translation units.
template <int = 0>
__global__ void __launch_bounds__(256)
    splitk_reduce_f32(const float* partial, int splits, int m, int n, epilogue_params ep) {
  const std::size_t total = static_cast<std::size_t>(m) * n;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += partial[s * total + i];
    const int row = static_cast<int>(i / n), col = static_cast<int>(i % n);
    store_one(ep, row, col, epilogue_value(ep, v, row, col));
  }
}

}  // namespace cuda::kernel
FRUGAL_END_NAMESPACE
