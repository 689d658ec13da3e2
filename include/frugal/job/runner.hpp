#pragma once

// The job runner, on the online server's path. The runner reads records in order and submits them to a
// frugal::batcher, keeping at most two batches' worth of records not yet written; one worker pulls batches
// with next_batch(), calls the user's batch function and fulfills them, as a server's model loop does; the
// runner appends results to the output in input order as their batches complete. The batcher's max_batch is
// options.batch_size and its window is unbounded (nanoseconds::max()): a batch is cut when batch_size
// records are queued, or when close() at the end of the input releases the short last one. Window 0 would be
// greedy, so the worker would take whatever the reader had submitted so far and run partial batches; an
// offline job always has its next record in hand, so waiting for a full batch costs nothing, and batch
// sizes, checkpoint positions and the ledger come out the same from run to run. The one worker gets batches
// in submit order, so the runner knows where each ends: checkpoints fall after whole batches, and each covers
// a prefix of the input whose results are all in the output.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "frugal/batcher.hpp"
#include "frugal/job/checkpoint.hpp"
#include "frugal/job/detail/lock.hpp"
#include "frugal/job/detail/process.hpp"
#include "frugal/job/errors.hpp"
#include "frugal/job/io.hpp"
#include "frugal/job/shard.hpp"
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
  /// rest.
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
  std::uint64_t batches = 0;      ///< this run
  std::uint64_t checkpoints = 0;  ///< this run
  bool resumed = false;
  bool waited_for_lock = false;  ///< another run held checkpoint_dir's lock when this one started
  std::uint64_t resumed_at_record = 0;
  /// Results past the checkpoint that resume found and dropped: the work the last crash cost.
  std::uint64_t redone_records = 0;
  int stop_requests = 0;
};

/// @brief Runs one job to completion or preemption. Output is exactly once and in input order across any
/// number of crashes: a resume truncates the output to the checkpoint's size and reads on from its offset.
/// Without a checkpoint the output and errors files are started afresh. Ids are carried to the output, not
/// deduplicated. The batch function runs on the batcher's worker thread, one batch at a time, so the
/// runner's thread can watch the preemption deadline while it runs.
template <class Clock = std::chrono::steady_clock>
class basic_runner {
 public:
  basic_runner(options o, batch_function fn, Clock clock = Clock())
      : o_(std::move(o)), fn_(std::move(fn)), clock_(clock) {
    auto bad = [](const std::string& why) { return error(job_errc::invalid_options, "options: " + why); };
    if (o_.name.empty()) throw bad("name is empty");
    if (o_.input.empty() || o_.output.empty() || o_.checkpoint_dir.empty())
      throw bad("input, output and checkpoint_dir are required");
    if (o_.errors.empty()) o_.errors = o_.output + ".errors";
    if (o_.input == o_.output || o_.input == o_.errors || o_.output == o_.errors)
      throw bad("input, output and errors must be different files");
    if (o_.batch_size == 0) throw bad("batch_size must be >= 1");
    if (o_.shard.count == 0 || o_.shard.index >= o_.shard.count)
      throw bad("shard.index (" + std::to_string(o_.shard.index) + ") must be below shard.count (" +
                std::to_string(o_.shard.count) + ")");
    if (o_.lock_poll.count() <= 0) throw bad("lock_poll must be > 0");
    if (o_.checkpoint_every.count() < 0 || o_.preemption_deadline.count() < 0)
      throw bad("checkpoint_every and preemption_deadline must not be negative");
    if (!fn_) throw bad("no batch function");
    fault_.fail_after = o_.testing.fail_write_after;
    fault_.pause_before_rename = o_.testing.pause_before_rename;
  }

