# The Eigen baseline is also built for this CPU (-march=native) in its own translation unit, so the
# int8 kernels (runtime-dispatched, no -march) are compared with Eigen at its best, not only at SSE2.
set(frugal_quant_bench_libs)
set(frugal_quant_bench_defines)
if(TARGET DNNL::dnnl)
  list(APPEND frugal_quant_bench_libs DNNL::dnnl)
  list(APPEND frugal_quant_bench_defines FRUGAL_BENCH_HAVE_DNNL=1)
endif()
frugal_add_benchmark(bench_quant SOURCES bench_quant.cpp quant/eigen_native.cpp
  LIBS ${frugal_quant_bench_libs} DEFINES ${frugal_quant_bench_defines})
set_source_files_properties(quant/eigen_native.cpp PROPERTIES COMPILE_OPTIONS "-march=native")
# gemm_ggml (GGUF Q4_1 / Q8_0 kept quantized) on SmolLM2's shapes, against W8A8 and the read bandwidth.
frugal_add_benchmark(bench_ggml_gemm SOURCES bench_ggml_gemm.cpp)
