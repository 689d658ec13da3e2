#pragma once

// Shared by GPU tests: a test that needs a device is decorated with FRUGAL_NEEDS_GPU, which skips it without
// one, saying why (../support/requires.hpp). CI has no GPU, so FRUGAL_REQUIRE=all does not cover it; on a
// GPU machine FRUGAL_REQUIRE=gpu makes a missing device a failure.
#include <doctest/doctest.h>

#include <string>

#include "../support/requires.hpp"
#include "frugal/cuda/device.cuh"

namespace frugal_test {
inline requirement gpu() {
  static const requirement r{"gpu", frugal::cuda::no_device_reason(), false};
  return r;
}
}  // namespace frugal_test

#define FRUGAL_NEEDS_GPU frugal_test::needs(frugal_test::gpu())
