#pragma once

/// @brief frugal's version. It must equal `project(frugal VERSION ...)`: tests/package/check_versions.cmake
/// checks it.
#define FRUGAL_VERSION_MAJOR 0
#define FRUGAL_VERSION_MINOR 1
#define FRUGAL_VERSION_PATCH 0
#define FRUGAL_VERSION (FRUGAL_VERSION_MAJOR * 10000 + FRUGAL_VERSION_MINOR * 100 + FRUGAL_VERSION_PATCH)
#define FRUGAL_VERSION_STRING "0.1.0"
