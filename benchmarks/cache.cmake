# The result cache: timing against rivals in one binary, and the hit-ratio simulator.
set(cache_bench_libs)
set(cache_bench_defines)
if(TARGET TBB::tbb)
  list(APPEND cache_bench_libs TBB::tbb)
  list(APPEND cache_bench_defines FRUGAL_BENCH_HAVE_TBB=1)
endif()
frugal_add_benchmark(bench_cache SOURCES bench_cache.cpp LIBS ${cache_bench_libs} DEFINES ${cache_bench_defines})
target_include_directories(bench_cache PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/cache")

add_executable(cache_hit_ratio cache/hit_ratio.cpp)
target_link_libraries(cache_hit_ratio PRIVATE frugal::frugal)

# bench_cache's 1M-entry hit loop alone (see cache/layouts.sh).
add_executable(cache_hit_alone cache/hit_alone.cpp)
target_link_libraries(cache_hit_alone PRIVATE frugal::cache)
