#pragma once

// A real redis-server for tests and benchmarks: on 127.0.0.1, a free port and a temporary directory,
// stopped (and its directory removed) when the object goes, and killed by the kernel if this process
// dies first. Plus child processes with pipes, for replicas.
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
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

struct reply_deleter {
  void operator()(redisReply* r) const noexcept {
    if (r) freeReplyObject(r);
  }
};
using reply = std::unique_ptr<redisReply, reply_deleter>;

class redis_server {
 public:
  explicit redis_server(std::vector<std::string> extra = {}) : extra_(std::move(extra)) {
    char tmpl[] = "/tmp/frugal-redis-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("redis_server: mkdtemp failed");
    dir_ = tmpl;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_port();
      if (start()) return;
    }
    std::filesystem::remove_all(dir_);
    throw std::runtime_error("redis_server: redis-server did not start (see redis-server on PATH)");
  }
  ~redis_server() {
    stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  int port() const { return port_; }

  // Starts it (again) on the same port; true once it answers PING.
  bool start() {
    std::vector<std::string> argv{"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                  "--dir", dir_, "--save", "", "--appendonly", "no", "--daemonize", "no",
                                  "--logfile", dir_ + "/redis.log"};
    argv.insert(argv.end(), extra_.begin(), extra_.end());
    proc_ = child::spawn(argv);
    proc_.close_fds();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(proc_.pid, &status, WNOHANG) == proc_.pid) {
        proc_.pid = -1;
        return false;
      }
      if (redisContext* c = redisConnect("127.0.0.1", port_)) {
        const bool up = !c->err;
        redisFree(c);
        if (up) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop();
    return false;
  }

  void kill() {
    if (proc_.pid <= 0) return;
    ::kill(proc_.pid, SIGKILL);
    proc_.wait();
  }
  void pause() { ::kill(proc_.pid, SIGSTOP); }
  void resume() { ::kill(proc_.pid, SIGCONT); }

  void stop() {
    if (proc_.pid <= 0) return;
    ::kill(proc_.pid, SIGCONT);
    ::kill(proc_.pid, SIGTERM);
    for (int i = 0; i < 200; ++i) {
      int status = 0;
      if (::waitpid(proc_.pid, &status, WNOHANG) == proc_.pid) {
        proc_.pid = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill();
  }

  // A command on a fresh connection, as a test's own client.
  reply command(const std::vector<std::string>& args, const std::string& password = {}) const {
    redisContext* c = redisConnect("127.0.0.1", port_);
    if (!c || c->err) {
      if (c) redisFree(c);
      throw std::runtime_error("redis_server::command: cannot connect");
    }
    if (!password.empty()) freeReplyObject(redisCommand(c, "AUTH %s", password.c_str()));
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    reply r(static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
    redisFree(c);
    if (!r) throw std::runtime_error("redis_server::command: no reply");
    return r;
  }

 private:
  std::vector<std::string> extra_;
  std::string dir_;
  int port_ = 0;
  child proc_;
};

}  // namespace frugal_test
