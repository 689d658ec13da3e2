# Runs the sample program and checks its output with `promtool check metrics`; without promtool the test
# is skipped, or fails under FRUGAL_REQUIRE (../support/require.cmake).
if(NOT PROMTOOL)
  include(${CMAKE_CURRENT_LIST_DIR}/../support/require.cmake)
  frugal_missing(promtool "promtool was not found when the build was configured (Debian's prometheus package)")
  return()
endif()
execute_process(COMMAND "${SAMPLE}" OUTPUT_FILE "${OUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "prometheus sample program failed: ${rc}")
endif()
execute_process(COMMAND "${PROMTOOL}" check metrics INPUT_FILE "${OUT}" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT "${out}${err}" STREQUAL "")
  message(FATAL_ERROR "promtool check metrics failed (${rc}):\n${out}${err}")
endif()
file(SIZE "${OUT}" size)
message("promtool check metrics: ${size} bytes clean")
