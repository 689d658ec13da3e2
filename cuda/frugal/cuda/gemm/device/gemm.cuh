#pragma once

// Host side of every GEMM: can_implement() names precisely why a problem cannot run; run() launches and
// checks every CUDA call, never aborting. The functions are overloaded on the arguments struct.
//
// Free functions, not CUTLASS's device::Gemm class: these GEMMs keep no per-problem state (what a launch
// needs, the device facts and the per-kernel shared-memory opt-in, is cached per process and device), so an
// object would only carry the arguments from initialize() to run(). The cuBLASLt baselines (cublaslt.cuh) are
// classes because a cuBLASLt plan does own state: descriptors, the heuristic's algorithm and, for W8A8, the
// int32 scratch. Both answer the same questions under the same names: can_implement, get_workspace_size
// (frugal's; the baselines own their scratch) and run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "frugal/cuda/errors.cuh"
#include "frugal/cuda/gemm/arguments.cuh"
#include "frugal/cuda/gemm/device/checks.cuh"
#include "frugal/cuda/gemm/device/prepared.cuh"
#include "frugal/cuda/gemm/kernel/gemm_tn_sm80.cuh"
#include "frugal/cuda/gemm/kernel/gemm_tn_sm90.cuh"
#include "frugal/cuda/gemm/kernel/quantize_rows.cuh"
#include "frugal/cuda/gemm/kernel/weight_only_sm80.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda {

namespace detail {
// Per-device facts and per-(kernel, device) setup are fetched once: decode-sized GEMMs run in ~10 µs, so a
// handful of attribute queries per call would be a visible share of the host's time.
inline constexpr int max_cached_devices = 64;
struct device_cache {
  std::mutex mutex;
  device_info info[max_cached_devices];
  bool known[max_cached_devices] = {};
};
inline device_cache& devices() {
  static device_cache c;
  return c;
}
inline status query_device_uncached(int dev, device_info& info);
}  // namespace detail

/// @brief The current device's compute capability and SM count (cached per device).
inline status query_device(device_info& info) {
  int dev = 0;
  if (auto s = cuda_status(cudaGetDevice(&dev), "cudaGetDevice"); !s) return s;
  if (dev < 0 || dev >= detail::max_cached_devices) return detail::query_device_uncached(dev, info);
  auto& cache = detail::devices();
  {
    std::lock_guard lock(cache.mutex);
    if (cache.known[dev]) {
      info = cache.info[dev];
      return status::ok();
    }
  }
  if (auto s = detail::query_device_uncached(dev, info); !s) return s;
  std::lock_guard lock(cache.mutex);
  cache.info[dev] = info;
  cache.known[dev] = true;
  return status::ok();
}

inline status detail::query_device_uncached(int dev, device_info& info) {
  if (auto s = cuda_status(cudaDeviceGetAttribute(&info.cc_major, cudaDevAttrComputeCapabilityMajor, dev),
                           "cudaDeviceGetAttribute(major)");
      !s)
    return s;
  if (auto s = cuda_status(cudaDeviceGetAttribute(&info.cc_minor, cudaDevAttrComputeCapabilityMinor, dev),
                           "cudaDeviceGetAttribute(minor)");
      !s)
    return s;
  return cuda_status(cudaDeviceGetAttribute(&info.sm_count, cudaDevAttrMultiProcessorCount, dev),
                     "cudaDeviceGetAttribute(sm count)");
}

