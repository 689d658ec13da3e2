// The example run as a child process and killed: SIGKILL at seeded random points, SIGTERM within and past
// its deadline, and an injected write failure. After each, resuming must give the uninterrupted output.

#include <doctest/doctest.h>

#include "../support/requires.hpp"

#ifdef FRUGAL_BATCH_JOB

#  include <fcntl.h>
#  include <signal.h>
#  include <spawn.h>
#  include <sys/mount.h>
#  include <sys/wait.h>
#  include <unistd.h>

#  include <algorithm>
#  include <cerrno>
#  include <chrono>
#  include <cstring>
#  include <filesystem>
#  include <fstream>
#  include <nlohmann/json.hpp>
#  include <random>
#  include <sstream>
#  include <string>
#  include <thread>
#  include <vector>

#  include "child.hpp"
#  include "test_util.hpp"

namespace {

using frugal_test::model_dir;
using job_test::child;
using job_test::clock_type;
using job_test::exit_status;
using job_test::slurp;
using job_test::spawn;
using job_test::temp_dir;
using job_test::wait_for;

// The input and its uninterrupted output, made once per model and shared by the tests.
struct reference {
  temp_dir dir;
  std::string model;
  int records = 0;
  std::string input = dir / "in.jsonl";
  std::string output = dir / "ref.jsonl";
  std::vector<std::string> ids;

  reference(std::string m, int n) : model(std::move(m)), records(n) {
    const std::string log = dir / "log.txt";
    REQUIRE(exit_status(wait_for(spawn({"--generate", std::to_string(records), input}, {}, log))) == 0);
    job_test::append(input, "{broken\n{\"text\":\"no id\"}\n{\"id\":\"tail\",\"text\":\"the end\"}\n");
    for (int i = 0; i < records; ++i) ids.push_back("r" + std::to_string(i));
    ids.push_back("tail");
    const int rc =
        exit_status(wait_for(spawn({"--model", model, "--input", input, "--output", output,
                                    "--checkpoint-dir", dir / "ckpt", "--batch", "32", "--every", "0"},
                                   {}, log)));
    INFO(slurp(log));
    REQUIRE(rc == 0);
  }
};

// The signal and disk tests time their kills with FRUGAL_JOB_SLOW_MS, so the model does not matter to them:
// they use the stand-in, whose 500 records cost milliseconds.
const reference& shared_reference() {
  static const reference r("stand-in", 500);
  return r;
}

// The SIGKILL test's: MiniLM (fp32) on 64 records, where the model is present and the build is not
// sanitized (FRUGAL_BERT_QUICK; each of its 30-odd runs loads the model); else the stand-in, said so.
bool use_minilm() {
  if (FRUGAL_BERT_QUICK) {
    MESSAGE("FRUGAL_BERT_QUICK (a sanitizer build): the SIGKILL test runs the stand-in model");
    return false;
  }
  if (!frugal_test::available(frugal_test::model())) {
    MESSAGE("the SIGKILL test runs the stand-in model");
    return false;
  }
  return true;
}
const reference& kill_reference() {
  static const reference r = use_minilm() ? reference(model_dir(), 64) : reference("stand-in", 500);
  return r;
}

struct fixture {
  const reference& ref;
  temp_dir dir;
  std::string out = dir / "out.jsonl";
  std::string ckpt = dir / "ckpt";
  std::string log = dir / "log.txt";

  explicit fixture(const reference& r = shared_reference()) : ref(r) {}

