#pragma once

// A job directory's lock: flock(2) on a file that is never deleted (deleting it would let two processes
// lock two different inodes of one name). The kernel drops the lock when its holder dies, SIGKILL included,
// so a restarted shard never waits on a dead one. The holder writes a note (host, pid, start time) into the
// file for whoever waits to print; nothing parses it.

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "frugal/job/errors.hpp"
#include "frugal/job/io.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job::detail {

class dir_lock {
 public:
  // The lock, or nullopt while another open file holds it (then `holder` gets its note, printable
  // characters only, at most 200).
  static std::optional<dir_lock> try_lock(const std::string& path, const std::string& note,
                                          std::string& holder) {
    file f(path, O_RDWR | O_CREAT);
    int rc;
    do {
      rc = ::flock(f.fd(), LOCK_EX | LOCK_NB);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      if (errno != EWOULDBLOCK) throw_io("flock", path, errno);
      holder.clear();
      char buf[200];
      const std::size_t n = f.read_some(buf, sizeof buf);
      for (std::size_t i = 0; i < n; ++i)
        if (buf[i] >= 0x20 && buf[i] < 0x7f) holder += buf[i];
      if (holder.empty()) holder = "no note";
      return std::nullopt;
    }
    f.truncate(0);
    f.write_all(note);
    return dir_lock(std::move(f));
  }

 private:
  explicit dir_lock(file f) : f_(std::move(f)) {}
  file f_;  // closing it releases the lock
};

// Polls for the lock at `path` every `poll`. While another run holds it, `waiting` is called once per poll
// (the first call after a note to stderr naming the holder); nullopt when it returns true (a stop request).
template <class Waiting>
std::optional<dir_lock> wait_for_lock(const std::string& path, const std::string& job_name,
                                      std::chrono::nanoseconds poll, Waiting waiting) {
  char host[256] = "unknown";
  ::gethostname(host, sizeof host - 1);
  const std::string note = "host " + std::string(host) + " pid " + std::to_string(::getpid()) + "\n";
  std::string holder;
  for (bool told = false;; told = true) {
    if (auto l = dir_lock::try_lock(path, note, holder)) return l;
    if (!told)
      std::fprintf(stderr, "frugal::job: %s: %s is held by another run (%s); waiting for it to end\n",
                   job_name.c_str(), path.c_str(), holder.c_str());
    if (waiting()) return std::nullopt;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace job::detail
FRUGAL_END_NAMESPACE