namespace detail {

inline status check_problem(const char* op, int m, int n, int k) {
  if (m <= 0 || n <= 0 || k <= 0)
    return fail(cuda_errc::invalid_problem, op,
                "M, N and K must be > 0 (got " + std::to_string(m) + ", " + std::to_string(n) + ", " +
                    std::to_string(k) + ")");
  return status::ok();
}

inline status check_arch(const char* op, const device_info& dev) {
  if (dev.cc_major < 8)
    return fail(cuda_errc::unsupported_arch, op,
                "needs compute capability >= 8.0 (mma.sync, cp.async), device is sm_" +
                    std::to_string(dev.cc_major * 10 + dev.cc_minor));
  return status::ok();
}

// ld >= k, ld a multiple of `mult` elements, pointer aligned to 16 bytes.
inline status check_operand(const char* op, const char* name, const void* p, int ld, int cols, int mult) {
  if (p == nullptr) return fail(cuda_errc::invalid_pointer, op, std::string(name) + " is null");
  if (ld < cols)
    return fail(cuda_errc::invalid_problem, op,
                std::string("ld") + name + " (" + std::to_string(ld) + ") is smaller than its row length (" +
                    std::to_string(cols) + ")");
  if (ld % mult != 0)
    return fail(cuda_errc::misaligned_operand, op,
                std::string("ld") + name + " (" + std::to_string(ld) + ") must be a multiple of " +
                    std::to_string(mult));
  if (!aligned(p, 16))
    return fail(cuda_errc::misaligned_operand, op, std::string(name) + " must be 16-byte aligned");
  return status::ok();
}

inline status check_tile(const char* op, gemm_tile t, const device_info& dev) {
  if (t == gemm_tile::wgmma_sm90 && !(dev.cc_major == 9 && dev.cc_minor == 0))
    return fail(
        cuda_errc::unsupported_arch, op,
        "the wgmma tile needs sm_90a, device is sm_" + std::to_string(dev.cc_major * 10 + dev.cc_minor));
  return status::ok();
}

inline status check_launch_image(const char* op, const void* kernel) {
  cudaFuncAttributes attr{};
  cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return fail(cuda_errc::unsupported_arch, op,
                std::string("no kernel image for this device in this build (") + cudaGetErrorString(e) + ")");
  }
  return status::ok();
}

template <class Cfg, class Kernel>
inline status prepare_tn(const char* op, Kernel kernel, int dev) {
  if (auto s = check_launch_image(op, reinterpret_cast<const void*>(kernel)); !s) return s;
  int optin = 0;
  if (auto s = cuda_status(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                           "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
      !s)
    return s;
  if (optin < Cfg::smem_bytes)
    return fail(cuda_errc::unsupported_arch, op,
                "needs " + std::to_string(Cfg::smem_bytes) +
                    " bytes of shared memory per block, the device allows " + std::to_string(optin) +
                    "; use gemm_tile::small");
  if (auto s = cuda_status(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::smem_bytes),
          "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
      !s)
    return s;
  return status::ok();
}

template <class Cfg, class Kernel>
inline status launch_tn(const char* op, Kernel kernel, const kernel::gemm_tn_params& p, cudaStream_t stream) {
  int dev = 0;
  if (auto s = cuda_status(cudaGetDevice(&dev), "cudaGetDevice"); !s) return s;
  if (auto s = prepared_registry().ensure(reinterpret_cast<const void*>(kernel), dev,
                                          [&] { return prepare_tn<Cfg>(op, kernel, dev); });
      !s)
    return s;
  const dim3 grid((p.n + Cfg::BN - 1) / Cfg::BN, (p.m + Cfg::BM - 1) / Cfg::BM);
  if (grid.y > 65535u) return fail(cuda_errc::invalid_problem, op, "M is too large for the grid");
  kernel<<<grid, Cfg::threads, Cfg::smem_bytes, stream>>>(p);
  return launch_status(op);
}

// Small M leaves most of a 128-row tile idle, and too few tiles leave SMs idle: both pick the 32×64 tile.
inline bool use_small_tile(int m, int n, const device_info& dev) {
  using L = kernel::tile_large;
  const long tiles = static_cast<long>((m + L::BM - 1) / L::BM) * ((n + L::BN - 1) / L::BN);
  return m <= 64 || tiles < dev.sm_count;
}

}  // namespace detail

/// @brief The tile run() uses for `a` on `dev` (never automatic).
template <class Args>
inline gemm_tile selected_tile(const Args& a, const device_info& dev) {
  if (a.tile != gemm_tile::automatic) return a.tile;
  return detail::use_small_tile(a.m, a.n, dev) ? gemm_tile::small : gemm_tile::large;
}

