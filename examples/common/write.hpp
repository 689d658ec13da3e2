#pragma once

// Every file an example writes goes through here: each write, the flush and the close are checked, and a
// failure (a directory where the file must go, a path component that is a file, a full disk) throws
// write_error naming the path. prepare_output_dir and check_writable let a program find out before its
// run, not after it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace examples {

/// @brief A file that could not be written: the message names the path and the system's reason.
struct write_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {

[[noreturn]] inline void write_failed(const std::string& path, const char* doing, int err) {
  throw write_error(path + ": " + doing + ": " + std::strerror(err));
}

// Creates and removes a file in `dir`; a failure names `path`.
inline void probe_dir(const std::string& dir, const std::string& path) {
  const std::string probe = dir + "/.frugal-write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) write_failed(path, "cannot be written", errno);
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace detail

/// @brief An output file written in pieces ("-" is stdout). close() flushes and closes it and reports
/// either's failure; the destructor of a file not closed closes it without a word (an error is on its way).
class output_file {
 public:
  explicit output_file(const std::string& path) : path_(path) {
    if (path == "-") {
      f_ = stdout;
      return;
    }
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) detail::write_failed(path, "cannot be opened for writing", errno);
  }
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;
  ~output_file() {
    if (f_ && f_ != stdout) std::fclose(f_);
  }

  void write(std::string_view text) {
    if (std::fwrite(text.data(), 1, text.size(), f_) != text.size())
      detail::write_failed(path_, "writing failed", errno);
  }
  void close() {
    std::FILE* f = std::exchange(f_, nullptr);
    if (std::fflush(f) != 0) {
      const int err = errno;
      if (f != stdout) std::fclose(f);
      detail::write_failed(path_, "writing failed", err);
    }
    if (f != stdout && std::fclose(f) != 0) detail::write_failed(path_, "closing failed", errno);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

/// @brief Writes @p text as the whole of @p path: opened, written, flushed and closed, each checked.
inline void write_file(const std::string& path, std::string_view text) {
  output_file f(path);
  f.write(text);
  f.close();
}

/// @brief Checks that @p path can be written, without touching it: it is not a directory, and a file can
/// be created in its directory. Throws write_error naming the path.
inline void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  if (path == "-") return;
  std::error_code ec;
  if (fs::is_directory(path, ec)) detail::write_failed(path, "cannot be written", EISDIR);
  const fs::path dir = fs::path(path).parent_path();
  detail::probe_dir(dir.empty() ? "." : dir.string(), path);
}

/// @brief Creates @p dir and its parents, and checks that a file can be created in it; throws write_error
/// naming the directory.
inline void prepare_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw write_error(dir + ": cannot be created: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) detail::write_failed(dir, "cannot be created", ENOTDIR);
  detail::probe_dir(dir, dir);
}

}  // namespace examples
