// frugal::quant alone (Eigen): per-channel int8 weights round-trip within half a step.
#include <cmath>
#include <cstdio>

#include <frugal/quant.hpp>

int main() {
  namespace q = frugal::quant;
  q::row_matrix w(4, 8);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 8; ++c) w(r, c) = float(r * 8 + c) / 31.0f - 0.5f;
  const q::quantized_tensor t = q::quantize(w, q::scheme{.granularity = q::granularity::per_channel});
  const q::row_matrix back = q::dequantize(t);
  // Row r's scale is its absmax / 127: the error is at most half of it.
  for (int r = 0; r < 4; ++r) {
    const float half_step = 0.5f * w.row(r).cwiseAbs().maxCoeff() / 127.0f;
    for (int c = 0; c < 8; ++c)
      if (std::abs(back(r, c) - w(r, c)) > half_step * 1.001f) return 1;
  }
  std::printf("frugal quant consumer ok\n");
  return 0;
}