/// @brief Whether gemm_w8a8 can run `args` on a device like `dev`.
inline status can_implement(const gemm_w8a8_arguments& a, const device_info& dev) {
  constexpr const char* op = "gemm_w8a8";
  if (a.c_type != element_type::f32 && a.c_type != element_type::f16 && a.c_type != element_type::bf16 &&
      a.c_type != element_type::i32)
    return detail::fail(cuda_errc::unsupported_type, op,
                        std::string("output type ") + to_string(a.c_type) + " is not f32, f16, bf16 or i32");
  if (auto s = detail::check_problem(op, a.m, a.n, a.k); !s) return s;
  if (a.k % 16 != 0)
    return detail::fail(cuda_errc::invalid_k, op,
                        "K (" + std::to_string(a.k) + ") must be a multiple of 16; pad K with zeros");
  if (auto s = detail::check_operand(op, "a", a.a, a.lda, a.k, 16); !s) return s;
  if (auto s = detail::check_operand(op, "b", a.b, a.ldb, a.k, 16); !s) return s;
  if (auto s = detail::check_output(op, a.c, a.ldc, a.n, a.c_type); !s) return s;
  if (a.c_type != element_type::i32) {
    if (auto s = detail::check_activation(op, a.act); !s) return s;
    if (a.scale_a == nullptr) return detail::fail(cuda_errc::invalid_pointer, op, "scale_a is null");
    if (a.scale_b == nullptr) return detail::fail(cuda_errc::invalid_pointer, op, "scale_b is null");
    if (a.zero_a != nullptr && a.colsum_b == nullptr)
      return detail::fail(cuda_errc::invalid_pointer, op, "zero_a is set but colsum_b is null");
  }
  if (auto s = detail::check_tile(op, a.tile, dev); !s) return s;
  return detail::check_arch(op, dev);
}

/// @brief Whether gemm_f16 can run `args` on a device like `dev`.
inline status can_implement(const gemm_f16_arguments& a, const device_info& dev) {
  constexpr const char* op = "gemm_f16";
  if (a.ab_type != element_type::f16 && a.ab_type != element_type::bf16)
    return detail::fail(cuda_errc::unsupported_type, op,
                        std::string("input type ") + to_string(a.ab_type) + " is not f16 or bf16");
  if (a.c_type != element_type::f32 && a.c_type != element_type::f16 && a.c_type != element_type::bf16)
    return detail::fail(cuda_errc::unsupported_type, op,
                        std::string("output type ") + to_string(a.c_type) + " is not f32, f16 or bf16");
  if (auto s = detail::check_problem(op, a.m, a.n, a.k); !s) return s;
  if (a.k % 8 != 0)
    return detail::fail(cuda_errc::invalid_k, op,
                        "K (" + std::to_string(a.k) + ") must be a multiple of 8; pad K with zeros");
  if (auto s = detail::check_operand(op, "a", a.a, a.lda, a.k, 8); !s) return s;
  if (auto s = detail::check_operand(op, "b", a.b, a.ldb, a.k, 8); !s) return s;
  if (auto s = detail::check_output(op, a.c, a.ldc, a.n, a.c_type); !s) return s;
  if (auto s = detail::check_activation(op, a.act); !s) return s;
  if (auto s = detail::check_tile(op, a.tile, dev); !s) return s;
  return detail::check_arch(op, dev);
}

namespace detail {
template <class Args>
inline status check_weight_only_common(const char* op, const Args& a) {
  if (a.x_type != element_type::f16 && a.x_type != element_type::bf16)
    return fail(cuda_errc::unsupported_type, op,
                std::string("activation type ") + to_string(a.x_type) + " is not f16 or bf16");
  if (a.c_type != element_type::f32 && a.c_type != a.x_type)
    return fail(cuda_errc::unsupported_type, op,
                std::string("output type ") + to_string(a.c_type) + " must be f32 or the activation type " +
                    to_string(a.x_type));
  if (auto s = check_problem(op, a.m, a.n, a.k); !s) return s;
  if (a.split_k < 0) return fail(cuda_errc::invalid_problem, op, "split_k must be >= 0 (0 picks one)");
  if (a.block_n != 0 && a.block_n != 32 && a.block_n != 64)
    return fail(cuda_errc::invalid_problem, op,
                "block_n " + std::to_string(a.block_n) + " is not 32 or 64 (0 picks one)");
  return check_activation(op, a.act);
}

// 64 rows per block put 8 × 16 B per lane in flight; small N keeps 32 so that there are enough blocks.
inline int resolve_block_n(int requested, int n) {
  return requested != 0 ? requested : (n >= 2048 ? 64 : 32);
}

template <bool Int4>
inline int resolve_split_k(int requested, int m, int n, int k, int block_n, const device_info& dev) {
  using cfg = kernel::weight_only_config<Int4, 4>;
  const int steps = (k + cfg::step_k - 1) / cfg::step_k;
  const int max_split = std::max(1, steps / cfg::warps);  // every warp gets at least one step
  if (requested > 0) return std::min(requested, max_split);
  const long tiles = static_cast<long>((n + block_n - 1) / block_n) * ((m + 15) / 16);
  const long want = 4L * std::max(dev.sm_count, 1);  // ~16 resident warps per SM keep enough bytes in flight
  const long split = (want + tiles - 1) / tiles;
  return static_cast<int>(std::clamp<long>(split, 1, std::min(16, max_split)));
}
}  // namespace detail

