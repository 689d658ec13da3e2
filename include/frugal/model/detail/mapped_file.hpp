#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace model::detail {

/// A regular file mapped read-only for the lifetime of the object. Errors are thrown as Error, with
/// @p who (the format's name) and the path in the message.
class mapped_file {
 public:
  mapped_file() = default;
  template <class Error>
  static mapped_file open(const std::string& path, const char* who) {
    mapped_file m;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(std::string(who) + ": " + path + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(std::string(who) + ": " + path + ": not a regular file");
    }
    m.size_ = static_cast<std::size_t>(st.st_size);
    if (m.size_ > 0) {
      void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int err = errno;
      ::close(fd);
      if (p == MAP_FAILED)
        throw Error(std::string(who) + ": " + path + ": mmap failed: " + std::strerror(err));
      m.map_ = p;
    } else {
      ::close(fd);
    }
    return m;
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  mapped_file(mapped_file&& o) noexcept { swap(o); }
  mapped_file& operator=(mapped_file&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  ~mapped_file() { reset(); }

  std::span<const std::byte> bytes() const noexcept { return {static_cast<const std::byte*>(map_), size_}; }

 private:
  void reset() noexcept {
    if (map_) ::munmap(map_, size_);
    map_ = nullptr;
    size_ = 0;
  }
  void swap(mapped_file& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(size_, o.size_);
  }
  void* map_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace model::detail
FRUGAL_END_NAMESPACE
