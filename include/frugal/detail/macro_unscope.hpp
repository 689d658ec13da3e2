// Undefines what frugal/detail/macro_scope.hpp defined; included at the end of each header that opened the
// scope. No #pragma once, as macro_scope.hpp.
#undef FRUGAL_QUANT_X86
#undef FRUGAL_QUANT_TARGET_AVX2
#undef FRUGAL_QUANT_TARGET_AVXVNNI
#undef FRUGAL_QUANT_TARGET_AVX512
#undef FRUGAL_QUANT_TARGET_AVX512VNNI
#undef FRUGAL_QUANT_TARGET_AMX
#undef FRUGAL_QUANT_SIMD_BEGIN
#undef FRUGAL_QUANT_SIMD_END
#undef FRUGAL_QUANT_PRAGMA
#undef FRUGAL_QUANT_UNROLL
#undef FRUGAL_CACHE_TSAN
