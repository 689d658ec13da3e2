#include "gpu_test.hpp"

#include <cuda_runtime.h>

namespace {
__global__ void frugal_add_one_kernel(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}
}  // namespace

TEST_CASE("cuda: device_count never fails, with or without a device") {
  CHECK(frugal::cuda::device_count() >= 0);
  CHECK((frugal::cuda::device_count() == 0) == !frugal::cuda::no_device_reason().empty());
}

TEST_CASE("cuda: a kernel runs and writes every element" * FRUGAL_NEEDS_GPU) {
  constexpr int n = 1000;
  int* d = nullptr;
  REQUIRE(cudaMalloc(&d, n * sizeof(int)) == cudaSuccess);
  int host[n];
  for (int i = 0; i < n; ++i) host[i] = i;
  REQUIRE(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess);
  frugal_add_one_kernel<<<(n + 255) / 256, 256>>>(d, n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(d);
  for (int i = 0; i < n; ++i) CHECK(host[i] == i + 1);
}
