# Preprocesses SOURCE with COMPILER (-dM -E, frugal's include directory and INCLUDES, Eigen's) and fails if
# any FRUGAL_* macro other than the public ones is left defined: the namespace macros, which a user may
# override, and the version macros. -Wundef -Werror also fails an #if on an internal macro that is not
# defined where it is read (a header that reads one outside its macro_scope.hpp / macro_unscope.hpp pair).
# Run by ctest (tests/CMakeLists.txt).
set(args -std=c++20 -dM -E -Wundef -Werror -I${ROOT}/include ${EXTRA})
foreach(dir IN LISTS INCLUDES)
  list(APPEND args -isystem ${dir})
endforeach()
execute_process(COMMAND ${COMPILER} ${args} ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${COMPILER} -dM -E ${SOURCE} failed:\n${err}")
endif()
string(REGEX MATCHALL "#define FRUGAL_[A-Za-z0-9_]+" defined "${out}")
set(leaked "")
foreach(d IN LISTS defined)
  string(REPLACE "#define " "" name "${d}")
  if(NOT name MATCHES "^FRUGAL_(BEGIN_NAMESPACE|END_NAMESPACE|VERSION|VERSION_[A-Z]+)$")
    list(APPEND leaked ${name})
  endif()
endforeach()
if(leaked)
  foreach(name IN LISTS leaked)
    message(NOTICE "left defined: ${name}")
  endforeach()
  message(FATAL_ERROR "internal macros reach the code that includes frugal's headers")
endif()
list(LENGTH defined n)
message(STATUS "${SOURCE}: only frugal's ${n} public macros are left defined")
