#pragma once

/// @file
/// @brief frugal::element_type, the one enum of tensor element types: what the quantization toolkit stores,
/// what a safetensors file holds, what a CUDA GEMM takes and what the advisors size weights by. Plain C++:
/// no Eigen and no CUDA, so .cu files include it too.

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The element type of a tensor. A function that takes only some of them says which, and refuses the
/// others with a clear error.
enum class element_type {
  boolean,
  u8,
  i8,
  u16,
  i16,
  u32,
  i32,
  u64,
  i64,
  f16,
  bf16,
  f32,
  f64,
  f8_e4m3,  ///< OCP FP8 E4M3 (4 exponent bits, 3 mantissa bits)
  i4,       ///< two per byte
};

/// @brief Bits per element: 4 for i4, 8 for boolean; 0 for a value outside the enum.
inline constexpr int element_bits(element_type t) noexcept {
  switch (t) {
    case element_type::i4:
      return 4;
    case element_type::boolean:
    case element_type::u8:
    case element_type::i8:
    case element_type::f8_e4m3:
      return 8;
    case element_type::u16:
    case element_type::i16:
    case element_type::f16:
    case element_type::bf16:
      return 16;
    case element_type::u32:
    case element_type::i32:
    case element_type::f32:
      return 32;
    case element_type::u64:
    case element_type::i64:
    case element_type::f64:
      return 64;
  }
  return 0;
}

/// @brief The name of an element type ("f32", "bf16", "i4", ...); "?" for a value outside the enum.
inline constexpr const char* to_string(element_type t) noexcept {
  switch (t) {
    case element_type::boolean:
      return "boolean";
    case element_type::u8:
      return "u8";
    case element_type::i8:
      return "i8";
    case element_type::u16:
      return "u16";
    case element_type::i16:
      return "i16";
    case element_type::u32:
      return "u32";
    case element_type::i32:
      return "i32";
    case element_type::u64:
      return "u64";
    case element_type::i64:
      return "i64";
    case element_type::f16:
      return "f16";
    case element_type::bf16:
      return "bf16";
    case element_type::f32:
      return "f32";
    case element_type::f64:
      return "f64";
    case element_type::f8_e4m3:
      return "f8_e4m3";
    case element_type::i4:
      return "i4";
  }
  return "?";
}

FRUGAL_END_NAMESPACE
