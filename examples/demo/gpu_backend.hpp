#pragma once

// The demo's GPU path: the same layers on frugal's CUDA kernels (fp16 GEMM for the fp32 steps, W8A8
// with the fused dequant epilogue for the int8 steps). Built only when CUDA is enabled; at run time it
// is used only when a device is present, and the demo says which path it took.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <frugal/quant.hpp>

namespace demo {

struct gpu_layer {
  int in = 0, out = 0;
  std::vector<float> w;          // out x in, fp32 (fp16 path)
  std::vector<std::int8_t> w8;   // out x in, int8 per channel (W8A8 path)
  std::vector<float> w8_scales;  // [out]
  std::vector<float> bias;       // [out]
};

class gpu_backend {
 public:
  virtual ~gpu_backend() = default;
  /// Rows of x through every layer; GELU between layers, none after the last.
  virtual frugal::quant::row_matrix forward(const frugal::quant::row_matrix& x) = 0;
  virtual std::string describe() const = 0;
};

/// A backend for `int8` (W8A8) or not (fp16), or null with `why` set: no CUDA in this build, no
/// device, or a shape the kernels cannot run.
std::unique_ptr<gpu_backend> make_gpu_backend(bool int8, const std::vector<gpu_layer>& layers,
                                              std::string& why);

/// Whether a CUDA device can be used, and if not, why.
bool gpu_available(std::string& why);

}  // namespace demo