  std::vector<std::string> args(int batch, int every) const {
    return {"--model",          ref.model,
            "--input",          ref.input,
            "--output",         out,
            "--checkpoint-dir", ckpt,
            "--batch",          std::to_string(batch),
            "--every",          std::to_string(every)};
  }
  void reset() const {
    std::filesystem::remove(out);
    std::filesystem::remove(out + ".errors");
    std::filesystem::remove_all(ckpt);
  }
  // Bounded wait for the first results in the output.
  void wait_for_output(const child& c) const {
    const auto limit = clock_type::now() + std::chrono::seconds(10);
    while (!std::filesystem::exists(out) || std::filesystem::file_size(out) == 0) {
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) == c.pid) FAIL("the job exited before writing a result");
      if (clock_type::now() > limit) FAIL("no result within 10 s");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  nlohmann::json checkpoint() const { return nlohmann::json::parse(slurp(ckpt + "/checkpoint.json")); }
  // Every id exactly once, in input order, with the uninterrupted run's values, and the same errors file.
  void check_output() const {
    const std::string got = slurp(out);
    std::istringstream lines(got);
    std::vector<std::string> seen;
    for (std::string line; std::getline(lines, line);) seen.push_back(nlohmann::json::parse(line)["id"]);
    CHECK(seen == ref.ids);
    CHECK(got == slurp(ref.output));
    CHECK(slurp(out + ".errors") == slurp(ref.output + ".errors"));
  }
};

// Waits, bounded, for `path` to appear while the child runs; false, with its wait status, if it exits first
// (a kill that came after its final checkpoint leaves a finished job, and a rerun exits at once).
bool appears(const std::string& path, const child& c, int& status) {
  const auto limit = clock_type::now() + std::chrono::seconds(10);
  while (clock_type::now() < limit) {
    if (std::filesystem::exists(path)) return true;
    if (::waitpid(c.pid, &status, WNOHANG) == c.pid) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  FAIL("no checkpoint within 10 s");
  return false;
}

}  // namespace

TEST_CASE("job kill: SIGKILL at 20+ seeded random points, each resumed, gives the uninterrupted output") {
  fixture f(kill_reference());
  MESSAGE("model " << f.ref.model << ", " << f.ref.records << " records");
  const auto t0 = clock_type::now();
  REQUIRE(exit_status(wait_for(spawn(f.args(8, 1), {}, f.log))) == 0);
  const auto full = clock_type::now() - t0;  // an uninterrupted run with a checkpoint per batch
  f.check_output();

  std::mt19937 rng(22);
  const int batches[] = {8, 16, 32};
  const int everies[] = {1, 1, 8, 40};
  const std::string tmp = f.ckpt + "/checkpoint.json.tmp";
  int kills = 0, during_checkpoint = 0, aimed = 0, rounds = 0, spawns = 0, lost_work = 0;
  while (kills < 20 && spawns < 300) {
    f.reset();
    ++rounds;
    for (;;) {
      // Every fourth kill is aimed: checkpoints are held 20 ms before their rename and the kill comes as soon
      // as the temporary file appears. The others come at a uniform random time within an uninterrupted run.
      const bool aim = kills < 20 && kills % 4 == 0;
      std::filesystem::remove(tmp);
      const child c =
          spawn(f.args(batches[rng() % 3], aim ? 1 : everies[rng() % 4]),
                {aim ? "FRUGAL_JOB_CHECKPOINT_PAUSE_MS=20" : "FRUGAL_JOB_CHECKPOINT_PAUSE_MS=0"}, f.log);
      ++spawns;
      int status = 0;
      bool exited = false;
      if (aim) {
        if (appears(tmp, c, status)) {
          ++aimed;
          ::kill(c.pid, SIGKILL);
        } else {
          exited = true;
        }
      } else if (kills < 20) {
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(full).count();
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % std::max<long long>(1, us)));
        ::kill(c.pid, SIGKILL);
      }
      if (!exited) status = wait_for(c);
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        ++kills;
        during_checkpoint += std::filesystem::exists(tmp);
        // Results past the checkpoint: the kill came mid-work (not during the model's load) and a resume
        // must drop them.
        const std::uint64_t kept = std::filesystem::exists(f.ckpt + "/checkpoint.json")
                                       ? f.checkpoint()["output_size"].get<std::uint64_t>()
                                       : 0;
        lost_work += std::filesystem::exists(f.out) && std::filesystem::file_size(f.out) > kept;
        continue;
      }
      REQUIRE(exit_status(status) == 0);
      break;
    }
    f.check_output();
  }
  MESSAGE(kills << " kills in " << rounds << " rounds and " << spawns << " runs, " << during_checkpoint
                << " of them between a checkpoint's temporary file and its rename (" << aimed << " aimed), "
                << lost_work << " with results past the checkpoint; uninterrupted run "
                << std::chrono::duration_cast<std::chrono::milliseconds>(full).count() << " ms");
  CHECK(kills >= 20);
  CHECK(aimed == 5);
  CHECK(during_checkpoint >= 3);
  CHECK(lost_work >= 3);
}

