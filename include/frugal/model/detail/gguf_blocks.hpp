#pragma once

// The block layouts of ggml's tensor types, as GGUF stores them, and their dequantization to float.
// Every quantized type packs a fixed number of elements (the block) into a fixed number of bytes; scales
// are little-endian IEEE half unless noted.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "frugal/namespace.hpp"
#include "frugal/quant/types.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace gguf {

/// @brief ggml's tensor type codes, as stored in a GGUF file's tensor infos.
// Not a frugal::element_type: most codes name a block format (scales and packed values), not an element.
enum class ggml_type : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
};

/// @brief A type's block: how many elements, in how many bytes; {0, 0} for a code that is not a type.
struct block_layout {
  std::uint32_t elements = 0;
  std::uint32_t bytes = 0;
};

inline constexpr block_layout layout_of(ggml_type t) noexcept {
  switch (t) {
    case ggml_type::f32:
    case ggml_type::i32:
      return {1, 4};
    case ggml_type::f16:
    case ggml_type::bf16:
    case ggml_type::i16:
      return {1, 2};
    case ggml_type::i8:
      return {1, 1};
    case ggml_type::i64:
    case ggml_type::f64:
      return {1, 8};
    case ggml_type::q4_0:
    case ggml_type::iq4_nl:
      return {32, 18};
    case ggml_type::q4_1:
      return {32, 20};
    case ggml_type::q5_0:
      return {32, 22};
    case ggml_type::q5_1:
      return {32, 24};
    case ggml_type::q8_0:
      return {32, 34};
    case ggml_type::q8_1:
      return {32, 40};
    case ggml_type::mxfp4:
      return {32, 17};
    case ggml_type::q2_k:
      return {256, 84};
    case ggml_type::q3_k:
    case ggml_type::iq3_s:
      return {256, 110};
    case ggml_type::q4_k:
      return {256, 144};
    case ggml_type::q5_k:
      return {256, 176};
    case ggml_type::q6_k:
      return {256, 210};
    case ggml_type::q8_k:
      return {256, 292};
    case ggml_type::iq2_xxs:
      return {256, 66};
    case ggml_type::iq2_xs:
      return {256, 74};
    case ggml_type::iq3_xxs:
      return {256, 98};
    case ggml_type::iq1_s:
      return {256, 50};
    case ggml_type::iq2_s:
      return {256, 82};
    case ggml_type::iq4_xs:
      return {256, 136};
    case ggml_type::iq1_m:
      return {256, 56};
    case ggml_type::tq1_0:
      return {256, 54};
    case ggml_type::tq2_0:
      return {256, 66};
  }
  return {};
}

/// @brief The name ggml gives a type ("Q4_1", "F32", ...); "?" for a code that is not a type.
inline constexpr const char* type_name(ggml_type t) noexcept {
  switch (t) {
    case ggml_type::f32:
      return "F32";
    case ggml_type::f16:
      return "F16";
    case ggml_type::q4_0:
      return "Q4_0";
    case ggml_type::q4_1:
      return "Q4_1";
    case ggml_type::q5_0:
      return "Q5_0";
    case ggml_type::q5_1:
      return "Q5_1";
    case ggml_type::q8_0:
      return "Q8_0";
    case ggml_type::q8_1:
      return "Q8_1";
    case ggml_type::q2_k:
      return "Q2_K";
    case ggml_type::q3_k:
      return "Q3_K";
    case ggml_type::q4_k:
      return "Q4_K";
    case ggml_type::q5_k:
      return "Q5_K";
    case ggml_type::q6_k:
      return "Q6_K";
    case ggml_type::q8_k:
      return "Q8_K";
    case ggml_type::iq2_xxs:
      return "IQ2_XXS";
    case ggml_type::iq2_xs:
      return "IQ2_XS";
    case ggml_type::iq3_xxs:
      return "IQ3_XXS";
    case ggml_type::iq1_s:
      return "IQ1_S";
    case ggml_type::iq4_nl:
      return "IQ4_NL";
    case ggml_type::iq3_s:
      return "IQ3_S";
    case ggml_type::iq2_s:
      return "IQ2_S";
    case ggml_type::iq4_xs:
      return "IQ4_XS";
    case ggml_type::i8:
      return "I8";
    case ggml_type::i16:
      return "I16";
    case ggml_type::i32:
      return "I32";
    case ggml_type::i64:
      return "I64";
    case ggml_type::f64:
      return "F64";
    case ggml_type::iq1_m:
      return "IQ1_M";
    case ggml_type::bf16:
      return "BF16";
    case ggml_type::tq1_0:
      return "TQ1_0";
    case ggml_type::tq2_0:
      return "TQ2_0";
    case ggml_type::mxfp4:
      return "MXFP4";
  }
  return "?";
}

