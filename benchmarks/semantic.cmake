# The semantic cache: HNSW lookup against a brute-force scan, and precision over thresholds with MiniLM.
if(TARGET frugal::semantic AND TARGET frugal::wordpiece AND TARGET frugal::safetensors)
  if(NOT TARGET frugal_example_bert)
    add_subdirectory("${PROJECT_SOURCE_DIR}/examples/models" "${CMAKE_BINARY_DIR}/examples-models")
  endif()
  frugal_add_benchmark(bench_semantic SOURCES semantic/bench_semantic.cpp LIBS frugal::semantic frugal_example_bert
                       DEFINES FRUGAL_MODEL_DIR="${FRUGAL_MODEL_DIR}"
                       FRUGAL_FIXTURE_DIR="${PROJECT_SOURCE_DIR}/tests/semantic/fixtures"
                       FRUGAL_BENCH_RESULTS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/semantic/results")
  target_include_directories(bench_semantic PRIVATE "${PROJECT_SOURCE_DIR}/tests/semantic")
  frugal_add_benchmark(bench_semantic_traffic SOURCES semantic/traffic.cpp LIBS frugal::semantic frugal_example_bert
                       DEFINES FRUGAL_MODEL_DIR="${FRUGAL_MODEL_DIR}"
                       FRUGAL_FIXTURE_DIR="${PROJECT_SOURCE_DIR}/tests/semantic/fixtures"
                       FRUGAL_BENCH_RESULTS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/semantic/results")
  target_include_directories(bench_semantic_traffic PRIVATE "${PROJECT_SOURCE_DIR}/tests/semantic")
endif()
