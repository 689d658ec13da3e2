#pragma once

#include "frugal/namespace.hpp"

/// @brief frugal's version. It must equal `project(frugal VERSION ...)`: tests/package/check_versions.cmake
/// checks it.
#define FRUGAL_VERSION_MAJOR 0
#define FRUGAL_VERSION_MINOR 1
#define FRUGAL_VERSION_PATCH 0
#define FRUGAL_VERSION (FRUGAL_VERSION_MAJOR * 10000 + FRUGAL_VERSION_MINOR * 100 + FRUGAL_VERSION_PATCH)
#define FRUGAL_VERSION_STRING "0.1.0"

FRUGAL_BEGIN_NAMESPACE

/// @brief The library's version as "major.minor.patch".
inline constexpr const char* version_string() noexcept { return FRUGAL_VERSION_STRING; }

/// @brief The version as {major, minor, patch}.
struct version_info {
  int major;
  int minor;
  int patch;
};
inline constexpr version_info version() noexcept {
  return {FRUGAL_VERSION_MAJOR, FRUGAL_VERSION_MINOR, FRUGAL_VERSION_PATCH};
}

FRUGAL_END_NAMESPACE