/// @brief Whether dequantize_row() can convert this type to float.
inline constexpr bool can_dequantize(ggml_type t) noexcept {
  switch (t) {
    case ggml_type::f32:
    case ggml_type::f16:
    case ggml_type::bf16:
    case ggml_type::q4_0:
    case ggml_type::q4_1:
    case ggml_type::q8_0:
    case ggml_type::q4_k:
    case ggml_type::q5_k:
    case ggml_type::q6_k:
      return true;
    default:
      return false;
  }
}

namespace detail {

inline float half_at(const std::uint8_t* p) noexcept {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return quant::detail::half_bits_to_float(h);
}

// Q4_0 and Q4_1: the low nibbles of 16 bytes are elements 0..15, the high nibbles elements 16..31.
inline void dequantize_q4_0(const std::uint8_t* b, float* y) noexcept {
  const float d = half_at(b);
  const std::uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

inline void dequantize_q4_1(const std::uint8_t* b, float* y) noexcept {
  const float d = half_at(b), m = half_at(b + 2);
  const std::uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

inline void dequantize_q8_0(const std::uint8_t* b, float* y) noexcept {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

// The k-quants' 8 sub-blocks carry 6-bit scales and mins packed into 12 bytes: sub-blocks 0..3 in the low
// 6 bits of bytes 0..3 (scales) and 4..7 (mins); sub-blocks 4..7 in bytes 8..11's nibbles, with their top
// two bits in the top bits of bytes 0..7.
inline void k_scale_min(int j, const std::uint8_t* q, std::uint8_t& sc, std::uint8_t& m) noexcept {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K: d, dmin, scales[12], qs[128]; each 64 elements take 32 bytes, low nibbles then high nibbles.
inline void dequantize_q4_k(const std::uint8_t* b, float* y) noexcept {
  const float d = half_at(b), dmin = half_at(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    std::uint8_t sc, m;
    k_scale_min(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    k_scale_min(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: d, dmin, scales[12], qh[32], qs[128]; Q4_K's nibbles plus a fifth bit from qh, two bit planes per
// 64 elements.
inline void dequantize_q5_k(const std::uint8_t* b, float* y) noexcept {
  const float d = half_at(b), dmin = half_at(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* ql = b + 48;
  unsigned u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    std::uint8_t sc, m;
    k_scale_min(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    k_scale_min(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
  }
}

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] (one per 16 elements), d.
inline void dequantize_q6_k(const std::uint8_t* b, float* y) noexcept {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

/// Dequantizes @p elements values (a whole number of blocks; checked by the caller) from @p src.
inline void dequantize_blocks(ggml_type t, const std::byte* src, float* y, std::size_t elements) noexcept {
  if (elements == 0) return;
  const auto* b = reinterpret_cast<const std::uint8_t*>(src);
  const block_layout l = layout_of(t);
  const std::size_t blocks = elements / l.elements;
  switch (t) {
    case ggml_type::f32:
      std::memcpy(y, b, elements * 4);
      return;
    case ggml_type::f16:
      for (std::size_t i = 0; i < elements; ++i) y[i] = half_at(b + 2 * i);
      return;
    case ggml_type::bf16:
      for (std::size_t i = 0; i < elements; ++i) {
        std::uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        y[i] = quant::detail::bf16_bits_to_float(h);
      }
      return;
    default:
      break;
  }
  void (*one)(const std::uint8_t*, float*) noexcept = nullptr;
  switch (t) {
    case ggml_type::q4_0:
      one = dequantize_q4_0;
      break;
    case ggml_type::q4_1:
      one = dequantize_q4_1;
      break;
    case ggml_type::q8_0:
      one = dequantize_q8_0;
      break;
    case ggml_type::q4_k:
      one = dequantize_q4_k;
      break;
    case ggml_type::q5_k:
      one = dequantize_q5_k;
      break;
    case ggml_type::q6_k:
      one = dequantize_q6_k;
      break;
    default:
      return;
  }
  for (std::size_t i = 0; i < blocks; ++i) one(b + i * l.bytes, y + i * l.elements);
}

}  // namespace detail
}  // namespace gguf
FRUGAL_END_NAMESPACE
