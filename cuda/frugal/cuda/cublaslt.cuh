#pragma once

// cuBLASLt baselines, timed against our kernels in the same binary: the fp16/bf16 GEMM, and W8A8 as
// cuBLASLt's int8 GEMM with int32 output followed by a separate dequant kernel (cuBLASLt supports no epilogue
// for int8). Descriptors and the heuristic's algorithm are chosen once per shape in initialize(); run() only
// launches.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "frugal/cuda/errors.cuh"
#include "frugal/cuda/gemm/arguments.cuh"
#include "frugal/cuda/gemm/device/checks.cuh"
#include "frugal/cuda/gemm/kernel/epilogue.cuh"
#include "frugal/cuda/memory.cuh"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda {

namespace detail {
inline status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return status::ok();
  return make_status(cuda_errc::cublas_error, std::string(what) + ": " + cublasLtGetStatusString(s));
}

inline cudaDataType_t to_cuda_type(element_type t) {
  switch (t) {
    case element_type::f32:
      return CUDA_R_32F;
    case element_type::f16:
      return CUDA_R_16F;
    case element_type::bf16:
      return CUDA_R_16BF;
    case element_type::i8:
      return CUDA_R_8I;
    case element_type::i32:
      return CUDA_R_32I;
    default:
      break;  // every caller's can_implement refuses the other types first
  }
  return CUDA_R_32F;
}

// The separate dequant pass of the baseline: reads the int32 product and writes the same epilogue ours fuses.
// A template so that the header can be included by several translation units.
template <int = 0>
__global__ void __launch_bounds__(256)
    dequant_s32_epilogue(const std::int32_t* acc, int ld_acc, int m, int n, kernel::epilogue_params ep) {
  const int pairs = (n + 1) / 2;
  const std::size_t total = static_cast<std::size_t>(m) * pairs;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(i / pairs), col = static_cast<int>(i % pairs) * 2;
    const std::int32_t* src = acc + static_cast<std::size_t>(row) * ld_acc + col;
    const float v0 = kernel::epilogue_value_s32(ep, src[0], row, col);
    const float v1 = col + 1 < n ? kernel::epilogue_value_s32(ep, src[1], row, col + 1) : 0.0f;
    kernel::store_pair(ep, row, col, n, v0, v1);
  }
}
}  // namespace detail

/// @brief A cuBLASLt handle and its workspace; one per thread or stream.
class cublaslt_context {
 public:
  cublaslt_context() = default;
  cublaslt_context(const cublaslt_context&) = delete;
  cublaslt_context& operator=(const cublaslt_context&) = delete;
  ~cublaslt_context() {
    if (workspace_ != nullptr) (void)cudaFree(workspace_);
    if (handle_ != nullptr) (void)cublasLtDestroy(handle_);
  }
  /// @brief Creates the handle and a workspace of `workspace_bytes`.
  status initialize(std::size_t workspace_bytes = std::size_t(32) << 20) {
    if (handle_ == nullptr) {
      if (auto s = detail::cublas_status(cublasLtCreate(&handle_), "cublasLtCreate"); !s) return s;
    }
    void* p = nullptr;
    if (auto s = cuda_status(cudaMalloc(&p, workspace_bytes), "cudaMalloc(cuBLASLt workspace)"); !s) return s;
    if (workspace_ != nullptr) (void)cudaFree(workspace_);
    workspace_ = p;
    workspace_bytes_ = workspace_bytes;
    return status::ok();
  }
  cublasLtHandle_t handle() const noexcept { return handle_; }
  void* workspace() const noexcept { return workspace_; }
  std::size_t workspace_bytes() const noexcept { return workspace_bytes_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
};

namespace detail {
// One cuBLASLt matmul: D (N×M column-major, i.e. our M×N row-major C) = op_T(B) · A, the "TN" layout int8
// needs.
class lt_matmul {
 public:
  lt_matmul() = default;
  lt_matmul(const lt_matmul&) = delete;
  lt_matmul& operator=(const lt_matmul&) = delete;
  ~lt_matmul() { release(); }

