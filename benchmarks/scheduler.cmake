# The iteration-level scheduler's own time per step (no model).
frugal_add_benchmark(bench_scheduler SOURCES scheduler/bench_scheduler.cpp)
