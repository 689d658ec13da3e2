# The LLM comparison with llama.cpp (benchmarks/llm/): the machine's read bandwidth, the ceiling of decode's
# GB/s of weights read per token. A plain program, not a Google Benchmark: the comparison script parses its
# JSON lines.
add_executable(bench_read_bandwidth llm/read_bandwidth.cpp)
target_link_libraries(bench_read_bandwidth PRIVATE frugal::frugal Threads::Threads)
frugal_warnings(bench_read_bandwidth)