TEST_CASE("job kill: SIGTERM within the deadline finishes the batch, checkpoints, exits 75, and resumes") {
  fixture f;
  const child c = spawn(f.args(8, 100000), {"FRUGAL_JOB_SLOW_MS=20"}, f.log);
  f.wait_for_output(c);  // the signal handler is in place once a batch is out
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(c.pid, SIGTERM);
  const auto signalled = clock_type::now();
  CHECK(exit_status(wait_for(c)) == 75);
  CHECK(clock_type::now() - signalled < std::chrono::seconds(2));
  const nlohmann::json cp = f.checkpoint();
  CHECK(!cp["done"].get<bool>());
  CHECK(cp["records_done"].get<int>() > 0);
  CHECK(cp["records_done"].get<int>() < f.ref.records);
  const std::string partial = slurp(f.out);
  CHECK(std::count(partial.begin(), partial.end(), '\n') == cp["records_done"].get<int>());
  CHECK(std::filesystem::file_size(f.out) == cp["output_size"].get<std::uintmax_t>());
  CHECK(slurp(f.log).find("preempted, resumable") != std::string::npos);
  REQUIRE(exit_status(wait_for(spawn(f.args(32, 100000), {}, f.log))) == 0);
  f.check_output();
}

TEST_CASE(
    "job kill: past the deadline, or at a second SIGTERM, the done work is checkpointed and it exits 75") {
  fixture f;
  std::vector<std::string> args = f.args(8, 100000);
  bool twice = false;
  SUBCASE("the deadline passes") { args.insert(args.end(), {"--deadline-ms", "100"}); }
  SUBCASE("a second signal") {
    args.insert(args.end(), {"--deadline-ms", "60000"});
    twice = true;
  }
  // Each batch takes 1 s: 300 ms after the first is out, the second is in flight.
  const child c = spawn(args, {"FRUGAL_JOB_SLOW_MS=1000"}, f.log);
  f.wait_for_output(c);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(c.pid, SIGTERM);
  const auto signalled = clock_type::now();
  if (twice) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ::kill(c.pid, SIGTERM);
  }
  CHECK(exit_status(wait_for(c)) == 75);
  CHECK(clock_type::now() - signalled < std::chrono::milliseconds(600));
  CHECK(slurp(f.log).find("in-flight batch abandoned") != std::string::npos);
  const nlohmann::json cp = f.checkpoint();
  CHECK(cp["records_done"].get<int>() == 8);
  REQUIRE(exit_status(wait_for(spawn(f.args(32, 100000), {}, f.log))) == 0);
  f.check_output();
}

TEST_CASE("job kill: an injected write failure exits 74 naming the file and errno, and a resume completes") {
  fixture f;
  REQUIRE(exit_status(wait_for(spawn(f.args(8, 5), {"FRUGAL_JOB_FAIL_WRITE_AFTER=25"}, f.log))) == 74);
  const std::string log = slurp(f.log);
  CHECK(log.find("write (injected fault) " + f.dir.path.string()) != std::string::npos);
  CHECK(log.find("No space left on device (errno 28)") != std::string::npos);
  REQUIRE(exit_status(wait_for(spawn(f.args(32, 40), {}, f.log))) == 0);
  CHECK(slurp(f.log).find("resumed") != std::string::npos);
  f.check_output();
}

TEST_CASE(
    "job kill: the resumed run's ledger books the preemption and the records redone, under spot billing") {
  fixture f;
  std::vector<std::string> args = f.args(8, 16);
  const child c = spawn(args, {"FRUGAL_JOB_SLOW_MS=20"}, f.log);
  f.wait_for_output(c);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(130));  // mid-way between checkpoints, 2 batches apart
  ::kill(c.pid, SIGKILL);
  REQUIRE(WIFSIGNALED(wait_for(c)));
  const std::uint64_t at = f.checkpoint()["output_size"].get<std::uint64_t>();
  const std::string partial = slurp(f.out);
  REQUIRE(partial.size() >= at);
  const auto past = std::count(partial.begin() + std::ptrdiff_t(at), partial.end(), '\n');
  const std::string ledger = f.dir / "ledger.json";
  args.insert(args.end(), {"--ledger", ledger, "--billing", "spot", "--price", "$3.60"});
  REQUIRE(exit_status(wait_for(spawn(args, {}, f.log))) == 0);
  f.check_output();
  const nlohmann::json d = nlohmann::json::parse(slurp(ledger))["devices"][0];
  INFO(d.dump());
  CHECK(d["billing"] == "spot");
  CHECK(d["preemptions"] == 1);
  CHECK(d["redone_records"] == past);
  CHECK((d["redone_seconds"].get<double>() > 0) == (past > 0));
  CHECK(std::stod(d["paid"].get<std::string>()) > 0);
  CHECK(slurp(f.log).find(std::to_string(past) + " redone after resume") != std::string::npos);
  // A run that resumes nothing books no preemption.
  f.reset();
  args.back() = "$1.00";
  REQUIRE(exit_status(wait_for(spawn(args, {}, f.log))) == 0);
  CHECK(nlohmann::json::parse(slurp(ledger))["devices"][0]["preemptions"] == 0);
}

