#pragma once

// Checked POSIX file operations: every call that can fail throws job::error naming the path and errno.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "frugal/job/errors.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job {
namespace detail {

// Test faults: counts the writes a job makes so a test can fail the Nth one, as a full disk would, and
// holds a checkpoint between its temporary file and the rename.
struct write_fault {
  std::uint64_t fail_after = 0;  // 0: never
  std::uint64_t writes = 0;
  int error = ENOSPC;
  std::chrono::nanoseconds pause_before_rename{0};
};

class file {
 public:
  file() = default;
  file(std::string path, int flags, mode_t mode = 0644) : path_(std::move(path)) {
    do {
      fd_ = ::open(path_.c_str(), flags | O_CLOEXEC, mode);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) throw_io("open", path_, errno);
  }
  file(const file&) = delete;
  file& operator=(const file&) = delete;
  file(file&& o) noexcept : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}
  file& operator=(file&& o) noexcept {
    if (this != &o) {
      reset();
      path_ = std::move(o.path_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~file() { reset(); }

  int fd() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }
  bool is_open() const noexcept { return fd_ >= 0; }

  void write_all(std::string_view data, write_fault* fault = nullptr) {
    if (data.empty()) return;
    if (fault && fault->fail_after && ++fault->writes > fault->fail_after)
      throw_io("write (injected fault)", path_, fault->error);
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_io("write", path_, errno);
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  std::size_t read_some(char* buf, std::size_t cap) {
    for (;;) {
      const ssize_t n = ::read(fd_, buf, cap);
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno != EINTR) throw_io("read", path_, errno);
    }
  }
  void sync() {
    if (::fsync(fd_) != 0) throw_io("fsync", path_, errno);
  }
  std::uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw_io("fstat", path_, errno);
    return static_cast<std::uint64_t>(st.st_size);
  }
  void truncate(std::uint64_t n) {
    if (::ftruncate(fd_, static_cast<off_t>(n)) != 0) throw_io("ftruncate", path_, errno);
  }
  void seek(std::uint64_t off) {
    if (::lseek(fd_, static_cast<off_t>(off), SEEK_SET) < 0) throw_io("lseek", path_, errno);
  }
  void close() {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) throw_io("close", path_, errno);
  }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  std::string path_;
  int fd_ = -1;
};

inline std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A rename is durable only once the directory holding the new name is on disk.
inline void sync_dir(const std::string& dir) {
  file d(dir, O_RDONLY | O_DIRECTORY);
  d.sync();
}

inline bool exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  if (errno == ENOENT) return false;
  throw_io("stat", path, errno);
}

inline void rename_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_io("rename " + from + " ->", to, errno);
}

inline std::string read_whole(const std::string& path) {
  file f(path, O_RDONLY);
  std::string out;
  char buf[4096];
  for (;;) {
    const std::size_t n = f.read_some(buf, sizeof buf);
    if (n == 0) break;
    out.append(buf, n);
  }
  return out;
}

}  // namespace detail
}  // namespace job
FRUGAL_END_NAMESPACE
