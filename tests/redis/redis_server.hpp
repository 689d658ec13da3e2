#pragma once

// A real redis-server for tests and benchmarks: on 127.0.0.1, a free port and a temporary directory,
// stopped (and its directory removed) when the object goes, and killed by the kernel if this process
// dies first. Plus child processes with pipes, for replicas (../support/process.hpp).
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

#include "../support/process.hpp"

namespace frugal_test {

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
    std::vector<std::string> argv{
        "redis-server",     "--port", std::to_string(port_), "--bind", "127.0.0.1",   "--dir", dir_,
        "--save",           "",       "--appendonly",        "no",     "--daemonize", "no",    "--logfile",
        dir_ + "/redis.log"};
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
    reply r(static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
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
