#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Why a CUDA operation cannot run, or did not run; `success` when it did. CUDA code returns it inside
/// a cuda::status rather than throwing.
enum class cuda_errc {
  success,
  invalid_problem,         ///< M, N or K out of range
  invalid_pointer,         ///< a required pointer is null
  misaligned_operand,      ///< a pointer or leading dimension breaks the kernel's vector width
  invalid_k,               ///< K is not a multiple of what the kernel needs
  unsupported_group,       ///< weight-only int4 group size not supported, or K not a multiple of it
  unsupported_type,        ///< input or output element type not supported by this operation
  unsupported_activation,  ///< an activation the device epilogue does not implement (gelu_erf)
  unsupported_arch,        ///< the device's compute capability has no kernel here
  workspace_too_small,     ///< split-K needs more workspace than was given
  cuda_error,              ///< a CUDA runtime call or a launch failed
  cublas_error,            ///< a cuBLASLt call failed or found no algorithm
};

/// @brief The name of a code, e.g. "misaligned_operand".
inline const char* to_string(cuda_errc c) noexcept {
  switch (c) {
    case cuda_errc::success:
      return "success";
    case cuda_errc::invalid_problem:
      return "invalid_problem";
    case cuda_errc::invalid_pointer:
      return "invalid_pointer";
    case cuda_errc::misaligned_operand:
      return "misaligned_operand";
    case cuda_errc::invalid_k:
      return "invalid_k";
    case cuda_errc::unsupported_group:
      return "unsupported_group";
    case cuda_errc::unsupported_type:
      return "unsupported_type";
    case cuda_errc::unsupported_activation:
      return "unsupported_activation";
    case cuda_errc::unsupported_arch:
      return "unsupported_arch";
    case cuda_errc::workspace_too_small:
      return "workspace_too_small";
    case cuda_errc::cuda_error:
      return "cuda_error";
    case cuda_errc::cublas_error:
      return "cublas_error";
  }
  return "unknown";
}

namespace cuda {

/// @brief The outcome of can_implement() or run(): a code and a readable message; true on success.
struct status {
  cuda_errc code = cuda_errc::success;
  std::string message;

  static status ok() { return {}; }
  explicit operator bool() const noexcept { return code == cuda_errc::success; }
  /// @brief "code: message", for logs and test failures.
  std::string str() const {
    return message.empty() ? to_string(code) : std::string(to_string(code)) + ": " + message;
  }
};

inline status make_status(cuda_errc code, std::string message) { return {code, std::move(message)}; }

/// @brief A status from a CUDA runtime error; `what` names the call that failed. The error, now reported, is
/// cleared from the thread's last error (a non-sticky one; sticky ones stay), so that the next
/// launch_status() does not blame the next kernel for it.
inline status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return status::ok();
  (void)cudaGetLastError();
  return make_status(cuda_errc::cuda_error, std::string(what) + ": " + cudaGetErrorString(e));
}

/// @brief The status of the launch just made: cudaGetLastError() after every launch, which also clears it.
inline status launch_status(const char* kernel) { return cuda_status(cudaGetLastError(), kernel); }

}  // namespace cuda
FRUGAL_END_NAMESPACE
