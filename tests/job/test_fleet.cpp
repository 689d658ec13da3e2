// A fleet on one machine: four shard processes of frugal_batch_job over one input and one output prefix,
// as a Kubernetes Indexed Job runs them. Random SIGKILLs, each followed by a restart with the same index (a
// preempted pod's replacement), and two processes on one index at once (Kubernetes can start a replacement
// before the old pod is gone). The merged output must equal one uninterrupted single-process run, byte for
// byte.

#include <doctest/doctest.h>

#include "../support/requires.hpp"

#ifdef FRUGAL_BATCH_JOB

#  include <signal.h>
#  include <sys/wait.h>

#  include <algorithm>
#  include <chrono>
#  include <cstdio>
#  include <filesystem>
#  include <random>
#  include <string>
#  include <thread>
#  include <vector>

#  include "child.hpp"
#  include "test_util.hpp"

namespace {

using job_test::child;
using job_test::clock_type;
using job_test::exit_status;
using job_test::slurp;
using job_test::spawn;
using job_test::temp_dir;
using job_test::wait_for;

struct fleet_config {
  std::string model;
  int records = 0;
  std::uint32_t shards = 4;
  int batch = 8;
  int every = 16;
  int slow_ms = 0;      // FRUGAL_JOB_SLOW_MS: stretches the stand-in's batches so kills land mid-work
  int min_kills = 0;    // SIGKILLs before the fleet is left to finish
  int max_gap_ms = 50;  // between two of the killer's moves
  int duplicates = 3;   // extra processes started on an index that already has one running
};

std::string files_dir(const std::string& prefix, std::uint32_t i, std::uint32_t n) {
  char name[48];
  std::snprintf(name, sizeof name, "/shard-%05u-of-%05u", unsigned(i), unsigned(n));
  return prefix + name;
}

std::string count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return std::to_string(n);
}

