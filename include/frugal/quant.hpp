#pragma once

/// @brief frugal's host quantization toolkit: fp16/bf16, int8/uint8/int4 schemes, calibration,
/// int4 packing, SmoothQuant, accuracy metrics and CPU matmul (W8A8 and weight-only).
#include "frugal/quant/activation.hpp"
#include "frugal/quant/calibrate.hpp"
#include "frugal/quant/convert.hpp"
#include "frugal/quant/cpu.hpp"
#include "frugal/quant/gemm.hpp"
#include "frugal/quant/ggml.hpp"
#include "frugal/quant/int4.hpp"
#include "frugal/quant/metrics.hpp"
#include "frugal/quant/quantize.hpp"
#include "frugal/quant/scheme.hpp"
#include "frugal/quant/smoothquant.hpp"
#include "frugal/quant/types.hpp"
