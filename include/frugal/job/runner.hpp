#pragma once

// The job runner. Records are read in order, grouped into batches of options.batch_size and handed to the
// user's batch function; results are appended to the output in input order. It calls the function on
// chunks directly rather than through frugal::batcher: an offline job has every record in hand, so the
// batcher's time window adds only latency, and chunking here keeps each batch's boundary, and therefore each
// checkpoint's input offset, exact.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

#include "frugal/config.hpp"
#include "frugal/job/checkpoint.hpp"
#include "frugal/job/error.hpp"
#include "frugal/job/io.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job {

/// @brief Exit codes of a job process (sysexits.h). 75 (EX_TEMPFAIL) means "preempted, resumable": run the
/// same command again and it continues from its checkpoint.
inline constexpr int exit_completed = 0;
inline constexpr int exit_preempted = 75;
inline constexpr int exit_io_error = 74;  ///< resumable once the cause (a full disk, say) is fixed

/// @brief The exit code for an error: io 74, checkpoint_corrupt and checkpoint_mismatch 78 (EX_CONFIG),
/// bad_record 65 (EX_DATAERR), batch_failed 70 (EX_SOFTWARE), invalid_options 64 (EX_USAGE).
inline constexpr int exit_code(errc e) noexcept {
  switch (e) {
    case errc::io:
      return exit_io_error;
    case errc::checkpoint_corrupt:
    case errc::checkpoint_mismatch:
      return 78;
    case errc::bad_record:
      return 65;
    case errc::batch_failed:
      return 70;
    case errc::invalid_options:
      return 64;
  }
  return 1;
}

/// @brief One input record: a JSON object on one line, with a stable "id" (a string or an integer).
struct record {
  nlohmann::json id;
  nlohmann::json request;  ///< the whole object, id included
  std::uint64_t line = 0;  ///< 1-based line number in the input
};

/// @brief The user's model: one result per record, in the same order. It runs on a thread of the runner's.
using batch_function = std::function<std::vector<nlohmann::json>(std::span<const record>)>;

struct options {
  /// Recorded in the checkpoint; a checkpoint of another name is refused.
  std::string name{};
  std::string input{};           ///< JSON lines
  std::string output{};          ///< JSON lines {"id": ..., "result": ...}, in input order
  std::string checkpoint_dir{};  ///< created if missing (one level)
  std::string errors{};          ///< JSON lines {"line", "reason", "text"}; empty: output + ".errors"
  std::size_t batch_size = 32;
  /// A checkpoint after the batch that brings the records since the last one to this many; 0: no record
  /// rule. Each costs three fsyncs and a rename: lower it where preemptions are frequent and batches slow.
  std::uint64_t checkpoint_every_records = 1000;
  /// A checkpoint after the first batch that ends this long after the last one; 0: no time rule.
  std::chrono::nanoseconds checkpoint_every = std::chrono::seconds(30);
  /// Stop with errc::bad_record at the first malformed record instead of logging it and going on.
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

enum class outcome { completed, preempted };

inline constexpr int exit_code(outcome o) noexcept {
  return o == outcome::completed ? exit_completed : exit_preempted;
}

struct stats {
  std::uint64_t records_done = 0;  ///< results in the output, over every run of the job
  std::uint64_t records_this_run = 0;
  std::uint64_t bad_records = 0;  ///< over every run
  std::uint64_t batches = 0;      ///< this run
  std::uint64_t checkpoints = 0;  ///< this run
  bool resumed = false;
  std::uint64_t resumed_at_record = 0;
  /// Results past the checkpoint that resume found and dropped: the work the last crash cost.
  std::uint64_t redone_records = 0;
  int stop_requests = 0;
};

namespace detail {

inline std::atomic<int>& signal_count() noexcept {
  static std::atomic<int> n{0};
  return n;
}
extern "C" inline void job_on_signal(int) { signal_count().fetch_add(1, std::memory_order_relaxed); }

class signal_guard {
 public:
  explicit signal_guard(bool on) : on_(on) {
    if (!on_) return;
    struct sigaction sa {};
    sa.sa_handler = job_on_signal;
    sa.sa_flags = SA_RESTART;  // the file calls carry on; the runner polls the count
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, &old_term_);
    ::sigaction(SIGINT, &sa, &old_int_);
  }
  signal_guard(const signal_guard&) = delete;
  signal_guard& operator=(const signal_guard&) = delete;
  ~signal_guard() {
    if (!on_) return;
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGINT, &old_int_, nullptr);
  }

 private:
  bool on_;
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

class line_reader {
 public:
  explicit line_reader(file& f) : f_(f) {}
  // The next line without its '\n' (and '\r'); false at the end.
  bool next(std::string& line) {
    for (;;) {
      const auto nl = buf_.find('\n', pos_);
      if (nl != std::string::npos) return take(line, nl - pos_, 1);
      if (eof_) {
        if (pos_ == buf_.size()) return false;
        return take(line, buf_.size() - pos_, 0);
      }
      buf_.erase(0, pos_);
      pos_ = 0;
      char chunk[1 << 16];
      const std::size_t n = f_.read_some(chunk, sizeof chunk);
      if (n == 0) eof_ = true;
      buf_.append(chunk, n);
    }
  }
  std::uint64_t offset = 0;
  std::uint64_t line_no = 0;

