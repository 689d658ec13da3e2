#pragma once

// Shared by GPU tests: a test that needs a device is decorated with FRUGAL_NEEDS_GPU, which makes
// doctest skip it (and ctest report the whole binary as skipped) when no device is present.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "frugal/cuda/device.cuh"

namespace frugal_test {
inline bool gpu_missing() {
  static const bool missing = [] {
    std::string why = frugal::cuda::no_device_reason();
    if (!why.empty()) std::printf("SKIPPED GPU tests: %s\n", why.c_str());
    return !why.empty();
  }();
  return missing;
}
}  // namespace frugal_test

#define FRUGAL_NEEDS_GPU doctest::skip(frugal_test::gpu_missing())
