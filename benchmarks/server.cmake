# The streaming chat load generator (benchmarks/server/chat_load.cpp, described in benchmarks/server/README.md):
# a plain program on cpp-httplib's client, not a Google Benchmark. tests/server includes this file too (its
# smoke test runs the generator, and the tests are configured before the benchmarks), hence the guard.
if(TARGET bench_chat_load)
  return()
endif()
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(frugal_chat_load_httplib QUIET IMPORTED_TARGET cpp-httplib)
endif()
if(NOT frugal_chat_load_httplib_FOUND)
  message(STATUS "frugal: bench_chat_load needs cpp-httplib (libcpp-httplib-dev): not built")
  return()
endif()
find_package(Threads REQUIRED)
add_executable(bench_chat_load "${PROJECT_SOURCE_DIR}/benchmarks/server/chat_load.cpp")
target_include_directories(bench_chat_load PRIVATE "${PROJECT_SOURCE_DIR}/examples/common")
target_link_libraries(bench_chat_load PRIVATE nlohmann_json::nlohmann_json PkgConfig::frugal_chat_load_httplib
                      Threads::Threads)
target_compile_features(bench_chat_load PRIVATE cxx_std_20)
frugal_warnings(bench_chat_load)
# In the benchmarks' folder wherever it is defined, so that chat_vs_llama_server.sh finds it.
set_target_properties(bench_chat_load PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/benchmarks")
