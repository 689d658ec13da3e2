// Compiled by nvcc: every host header must be includable from a .cu translation unit.
#include <cstdio>

#include "frugal/frugal.hpp"

__global__ void frugal_nvcc_probe(int* out) { *out = 1; }

int main() {
  std::printf("frugal %s host headers compile under nvcc\n", frugal::version_string());
  return 0;
}
