#pragma once

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
