#pragma once

// The encoder's linear layers on a CUDA device (bert_cuda.cu, the target frugal_example_bert_cuda, built when
// frugal's CUDA support is). Pass the result as load_options.device:
//   auto enc = bert::encoder::load(dir, {.weights = bert::precision::int8, .calibration = calib,
//                                        .device = bert::make_cuda_linear_device()});
#include <memory>

#include "linear_device.hpp"

namespace bert {

/// @brief The GEMMs on CUDA device @p ordinal through frugal::cuda's dispatcher (frugal's kernels or
/// cuBLASLt, per shape). Throws std::runtime_error when the machine has no usable device, saying why, and
/// std::invalid_argument for an ordinal that does not exist.
std::shared_ptr<linear_device> make_cuda_linear_device(int ordinal = 0);

}  // namespace bert
