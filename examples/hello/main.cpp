// Prints frugal's version and which of its components this build has.
#include <cstdio>

#include <frugal/frugal.hpp>

int main() {
  std::printf("frugal %s\n", frugal::version_string());
  std::printf("  host components: batcher, quantization, cache, cost (header-only)\n");
  std::printf("  CUDA kernels:    %s\n",
              FRUGAL_BUILT_WITH_CUDA ? "built (frugal::cuda)" : "not built (no CUDA toolkit)");
  return 0;
}
