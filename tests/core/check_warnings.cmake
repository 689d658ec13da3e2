# Compiles SOURCES with COMPILER at OPT (-O2 or -O3) and -Wall -Wextra -Wpedantic -Werror, with frugal's
# include directory and INCLUDES (Eigen's), and fails on any warning. Run by ctest (tests/CMakeLists.txt).
foreach(src IN LISTS SOURCES)
  set(args -std=c++20 ${OPT} -Wall -Wextra -Wpedantic -Werror -I${ROOT}/include)
  foreach(dir IN LISTS INCLUDES)
    list(APPEND args -isystem ${dir})
  endforeach()
  execute_process(COMMAND ${COMPILER} ${args} -c ${src} -o ${OUT}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${COMPILER} ${OPT}: ${src} does not compile warning-free:\n${out}${err}")
  endif()
  message(STATUS "${COMPILER} ${OPT}: ${src} compiles warning-free")
endforeach()