  status initialize(const cublaslt_context& ctx, int m, int n, int k, element_type ab, int lda, int ldb,
                    element_type c, int ldc, cublasComputeType_t compute, cudaDataType_t scale) {
    release();
    ctx_ = &ctx;
    if (auto s = cublas_status(cublasLtMatmulDescCreate(&desc_, compute, scale), "cublasLtMatmulDescCreate");
        !s)
      return s;
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    if (auto s = cublas_status(
            cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), "set TRANSA");
        !s)
      return s;
    if (auto s = cublas_status(
            cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt), "set TRANSB");
        !s)
      return s;
    if (auto s = cublas_status(cublasLtMatrixLayoutCreate(&la_, to_cuda_type(ab), k, n, ldb), "layout A"); !s)
      return s;
    if (auto s = cublas_status(cublasLtMatrixLayoutCreate(&lb_, to_cuda_type(ab), k, m, lda), "layout B"); !s)
      return s;
    if (auto s = cublas_status(cublasLtMatrixLayoutCreate(&lc_, to_cuda_type(c), n, m, ldc), "layout C"); !s)
      return s;
    cublasLtMatmulPreference_t pref = nullptr;
    if (auto s = cublas_status(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"); !s)
      return s;
    std::size_t ws = ctx.workspace_bytes();
    (void)cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof ws);
    int found = 0;
    cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(ctx.handle(), desc_, la_, lb_, lc_, lc_, pref, 1, &algo_, &found);
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (auto s = cublas_status(hs, "cublasLtMatmulAlgoGetHeuristic"); !s) return s;
    if (found == 0) return make_status(cuda_errc::cublas_error, "cuBLASLt found no algorithm for this shape");
    return status::ok();
  }

  template <class Scale>
  status run(const void* a, const void* b, void* c, Scale alpha, cudaStream_t stream) const {
    const Scale beta = Scale(0);
    return cublas_status(cublasLtMatmul(ctx_->handle(), desc_, &alpha, b, la_, a, lb_, &beta, c, lc_, c, lc_,
                                        &algo_.algo, ctx_->workspace(), ctx_->workspace_bytes(), stream),
                         "cublasLtMatmul");
  }

 private:
  void release() noexcept {
    if (desc_) (void)cublasLtMatmulDescDestroy(desc_);
    if (la_) (void)cublasLtMatrixLayoutDestroy(la_);
    if (lb_) (void)cublasLtMatrixLayoutDestroy(lb_);
    if (lc_) (void)cublasLtMatrixLayoutDestroy(lc_);
    desc_ = nullptr;
    la_ = lb_ = lc_ = nullptr;
  }
  const cublaslt_context* ctx_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, lc_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
};
}  // namespace detail

/// @brief cuBLASLt's fp16/bf16 GEMM (C = alpha·A·Bᵀ, fp32 accumulation), no epilogue.
class cublaslt_gemm_f16 {
 public:
  /// @brief What this baseline supports: no per-row/column scales, bias or activation.
  static status can_implement(const gemm_f16_arguments& a) {
    if (a.ab_type != element_type::f16 && a.ab_type != element_type::bf16)
      return make_status(cuda_errc::unsupported_type, "cublaslt_gemm_f16: input must be f16 or bf16");
    if (a.c_type != a.ab_type && a.c_type != element_type::f32)
      return make_status(cuda_errc::unsupported_type,
                         "cublaslt_gemm_f16: output must be f32 or the input type");
    if (a.scale_a || a.scale_b || a.bias || a.act != quant::activation_kind::none)
      return make_status(cuda_errc::unsupported_type, "cublaslt_gemm_f16: the baseline runs no epilogue");
    if (a.m <= 0 || a.n <= 0 || a.k <= 0)
      return make_status(cuda_errc::invalid_problem, "cublaslt_gemm_f16: M, N, K > 0");
    if (!a.a || !a.b) return make_status(cuda_errc::invalid_pointer, "cublaslt_gemm_f16: null operand");
    return detail::check_output("cublaslt_gemm_f16", a.c, a.ldc, a.n, a.c_type);
  }
  /// @brief Chooses the algorithm for the shape and types of `a`.
  status initialize(const cublaslt_context& ctx, const gemm_f16_arguments& a) {
    if (auto s = can_implement(a); !s) return s;
    return mm_.initialize(ctx, a.m, a.n, a.k, a.ab_type, a.lda, a.ldb, a.c_type, a.ldc, CUBLAS_COMPUTE_32F,
                          CUDA_R_32F);
  }
  /// @brief Runs on the pointers of `a`, which must have the shape given to initialize().
  status run(const gemm_f16_arguments& a, cudaStream_t stream = nullptr) const {
    return mm_.run(a.a, a.b, a.c, a.alpha, stream);
  }

 private:
  detail::lt_matmul mm_;
};

