// frugal's internal macros. A header that uses them includes this file after all its other #includes and
// frugal/detail/macro_unscope.hpp at its end, so that none reaches the code that includes it. The scope is
// per header, not per include stack: a header's own #includes have opened and closed their scopes before
// its scope opens, so a header must not #include anything between the two. Deliberately without
// #pragma once or an include guard: every such header opens its own scope.

// SIMD paths are compiled per function with target attributes, so one binary built without -march runs on
// any x86-64 and picks its path at run time (frugal/quant/detail/cpu.hpp includes the intrinsics under the
// same condition). Other architectures get the portable path only.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#  define FRUGAL_QUANT_X86 1
#  define FRUGAL_QUANT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#  define FRUGAL_QUANT_TARGET_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#  define FRUGAL_QUANT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#  define FRUGAL_QUANT_TARGET_AVX512VNNI \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#  define FRUGAL_QUANT_TARGET_AMX \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8,fma,f16c")))
#else
#  define FRUGAL_QUANT_X86 0
#endif
// GCC 12 warns that the `undefined` vectors inside its own AVX-512 intrinsics are uninitialized (GCC bug
// 105593); SIMD code sits between these two.
#if FRUGAL_QUANT_X86 && defined(__GNUC__) && !defined(__clang__)
#  define FRUGAL_QUANT_SIMD_BEGIN                                                        \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
        _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#  define FRUGAL_QUANT_SIMD_END _Pragma("GCC diagnostic pop")
#else
#  define FRUGAL_QUANT_SIMD_BEGIN
#  define FRUGAL_QUANT_SIMD_END
#endif
// Full unrolling keeps the micro-kernels' accumulator arrays in registers; nvcc does not know the pragma.
#if defined(__CUDACC__) || !(defined(__GNUC__) || defined(__clang__))
#  define FRUGAL_QUANT_UNROLL(n)
#else
#  define FRUGAL_QUANT_PRAGMA(x) _Pragma(#  x)
#  define FRUGAL_QUANT_UNROLL(n) FRUGAL_QUANT_PRAGMA(GCC unroll n)
#endif

// Whether ThreadSanitizer instruments this build (GCC defines __SANITIZE_THREAD__, Clang has the feature
// test); it does not model std::atomic_thread_fence (frugal/cache/detail/read_buffer.hpp).
#if defined(__SANITIZE_THREAD__)
#  define FRUGAL_CACHE_TSAN 1
#elif defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define FRUGAL_CACHE_TSAN 1
#  endif
#endif
#ifndef FRUGAL_CACHE_TSAN
#  define FRUGAL_CACHE_TSAN 0
#endif
