# frugal is header-only: one release configure, no debug tree, nothing in lib/.
set(VCPKG_BUILD_TYPE release)

# As an overlay port inside frugal's repository, the port builds the checkout it lives in. A registry
# port would fetch a tagged release instead, with vcpkg_from_github(REF v${VERSION} SHA512 ...).
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT EXISTS "${SOURCE_PATH}/include/frugal/frugal.hpp")
  message(FATAL_ERROR "frugal's overlay port must stay at ports/frugal inside frugal's source tree (looked in ${SOURCE_PATH})")
endif()

# Without a feature its component is not installed: frugal's CMake skips a component whose package
# it cannot find, so hiding the package is how a feature is turned off.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda FRUGAL_ENABLE_CUDA
  INVERTED_FEATURES
    cache CMAKE_DISABLE_FIND_PACKAGE_xxHash
    quant CMAKE_DISABLE_FIND_PACKAGE_Eigen3
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DFRUGAL_BUILD_TESTS=OFF
    -DFRUGAL_BUILD_BENCHMARKS=OFF
    -DFRUGAL_BUILD_EXAMPLES=OFF
    -DFRUGAL_INSTALL=ON
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME frugal CONFIG_PATH share/frugal)

# The pkg-config file is kept: vcpkg_fixup_pkgconfig checks and relocates it.
vcpkg_fixup_pkgconfig()

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug" "${CURRENT_PACKAGES_DIR}/lib")
# A working tree can hold header folders that are still empty; vcpkg rejects empty directories.
file(GLOB_RECURSE include_dirs LIST_DIRECTORIES TRUE "${CURRENT_PACKAGES_DIR}/include/*")
list(SORT include_dirs)
list(REVERSE include_dirs)
foreach(dir IN LISTS include_dirs)
  if(IS_DIRECTORY "${dir}")
    file(GLOB entries "${dir}/*")
    if(NOT entries)
      file(REMOVE_RECURSE "${dir}")
    endif()
  endif()
endforeach()
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
