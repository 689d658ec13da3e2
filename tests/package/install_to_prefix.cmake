# Installs the configured frugal build tree into PREFIX, from scratch.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${PREFIX}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
foreach(f include/frugal/frugal.hpp include/frugal/version.hpp share/frugal/frugalConfig.cmake
          share/frugal/frugalConfigVersion.cmake share/frugal/frugal-targets.cmake share/pkgconfig/frugal.pc)
  if(NOT EXISTS "${PREFIX}/${f}")
    message(FATAL_ERROR "install is missing ${f}")
  endif()
endforeach()
message(STATUS "installed frugal into ${PREFIX}")
