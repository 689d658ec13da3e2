#include <cstdio>

#include <frugal/cuda/device.cuh>
#include <frugal/frugal.hpp>

int main() {
  // No GPU is needed: the point is that frugal::cuda compiles and links against the CUDA runtime.
  const int devices = frugal::cuda::device_count();
  std::printf("frugal %s conan test_package cuda ok (%d devices)\n", frugal::version_string(), devices);
  return devices >= 0 ? 0 : 1;
}
