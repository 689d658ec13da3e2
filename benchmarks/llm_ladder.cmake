# The generation ladder on SmolLM2 (benchmarks/llm/bench_ladder.cpp, described in benchmarks/llm/README.md):
# a plain program replaying the chat trace in real time, not a Google Benchmark. It needs the example
# decoder (examples/models/llama.hpp) and the fortunes reader (examples/common/corpus.hpp).
if(TARGET frugal_example_llama)
  add_executable(bench_ladder llm/bench_ladder.cpp)
  target_include_directories(bench_ladder PRIVATE "${PROJECT_SOURCE_DIR}/examples/common")
  target_link_libraries(bench_ladder PRIVATE frugal_example_llama Threads::Threads)
  frugal_warnings(bench_ladder)
endif()
