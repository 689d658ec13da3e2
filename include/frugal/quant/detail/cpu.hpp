#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "frugal/namespace.hpp"
#include "frugal/quant/cpu.hpp"

// The intrinsics, for the SIMD paths that frugal/detail/macro_scope.hpp enables on the same condition.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#  include <cpuid.h>
// GCC 12 warns that the `undefined` vectors inside its own AVX-512 intrinsics are uninitialized
// (GCC bug 105593); the pragmas silence that false positive, here and around the SIMD code.
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#    include <immintrin.h>
#    pragma GCC diagnostic pop
#  else
#    include <immintrin.h>
#  endif
#  if defined(__linux__)
#    include <sys/syscall.h>
#    include <unistd.h>
#  endif
#endif

#include "frugal/detail/macro_scope.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

namespace detail {

// Beyond the caches, non-temporal stores skip the read-for-ownership of an output written once (most of
// the traffic of a widening conversion; a sixth of an int8 quantization's: 4 bytes read, 1 read for
// ownership, 1 written back per value); below this size the output is better left in cache for its reader.
inline constexpr std::size_t stream_bytes = std::size_t{4} << 20;

inline cpu_features detect_cpu_features() noexcept {
  cpu_features f;
#if FRUGAL_QUANT_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1u, fma = (c >> 12) & 1u, f16c = (c >> 29) & 1u, avx = (c >> 28) & 1u;
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const std::uint64_t xcr0 = xcr0_lo | static_cast<std::uint64_t>(xcr0_hi) << 32;
  const bool ymm_os = (xcr0 & 0x6u) == 0x6u, zmm_os = (xcr0 & 0xe6u) == 0xe6u;
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  if (!__get_cpuid_count(7, 0, &a7, &b7, &c7, &d7)) return f;
  unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
  f.avx2 = ymm_os && fma && f16c && ((b7 >> 5) & 1u);
  f.avx_vnni = f.avx2 && ((a71 >> 4) & 1u);
  const bool avx512f = (b7 >> 16) & 1u, avx512dq = (b7 >> 17) & 1u, avx512bw = (b7 >> 30) & 1u,
             avx512vl = (b7 >> 31) & 1u;
  f.avx512 = f.avx2 && zmm_os && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && ((c7 >> 11) & 1u);
  // AMX: the CPU's AMX-TILE and AMX-INT8 bits, the OS saving tile state (XCR0 bits 17 and 18), and on
  // Linux the process's leave to use tile data, which the kernel grants on request (arch_prctl
  // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16+). The leave is process-wide and permanent;
  // when it is refused (an older kernel, or a thread's sigaltstack too small for the larger signal
  // frame) the AVX-512 VNNI path stays. Other systems: no AMX.
  const bool amx_cpu = ((d7 >> 24) & 1u) && ((d7 >> 25) & 1u), amx_os = (xcr0 & 0x60000u) == 0x60000u;
#  if defined(__linux__)
  constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  f.amx = f.avx512_vnni && amx_cpu && amx_os &&
          syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#  else
  (void)amx_cpu;
  (void)amx_os;
#  endif
#endif
  return f;
}

}  // namespace detail

namespace detail {

// Lowers `f` to the paths up to `cap`, in the order portable < avx2 < avx_vnni < avx512 < avx512_vnni
// < amx; false for a name that is not one of them.
inline bool apply_max_isa(cpu_features& f, std::string_view cap) noexcept {
  if (cap == "amx") return true;
  if (cap == "avx512_vnni") {
    f.amx = false;
  } else if (cap == "avx512") {
    f.avx512_vnni = f.amx = false;
  } else if (cap == "avx_vnni") {
    f.avx512 = f.avx512_vnni = f.amx = false;
  } else if (cap == "avx2") {
    f.avx512 = f.avx512_vnni = f.avx_vnni = f.amx = false;
  } else if (cap == "portable") {
    f = cpu_features{};
  } else {
    return false;
  }
  return true;
}

}  // namespace detail

/// @brief The features of the CPU this process runs on (detected on first use), lowered by the
/// environment variable FRUGAL_MAX_CPU_ISA when it is set (portable, avx2, avx_vnni, avx512, avx512_vnni
/// or amx), as oneDNN's ONEDNN_MAX_CPU_ISA: it makes one machine run, test and time the paths of a
/// smaller CPU. Any other value stops the process at first use with a message naming it, since a typo
/// would otherwise time the wrong path without a word.
inline const cpu_features& host_cpu_features() noexcept {
  static const cpu_features f = [] {
    cpu_features d = detail::detect_cpu_features();
    const char* cap = std::getenv("FRUGAL_MAX_CPU_ISA");
    if (cap && *cap && !detail::apply_max_isa(d, cap)) {
      std::fprintf(stderr,
                   "frugal: FRUGAL_MAX_CPU_ISA=\"%s\" is not one of portable, avx2, avx_vnni, avx512, "
                   "avx512_vnni, amx\n",
                   cap);
      std::abort();
    }
    return d;
  }();
  return f;
}

/// @brief Whether this CPU (and this build) can run path `p`.
inline bool is_supported(simd_path p) noexcept {
  const cpu_features& f = host_cpu_features();
  switch (p) {
    case simd_path::automatic:
    case simd_path::portable:
      return true;
    case simd_path::avx2:
      return f.avx2;
    case simd_path::avx_vnni:
      return f.avx_vnni;
    case simd_path::avx512:
      return f.avx512;
    case simd_path::avx512_vnni:
      return f.avx512_vnni;
    case simd_path::amx:
      return f.amx;
  }
  return false;
}

namespace detail {

// Float kernels have three levels; the VNNI paths imply their float counterparts.
enum class float_level { portable, avx2, avx512 };

inline void require_supported(simd_path p, const char* who) {
  if (!is_supported(p))
    throw std::invalid_argument(std::string(who) + ": options.path " + to_string(p) +
                                " is not supported by this CPU");
}

inline float_level resolve_float_level(simd_path p, const char* who) {
  require_supported(p, who);
  const cpu_features& f = host_cpu_features();
  switch (p) {
    case simd_path::automatic:
      return f.avx512 ? float_level::avx512 : f.avx2 ? float_level::avx2 : float_level::portable;
    case simd_path::portable:
      return float_level::portable;
    case simd_path::avx2:
    case simd_path::avx_vnni:
      return float_level::avx2;
    case simd_path::avx512:
    case simd_path::avx512_vnni:
    case simd_path::amx:
      return float_level::avx512;
  }
  return float_level::portable;
}

}  // namespace detail

}  // namespace quant
FRUGAL_END_NAMESPACE

#include "frugal/detail/macro_unscope.hpp"
