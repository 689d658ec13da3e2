#pragma once

#include <cuda_runtime.h>

#include <string>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cuda {

/// @brief How many CUDA devices this process can use; 0 when there is no driver or no device.
inline int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return 0;
  }
  return n;
}

/// @brief Why no device is usable, for skip messages; empty when one is.
inline std::string no_device_reason() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no CUDA device found (") + cudaGetErrorString(e) + ")";
  }
  return n == 0 ? std::string("no CUDA device found (0 devices)") : std::string();
}

}  // namespace cuda
FRUGAL_END_NAMESPACE
