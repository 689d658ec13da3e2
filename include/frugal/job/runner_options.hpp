#pragma once

// The job runner's exit codes, options and statistics (runner.hpp runs them).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/job/checkpoint.hpp"
#include "frugal/job/errors.hpp"
#include "frugal/job/io.hpp"
#include "frugal/job/shard.hpp"
#include "frugal/job/stream.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job {

/// @brief Exit codes of a job process (sysexits.h). 75 (EX_TEMPFAIL) means "preempted, resumable": run the
/// same command again and it continues from its checkpoint.
inline constexpr int exit_completed = 0;
inline constexpr int exit_preempted = 75;
inline constexpr int exit_io_error = 74;  ///< resumable once the cause (a full disk, say) is fixed

/// @brief The exit code for an error: io 74, checkpoint_corrupt and checkpoint_mismatch 78 (EX_CONFIG),
/// bad_record 65 (EX_DATAERR), batch_failed 70 (EX_SOFTWARE), invalid_options 64 (EX_USAGE),
/// shard_incomplete 66 (EX_NOINPUT).
inline constexpr int exit_code(job_errc e) noexcept {
  switch (e) {
    case job_errc::io:
      return exit_io_error;
    case job_errc::checkpoint_corrupt:
    case job_errc::checkpoint_mismatch:
      return 78;
    case job_errc::bad_record:
      return 65;
    case job_errc::batch_failed:
      return 70;
    case job_errc::invalid_options:
      return 64;
    case job_errc::shard_incomplete:
      return 66;
  }
  return 1;
}

/// @brief One input record: a JSON object on one line, with a stable "id" (a string or an integer).
struct record {
  nlohmann::json id;
  nlohmann::json request;  ///< the whole object, id included
  std::uint64_t line = 0;  ///< 1-based line number in the input
};

/// @brief The user's model: one result per record, in the same order. It runs on the batcher's worker
/// thread, one batch at a time.
using batch_function = std::function<std::vector<nlohmann::json>(std::span<const record>)>;

struct options {
  /// Recorded in the checkpoint; a checkpoint of another name is refused.
  std::string name{};
  std::string input{};           ///< JSON lines
  std::string output{};          ///< JSON lines {"id": ..., "result": ...}, in input order
  std::string checkpoint_dir{};  ///< created if missing (one level)
  std::string errors{};          ///< JSON lines {"line", "reason", "text"}; empty: output + ".errors"
  /// The batcher's max_batch: every batch of a run holds this many records but the last, which holds the
  /// rest. With a stream_model: the records the model may hold at once (its room() may say fewer); as
  /// many again may wait finished behind a slow one, so it rarely starves.
  std::size_t batch_size = 32;
  /// A checkpoint after the batch that brings the records since the last one to this many; 0: no record
  /// rule. Each costs three fsyncs and a rename: lower it where preemptions are frequent and batches slow.
  std::uint64_t checkpoint_every_records = 1000;
  /// A checkpoint after the first batch that ends this long after the last one; 0: no time rule.
  std::chrono::nanoseconds checkpoint_every = std::chrono::seconds(30);
  /// The slice of the input this run does (shard.hpp); {0, 1}: all of it. The checkpoint records it, and
  /// a checkpoint of another shard or count is refused. Error lines carry the input's own line numbers.
  job::shard shard{};
  /// How often a run that finds checkpoint_dir locked by another live run (two pods on one index) tries
  /// again. It waits, checkpointing nothing, until that run ends: then it resumes from its checkpoint, or,
  /// if that run completed the job, returns completed at once. A stop request ends the wait (preempted).
  std::chrono::nanoseconds lock_poll = std::chrono::milliseconds(100);
  /// Stop with job_errc::bad_record at the first malformed record instead of logging it and going on.
  bool stop_on_bad_record = false;
  /// After SIGTERM (or request_stop()), how long the in-flight batch may take. Past it, or at a second
  /// signal, what is done is checkpointed and the process exits with exit_preempted. Cloud notices give
  /// about 2 minutes; leave room for the checkpoint itself.
  std::chrono::nanoseconds preemption_deadline = std::chrono::seconds(90);
  /// Install SIGTERM and SIGINT handlers for the duration of run(), restoring the previous ones after.
  bool handle_signals = true;
  /// Fault injection for tests; leave it zero.
  struct testing_hooks {
    std::uint64_t fail_write_after = 0;  ///< the write after this many fails with ENOSPC, as on a full disk
    /// A sleep between the checkpoint's temporary file and its rename, so a kill lands mid-checkpoint.
    std::chrono::nanoseconds pause_before_rename{0};
  } testing{};
};

/// @brief How run() ended: the job is done, or it was stopped and checkpointed, so a rerun resumes it.
enum class run_result { completed, preempted };

inline constexpr int exit_code(run_result o) noexcept {
  return o == run_result::completed ? exit_completed : exit_preempted;
}

struct stats {
  std::uint64_t records_done = 0;  ///< results in the output, over every run of the job
  std::uint64_t records_this_run = 0;
  std::uint64_t bad_records = 0;  ///< over every run
  std::uint64_t batches = 0;      ///< this run; with a stream_model, the advances of the finished prefix
  std::uint64_t checkpoints = 0;  ///< this run
  bool resumed = false;
  bool waited_for_lock = false;  ///< another run held checkpoint_dir's lock when this one started
  std::uint64_t resumed_at_record = 0;
  /// Results past the checkpoint that resume found and dropped: the work the last crash cost.
  std::uint64_t redone_records = 0;
  int stop_requests = 0;
};

}  // namespace job
FRUGAL_END_NAMESPACE