  /// @brief Runs (or resumes) the job, once per runner. Takes checkpoint_dir's lock (waiting while another
  /// run holds it), then reads the whole input to check its identity against the checkpoint. Returns
  /// completed or preempted; throws job::error.
  run_result run() {
    if (ran_)
      throw error(job_errc::invalid_options, "run() called twice on one runner; make a new runner to resume");
    ran_ = true;
    detail::signal_guard guard(o_.handle_signals);
    signal_base_ = detail::signal_count().load();
    detail::make_dir(o_.checkpoint_dir);
    std::optional<detail::dir_lock> lock = take_lock();
    if (!lock) return run_result::preempted;
    const std::optional<shard_extent> extent = shard_of_input();
    const job::slice slice = extent ? extent->slice : job::slice{0, input_size_};
    std::uint64_t lines_before = 0;
    const input_identity id = detail::identify_and_count(o_.input, input_size_, slice.begin, lines_before);
    const std::optional<checkpoint> cp = read_checkpoint(o_.checkpoint_dir);
    out_ = detail::file(o_.output, O_WRONLY | O_CREAT | O_APPEND);
    err_ = detail::file(o_.errors, O_WRONLY | O_CREAT | O_APPEND);
    if (cp) {
      check_checkpoint_matches(*cp, o_.name, id, o_.checkpoint_dir, extent);
      state_ = *cp;
      resume_files();
      if (cp->done) return run_result::completed;
    } else {
      state_ = checkpoint{.job_name = o_.name,
                          .input = id,
                          .input_offset = slice.begin,
                          .input_line = lines_before,
                          .extent = extent};
      out_.truncate(0);
      err_.truncate(0);
    }
    detail::file in(o_.input, O_RDONLY);
    in.seek(state_.input_offset);
    detail::line_reader reader(in);
    reader.offset = state_.input_offset;
    reader.line_no = state_.input_line;
    collected_offset_ = state_.input_offset;
    collected_line_ = state_.input_line;
    last_checkpoint_ = clock_.now();

    pipeline p(*this, {.window = std::chrono::nanoseconds::max(), .max_batch = o_.batch_size});
    // One batch running and the next one queued, so the worker never waits for the reader.
    const std::uint64_t max_in_flight = 2 * static_cast<std::uint64_t>(o_.batch_size);
    std::string line;
    bool eof = false;
    for (;;) {
      if (stop_requested()) return stop(p.queue);
      collect();
      if (!eof && submitted_ - collected_ < max_in_flight) {
        if (reader.offset < slice.end && reader.next(line)) {
          take(line, reader, p.queue);
        } else {
          eof = true;
          p.queue.close(drain::yes);
        }
        continue;
      }
      if (eof && slots_.empty()) break;
      wait_for_worker();
    }
    collected_offset_ = reader.offset;  // blank lines at the end are covered too
    collected_line_ = reader.line_no;
    commit();
    checkpoint_now(true);
    return run_result::completed;
  }

  /// @brief Asks the job to stop as a SIGTERM would; thread-safe. A second call forces the checkpoint.
  void request_stop() noexcept { requested_.fetch_add(1, std::memory_order_relaxed); }

  /// @brief A snapshot; thread-safe.
  job::stats stats() const {
    std::lock_guard lk(stats_mu_);
    return stats_;
  }

 private:
  using time_point = typename Clock::time_point;
  using queue_type = batcher<record, nlohmann::json>;

  // One input line that gives output: a record submitted to the batcher, or a bad record's errors line.
  struct slot {
    bool is_record = false;
    std::uint64_t seq = 0;  // a record's submit order
    nlohmann::json id;
    nlohmann::json result;  // written by the batcher's callback on the worker, read once its batch is done
    std::string error_line;
    std::uint64_t end_offset = 0, end_line = 0;  // the input consumed through this line
  };
  struct batch_end {
    std::uint64_t records;  // records done once this batch is: its last one's seq + 1
    time_point at;
  };

