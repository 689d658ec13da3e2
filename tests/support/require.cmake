# The rule of requires.hpp for tests that are CMake scripts. frugal_missing(<name> <why>) prints the
# "frugal-skip:" marker that the test's SKIP_REGULAR_EXPRESSION reports as skipped, or, where
# $ENV{FRUGAL_REQUIRE} names <name> or says "all", fails naming what is missing; the caller returns after it.
# Everything a script test can miss is something ./cmake/quickstart.sh test installs, so "all" covers it.
#   cmake -DREQUIREMENT=<name> -DWHY=<text> -P require.cmake   a test that stands in for one not built
function(frugal_missing name why)
  string(REPLACE "," ";" required "$ENV{FRUGAL_REQUIRE}")
  list(FIND required "${name}" named)  # not IN_LIST: a script without cmake_minimum_required lacks CMP0057
  list(FIND required all all)
  if(named GREATER -1 OR all GREATER -1)
    message(FATAL_ERROR "missing, and FRUGAL_REQUIRE requires it: ${name}: ${why}")
  endif()
  message(NOTICE "frugal-skip: missing ${name}: ${why}")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE AND DEFINED REQUIREMENT)
  frugal_missing("${REQUIREMENT}" "${WHY}")
endif()