/// @brief The weight rows per block run() will use (32 or 64).
template <class Args>
inline int resolved_block_n(const Args& a) {
  return detail::resolve_block_n(a.block_n, a.n);
}

/// @brief The split-K factor run() will use.
inline int resolved_split_k(const gemm_w8a16_arguments& a, const device_info& dev) {
  return detail::resolve_split_k<false>(a.split_k, a.m, a.n, a.k, resolved_block_n(a), dev);
}
inline int resolved_split_k(const gemm_w4a16_arguments& a, const device_info& dev) {
  return detail::resolve_split_k<true>(a.split_k, a.m, a.n, a.k, resolved_block_n(a), dev);
}

/// @brief Bytes of workspace run() needs (0 without split-K).
template <class Args>
inline std::size_t get_workspace_size(const Args& a, const device_info& dev) {
  const int s = resolved_split_k(a, dev);
  return s > 1 ? static_cast<std::size_t>(s) * a.m * a.n * sizeof(float) : 0;
}

namespace detail {
// What W8A16 and W4A16 check after their weights: scales, output, architecture and split-K workspace.
template <class Args>
status check_weight_only_tail(const char* op, const Args& a, const device_info& dev) {
  if (a.scale == nullptr) return fail(cuda_errc::invalid_pointer, op, "scale is null");
  if (auto s = check_output(op, a.c, a.ldc, a.n, a.c_type); !s) return s;
  if (auto s = check_arch(op, dev); !s) return s;
  const std::size_t need = get_workspace_size(a, dev);
  if (need > 0 && (a.workspace == nullptr || a.workspace_bytes < need))
    return fail(cuda_errc::workspace_too_small, op,
                "split-K needs " + std::to_string(need) + " bytes of workspace, got " +
                    std::to_string(a.workspace_bytes));
  return status::ok();
}
}  // namespace detail

/// @brief Whether gemm_w8a16 can run `args` on a device like `dev`.
inline status can_implement(const gemm_w8a16_arguments& a, const device_info& dev) {
  constexpr const char* op = "gemm_w8a16";
  if (auto s = detail::check_weight_only_common(op, a); !s) return s;
  if (a.k % 16 != 0)
    return detail::fail(cuda_errc::invalid_k, op, "K (" + std::to_string(a.k) + ") must be a multiple of 16");
  if (auto s = detail::check_operand(op, "x", a.x, a.ldx, a.k, 8); !s) return s;
  if (auto s = detail::check_operand(op, "w", a.w, a.ldw, a.k, 16); !s) return s;
  return detail::check_weight_only_tail(op, a, dev);
}

/// @brief Whether gemm_w4a16 can run `args` on a device like `dev`.
inline status can_implement(const gemm_w4a16_arguments& a, const device_info& dev) {
  constexpr const char* op = "gemm_w4a16";
  if (auto s = detail::check_weight_only_common(op, a); !s) return s;
  if (a.group_size != 32 && a.group_size != 64 && a.group_size != 128)
    return detail::fail(cuda_errc::unsupported_group, op,
                        "group_size " + std::to_string(a.group_size) + " is not 32, 64 or 128");
  if (a.k % a.group_size != 0)
    return detail::fail(cuda_errc::unsupported_group, op,
                        "K (" + std::to_string(a.k) + ") must be a multiple of group_size (" +
                            std::to_string(a.group_size) + ")");
  if (auto s = detail::check_operand(op, "x", a.x, a.ldx, a.k, 8); !s) return s;
  if (auto s = detail::check_operand(op, "w", a.w, a.ldw, a.k / 2, 16); !s) return s;
  return detail::check_weight_only_tail(op, a, dev);
}