  // The batcher and its one worker. On the way out (an exception included) it fails what is queued and
  // joins the worker, which at most finishes the batch it is running.
  struct pipeline {
    queue_type queue;
    std::thread worker;
    pipeline(basic_runner& r, batcher_options o)
        : queue(std::move(o)), worker([&r, this] { r.work(queue); }) {}
    pipeline(const pipeline&) = delete;
    pipeline& operator=(const pipeline&) = delete;
    ~pipeline() {
      queue.close(drain::no);
      worker.join();
    }
  };

  // checkpoint_dir's lock, or nullopt when a stop request came while another run held it.
  std::optional<detail::dir_lock> take_lock() {
    return detail::wait_for_lock(o_.checkpoint_dir + "/lock", o_.name, o_.lock_poll, [&] {
      update([](job::stats& s) { s.waited_for_lock = true; });
      return stop_requested();
    });
  }

  std::optional<shard_extent> shard_of_input() {
    input_size_ = detail::file(o_.input, O_RDONLY).size();
    if (o_.shard.count == 1) return std::nullopt;
    return shard_extent{o_.shard, slice_of(o_.input, input_size_, o_.shard)};
  }

  int stop_count() const noexcept {
    return detail::signal_count().load(std::memory_order_relaxed) - signal_base_ +
           requested_.load(std::memory_order_relaxed);
  }
  bool stop_requested() {
    const int n = stop_count();
    if (n == 0) return false;
    if (!deadline_) deadline_ = clock_.now() + o_.preemption_deadline;
    update([&](job::stats& s) { s.stop_requests = n; });
    return true;
  }

  template <class F>
  void update(F f) {
    std::lock_guard lk(stats_mu_);
    f(stats_);
  }

  void resume_files() {
    const std::uint64_t out_size = out_.size(), err_size = err_.size();
    if (out_size < state_.output_size || err_size < state_.errors_size)
      throw error(job_errc::checkpoint_mismatch,
                  "output " + o_.output + " (" + std::to_string(out_size) + " bytes) or errors " + o_.errors +
                      " (" + std::to_string(err_size) + " bytes) is shorter than checkpoint " +
                      o_.checkpoint_dir + "/" + checkpoint_file_name + " records (" +
                      std::to_string(state_.output_size) + ", " + std::to_string(state_.errors_size) +
                      "); refusing to resume");
    const std::uint64_t redone = detail::count_lines_from(o_.output, state_.output_size);
    out_.truncate(state_.output_size);
    err_.truncate(state_.errors_size);
    update([&](job::stats& s) {
      s.resumed = true;
      s.resumed_at_record = state_.records_done;
      s.redone_records = redone;
      s.records_done = state_.records_done;
      s.bad_records = state_.bad_records;
    });
  }

