#pragma once

#include "frugal/version.hpp"

// The namespace is versioned and inline, as in {fmt}: `frugal::x` names `frugal::v0::x`, so two
// incompatible versions in one program are two distinct sets of symbols. A user may override the
// macros to put frugal elsewhere.
#ifndef FRUGAL_BEGIN_NAMESPACE
#  define FRUGAL_BEGIN_NAMESPACE \
    namespace frugal {           \
    inline namespace v0 {
#  define FRUGAL_END_NAMESPACE \
    }                          \
    }
#endif

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
