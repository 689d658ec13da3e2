#pragma once

// frugal_batch_job run as a child process: spawned with its output to a log, waited for with a bound.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace job_test {

using clock_type = std::chrono::steady_clock;

struct child {
  pid_t pid = -1;
  clock_type::time_point started;
};

// The child's environment is this process's, less FRUGAL_JOB_* hooks and the shard variables, plus `env`.
inline child spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
                   const std::string& log) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(FRUGAL_BATCH_JOB));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    if (v.rfind("FRUGAL_JOB_", 0) != 0 && v.rfind("JOB_COMPLETION_INDEX=", 0) != 0 &&
        v.rfind("FRUGAL_SHARD_COUNT=", 0) != 0)
      env_strings.emplace_back(*e);
  }
  for (const auto& e : env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  child c;
  c.started = clock_type::now();
  const int rc = posix_spawn(&c.pid, FRUGAL_BATCH_JOB, &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return c;
}

// The wait status; a child still running after 30 s is killed and fails the test.
inline int wait_for(const child& c) {
  const auto limit = clock_type::now() + std::chrono::seconds(30);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
    REQUIRE(r >= 0);
    if (r == c.pid) return status;
    if (clock_type::now() > limit) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &status, 0);
      FAIL("the job did not finish within 30 s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

inline int exit_status(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

}  // namespace job_test
