#pragma once

// The sm_90a TN GEMM on wgmma: the same cp.async multistage pipeline, swizzled tiles and fused epilogue as
// the sm_80 kernel, with the ldmatrix + mma.sync inner loop replaced by warpgroup MMAs reading shared memory
// through descriptors. The sm_80 tile layout (128-byte rows, 16-byte chunk c of row r at c ^ (r & 7),
// 1024-byte aligned stages) is exactly wgmma's K-major 128-byte-swizzle canonical layout, so the loader is
// shared. Two consumer warpgroups each own 64 rows of a 128×128 tile. TMA and a producer warp are the next
// step (RESULTS.md). Opt-in (gemm_tile::wgmma_sm90) until a GPU run has checked and timed it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "frugal/cuda/gemm/kernel/gemm_tn_sm80.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda::kernel {

namespace sm90 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#  define FRUGAL_CUDA_SM90A_ENABLED 1
#endif

// Shared-memory matrix descriptor, K-major with the 128-byte swizzle: 8-row groups 1024 bytes apart (SBO),
// the leading offset unused by swizzled K-major layouts, swizzle mode 1 in bits 62-63.
__device__ __forceinline__ std::uint64_t smem_desc_sw128(std::uint32_t smem_byte_addr) {
  return (static_cast<std::uint64_t>((smem_byte_addr & 0x3FFFF) >> 4)) | (std::uint64_t(1) << 16) |
         (std::uint64_t(1024 >> 4) << 32) | (std::uint64_t(1) << 62);
}

#ifdef FRUGAL_CUDA_SM90A_ENABLED
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// cp.async writes through the generic proxy; wgmma reads through the async proxy.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accumulator accesses across the asynchronous MMAs.
template <class T>
__device__ __forceinline__ void fence_operands(T (&d)[64]) {
#  pragma unroll
  for (int i = 0; i < 64; ++i) {
    if constexpr (std::is_same_v<T, int>)
      asm volatile("" : "+r"(d[i])::"memory");
    else
      asm volatile("" : "+f"(d[i])::"memory");
  }
}

__device__ __forceinline__ void wgmma_s8(int (&d)[64], std::uint64_t da, std::uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, "
      "%2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
      "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]),
        "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]),
        "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]),
        "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]),
        "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]),
        "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]),
        "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
      : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_f16(float (&d)[64], std::uint64_t da, std::uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, "
      "%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
      "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_bf16(float (&d)[64], std::uint64_t da, std::uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, "
      "%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, "
      "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
}
#endif

}  // namespace sm90

struct tile_sm90 {
  static constexpr int BM = 128, BN = 128, STAGES = 4, MIN_BLOCKS = 1;
  static constexpr int threads = 256;  // two warpgroups
  static constexpr int bk_bytes = 128;
  static constexpr int stage_bytes = (BM + BN) * bk_bytes;
  static constexpr int smem_bytes = STAGES * stage_bytes + 1024;  // + slack to align the base to 1024
};

template <class Elem>
__device__ __forceinline__ void gemm_tn_sm90_body(const gemm_tn_params& p) {
#ifdef FRUGAL_CUDA_SM90A_ENABLED
  using Cfg = tile_sm90;
  using acc_t = std::conditional_t<std::is_same_v<Elem, std::int8_t>, int, float>;
  extern __shared__ __align__(1024) unsigned char smem_sm90[];
  const std::uint32_t smem_base = (sm80::smem_addr(smem_sm90) + 1023u) & ~1023u;

  const int m0 = blockIdx.y * Cfg::BM, n0 = blockIdx.x * Cfg::BN;
  const int wg = threadIdx.x >> 7, warp_in_wg = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;

  acc_t acc[64];
#  pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = acc_t(0);

  const int ktiles = (p.k_bytes + Cfg::bk_bytes - 1) / Cfg::bk_bytes;
  auto stage_a = [&](int s) { return smem_base + s * Cfg::stage_bytes; };
  auto stage_b = [&](int s) { return smem_base + s * Cfg::stage_bytes + Cfg::BM * Cfg::bk_bytes; };

#  pragma unroll
  for (int s = 0; s < Cfg::STAGES - 1; ++s) {
    if (s < ktiles) load_stage<void, Cfg>(p, stage_a(s), stage_b(s), m0, n0, s * Cfg::bk_bytes);
    sm80::cp_async_commit();
  }

  for (int kt = 0; kt < ktiles; ++kt) {
    sm80::cp_async_wait<Cfg::STAGES - 2>();
    sm90::fence_proxy_async_shared();
    __syncthreads();
    const int next = kt + Cfg::STAGES - 1;
    if (next < ktiles) {
      const int s = next % Cfg::STAGES;
      load_stage<void, Cfg>(p, stage_a(s), stage_b(s), m0, n0, next * Cfg::bk_bytes);
    }
    sm80::cp_async_commit();

    const int s = kt % Cfg::STAGES;
    const std::uint64_t da = sm90::smem_desc_sw128(stage_a(s) + wg * 64 * Cfg::bk_bytes);
    const std::uint64_t db = sm90::smem_desc_sw128(stage_b(s));
    sm90::fence_operands(acc);
    sm90::wgmma_fence();
#  pragma unroll
    for (int ks = 0; ks < Cfg::bk_bytes / 32; ++ks) {
      // 32 bytes further along K: the descriptor address moves in 16-byte units; the swizzle is applied by
      // the hardware from the address bits, as for ldmatrix.
      if constexpr (std::is_same_v<Elem, std::int8_t>)
        sm90::wgmma_s8(acc, da + 2 * ks, db + 2 * ks);
      else if constexpr (std::is_same_v<Elem, __half>)
        sm90::wgmma_f16(acc, da + 2 * ks, db + 2 * ks);
      else
        sm90::wgmma_bf16(acc, da + 2 * ks, db + 2 * ks);
    }
    sm90::wgmma_commit();
    sm90::wgmma_wait_all();  // the next iteration's loads overwrite the stage read here
    sm90::fence_operands(acc);
  }
  sm80::cp_async_wait<0>();

  const int gid = lane >> 2, tig = lane & 3;
#  pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int n = n0 + j * 8 + tig * 2;
    if (n >= p.n) continue;
#  pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + wg * 64 + warp_in_wg * 16 + gid + h * 8;
      if (m >= p.m) continue;
      const acc_t v0 = acc[j * 4 + 2 * h], v1 = acc[j * 4 + 2 * h + 1];
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
#else
  (void)p;
  __trap();
#endif
}

// Templates so that the header can be included by several translation units.
template <int = 0>
__global__ void __launch_bounds__(256, 1) gemm_s8s8_s32_wgmma_sm90a(gemm_tn_params p) {
  gemm_tn_sm90_body<std::int8_t>(p);
}
template <int = 0>
__global__ void __launch_bounds__(256, 1) gemm_f16f16_f32_wgmma_sm90a(gemm_tn_params p) {
  gemm_tn_sm90_body<__half>(p);
}
template <int = 0>
__global__ void __launch_bounds__(256, 1) gemm_bf16bf16_f32_wgmma_sm90a(gemm_tn_params p) {
  gemm_tn_sm90_body<__nv_bfloat16>(p);
}

}  // namespace cuda::kernel
FRUGAL_END_NAMESPACE

#undef FRUGAL_CUDA_SM90A_ENABLED
