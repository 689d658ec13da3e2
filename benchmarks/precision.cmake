# The precision comparison: one GEMM in fp32, fp16, bf16, W8A8, W8A16 and W4A16, timed in one binary.
# -march=native lets Eigen's fp32 baseline use the machine's full vector width; frugal's own kernels
# pick their SIMD path at run time either way.
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-march=native frugal_cxx_has_march_native)
set(precision_bench_defines)
if(frugal_cxx_has_march_native)
  list(APPEND precision_bench_defines FRUGAL_BENCH_MARCH_NATIVE=1)
endif()
frugal_add_benchmark(bench_precision SOURCES precision/bench_precision.cpp DEFINES ${precision_bench_defines})
if(frugal_cxx_has_march_native)
  target_compile_options(bench_precision PRIVATE -march=native)
endif()
