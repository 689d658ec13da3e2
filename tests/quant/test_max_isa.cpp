// FRUGAL_MAX_CPU_ISA lowers the detected features: ctest runs this binary unset, at avx2 and at portable
// (tests/quant/CMakeLists.txt), and once with a bad name, which must stop the process with a message.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "frugal/quant.hpp"

namespace q = frugal::quant;

TEST_CASE("quant cpu: FRUGAL_MAX_CPU_ISA caps the paths that automatic picks and is_supported allows") {
  const q::cpu_features raw = q::detail::detect_cpu_features();
  const q::cpu_features& got = q::host_cpu_features();
  const char* env = std::getenv("FRUGAL_MAX_CPU_ISA");
  const std::string cap = env ? env : "";
  CAPTURE(cap);
  if (cap.empty()) {
    CHECK(got.avx2 == raw.avx2);
    CHECK(got.avx512_vnni == raw.avx512_vnni);
    CHECK(got.amx == raw.amx);
  } else if (cap == "avx512_vnni") {
    CHECK(got.avx512_vnni == raw.avx512_vnni);
    CHECK_FALSE(got.amx);
    CHECK_FALSE(q::is_supported(q::simd_path::amx));
  } else if (cap == "avx2") {
    CHECK(got.avx2 == raw.avx2);
    CHECK_FALSE(got.avx_vnni);
    CHECK_FALSE(got.avx512);
    CHECK_FALSE(got.avx512_vnni);
    CHECK_FALSE(got.amx);
    CHECK_FALSE(q::is_supported(q::simd_path::avx512));
    CHECK(q::is_supported(q::simd_path::avx2) == raw.avx2);
  } else if (cap == "portable") {
    CHECK_FALSE(got.avx2);
    CHECK_FALSE(q::is_supported(q::simd_path::avx2));
    // The automatic path still computes: a GEMM on the portable kernels gives the exact sum.
    const auto a = q::quantize_rows(std::vector<float>{1.0f, -2.0f, 3.0f, 0.5f}, 1, 4);
    const auto w = q::quantize_weights_per_channel(std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f}, 1, 4);
    std::vector<std::int32_t> acc(1);
    q::gemm_w8a8_s32(a, w, acc);
    CHECK(acc[0] == (42 - 85 + 127 + 21) * 127);
  } else {
    FAIL("unexpected FRUGAL_MAX_CPU_ISA for this test: " << cap);
  }
  // The function under the cap, for every name.
  for (const char* name : {"portable", "avx2", "avx_vnni", "avx512", "avx512_vnni", "amx"}) {
    q::cpu_features f = raw;
    CHECK(q::detail::apply_max_isa(f, name));
    CHECK(f.avx512_vnni <= raw.avx512_vnni);
    CHECK(f.amx <= raw.amx);
    CHECK(f.amx == (raw.amx && std::string(name) == "amx"));
  }
  q::cpu_features f = raw;
  CHECK_FALSE(q::detail::apply_max_isa(f, "avx3"));
}
