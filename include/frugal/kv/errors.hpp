#pragma once

#include <stdexcept>
#include <string>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Why the KV cache refused an operation. `out_of_blocks` is a result (kv_append_result), never
/// thrown: the scheduler acts on it. The others are misuse and come inside a kv_error.
enum class kv_errc {
  out_of_blocks = 1,  ///< an append needs more blocks than are free or evictable; nothing changed
  unknown_sequence,   ///< the sequence id was never opened, or was released
  bad_position,       ///< a write or an attention outside the sequence's tokens (or into committed ones)
  bad_shape,          ///< a span's size does not match the cache's or the call's dimensions
  pending_tokens,     ///< fork of a sequence with appended but uncommitted tokens
};

/// @brief A short name for the code, e.g. "out_of_blocks".
inline constexpr const char* to_string(kv_errc c) noexcept {
  switch (c) {
    case kv_errc::out_of_blocks:
      return "out_of_blocks";
    case kv_errc::unknown_sequence:
      return "unknown_sequence";
    case kv_errc::bad_position:
      return "bad_position";
    case kv_errc::bad_shape:
      return "bad_shape";
    case kv_errc::pending_tokens:
      return "pending_tokens";
  }
  return "unknown";
}

/// @brief The exception of a misused KV cache; what() names the function and the offending values.
class kv_error : public std::logic_error {
 public:
  kv_error(kv_errc code, const std::string& what) : std::logic_error(what), code_(code) {}
  kv_errc code() const noexcept { return code_; }

 private:
  kv_errc code_;
};

FRUGAL_END_NAMESPACE
