#pragma once

// The job runner's dealings with the process and its files: SIGTERM and SIGINT counted while a run lasts,
// the input read line by line with byte offsets, and the output's lines counted and written.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "frugal/job/io.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job::detail {

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

}  // namespace job::detail
FRUGAL_END_NAMESPACE