 private:
  bool take(std::string& line, std::size_t len, std::size_t sep) {
    line.assign(buf_, pos_, len);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    pos_ += len + sep;
    offset += len + sep;
    ++line_no;
    return true;
  }
  file& f_;
  std::string buf_;
  std::size_t pos_ = 0;
  bool eof_ = false;
};

inline std::string dump_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

inline std::uint64_t count_lines_from(const std::string& path, std::uint64_t from) {
  file f(path, O_RDONLY);
  f.seek(from);
  std::uint64_t n = 0;
  char buf[1 << 16];
  for (;;) {
    const std::size_t got = f.read_some(buf, sizeof buf);
    if (got == 0) break;
    for (std::size_t i = 0; i < got; ++i) n += buf[i] == '\n';
  }
  return n;
}

inline void make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw_io("mkdir", dir, errno);
}

}  // namespace detail

/// @brief Runs one job to completion or preemption. Output is exactly once and in input order across any
/// number of crashes: a resume truncates the output to the checkpoint's size and reads on from its offset.
/// Without a checkpoint the output and errors files are started afresh. Ids are carried to the output, not
/// deduplicated. The batch function runs on a thread of the runner's, so the wait for it can watch the
/// preemption deadline.
template <class Clock = std::chrono::steady_clock>
class basic_runner {
 public:
  basic_runner(options o, batch_function fn, Clock clock = Clock())
      : o_(std::move(o)), fn_(std::move(fn)), clock_(clock) {
    auto bad = [](const std::string& why) { return error(errc::invalid_options, "options: " + why); };
    if (o_.name.empty()) throw bad("name is empty");
    if (o_.input.empty() || o_.output.empty() || o_.checkpoint_dir.empty())
      throw bad("input, output and checkpoint_dir are required");
    if (o_.errors.empty()) o_.errors = o_.output + ".errors";
    if (o_.input == o_.output || o_.input == o_.errors || o_.output == o_.errors)
      throw bad("input, output and errors must be different files");
    if (o_.batch_size == 0) throw bad("batch_size must be >= 1");
    if (o_.checkpoint_every.count() < 0 || o_.preemption_deadline.count() < 0)
      throw bad("checkpoint_every and preemption_deadline must not be negative");
    if (!fn_) throw bad("no batch function");
    fault_.fail_after = o_.testing.fail_write_after;
    fault_.pause_before_rename = o_.testing.pause_before_rename;
  }

  /// @brief Runs (or resumes) the job, once per runner. Reads the whole input first to check its identity
  /// against the checkpoint. Returns completed or preempted; throws job::error.
  outcome run() {
    if (ran_)
      throw error(errc::invalid_options, "run() called twice on one runner; make a new runner to resume");
    ran_ = true;
    detail::signal_guard guard(o_.handle_signals);
    signal_base_ = detail::signal_count().load();
    detail::make_dir(o_.checkpoint_dir);
    const input_identity id = identify_input(o_.input);
    const std::optional<checkpoint> cp = read_checkpoint(o_.checkpoint_dir);
    out_ = detail::file(o_.output, O_WRONLY | O_CREAT | O_APPEND);
    err_ = detail::file(o_.errors, O_WRONLY | O_CREAT | O_APPEND);
    if (cp) {
      check_checkpoint_matches(*cp, o_.name, id, o_.checkpoint_dir);
      state_ = *cp;
      resume_files();
      if (cp->done) return outcome::completed;
    } else {
      state_ = checkpoint{.job_name = o_.name, .input = id};
      out_.truncate(0);
      err_.truncate(0);
    }
    detail::file in(o_.input, O_RDONLY);
    in.seek(state_.input_offset);
    detail::line_reader reader(in);
    reader.offset = state_.input_offset;
    reader.line_no = state_.input_line;
    last_checkpoint_ = clock_.now();

    std::string line;
    for (;;) {
      if (stop_requested()) {
        flush(reader);
        checkpoint_now(false);
        return outcome::preempted;
      }
      if (!reader.next(line)) break;
      take(line, reader);
      if (pending_.size() >= o_.batch_size) {
        flush(reader);
        maybe_checkpoint();
      }
    }
    flush(reader);
    checkpoint_now(true);
    return outcome::completed;
  }

  /// @brief Asks the job to stop as a SIGTERM would; thread-safe. A second call forces the checkpoint.
  void request_stop() noexcept { requested_.fetch_add(1, std::memory_order_relaxed); }

  /// @brief A snapshot; thread-safe.
  job::stats stats() const {
    std::lock_guard lk(stats_mu_);
    return stats_;
  }