/// @brief Whether quantize_rows can run `args` on a device like `dev`.
inline status can_implement(const quantize_rows_arguments& a, const device_info& dev) {
  constexpr const char* op = "quantize_rows";
  if (a.x_type != element_type::f16 && a.x_type != element_type::bf16)
    return detail::fail(cuda_errc::unsupported_type, op,
                        std::string("input type ") + to_string(a.x_type) + " is not f16 or bf16");
  if (a.m <= 0 || a.k <= 0)
    return detail::fail(cuda_errc::invalid_problem, op,
                        "M and K must be > 0 (got " + std::to_string(a.m) + ", " + std::to_string(a.k) + ")");
  if (a.k % 8 != 0)
    return detail::fail(cuda_errc::invalid_k, op, "K (" + std::to_string(a.k) + ") must be a multiple of 8");
  if (auto s = detail::check_operand(op, "x", a.x, a.ldx, a.k, 8); !s) return s;
  if (a.q == nullptr) return detail::fail(cuda_errc::invalid_pointer, op, "q is null");
  if (a.ldq < a.k || a.ldq % quantize_rows_q_align != 0 || !detail::aligned(a.q, quantize_rows_q_align))
    return detail::fail(cuda_errc::misaligned_operand, op,
                        "q must be " + std::to_string(quantize_rows_q_align) +
                            "-byte aligned with ldq >= K and a multiple of " +
                            std::to_string(quantize_rows_q_align));
  if (a.scale == nullptr) return detail::fail(cuda_errc::invalid_pointer, op, "scale is null");
  return detail::check_arch(op, dev);
}

/// @brief can_implement() against the current device.
template <class Args>
inline status can_implement(const Args& a) {
  device_info dev;
  if (auto s = query_device(dev); !s) return s;
  return can_implement(a, dev);
}

/// @brief Sets `bytes` to the workspace run() needs on the current device; a failed device query is its
/// status (and `bytes` is 0), never a silent 0 that would make run() refuse later.
template <class Args>
inline status get_workspace_size(const Args& a, std::size_t& bytes) {
  bytes = 0;
  device_info dev;
  if (auto s = query_device(dev); !s) return s;
  bytes = get_workspace_size(a, dev);
  return status::ok();
}

/// @brief Runs W8A8 with the fused epilogue on `stream`.
inline status run(const gemm_w8a8_arguments& a, cudaStream_t stream = nullptr) {
  device_info dev;
  if (auto s = query_device(dev); !s) return s;
  if (auto s = can_implement(a, dev); !s) return s;
  kernel::gemm_tn_params p{};
  p.a = a.a;
  p.b = a.b;
  p.m = a.m;
  p.n = a.n;
  p.k_bytes = a.k;
  p.lda_bytes = a.lda;
  p.ldb_bytes = a.ldb;
  p.ep = detail::w8a8_epilogue(a);
  if (selected_tile(a, dev) == gemm_tile::wgmma_sm90)
    return detail::launch_tn<kernel::tile_sm90>("gemm_s8s8_s32_wgmma_sm90a",
                                                kernel::gemm_s8s8_s32_wgmma_sm90a<>, p, stream);
  if (selected_tile(a, dev) == gemm_tile::small) {
    using C = kernel::tile_small;
    return detail::launch_tn<C>("gemm_s8s8_s32_tensorop_sm80<32x64>", kernel::gemm_s8s8_s32_tensorop_sm80<C>,
                                p, stream);
  }
  using C = kernel::tile_large;
  return detail::launch_tn<C>("gemm_s8s8_s32_tensorop_sm80<128x128>", kernel::gemm_s8s8_s32_tensorop_sm80<C>,
                              p, stream);
}

