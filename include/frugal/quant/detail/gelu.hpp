#pragma once
/// @file
/// @brief GELU's constants, written once for every place that computes it: the CPU epilogues' scalar and
/// SIMD paths, the CUDA epilogue, the examples' reference models and the tests' exact loops.
///
/// - the tanh approximation: 0.5 x (1 + tanh(gelu_tanh_scale (x + gelu_tanh_cubic x^3)));
/// - the exact form (BERT-family checkpoints): 0.5 x (1 + erf(x gelu_erf_scale)).
///
/// Plain constexpr floats, so that device code may use them as well as host code.
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

namespace quant::detail {

/// sqrt(2 / pi), the tanh approximation's scale.
inline constexpr float gelu_tanh_scale = 0.7978845608028654f;
/// The tanh approximation's cubic coefficient.
inline constexpr float gelu_tanh_cubic = 0.044715f;
/// 1 / sqrt(2), the exact form's scale of x inside erf.
inline constexpr float gelu_erf_scale = 0.70710678118654752f;

}  // namespace quant::detail

FRUGAL_END_NAMESPACE