 private:
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
      throw error(errc::checkpoint_mismatch,
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

  void take(const std::string& line, const detail::line_reader& reader) {
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
    if (!reason.empty()) {
      if (o_.stop_on_bad_record)
        throw error(errc::bad_record, o_.input + ":" + std::to_string(reader.line_no) + ": " + reason);
      pending_errors_ +=
          detail::dump_line({{"line", reader.line_no}, {"reason", reason}, {"text", line.substr(0, 256)}});
      ++pending_bad_;
      return;
    }
    record r;
    r.id = j["id"];
    r.request = std::move(j);
    r.line = reader.line_no;
    pending_.push_back(std::move(r));
  }

  // Runs the pending batch and appends its results; the state then covers everything the reader consumed.
  void flush(const detail::line_reader& reader) {
    std::vector<nlohmann::json> results;
    if (!pending_.empty()) results = run_batch();
    std::string text;
    for (std::size_t i = 0; i < pending_.size(); ++i)
      text += detail::dump_line({{"id", pending_[i].id}, {"result", std::move(results[i])}});
    out_dirty_ |= !text.empty();
    err_dirty_ |= !pending_errors_.empty();
    out_.write_all(text, &fault_);
    err_.write_all(pending_errors_, &fault_);
    state_.output_size += text.size();
    state_.errors_size += pending_errors_.size();
    state_.records_done += pending_.size();
    state_.bad_records += pending_bad_;
    state_.input_offset = reader.offset;
    state_.input_line = reader.line_no;
    since_checkpoint_ += pending_.size();
    const std::uint64_t n = pending_.size(), bad = pending_bad_;
    update([&](job::stats& s) {
      s.records_done += n;
      s.records_this_run += n;
      s.bad_records += bad;
      s.batches += n > 0;
    });
    pending_.clear();
    pending_errors_.clear();
    pending_bad_ = 0;
  }

  std::vector<nlohmann::json> run_batch() {
    struct shared {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      std::vector<nlohmann::json> results;
      std::exception_ptr failure;
    };
    auto sh = std::make_shared<shared>();
    std::thread worker([sh, fn = &fn_, recs = std::span<const record>(pending_)] {
      std::vector<nlohmann::json> r;
      std::exception_ptr ex;
      try {
        r = (*fn)(recs);
      } catch (...) {
        ex = std::current_exception();
      }
      std::lock_guard lk(sh->mu);
      sh->results = std::move(r);
      sh->failure = ex;
      sh->done = true;
      sh->cv.notify_all();
    });
    {
      std::unique_lock lk(sh->mu);
      while (!sh->cv.wait_for(lk, std::chrono::milliseconds(5), [&] { return sh->done; })) {
        if (!stop_requested()) continue;
        if (stop_count() >= 2 || clock_.now() >= *deadline_) {
          lk.unlock();
          abandon();
        }
      }
    }
    worker.join();
    if (sh->failure) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(sh->failure);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      throw error(errc::batch_failed, "the batch function failed on the batch from line " +
                                          std::to_string(pending_.front().line) + ": " + what);
    }
    if (sh->results.size() != pending_.size())
      throw error(errc::batch_failed, "the batch function returned " + std::to_string(sh->results.size()) +
                                          " results for " + std::to_string(pending_.size()) + " records");
    return std::move(sh->results);
  }

  // The in-flight batch cannot be cancelled from outside, so what is done is checkpointed and the process
  // ends without unwinding past the thread still running it.
  [[noreturn]] void abandon() {
    try {
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

  void maybe_checkpoint() {
    const bool by_records = o_.checkpoint_every_records && since_checkpoint_ >= o_.checkpoint_every_records;
    const bool by_time =
        o_.checkpoint_every.count() > 0 && clock_.now() - last_checkpoint_ >= o_.checkpoint_every;
    if (by_records || by_time) checkpoint_now(false);
  }

  // Each fsync costs a device flush (4 ms on a cloud VM's disk even when clean), so clean files are skipped.
  void checkpoint_now(bool done) {
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
    last_checkpoint_ = clock_.now();
    update([](job::stats& s) { ++s.checkpoints; });
  }

  options o_;
  batch_function fn_;
  Clock clock_;
  detail::write_fault fault_;
  detail::file out_, err_;
  checkpoint state_;
  std::vector<record> pending_;
  std::string pending_errors_;
  std::uint64_t pending_bad_ = 0;
  std::uint64_t since_checkpoint_ = 0;
  typename Clock::time_point last_checkpoint_{};
  std::optional<typename Clock::time_point> deadline_;
  bool dirs_synced_ = false;
  bool out_dirty_ = true, err_dirty_ = true;  // true: a resume's truncation must reach the disk too
  bool ran_ = false;
  int signal_base_ = 0;
  std::atomic<int> requested_{0};
  mutable std::mutex stats_mu_;
  job::stats stats_;
};

using runner = basic_runner<>;

}  // namespace job
FRUGAL_END_NAMESPACE
