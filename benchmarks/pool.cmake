# The model pool (issue 21): acquire against a shared_ptr copy in one binary, the seeds' three-model day
# priced on a manual clock, and real MiniLM loads with RSS through the pool.
frugal_add_benchmark(bench_pool SOURCES pool/bench_pool.cpp)
add_executable(bench_pool_trace pool/bench_pool_trace.cpp)
target_link_libraries(bench_pool_trace PRIVATE frugal::frugal)
frugal_warnings(bench_pool)
frugal_warnings(bench_pool_trace)
if(TARGET frugal::wordpiece AND TARGET frugal::safetensors)
  if(NOT TARGET frugal_example_bert)
    add_subdirectory("${PROJECT_SOURCE_DIR}/examples/models" "${CMAKE_BINARY_DIR}/examples-models")
  endif()
  add_executable(bench_pool_rss pool/bench_pool_rss.cpp)
  target_link_libraries(bench_pool_rss PRIVATE frugal::frugal frugal_example_bert)
  target_compile_definitions(bench_pool_rss PRIVATE FRUGAL_MODEL_DIR="${FRUGAL_MODEL_DIR}"
    FRUGAL_DEFAULT_CALIBRATION="${PROJECT_SOURCE_DIR}/tests/models/fixtures/calibration.txt")
  frugal_warnings(bench_pool_rss)
endif()