/// @brief Runs the fp16/bf16 GEMM with the fused epilogue on `stream`.
inline status run(const gemm_f16_arguments& a, cudaStream_t stream = nullptr) {
  device_info dev;
  if (auto s = query_device(dev); !s) return s;
  if (auto s = can_implement(a, dev); !s) return s;
  kernel::gemm_tn_params p{};
  p.a = a.a;
  p.b = a.b;
  p.m = a.m;
  p.n = a.n;
  p.k_bytes = a.k * 2;
  p.lda_bytes = a.lda * 2;
  p.ldb_bytes = a.ldb * 2;
  p.ep = {.scale_a = a.scale_a,
          .scale_b = a.scale_b,
          .zero_a = nullptr,
          .colsum_b = nullptr,
          .bias = a.bias,
          .alpha = a.alpha,
          .act = a.act,
          .c = a.c,
          .ldc = a.ldc,
          .c_type = a.c_type,
          .pair_store = detail::pair_store_ok(a.c, a.ldc, a.c_type)};
  if (selected_tile(a, dev) == gemm_tile::wgmma_sm90) {
    if (a.ab_type == element_type::bf16)
      return detail::launch_tn<kernel::tile_sm90>("gemm_bf16bf16_f32_wgmma_sm90a",
                                                  kernel::gemm_bf16bf16_f32_wgmma_sm90a<>, p, stream);
    return detail::launch_tn<kernel::tile_sm90>("gemm_f16f16_f32_wgmma_sm90a",
                                                kernel::gemm_f16f16_f32_wgmma_sm90a<>, p, stream);
  }
  const bool small = selected_tile(a, dev) == gemm_tile::small;
  if (a.ab_type == element_type::bf16) {
    if (small) {
      using C = kernel::tile_small;
      return detail::launch_tn<C>("gemm_bf16bf16_f32_tensorop_sm80<32x64>",
                                  kernel::gemm_bf16bf16_f32_tensorop_sm80<C>, p, stream);
    }
    using C = kernel::tile_large;
    return detail::launch_tn<C>("gemm_bf16bf16_f32_tensorop_sm80<128x128>",
                                kernel::gemm_bf16bf16_f32_tensorop_sm80<C>, p, stream);
  }
  if (small) {
    using C = kernel::tile_small;
    return detail::launch_tn<C>("gemm_f16f16_f32_tensorop_sm80<32x64>",
                                kernel::gemm_f16f16_f32_tensorop_sm80<C>, p, stream);
  }
  using C = kernel::tile_large;
  return detail::launch_tn<C>("gemm_f16f16_f32_tensorop_sm80<128x128>",
                              kernel::gemm_f16f16_f32_tensorop_sm80<C>, p, stream);
}

