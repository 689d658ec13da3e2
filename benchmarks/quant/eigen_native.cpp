// Eigen's fp32 GEMM compiled for this CPU (-march=native: AVX-512 + FMA here), the strong baseline.
#include <Eigen/Core>

#include "eigen_native.hpp"

namespace frugal_bench {

void eigen_native_gemm(const float* x, const float* w, float* out, long m, long n, long k) {
  using rm = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const rm> X(x, m, k), W(w, n, k);
  Eigen::Map<rm> C(out, m, n);
  C.noalias() = X * W.transpose();
}

const char* eigen_native_simd() { return Eigen::SimdInstructionSetsInUse(); }

}  // namespace frugal_bench
