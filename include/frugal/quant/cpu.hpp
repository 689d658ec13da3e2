#pragma once

// The CPU's features and the SIMD paths the kernels can take. Free of Eigen and of intrinsics, so that
// detail/cpu.hpp (read before Eigen, see detail/eigen.hpp) can include it.
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief The CPU features the quantization kernels can use, detected once with CPUID and XGETBV.
struct cpu_features {
  bool avx2 = false;         ///< AVX2 + FMA + F16C, with the OS saving YMM state
  bool avx_vnni = false;     ///< AVX-VNNI (VEX-encoded vpdpbusd on YMM)
  bool avx512 = false;       ///< AVX-512 F, BW, VL, DQ, with the OS saving ZMM state
  bool avx512_vnni = false;  ///< AVX-512 VNNI
  bool amx = false;          ///< AMX-TILE + AMX-INT8, with AVX-512 VNNI and the OS's leave to use tile data
};

/// @brief A SIMD code path; `automatic` picks the best one this CPU supports.
///
/// `amx` (Intel AMX tiles, Sapphire Rapids and later) is an int8 GEMM path only; the other kernels take
/// their AVX-512 path under it.
enum class simd_path { automatic, portable, avx2, avx_vnni, avx512, avx512_vnni, amx };

/// @brief The name of a path, for messages and benchmark labels.
inline constexpr const char* to_string(simd_path p) noexcept {
  switch (p) {
    case simd_path::automatic:
      return "automatic";
    case simd_path::portable:
      return "portable";
    case simd_path::avx2:
      return "avx2";
    case simd_path::avx_vnni:
      return "avx_vnni";
    case simd_path::avx512:
      return "avx512";
    case simd_path::avx512_vnni:
      return "avx512_vnni";
    case simd_path::amx:
      return "amx";
  }
  return "?";
}

}  // namespace quant
FRUGAL_END_NAMESPACE