namespace detail {
template <bool Int4, int NTiles, class X>
inline const void* weight_only_kernel() {
  if constexpr (Int4)
    return reinterpret_cast<const void*>(kernel::gemm_w4a16_tensorop_sm80<X, NTiles>);
  else
    return reinterpret_cast<const void*>(kernel::gemm_w8a16_tensorop_sm80<X, NTiles>);
}

template <bool Int4, int NTiles, class X>
inline status launch_weight_only(const char* op, const kernel::weight_only_params& p, cudaStream_t stream) {
  using cfg = kernel::weight_only_config<Int4, NTiles>;
  int dev = 0;
  if (auto s = cuda_status(cudaGetDevice(&dev), "cudaGetDevice"); !s) return s;
  const void* k = weight_only_kernel<Int4, NTiles, X>();
  if (auto s = prepared_registry().ensure(k, dev, [&] { return check_launch_image(op, k); }); !s) return s;
  const dim3 grid((p.n + cfg::block_n - 1) / cfg::block_n, p.splits, (p.m + 15) / 16);
  if (grid.z > 65535u) return fail(cuda_errc::invalid_problem, op, "M is too large for the grid");
  if constexpr (Int4)
    kernel::gemm_w4a16_tensorop_sm80<X, NTiles><<<grid, cfg::threads, 0, stream>>>(p);
  else
    kernel::gemm_w8a16_tensorop_sm80<X, NTiles><<<grid, cfg::threads, 0, stream>>>(p);
  return launch_status(op);
}

template <bool Int4, class Args>
inline status run_weight_only(const char* op, const Args& a, kernel::weight_only_params p,
                              const device_info& dev, cudaStream_t stream) {
  using cfg = kernel::weight_only_config<Int4, 4>;
  const int steps = (a.k + cfg::step_k - 1) / cfg::step_k;
  const int block_n = resolved_block_n(a);
  const int split = resolved_split_k(a, dev);
  p.splits = split;
  p.steps_per_split = (steps + split - 1) / split;
  p.partial = static_cast<float*>(a.workspace);
  p.ep = {.scale_a = nullptr,
          .scale_b = p.ep.scale_b,
          .zero_a = nullptr,
          .colsum_b = nullptr,
          .bias = a.bias,
          .alpha = 1.0f,
          .act = a.act,
          .c = a.c,
          .ldc = a.ldc,
          .c_type = a.c_type,
          .pair_store = false};
  const bool bf16 = a.x_type == element_type::bf16;
  status s;
  if (block_n == 64)
    s = bf16 ? launch_weight_only<Int4, 8, __nv_bfloat16>(op, p, stream)
             : launch_weight_only<Int4, 8, __half>(op, p, stream);
  else
    s = bf16 ? launch_weight_only<Int4, 4, __nv_bfloat16>(op, p, stream)
             : launch_weight_only<Int4, 4, __half>(op, p, stream);
  if (!s) return s;
  if (split > 1) {
    const long total = static_cast<long>(a.m) * a.n;
    const int blocks = static_cast<int>(std::min<long>((total + 255) / 256, 8L * dev.sm_count));
    kernel::splitk_reduce_f32<><<<blocks, 256, 0, stream>>>(p.partial, split, a.m, a.n, p.ep);
    return launch_status("splitk_reduce_f32");
  }
  return status::ok();
}
}  // namespace detail

/// @brief Runs the W8A16 weight-only GEMM on `stream`.
inline status run(const gemm_w8a16_arguments& a, cudaStream_t stream = nullptr) {
  device_info dev;
  if (auto s = query_device(dev); !s) return s;
  if (auto s = can_implement(a, dev); !s) return s;
  kernel::weight_only_params p{};
  p.x = a.x;
  p.ldx = a.ldx;
  p.w = a.w;
  p.ldw_bytes = a.ldw;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.ep.scale_b = a.scale;
  return detail::run_weight_only<false>("gemm_w8a16_tensorop_sm80", a, p, dev, stream);
}

/// @brief Runs the W4A16 weight-only GEMM on `stream`.
inline status run(const gemm_w4a16_arguments& a, cudaStream_t stream = nullptr) {
  device_info dev;
  if (auto s = query_device(dev); !s) return s;
  if (auto s = can_implement(a, dev); !s) return s;
  kernel::weight_only_params p{};
  p.x = a.x;
  p.ldx = a.ldx;
  p.w = a.w;
  p.ldw_bytes = a.ldw;
  p.m = a.m;
  p.n = a.n;
  p.k = a.k;
  p.group_scale = a.scale;
  p.zero_point = a.zero_point;
  p.group_size = a.group_size;
  return detail::run_weight_only<true>("gemm_w4a16_tensorop_sm80", a, p, dev, stream);
}

/// @brief Quantizes M rows of fp16/bf16 activations to int8 with per-row scales on `stream`.
inline status run(const quantize_rows_arguments& a, cudaStream_t stream = nullptr) {
  device_info dev;
  if (auto s = query_device(dev); !s) return s;
  if (auto s = can_implement(a, dev); !s) return s;
  const kernel::quantize_rows_params p{a.x, a.ldx, a.q, a.ldq, a.scale, a.m, a.k};
  if (a.x_type == element_type::bf16)
    kernel::quantize_rows_s8_sm80<__nv_bfloat16><<<a.m, 256, 0, stream>>>(p);
  else
    kernel::quantize_rows_s8_sm80<__half><<<a.m, 256, 0, stream>>>(p);
  return launch_status("quantize_rows_s8_sm80");
}

}  // namespace cuda
FRUGAL_END_NAMESPACE
