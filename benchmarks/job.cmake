# frugal::job with MiniLM: checkpoint overhead on throughput, checkpoint cost, redone work per preemption.
if(TARGET frugal::job AND TARGET frugal::wordpiece AND TARGET frugal::safetensors)
  if(NOT TARGET frugal_example_bert)
    add_subdirectory("${PROJECT_SOURCE_DIR}/examples/models" "${CMAKE_BINARY_DIR}/examples-models")
  endif()
  frugal_add_benchmark(bench_job SOURCES job/bench_job.cpp LIBS frugal::job frugal_example_bert
                       DEFINES FRUGAL_MODEL_DIR="${FRUGAL_MODEL_DIR}")
  target_include_directories(bench_job PRIVATE "${PROJECT_SOURCE_DIR}/examples/common")
  # GCC 12 with optimisation reports Eigen's AVX-512 intrinsics (-march=native) as (maybe-)uninitialized.
  target_compile_options(bench_job PRIVATE $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>
                         $<$<CXX_COMPILER_ID:GNU>:-Wno-uninitialized>)
endif()
