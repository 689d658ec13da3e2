#pragma once

// The multistage tensor-core GEMM for "TN" operands (A M×K and B N×K, both K-contiguous): C = A·Bᵀ with the
// fused epilogue. One body serves int8 (mma m16n8k32) and fp16/bf16 (mma m16n8k16): both fragments cover 32
// bytes of K per row, so the shared-memory tiles, ldmatrix addressing and swizzle are the same; only the mma
// differs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "frugal/cuda/gemm/kernel/epilogue.cuh"
#include "frugal/cuda/gemm/kernel/mma_sm80.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda::kernel {

struct mma_s8s8_s32 {
  using element = std::int8_t;
  using accumulator = int;
  static __device__ __forceinline__ void mma(int (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                             std::uint32_t b1) {
    sm80::mma_s8(d, a, b0, b1);
  }
};
template <class T>
struct mma_f16f16_f32 {
  using element = T;
  using accumulator = float;
  static __device__ __forceinline__ void mma(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                             std::uint32_t b1) {
    sm80::mma_f16<T>(d, a, b0, b1);
  }
};

/// Tile shape: BM×BN per block, WM×WN warps, STAGES deep cp.async pipeline, 128 bytes of K per stage.
template <int BM_, int BN_, int WM_, int WN_, int STAGES_, int MIN_BLOCKS_>
struct tile_config {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, STAGES = STAGES_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int threads = WM * WN * 32;
  static constexpr int bk_bytes = 128;
  static constexpr int stage_bytes = (BM + BN) * bk_bytes;
  static constexpr int smem_bytes = STAGES * stage_bytes;
  static constexpr int TM = BM / WM, TN = BN / WN;
  static constexpr int MF = TM / 16, NF = TN / 8;
  static_assert(TM % 16 == 0 && TN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(BM * 8 % threads == 0 && BN * 8 % threads == 0,
                "every thread copies the same number of chunks");
};

using tile_large = tile_config<128, 128, 2, 4, 4, 1>;
// Small M is bound by streaming B: six stages keep ~40 KB of B in flight per block.
using tile_small = tile_config<32, 64, 1, 4, 6, 2>;

struct gemm_tn_params {
  const void* a;
  const void* b;
  int m, n, k_bytes;  // K in bytes: K for int8, 2K for fp16/bf16
  int lda_bytes, ldb_bytes;
  epilogue_params ep;
};

// Shared-memory rows are 128 bytes (8 chunks of 16); chunk c of row r lives at c ^ (r & 7), so the 8 rows an
// ldmatrix phase reads, and the 8 chunks a cp.async wave writes, fall in distinct bank groups.
__host__ __device__ constexpr int swizzle(int row, int chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// The index arithmetic of the kernel below, shared with the host test that models its data movement
// (tests/cuda/test_fragments.cu), so that the two cannot drift apart.
struct tn_lane_roles {
  int a_row, a_chunk;  // this lane's ldmatrix.x4 row address for A fragment 0, k step 0
  int b_row, b_chunk;  // and for B fragments 0 and 1
};
// ldmatrix.x4 lane roles: A takes rows (lane%8) + 8*(matrix&1) and chunk +(matrix>>1), giving a0..a3 in mma
// order; B takes rows (lane%8) + 8*(matrix>>1) and chunk +(matrix&1), giving b0,b1 of two n-fragments.
template <class Cfg>
__host__ __device__ constexpr tn_lane_roles tn_roles(int warp, int lane) {
  const int wm = warp / Cfg::WN, wn = warp % Cfg::WN;
  const int lrow = lane & 7, lmat = lane >> 3;
  return {wm * Cfg::TM + lrow + ((lmat & 1) << 3), lmat >> 1, wn * Cfg::TN + lrow + ((lmat >> 1) << 3),
          lmat & 1};
}
// The tile row of accumulator acc[i][j][2*h + e] of a lane (its column is tn_acc_col(..., e)).
template <class Cfg>
__host__ __device__ constexpr int tn_acc_row(int warp, int lane, int i, int h) {
  return (warp / Cfg::WN) * Cfg::TM + i * 16 + (lane >> 2) + h * 8;
}
template <class Cfg>
__host__ __device__ constexpr int tn_acc_col(int warp, int lane, int j, int e) {
  return (warp % Cfg::WN) * Cfg::TN + j * 8 + (lane & 3) * 2 + e;
}

template <class Op, class Cfg>
__device__ __forceinline__ void load_stage(const gemm_tn_params& p, std::uint32_t smem_a,
                                           std::uint32_t smem_b, int m0, int n0, int kbyte0) {
  const char* a = static_cast<const char*>(p.a);
  const char* b = static_cast<const char*>(p.b);
#pragma unroll
  for (int it = 0; it < Cfg::BM * 8 / Cfg::threads; ++it) {
    const int i = threadIdx.x + it * Cfg::threads;
    const int r = i >> 3, c = i & 7;
    const int gm = m0 + r, gk = kbyte0 + c * 16;
    const bool valid = gm < p.m && gk < p.k_bytes;
    const char* src = valid ? a + static_cast<std::size_t>(gm) * p.lda_bytes + gk : a;
    sm80::cp_async_16(smem_a + swizzle(r, c), src, valid);
  }
#pragma unroll
  for (int it = 0; it < Cfg::BN * 8 / Cfg::threads; ++it) {
    const int i = threadIdx.x + it * Cfg::threads;
    const int r = i >> 3, c = i & 7;
    const int gn = n0 + r, gk = kbyte0 + c * 16;
    const bool valid = gn < p.n && gk < p.k_bytes;
    const char* src = valid ? b + static_cast<std::size_t>(gn) * p.ldb_bytes + gk : b;
    sm80::cp_async_16(smem_b + swizzle(r, c), src, valid);
  }
}

template <class Op, class Cfg>
__device__ __forceinline__ void gemm_tn_body(const gemm_tn_params& p) {
  using acc_t = typename Op::accumulator;
  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t smem_base = sm80::smem_addr(smem);

  const int m0 = blockIdx.y * Cfg::BM, n0 = blockIdx.x * Cfg::BN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  acc_t acc[Cfg::MF][Cfg::NF][4];
#pragma unroll
  for (int i = 0; i < Cfg::MF; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::NF; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = acc_t(0);

  const int ktiles = (p.k_bytes + Cfg::bk_bytes - 1) / Cfg::bk_bytes;
  auto stage_a = [&](int s) { return smem_base + s * Cfg::stage_bytes; };
  auto stage_b = [&](int s) { return smem_base + s * Cfg::stage_bytes + Cfg::BM * Cfg::bk_bytes; };

#pragma unroll
  for (int s = 0; s < Cfg::STAGES - 1; ++s) {
    if (s < ktiles) load_stage<Op, Cfg>(p, stage_a(s), stage_b(s), m0, n0, s * Cfg::bk_bytes);
    sm80::cp_async_commit();
  }

  const tn_lane_roles roles = tn_roles<Cfg>(warp, lane);
  const int a_row = roles.a_row, a_chunk = roles.a_chunk, b_row = roles.b_row, b_chunk = roles.b_chunk;

  for (int kt = 0; kt < ktiles; ++kt) {
    sm80::cp_async_wait<Cfg::STAGES - 2>();
    __syncthreads();
    const int next = kt + Cfg::STAGES - 1;
    if (next < ktiles) {
      const int s = next % Cfg::STAGES;
      load_stage<Op, Cfg>(p, stage_a(s), stage_b(s), m0, n0, next * Cfg::bk_bytes);
    }
    sm80::cp_async_commit();

    const int s = kt % Cfg::STAGES;
    const std::uint32_t sa = stage_a(s), sb = stage_b(s);
#pragma unroll
    for (int ks = 0; ks < Cfg::bk_bytes / 32; ++ks) {
      std::uint32_t af[Cfg::MF][4];
      std::uint32_t bf[Cfg::NF][2];
#pragma unroll
      for (int i = 0; i < Cfg::MF; ++i)
        sm80::ldmatrix_x4(af[i], sa + swizzle(a_row + i * 16, ks * 2 + a_chunk));
#pragma unroll
      for (int j = 0; j < Cfg::NF; j += 2) {
        std::uint32_t r[4];
        sm80::ldmatrix_x4(r, sb + swizzle(b_row + j * 8, ks * 2 + b_chunk));
        bf[j][0] = r[0];
        bf[j][1] = r[1];
        bf[j + 1][0] = r[2];
        bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < Cfg::MF; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::NF; ++j) Op::mma(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
  }
  sm80::cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < Cfg::MF; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::NF; ++j) {
      const int n = n0 + tn_acc_col<Cfg>(warp, lane, j, 0);
      if (n >= p.n) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + tn_acc_row<Cfg>(warp, lane, i, h);
        if (m >= p.m) continue;
        const acc_t v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if constexpr (std::is_same_v<acc_t, int>) {
          if (p.ep.c_type == element_type::i32) {
            store_pair_s32(p.ep, m, n, p.n, v0, v1);
            continue;
          }
          store_pair(p.ep, m, n, p.n, epilogue_value_s32(p.ep, v0, m, n),
                     n + 1 < p.n ? epilogue_value_s32(p.ep, v1, m, n + 1) : 0.0f);
        } else {
          store_pair(p.ep, m, n, p.n, epilogue_value(p.ep, v0, m, n),
                     n + 1 < p.n ? epilogue_value(p.ep, v1, m, n + 1) : 0.0f);
        }
      }
    }
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::threads, Cfg::MIN_BLOCKS)
    gemm_s8s8_s32_tensorop_sm80(gemm_tn_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  gemm_tn_body<mma_s8s8_s32, Cfg>(p);
#else
  __trap();
#endif
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::threads, Cfg::MIN_BLOCKS)
    gemm_f16f16_f32_tensorop_sm80(gemm_tn_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  gemm_tn_body<mma_f16f16_f32<__half>, Cfg>(p);
#else
  __trap();
#endif
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::threads, Cfg::MIN_BLOCKS)
    gemm_bf16bf16_f32_tensorop_sm80(gemm_tn_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  gemm_tn_body<mma_f16f16_f32<__nv_bfloat16>, Cfg>(p);
#else
  __trap();
#endif
}

}  // namespace cuda::kernel
FRUGAL_END_NAMESPACE