void run_fleet(const fleet_config& cfg) {
  temp_dir d;
  const std::string input = d / "in.jsonl", ref = d / "ref.jsonl", prefix = d / "fleet", log = d / "log.txt";
  REQUIRE(exit_status(wait_for(spawn({"--generate", std::to_string(cfg.records), input}, {}, log))) == 0);
  job_test::append(input, "{broken\n{\"text\":\"no id\"}\n{\"id\":\"tail\",\"text\":\"the end\"}\n");
  const auto t0 = clock_type::now();
  REQUIRE(exit_status(wait_for(spawn({"--model", cfg.model, "--input", input, "--output", ref,
                                      "--checkpoint-dir", d / "ref-ckpt", "--batch", "32", "--every", "0"},
                                     {}, log))) == 0);
  const auto single = clock_type::now() - t0;

  struct live {
    child c;
    std::uint32_t index;
    bool spared = false;  // never killed
  };
  std::vector<live> running;
  std::mt19937 rng(48);
  int spawns = 0;
  // Half the starts name the index by flag, half by JOB_COMPLETION_INDEX as a pod would.
  auto start = [&](std::uint32_t i) {
    std::vector<std::string> args = {"--model",         cfg.model,
                                     "--input",         input,
                                     "--output-prefix", prefix,
                                     "--batch",         std::to_string(cfg.batch),
                                     "--every",         std::to_string(cfg.every),
                                     "--shard-count",   std::to_string(cfg.shards)};
    std::vector<std::string> env = {"FRUGAL_JOB_SLOW_MS=" + std::to_string(cfg.slow_ms)};
    if (spawns++ % 2)
      env.push_back("JOB_COMPLETION_INDEX=" + std::to_string(i));
    else
      args.insert(args.end(), {"--shard-index", std::to_string(i)});
    running.push_back({spawn(args, env, log), i});
  };
  for (std::uint32_t i = 0; i < cfg.shards; ++i) start(i);
  // Two processes on index 1 from the start, both spared, so that one certainly finds the other's lock.
  start(1);
  running[1].spared = running.back().spared = true;
  int kills = 0, restarts = 0, duplicates = 1, completions = 0;
  const auto limit = clock_type::now() + std::chrono::seconds(45);
  while (!running.empty()) {
    REQUIRE_MESSAGE(clock_type::now() < limit, "the fleet did not finish within 45 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % (cfg.max_gap_ms + 1)));
    for (std::size_t k = 0; k < running.size();) {
      int status = 0;
      const pid_t r = ::waitpid(running[k].c.pid, &status, WNOHANG);
      REQUIRE(r >= 0);
      if (r == 0) {
        ++k;
        continue;
      }
      const std::uint32_t i = running[k].index;
      running.erase(running.begin() + std::ptrdiff_t(k));
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        ++restarts;
        start(i);  // the replacement pod: the same index
        continue;
      }
      INFO(slurp(log));
      REQUIRE(exit_status(status) == 0);
      ++completions;
    }
    if (running.empty()) break;
    // Below the kill count, a kill every round: every other one aimed at a process whose shard has a
    // checkpoint not yet done, a kill mid-work that the restart must resume; the others at any process.
    const bool aim = kills % 2 == 0;
    std::vector<const live*> killable;
    for (const live& l : running) {
      if (l.spared) continue;
      const std::string cp = files_dir(prefix, l.index, cfg.shards) + "/checkpoint.json";
      if (!aim || (std::filesystem::exists(cp) && slurp(cp).find("\"done\":false") != std::string::npos))
        killable.push_back(&l);
    }
    // A victim that exited since the reap above is a zombie: the kill is sent but not counted as one.
    if (restarts < cfg.min_kills && !killable.empty()) {
      ::kill(killable[rng() % killable.size()]->c.pid, SIGKILL);
      ++kills;
    } else if (duplicates < cfg.duplicates && rng() % 4 == 0) {
      start(running[rng() % running.size()].index);
      ++duplicates;
    }
  }
  const std::string merged = d / "merged.jsonl";
  const int merge_rc = exit_status(wait_for(spawn(
      {"--merge", "--output-prefix", prefix, "--shard-count", std::to_string(cfg.shards), "--output", merged},
      {}, log)));
  const std::string text = slurp(log);
  MESSAGE(cfg.model << ": " << cfg.records << " records, " << cfg.shards << " shards, " << spawns
                    << " processes, " << restarts << " SIGKILLs, " << duplicates << " duplicate starts, "
                    << count_of(text, "is held by another run") << " waits on a held lock, "
                    << count_of(text, ", resumed,") << " resumes; single run "
                    << std::chrono::duration_cast<std::chrono::milliseconds>(single).count() << " ms");
  INFO(text);
  REQUIRE(merge_rc == 0);
  CHECK(slurp(merged) == slurp(ref));
  CHECK(slurp(merged + ".errors") == slurp(ref + ".errors"));
  CHECK(restarts >= cfg.min_kills);
  CHECK(restarts <= kills);
  CHECK(completions == spawns - restarts);
  // Two processes on one index overlapped at least once: the later one waited on the lock.
  CHECK(text.find("is held by another run") != std::string::npos);
  CHECK(text.find(", resumed,") != std::string::npos);
}

}  // namespace

TEST_CASE(
    "job fleet: 4 shards of the stand-in with SIGKILLs, restarts and two processes on one index merge "
    "to the single run's bytes") {
  run_fleet({.model = "stand-in", .records = 1200, .batch = 8, .every = 16, .slow_ms = 10, .min_kills = 12});
}

TEST_CASE(
    "job fleet: 4 shards of MiniLM with SIGKILLs, restarts and two processes on one index merge to the "
    "single run's bytes" *
    frugal_test::needs(frugal_test::model())) {
  run_fleet({.model = frugal_test::model_dir(),
             .records = 96,
             .batch = 4,
             .every = 4,
             .slow_ms = 60,
             .min_kills = 6,
             .max_gap_ms = 80,
             .duplicates = 2});
}

#else

TEST_CASE("job fleet: the fleet test runs examples/batch_job as child processes" *
          frugal_test::needs(frugal_test::built(
              "examples", false, "frugal_batch_job is not built (FRUGAL_BUILD_EXAMPLES=OFF)"))) {}

#endif
