# The Redis tier against an LRU hit and a model call, on a real redis-server started by the benchmark.
if(TARGET frugal::redis)
  find_program(FRUGAL_BENCH_REDIS_SERVER redis-server)
  if(FRUGAL_BENCH_REDIS_SERVER)
    frugal_add_benchmark(bench_redis SOURCES redis/bench_redis.cpp LIBS frugal::redis)
  endif()
endif()
