#pragma once

namespace frugal_bench {
// out (m x n) = x (m x k) * w^T (w is n x k), all row-major, with Eigen built for the host CPU.
void eigen_native_gemm(const float* x, const float* w, float* out, long m, long n, long k);
const char* eigen_native_simd();
}  // namespace frugal_bench
