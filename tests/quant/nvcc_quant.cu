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
  // gemm_ggml's kernels, instantiated here too: the automatic path against the portable one.
  std::vector<std::byte> raw(17 * 2 * 20);
  for (std::size_t i = 0; i < raw.size(); ++i) {  // d = 2^-7, m = -2^-7, then nibbles
    const std::size_t at = i % 20;
    raw[i] = static_cast<std::byte>(at == 1 ? 0x20 : at == 3 ? 0xa0 : at < 4 ? 0 : (i * 29) % 251);
  }
  const auto gw = q::make_ggml_weights(q::ggml_format::q4_1, raw, 17, 64);
  std::vector<float> gx(20 * 64), fast(20 * 17), slow(20 * 17);
  for (std::size_t i = 0; i < gx.size(); ++i) gx[i] = static_cast<float>((i * 53) % 19) - 9.0f;
  q::gemm_ggml(gx, 20, gw, fast);
  q::gemm_ggml(gx, 20, gw, slow, {.path = q::simd_path::portable});
  const bool same = fast == slow;
  std::printf("quant %s cosine %.4f ggml %s\n", cos > 0.99 && same ? "ok" : "BAD", cos,
              same ? "same" : "DIFFERS");
  return cos > 0.99 && same ? 0 : 1;
}
