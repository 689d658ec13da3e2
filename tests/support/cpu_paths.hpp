#pragma once

// The SIMD paths a kernel test runs, and what it says of the others. A test that loops over
//   for (auto p : frugal_test::cpu_paths({simd_path::portable, simd_path::avx2, simd_path::avx512}))
// runs every listed path this process can run. A listed path it cannot run is never dropped in silence:
// - the CPU lacks it: the step is reported skipped (a MESSAGE naming the path and the CPU's lack);
// - the CPU has it but FRUGAL_MAX_CPU_ISA hides it: the requirement "isa" is missing, so the step is skipped
//   with a message, and under FRUGAL_REQUIRE=all (the quickstart's test command) the test fails, since a
//   capped run would otherwise pass without the paths the machine has.
#include <doctest/doctest.h>

#include <cstdlib>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "frugal/quant/cpu.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "requires.hpp"

namespace frugal_test {

// Whether the CPU itself (before FRUGAL_MAX_CPU_ISA) runs path p.
inline bool cpu_has(frugal::quant::simd_path p) {
  namespace q = frugal::quant;
  static const q::cpu_features raw = q::detail::detect_cpu_features();
  switch (p) {
    case q::simd_path::automatic:
    case q::simd_path::portable:
      return true;
    case q::simd_path::avx2:
      return raw.avx2;
    case q::simd_path::avx_vnni:
      return raw.avx_vnni;
    case q::simd_path::avx512:
      return raw.avx512;
    case q::simd_path::avx512_vnni:
      return raw.avx512_vnni;
    case q::simd_path::amx:
      return raw.amx;
  }
  return false;
}

// Whether this test case has not yet said `what` (kernel tests ask for their paths inside their loops).
inline bool first_time(const std::string& what) {
  static std::set<std::string> said;
  const auto* tc = doctest::getContextOptions()->currentTest;
  return said.insert(std::string(tc && tc->m_name ? tc->m_name : "") + "/" + what).second;
}

inline std::vector<frugal::quant::simd_path> cpu_paths(
    std::initializer_list<frugal::quant::simd_path> listed) {
  namespace q = frugal::quant;
  std::vector<q::simd_path> run;
  for (const q::simd_path p : listed) {
    if (q::is_supported(p)) {
      run.push_back(p);
    } else if (!cpu_has(p)) {
      if (first_time(q::to_string(p))) MESSAGE("skipped path " << q::to_string(p) << ": this CPU lacks it");
    } else {
      const char* cap = std::getenv("FRUGAL_MAX_CPU_ISA");
      const requirement hidden{"isa", std::string("path ") + q::to_string(p) +
                                          ": the CPU has it, FRUGAL_MAX_CPU_ISA=" + (cap ? cap : "") +
                                          " hides it"};
      if (required(hidden) || first_time(q::to_string(p))) available(hidden);
    }
  }
  return run;
}

}  // namespace frugal_test
