frugal_add_benchmark(bench_cost SOURCES bench_cost.cpp)
