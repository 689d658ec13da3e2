#pragma once

// Processes for end-to-end tests: a free port on 127.0.0.1, and a child process (fork + exec) with its
// stdin and stdout on pipes that the kernel kills if this process dies first.
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace frugal_test {

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("free_port: bind failed");
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// fork + exec with the child's stdin and stdout on pipes; the child dies with this process.
struct child {
  pid_t pid = -1;
  int in = -1, out = -1;

  static child spawn(const std::vector<std::string>& argv) {
    int to[2], from[2];
    if (::pipe(to) != 0 || ::pipe(from) != 0) throw std::runtime_error("spawn: pipe failed");
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("spawn: fork failed");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(to[0], 0);
      ::dup2(from[1], 1);
      ::close(to[0]);
      ::close(to[1]);
      ::close(from[0]);
      ::close(from[1]);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    return child{pid, to[1], from[0]};
  }
  std::string read_line() const {
    std::string s;
    char c;
    while (::read(out, &c, 1) == 1 && c != '\n') s.push_back(c);
    return s;
  }
  void write_line(const std::string& s) const {
    const std::string l = s + "\n";
    if (::write(in, l.data(), l.size()) != static_cast<ssize_t>(l.size()))
      throw std::runtime_error("child: write failed");
  }
  int wait() {
    int status = 0;
    if (pid > 0) ::waitpid(pid, &status, 0);
    pid = -1;
    close_fds();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void close_fds() {
    if (in >= 0) ::close(in);
    if (out >= 0) ::close(out);
    in = out = -1;
  }
};

}  // namespace frugal_test
