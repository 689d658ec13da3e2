# FindxxHash: Debian's libxxhash-dev ships no CMake config, so this module finds it.
#
# Provides the imported target xxHash::xxhash and sets xxHash_FOUND, xxHash_INCLUDE_DIR,
# xxHash_LIBRARY and xxHash_VERSION. When only the header is found (or xxHash_HEADER_ONLY is
# set), the target compiles xxHash inline through XXH_INLINE_ALL and links nothing.
include(FindPackageHandleStandardArgs)

find_package(xxHash CONFIG QUIET NO_MODULE) # a vcpkg or Conan install brings its own config
if(TARGET xxHash::xxhash)
  set(xxHash_FOUND TRUE)
  return()
endif()

find_path(xxHash_INCLUDE_DIR NAMES xxhash.h)
if(NOT xxHash_HEADER_ONLY)
  find_library(xxHash_LIBRARY NAMES xxhash)
endif()

if(xxHash_INCLUDE_DIR AND EXISTS "${xxHash_INCLUDE_DIR}/xxhash.h")
  file(STRINGS "${xxHash_INCLUDE_DIR}/xxhash.h" _xxh_ver REGEX "^#define XXH_VERSION_(MAJOR|MINOR|RELEASE) +[0-9]+")
  foreach(_part MAJOR MINOR RELEASE)
    string(REGEX REPLACE ".*#define XXH_VERSION_${_part} +([0-9]+).*" "\\1" _xxh_${_part} "${_xxh_ver}")
  endforeach()
  set(xxHash_VERSION "${_xxh_MAJOR}.${_xxh_MINOR}.${_xxh_RELEASE}")
endif()

find_package_handle_standard_args(xxHash REQUIRED_VARS xxHash_INCLUDE_DIR VERSION_VAR xxHash_VERSION)

if(xxHash_FOUND AND NOT TARGET xxHash::xxhash)
  if(xxHash_LIBRARY)
    add_library(xxHash::xxhash UNKNOWN IMPORTED)
    set_target_properties(xxHash::xxhash PROPERTIES IMPORTED_LOCATION "${xxHash_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${xxHash_INCLUDE_DIR}")
  else()
    add_library(xxHash::xxhash INTERFACE IMPORTED)
    set_target_properties(xxHash::xxhash PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${xxHash_INCLUDE_DIR}"
                          INTERFACE_COMPILE_DEFINITIONS XXH_INLINE_ALL)
  endif()
endif()
mark_as_advanced(xxHash_INCLUDE_DIR xxHash_LIBRARY)
