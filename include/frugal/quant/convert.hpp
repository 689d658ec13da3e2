#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "frugal/namespace.hpp"
#include "frugal/quant/detail/cpu.hpp"
#include "frugal/quant/types.hpp"

#include "frugal/detail/macro_scope.hpp"

FRUGAL_QUANT_SIMD_BEGIN
FRUGAL_BEGIN_NAMESPACE
namespace quant {
namespace detail {

inline void cvt_f32_f16_portable(const float* in, std::uint16_t* out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_half_bits(in[i]);
}
inline void cvt_f16_f32_portable(const std::uint16_t* in, float* out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = half_bits_to_float(in[i]);
}
inline void cvt_f32_bf16_portable(const float* in, std::uint16_t* out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_bf16_bits(in[i]);
}
inline void cvt_bf16_f32_portable(const std::uint16_t* in, float* out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(in[i]);
}

#if FRUGAL_QUANT_X86
template <std::size_t Align, class T>
std::size_t head_to_align(const T* p, std::size_t n) noexcept {
  const auto mis = reinterpret_cast<std::uintptr_t>(p) % Align;
  return std::min(n, mis == 0 ? 0 : (Align - mis) / sizeof(T));
}

// vcvtps2ph with the rounding immediate is IEEE round-to-nearest-even regardless of MXCSR.
FRUGAL_QUANT_TARGET_AVX2 inline void cvt_f32_f16_avx2(const float* in, std::uint16_t* out,
                                                      std::size_t n) noexcept {
  std::size_t i = 0;
  if (n * 2 >= stream_bytes && reinterpret_cast<std::uintptr_t>(out) % 2 == 0) {
    i = head_to_align<16>(out, n);
    cvt_f32_f16_portable(in, out, i);
    for (; i + 8 <= n; i += 8)
      _mm_stream_si128(
          reinterpret_cast<__m128i*>(out + i),
          _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  cvt_f32_f16_portable(in + i, out + i, n - i);
}
FRUGAL_QUANT_TARGET_AVX2 inline void cvt_f16_f32_avx2(const std::uint16_t* in, float* out,
                                                      std::size_t n) noexcept {
  std::size_t i = 0;
  if (n * 4 >= stream_bytes) {
    i = head_to_align<32>(out, n);
    cvt_f16_f32_portable(in, out, i);
    for (; i + 8 <= n; i += 8)
      _mm256_stream_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  cvt_f16_f32_portable(in + i, out + i, n - i);
}
// bf16 is rounded with integer arithmetic: vcvtneps2bf16 flushes subnormals, which IEEE does not.
// The bf16 bits of 8 floats, each in the low half of its 32-bit lane.
FRUGAL_QUANT_TARGET_AVX2 inline __m256i f32x8_to_bf16_lanes(__m256 v) noexcept {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i absx = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(absx, _mm256_set1_epi32(0x7f800000));
  const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, qnan, nan);
}
FRUGAL_QUANT_TARGET_AVX2 inline __m128i f32x8_to_bf16(__m256 v) noexcept {
  const __m256i r = f32x8_to_bf16_lanes(v);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(packed);
}
FRUGAL_QUANT_TARGET_AVX2 inline void cvt_f32_bf16_avx2(const float* in, std::uint16_t* out,
                                                       std::size_t n) noexcept {
  std::size_t i = 0;
  // As for fp16: beyond the caches the output goes around them, with no read-for-ownership.
  if (n * 2 >= stream_bytes && reinterpret_cast<std::uintptr_t>(out) % 2 == 0) {
    i = head_to_align<32>(out, n);
    cvt_f32_bf16_portable(in, out, i);
    // 16 at a time: one pack and one permute for two vectors, and whole 32-byte stores.
    for (; i + 16 <= n; i += 16) {
      const __m256i p = _mm256_packus_epi32(f32x8_to_bf16_lanes(_mm256_loadu_ps(in + i)),
                                            f32x8_to_bf16_lanes(_mm256_loadu_ps(in + i + 8)));
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute4x64_epi64(p, 0xd8));
    }
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), f32x8_to_bf16(_mm256_loadu_ps(in + i)));
  cvt_f32_bf16_portable(in + i, out + i, n - i);
}
FRUGAL_QUANT_TARGET_AVX2 inline void cvt_bf16_f32_avx2(const std::uint16_t* in, float* out,
                                                       std::size_t n) noexcept {
  std::size_t i = 0;
  if (n * 4 >= stream_bytes) {
    i = head_to_align<32>(out, n);
    cvt_bf16_f32_portable(in, out, i);
    for (; i + 8 <= n; i += 8) {
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
      _mm256_stream_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  cvt_bf16_f32_portable(in + i, out + i, n - i);
}

FRUGAL_QUANT_TARGET_AVX512 inline void cvt_f32_f16_avx512(const float* in, std::uint16_t* out,
                                                          std::size_t n) noexcept {
  std::size_t i = 0;
  if (n * 2 >= stream_bytes && reinterpret_cast<std::uintptr_t>(out) % 2 == 0) {
    i = head_to_align<64>(out, n);
    cvt_f32_f16_portable(in, out, i);
    for (; i + 32 <= n; i += 32) {
      const __m256i a =
          _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i b =
          _mm512_cvtps_ph(_mm512_loadu_ps(in + i + 16), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i),
                          _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
    }
    _mm_sfence();
  }
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(out + i),
        _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  cvt_f32_f16_avx2(in + i, out + i, n - i);
}
FRUGAL_QUANT_TARGET_AVX512 inline void cvt_f16_f32_avx512(const std::uint16_t* in, float* out,
                                                          std::size_t n) noexcept {
  std::size_t i = 0;
  if (n * 4 >= stream_bytes) {
    i = head_to_align<64>(out, n);
    cvt_f16_f32_portable(in, out, i);
    for (; i + 16 <= n; i += 16)
      _mm512_stream_ps(out + i,
                       _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
    _mm_sfence();
  }
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  cvt_f16_f32_avx2(in + i, out + i, n - i);
}
FRUGAL_QUANT_TARGET_AVX512 inline __m256i f32x16_to_bf16(__m512 v) noexcept {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}
FRUGAL_QUANT_TARGET_AVX512 inline void cvt_f32_bf16_avx512(const float* in, std::uint16_t* out,
                                                           std::size_t n) noexcept {
  std::size_t i = 0;
  if (n * 2 >= stream_bytes && reinterpret_cast<std::uintptr_t>(out) % 2 == 0) {
    i = head_to_align<64>(out, n);
    cvt_f32_bf16_portable(in, out, i);
    for (; i + 32 <= n; i += 32) {
      const __m256i a = f32x16_to_bf16(_mm512_loadu_ps(in + i)),
                    b = f32x16_to_bf16(_mm512_loadu_ps(in + i + 16));
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i),
                          _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1));
    }
    _mm_sfence();
  }
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), f32x16_to_bf16(_mm512_loadu_ps(in + i)));
  cvt_f32_bf16_avx2(in + i, out + i, n - i);
}
FRUGAL_QUANT_TARGET_AVX512 inline void cvt_bf16_f32_avx512(const std::uint16_t* in, float* out,
                                                           std::size_t n) noexcept {
  std::size_t i = 0;
  if (n * 4 >= stream_bytes) {
    i = head_to_align<64>(out, n);
    cvt_bf16_f32_portable(in, out, i);
    for (; i + 16 <= n; i += 16) {
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
      _mm512_stream_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    _mm_sfence();
  }
  for (; i + 16 <= n; i += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  cvt_bf16_f32_avx2(in + i, out + i, n - i);
}
#endif

inline void check_sizes(std::size_t in, std::size_t out, const char* who) {
  if (in != out)
    throw std::invalid_argument(std::string(who) + ": input has " + std::to_string(in) +
                                " elements but output has " + std::to_string(out));
}

#if FRUGAL_QUANT_X86
#  define FRUGAL_QUANT_DISPATCH_FLOAT(level, fn, ...) \
    switch (level) {                                  \
      case detail::float_level::avx512:               \
        fn##_avx512(__VA_ARGS__);                     \
        return;                                       \
      case detail::float_level::avx2:                 \
        fn##_avx2(__VA_ARGS__);                       \
        return;                                       \
      case detail::float_level::portable:             \
        fn##_portable(__VA_ARGS__);                   \
        return;                                       \
    }
#else
#  define FRUGAL_QUANT_DISPATCH_FLOAT(level, fn, ...) \
    (void)level;                                      \
    fn##_portable(__VA_ARGS__);
#endif

}  // namespace detail

/// @brief Converts floats to fp16 (round to nearest even), vectorized with F16C / AVX-512 when present.
/// `path` forces a code path (for tests and benchmarks); an unsupported one is an invalid_argument.
inline void convert(std::span<const float> in, std::span<half> out, simd_path path = simd_path::automatic) {
  detail::check_sizes(in.size(), out.size(), "frugal::quant::convert");
  const auto level = detail::resolve_float_level(path, "frugal::quant::convert");
  auto* o = reinterpret_cast<std::uint16_t*>(out.data());
  FRUGAL_QUANT_DISPATCH_FLOAT(level, detail::cvt_f32_f16, in.data(), o, in.size())
}

/// @brief Converts fp16 to floats (exact).
inline void convert(std::span<const half> in, std::span<float> out, simd_path path = simd_path::automatic) {
  detail::check_sizes(in.size(), out.size(), "frugal::quant::convert");
  const auto level = detail::resolve_float_level(path, "frugal::quant::convert");
  const auto* i = reinterpret_cast<const std::uint16_t*>(in.data());
  FRUGAL_QUANT_DISPATCH_FLOAT(level, detail::cvt_f16_f32, i, out.data(), in.size())
}

/// @brief Converts floats to bfloat16 (round to nearest even, subnormals kept).
inline void convert(std::span<const float> in, std::span<bfloat16> out,
                    simd_path path = simd_path::automatic) {
  detail::check_sizes(in.size(), out.size(), "frugal::quant::convert");
  const auto level = detail::resolve_float_level(path, "frugal::quant::convert");
  auto* o = reinterpret_cast<std::uint16_t*>(out.data());
  FRUGAL_QUANT_DISPATCH_FLOAT(level, detail::cvt_f32_bf16, in.data(), o, in.size())
}

/// @brief Converts bfloat16 to floats (exact).
inline void convert(std::span<const bfloat16> in, std::span<float> out,
                    simd_path path = simd_path::automatic) {
  detail::check_sizes(in.size(), out.size(), "frugal::quant::convert");
  const auto level = detail::resolve_float_level(path, "frugal::quant::convert");
  const auto* i = reinterpret_cast<const std::uint16_t*>(in.data());
  FRUGAL_QUANT_DISPATCH_FLOAT(level, detail::cvt_bf16_f32, i, out.data(), in.size())
}

}  // namespace quant
FRUGAL_END_NAMESPACE
FRUGAL_QUANT_SIMD_END

#undef FRUGAL_QUANT_DISPATCH_FLOAT

#include "frugal/detail/macro_unscope.hpp"