/// @brief The W8A8 baseline: cuBLASLt int8 GEMM into an int32 scratch, then a separate dequant kernel.
class cublaslt_gemm_w8a8 {
 public:
  /// @brief cuBLASLt's int8 path needs K, lda, ldb multiples of 4 (our own need 16 already).
  static status can_implement(const gemm_w8a8_arguments& a) {
    if (a.m <= 0 || a.n <= 0 || a.k <= 0)
      return make_status(cuda_errc::invalid_problem, "cublaslt_gemm_w8a8: M, N, K > 0");
    if (!a.a || !a.b || !a.c)
      return make_status(cuda_errc::invalid_pointer, "cublaslt_gemm_w8a8: null operand");
    if (a.k % 4 || a.lda % 4 || a.ldb % 4)
      return make_status(cuda_errc::misaligned_operand,
                         "cublaslt_gemm_w8a8: K, lda and ldb must be multiples of 4");
    if (a.c_type != element_type::i32 && (!a.scale_a || !a.scale_b))
      return make_status(cuda_errc::invalid_pointer, "cublaslt_gemm_w8a8: scales are null");
    if (a.c_type != element_type::i32) {
      if (auto s = detail::check_activation("cublaslt_gemm_w8a8", a.act); !s) return s;
    }
    if (a.c_type != element_type::f32 && a.c_type != element_type::f16 && a.c_type != element_type::bf16 &&
        a.c_type != element_type::i32)
      return make_status(cuda_errc::unsupported_type,
                         "cublaslt_gemm_w8a8: output must be f32, f16, bf16 or i32");
    return detail::check_output("cublaslt_gemm_w8a8", a.c, a.ldc, a.n, a.c_type);
  }
  /// @brief The dequant pass's epilogue for `a`; pair stores are judged as frugal's kernels judge them.
  static kernel::epilogue_params epilogue(const gemm_w8a8_arguments& a) { return detail::w8a8_epilogue(a); }
  /// @brief Chooses the algorithm and allocates the int32 scratch (M × N rounded up to 4).
  status initialize(const cublaslt_context& ctx, const gemm_w8a8_arguments& a) {
    if (auto s = can_implement(a); !s) return s;
    ld_acc_ = (a.n + 3) / 4 * 4;
    m_ = a.m;
    n_ = a.n;
    try {
      scratch_ = device_buffer<std::int32_t>(static_cast<std::size_t>(a.m) * ld_acc_);
    } catch (const std::exception& e) {
      return make_status(cuda_errc::cuda_error, e.what());
    }
    return mm_.initialize(ctx, a.m, a.n, a.k, element_type::i8, a.lda, a.ldb, element_type::i32, ld_acc_,
                          CUBLAS_COMPUTE_32I, CUDA_R_32I);
  }
  /// @brief The int8 GEMM alone (int32 into the scratch), for timing it apart from the dequant.
  status run_gemm(const gemm_w8a8_arguments& a, cudaStream_t stream = nullptr) {
    return mm_.run(a.a, a.b, scratch_.data(), std::int32_t(1), stream);
  }
  /// @brief GEMM then dequant into a.c.
  status run(const gemm_w8a8_arguments& a, cudaStream_t stream = nullptr) {
    if (auto s = run_gemm(a, stream); !s) return s;
    if (auto s = can_implement(a); !s) return s;
    const kernel::epilogue_params ep = epilogue(a);
    if (a.c_type == element_type::i32) {
      return cuda_status(cudaMemcpy2DAsync(a.c, a.ldc * sizeof(std::int32_t), scratch_.data(),
                                           ld_acc_ * sizeof(std::int32_t), a.n * sizeof(std::int32_t), a.m,
                                           cudaMemcpyDeviceToDevice, stream),
                         "cudaMemcpy2DAsync");
    }
    const long pairs = static_cast<long>(m_) * ((n_ + 1) / 2);
    const int blocks = static_cast<int>(std::min<long>((pairs + 255) / 256, 65535L));
    detail::dequant_s32_epilogue<><<<blocks, 256, 0, stream>>>(scratch_.data(), ld_acc_, m_, n_, ep);
    return launch_status("dequant_s32_epilogue");
  }
  const std::int32_t* scratch() const noexcept { return scratch_.data(); }

 private:
  detail::lt_matmul mm_;
  device_buffer<std::int32_t> scratch_;
  int ld_acc_ = 0, m_ = 0, n_ = 0;
};

}  // namespace cuda
FRUGAL_END_NAMESPACE