  // Parses one line: a record goes to the batcher, a malformed one to the queue of lines awaiting output.
  void take(const std::string& line, const detail::line_reader& reader, queue_type& q) {
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    std::string reason;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
      if (!j.is_object())
        reason = "not a JSON object";
      else if (!j.contains("id"))
        reason = "no \"id\" field";
      else if (!j["id"].is_string() && !j["id"].is_number_integer())
        reason = "\"id\" must be a string or an integer";
    } catch (const nlohmann::json::parse_error& e) {
      reason = e.what();
    }
    if (!reason.empty() && o_.stop_on_bad_record)
      throw error(job_errc::bad_record, o_.input + ":" + std::to_string(reader.line_no) + ": " + reason);
    slot& s = slots_.emplace_back();
    s.end_offset = reader.offset;
    s.end_line = reader.line_no;
    if (!reason.empty()) {
      s.error_line =
          detail::dump_line({{"line", reader.line_no}, {"reason", reason}, {"text", line.substr(0, 256)}});
      return;
    }
    s.is_record = true;
    s.seq = submitted_++;
    s.id = j["id"];
    record r;
    r.id = s.id;
    r.request = std::move(j);
    r.line = reader.line_no;
    // A failed request (closed or abandoned at a stop, or its batch failed) leaves no result; the runner
    // never writes it, since its batch is never reported done.
    q.submit(std::move(r), [result = &s.result](auto&& o) {
      if (o) *result = std::move(*o);
    });
  }

  // The worker: a server's model loop (next_batch, the model, fulfill) with the job's batch function. It
  // reports each batch's end in order; after a stop request it runs no further batch.
  void work(queue_type& q) {
    std::string failure;
    try {
      while (auto b = q.next_batch()) {
        if (stop_count() > 0) break;
        const std::span<const record> recs(b->requests());
        std::vector<nlohmann::json> results;
        try {
          results = fn_(recs);
        } catch (const std::exception& e) {
          failure = failed_on(recs, e.what());
        } catch (...) {
          failure = failed_on(recs, "unknown exception");
        }
        if (failure.empty() && results.size() != recs.size())
          failure = "the batch function returned " + std::to_string(results.size()) + " results for " +
                    std::to_string(recs.size()) + " records";
        if (!failure.empty()) break;
        const time_point at = clock_.now();
        const std::size_t n = b->size();
        b->fulfill(std::move(results));
        {
          std::lock_guard lk(mu_);
          completed_ += n;
          ends_.push_back({completed_, at});
        }
        cv_.notify_one();
      }
    } catch (const std::exception& e) {
      failure = std::string("the batch worker failed: ") + e.what();
    }
    {
      std::lock_guard lk(mu_);
      if (!failure.empty()) failure_ = std::move(failure);
      worker_done_ = true;
    }
    cv_.notify_one();
  }

  static std::string failed_on(std::span<const record> recs, const char* what) {
    return "the batch function failed on the batch from line " + std::to_string(recs.front().line) + ": " +
           what;
  }

  void wait_for_worker() {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::milliseconds(5),
                 [&] { return completed_ != collected_ || failure_ || worker_done_; });
  }

  // Takes the finished prefix of the lines read: each record's result once its batch is done, and the bad
  // records between them. At each batch's end the text is appended to the files and a checkpoint may
  // follow. A failed batch throws once everything before it is collected.
  void collect() {
    std::uint64_t completed;
    std::optional<std::string> failure;
    {
      std::lock_guard lk(mu_);
      completed = completed_;
      failure = failure_;
      ends_seen_.insert(ends_seen_.end(), ends_.begin(), ends_.end());
      ends_.clear();
    }
    while (!slots_.empty()) {
      slot& s = slots_.front();
      if (s.is_record) {
        if (s.seq >= completed) break;
        out_text_ += detail::dump_line({{"id", std::move(s.id)}, {"result", std::move(s.result)}});
        ++collected_;
        ++text_records_;
      } else {
        err_text_ += s.error_line;
        ++text_bad_;
      }
      collected_offset_ = s.end_offset;
      collected_line_ = s.end_line;
      const bool batch_done = s.is_record && !ends_seen_.empty() && ends_seen_.front().records == s.seq + 1;
      slots_.pop_front();
      if (!batch_done) continue;
      const time_point at = ends_seen_.front().at;
      ends_seen_.pop_front();
      commit();
      update([](job::stats& st) { ++st.batches; });
      maybe_checkpoint(at);
    }
    if (failure) throw error(job_errc::batch_failed, *failure);
  }

  // Appends the collected text; the state then covers the input through the last line collected.
  void commit() {
    out_dirty_ |= !out_text_.empty();
    err_dirty_ |= !err_text_.empty();
    out_.write_all(out_text_, &fault_);
    err_.write_all(err_text_, &fault_);
    state_.output_size += out_text_.size();
    state_.errors_size += err_text_.size();
    state_.records_done += text_records_;
    state_.bad_records += text_bad_;
    state_.input_offset = collected_offset_;
    state_.input_line = collected_line_;
    since_checkpoint_ += text_records_;
    const std::uint64_t n = text_records_, bad = text_bad_;
    update([&](job::stats& s) {
      s.records_done += n;
      s.records_this_run += n;
      s.bad_records += bad;
    });
    out_text_.clear();
    err_text_.clear();
    text_records_ = text_bad_ = 0;
  }

  // Stops taking records: those queued and not yet in a batch fail with closed, and the batch in flight may
  // finish within the deadline. The checkpoint covers what is collected.
  run_result stop(queue_type& q) {
    q.close(drain::no);
    for (;;) {
      collect();
      {
        std::lock_guard lk(mu_);
        if (worker_done_) break;
      }
      stop_requested();
      if (stop_count() >= 2 || clock_.now() >= *deadline_) abandon();
      wait_for_worker();
    }
    collect();
    commit();
    checkpoint_now(false);
    return run_result::preempted;
  }

  // The in-flight batch cannot be cancelled from outside, so what is done is checkpointed and the process
  // ends without unwinding past the thread still running it.
  [[noreturn]] void abandon() {
    try {
      commit();
      checkpoint_now(false);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      std::_Exit(exit_io_error);
    }
    std::fprintf(stderr,
                 "frugal::job: %s: in-flight batch abandoned at the preemption deadline or a second signal; "
                 "checkpointed %llu records, exiting %d (resumable)\n",
                 o_.name.c_str(), static_cast<unsigned long long>(state_.records_done), exit_preempted);
    std::_Exit(exit_preempted);
  }

  // `at` is when the batch just collected ended, so the time rule does not depend on how far the reader lags.
  void maybe_checkpoint(time_point at) {
    const bool by_records = o_.checkpoint_every_records && since_checkpoint_ >= o_.checkpoint_every_records;
    const bool by_time = o_.checkpoint_every.count() > 0 && at - last_checkpoint_ >= o_.checkpoint_every;
    if (by_records || by_time) checkpoint_now(false, at);
  }

  void checkpoint_now(bool done) { checkpoint_now(done, clock_.now()); }

  // Each fsync costs a device flush (4 ms on a cloud VM's disk even when clean), so clean files are skipped.
  void checkpoint_now(bool done, time_point at) {
    if (out_dirty_) out_.sync();
    if (err_dirty_) err_.sync();
    out_dirty_ = err_dirty_ = false;
    if (!dirs_synced_) {
      detail::sync_dir(detail::parent_dir(o_.output));
      detail::sync_dir(detail::parent_dir(o_.errors));
      dirs_synced_ = true;
    }
    checkpoint c = state_;
    c.done = done;
    write_checkpoint(o_.checkpoint_dir, c, &fault_);
    since_checkpoint_ = 0;
    last_checkpoint_ = at;
    update([](job::stats& s) { ++s.checkpoints; });
  }

  options o_;
  batch_function fn_;
  Clock clock_;
  detail::write_fault fault_;
  detail::file out_, err_;
  checkpoint state_;
  // The runner's thread alone, but for the results the callbacks write into slots it has not collected.
  std::deque<slot> slots_;
  std::deque<batch_end> ends_seen_;
  std::uint64_t submitted_ = 0, collected_ = 0;
  std::string out_text_, err_text_;
  std::uint64_t text_records_ = 0, text_bad_ = 0;
  std::uint64_t collected_offset_ = 0, collected_line_ = 0;
  std::uint64_t since_checkpoint_ = 0;
  time_point last_checkpoint_{};
  std::optional<time_point> deadline_;
  bool dirs_synced_ = false;
  bool out_dirty_ = true, err_dirty_ = true;  // true: a resume's truncation must reach the disk too
  bool ran_ = false;
  std::uint64_t input_size_ = 0;
  int signal_base_ = 0;
  std::atomic<int> requested_{0};
  // Shared with the worker.
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t completed_ = 0;  // records in the batches done, in submit order
  std::deque<batch_end> ends_;
  std::optional<std::string> failure_;
  bool worker_done_ = false;
  mutable std::mutex stats_mu_;
  job::stats stats_;
};

using runner = basic_runner<>;

}  // namespace job
FRUGAL_END_NAMESPACE
