#pragma once

// Free of Eigen and of the standard library so that device code (cuda/frugal/cuda) uses the same type.
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief The activation applied after the epilogue's scale and bias.
enum class activation_kind {
  none,
  relu,
  gelu,      ///< the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  gelu_erf,  ///< exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as BERT-family checkpoints use it
};

/// @brief The name of an activation ("none", "relu", "gelu", "gelu_erf").
inline constexpr const char* to_string(activation_kind a) noexcept {
  switch (a) {
    case activation_kind::none:
      return "none";
    case activation_kind::relu:
      return "relu";
    case activation_kind::gelu:
      return "gelu";
    case activation_kind::gelu_erf:
      return "gelu_erf";
  }
  return "?";
}

}  // namespace quant
FRUGAL_END_NAMESPACE
