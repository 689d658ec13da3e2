#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Why a job stopped with an error.
enum class job_errc {
  io,                  ///< a read, write, fsync, rename or truncate failed; resumable once the cause is fixed
  checkpoint_corrupt,  ///< the checkpoint file does not parse or its checksum does not match
  checkpoint_mismatch,  ///< the checkpoint belongs to another job or input, or the output is shorter than it
  bad_record,           ///< a malformed input record, with options.stop_on_bad_record
  batch_failed,         ///< the batch function threw or returned the wrong number of results
  invalid_options,
  shard_incomplete,  ///< a merge found a shard missing, unfinished or shorter than its checkpoint
};

/// @brief A short name for the code, e.g. "checkpoint_corrupt".
inline constexpr const char* to_string(job_errc c) noexcept {
  switch (c) {
    case job_errc::io:
      return "io";
    case job_errc::checkpoint_corrupt:
      return "checkpoint_corrupt";
    case job_errc::checkpoint_mismatch:
      return "checkpoint_mismatch";
    case job_errc::bad_record:
      return "bad_record";
    case job_errc::batch_failed:
      return "batch_failed";
    case job_errc::invalid_options:
      return "invalid_options";
    case job_errc::shard_incomplete:
      return "shard_incomplete";
  }
  return "unknown";
}

namespace job {

/// @brief The one exception type of frugal::job; what() names the path and, for I/O, the errno text.
class error : public std::runtime_error {
 public:
  error(job_errc code, const std::string& what, int sys_errno = 0)
      : std::runtime_error("frugal::job: " + what), code_(code), errno_(sys_errno) {}
  job_errc code() const noexcept { return code_; }
  /// @brief The errno of a failed system call, 0 otherwise.
  int sys_errno() const noexcept { return errno_; }

 private:
  job_errc code_;
  int errno_;
};

namespace detail {
[[noreturn]] inline void throw_io(const std::string& op, const std::string& path, int e) {
  throw error(job_errc::io, op + " " + path + ": " + std::strerror(e) + " (errno " + std::to_string(e) + ")",
              e);
}
}  // namespace detail

}  // namespace job
FRUGAL_END_NAMESPACE