namespace {

// Mounting a tmpfs needs CAP_SYS_ADMIN: bit 21 of the effective set in /proc/self/status.
frugal_test::requirement cap_sys_admin() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("CapEff:", 0) == 0 && (std::stoull(line.substr(7), nullptr, 16) >> 21 & 1) != 0)
      return {"cap_sys_admin", "", false};
  return {"cap_sys_admin", "mounting a tmpfs needs CAP_SYS_ADMIN (root), which this process lacks", false};
}

}  // namespace

// A real full disk: a 64 KiB tmpfs holds the output, the errors file and the checkpoint. Without the
// privilege to mount it the test is skipped, and the injected failure above still runs.
TEST_CASE("job kill: a full tmpfs stops the job with ENOSPC naming the file; grown, it resumes exactly once" *
          frugal_test::needs(cap_sys_admin())) {
  fixture f;
  const std::string disk = f.dir / "disk";
  std::filesystem::create_directory(disk);
  REQUIRE_MESSAGE(::mount("tmpfs", disk.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k") == 0,
                  "mount -t tmpfs " << disk << " failed: " << std::strerror(errno));
  struct unmount {
    std::string at;
    ~unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } guard{disk};
  const std::string out = disk + "/out.jsonl", ckpt = disk + "/ckpt";
  const std::vector<std::string> args = {"--model",  "stand-in", "--input",          f.ref.input,
                                         "--output", out,        "--checkpoint-dir", ckpt,
                                         "--batch",  "8",        "--every",          "5"};
  const std::uintmax_t need = std::filesystem::file_size(f.ref.output);
  REQUIRE(need > 2 * 65536);  // the output cannot fit: the disk fills part-way
  CHECK(exit_status(wait_for(spawn(args, {}, f.log))) == 74);
  const std::string log = slurp(f.log);
  INFO(log);
  CHECK(log.find("No space left on device (errno 28)") != std::string::npos);
  CHECK(log.find(disk + "/") != std::string::npos);
  const nlohmann::json cp = nlohmann::json::parse(slurp(ckpt + "/checkpoint.json"));
  CHECK(cp["records_done"].get<int>() > 0);
  CHECK(cp["records_done"].get<int>() < f.ref.records);
  // Still full: a rerun fails the same way and loses nothing.
  CHECK(exit_status(wait_for(spawn(args, {}, f.log))) == 74);
  REQUIRE(::mount(nullptr, disk.c_str(), nullptr, MS_REMOUNT | MS_NOSUID | MS_NODEV, "size=4m") == 0);
  REQUIRE(exit_status(wait_for(spawn(args, {}, f.log))) == 0);
  CHECK(slurp(f.log).find("resumed") != std::string::npos);
  CHECK(slurp(out) == slurp(f.ref.output));
  CHECK(slurp(out + ".errors") == slurp(f.ref.output + ".errors"));
}

TEST_CASE(
    "job kill: a bad --price or --name is refused before any work, named by its flag, never by the ledger") {
  fixture f;
  const std::pair<const char*, const char*> cases[] = {
      {"--price", "0"}, {"--price", "-1"}, {"--price", "USD 12"}, {"--price", "abc"}, {"--name", ""}};
  for (const auto& [flag, value] : cases) {
    const std::string what = std::string(flag) + " \"" + value + "\"";
    CAPTURE(what);
    f.reset();
    std::filesystem::remove(f.log);
    std::vector<std::string> args = f.args(8, 100000);
    args.insert(args.end(), {"--ledger", f.dir / "ledger.json", flag, value});
    CHECK(exit_status(wait_for(spawn(args, {}, f.log))) == 64);
    const std::string log = slurp(f.log);
    CHECK(log.find(std::string(flag) + ": ") != std::string::npos);
    CHECK(log.find("frugal::cost::ledger") == std::string::npos);
    CHECK(log.find("frugal::cost::rate") == std::string::npos);
    CHECK(!std::filesystem::exists(f.out));  // refused before any work
  }
}

#else

// The kill tests need examples/batch_job; this stands in for them, skipped, saying so.
TEST_CASE("job kill: the kill tests run examples/batch_job as a child process" *
          frugal_test::needs(frugal_test::built(
              "examples", false, "frugal_batch_job is not built (FRUGAL_BUILD_EXAMPLES=OFF)"))) {}

#endif
