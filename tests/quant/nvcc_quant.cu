// The host quantization toolkit compiled by nvcc: its headers must stay usable from .cu files.
#include <cstdio>
#include <vector>

#include "frugal/quant.hpp"

__global__ void frugal_quant_nvcc_probe(int* out) { *out = 1; }

int main() {
  namespace q = frugal::quant;
  q::row_matrix w(8, 20), x(3, 20);
  for (int i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>((i * 37) % 23) - 11.0f;
  for (int i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>((i * 53) % 19) - 9.0f;
  const auto qw = q::quantize_weights_per_channel(w);
  const auto qa = q::quantize_rows(x);
  q::row_matrix out;
  q::gemm_w8a8(qa, qw, out);
  const double cos = q::cosine_similarity(q::reference_gemm(x, w), out);
  std::printf("quant %s cosine %.4f\n", cos > 0.99 ? "ok" : "BAD", cos);
  return cos > 0.99 ? 0 : 1;
}
