#include <doctest/doctest.h>

#include <chrono>
#include <frugal/job.hpp>
#include <map>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace frugal;
using job_test::slurp;
using job_test::spit;
using job_test::temp_dir;

namespace {

std::vector<nlohmann::json> doubler(std::span<const job::record> batch) {
  std::vector<nlohmann::json> out;
  for (const auto& r : batch) out.push_back(r.request["x"].get<int>() * 2);
  return out;
}

// n records of varied length, with a malformed line, a blank line and a record without "x" among them.
std::string corpus(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    s += R"({"id":"r)" + std::to_string(i) + R"(","x":)" + std::to_string(i) + R"(,"pad":")" +
         std::string(std::size_t(i * 7 % 23), 'p') + "\"}\n";
    if (i == n / 3) s += "{broken\n";
    if (i == n / 2) s += "\n";
  }
  return s;
}

job::options opts(const std::string& input, const std::string& output, const std::string& ckpt,
                  job::shard s = {}) {
  return {.name = "t",
          .input = input,
          .output = output,
          .checkpoint_dir = ckpt,
          .batch_size = 4,
          .checkpoint_every_records = 8,
          .checkpoint_every = std::chrono::seconds(0),
          .shard = s,
          .lock_poll = std::chrono::milliseconds(1),
          .handle_signals = false};
}

job::options shard_opts(const temp_dir& d, job::shard s) {
  const job::shard_files f = job::files_of(d / "prefix", s);
  std::filesystem::create_directories(f.dir);
  job::options o = opts(d / "in.jsonl", f.output, f.checkpoint_dir, s);
  o.errors = f.errors;
  return o;
}

template <class F>
job::error error_of(F f) {
  try {
    f();
  } catch (const job::error& e) {
    return e;
  }
  FAIL("no job::error thrown");
  return job::error(job_errc::io, "");
}

using env_map = std::map<std::string, std::string>;
auto env_of(const env_map& m) {
  return [m](const char* name) -> const char* {
    const auto it = m.find(name);
    return it == m.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE(
    "job shard: slices are contiguous line-aligned byte ranges that tile the input, balanced by bytes") {
  temp_dir d;
  std::mt19937 rng(48);
  for (int round = 0; round < 40; ++round) {
    std::string text;
    const int lines = int(rng() % 60);
    std::size_t longest = 0;
    for (int i = 0; i < lines; ++i) {
      const std::size_t len = rng() % 40;
      longest = std::max(longest, len + 1);
      text += std::string(len, 'a') + "\n";
    }
    if (rng() % 2) text += "unterminated";
    longest = std::max<std::size_t>(longest, 12);
    spit(d / "f", text);
    const std::uint32_t count = 1 + rng() % 9;
    std::uint64_t at = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
      const job::slice s = job::slice_of(d / "f", text.size(), {i, count});
      INFO("round " << round << ", shard " << i << " of " << count);
      CHECK(s.begin == at);
      CHECK(s.end >= s.begin);
      CHECK((s.begin == 0 || s.begin == text.size() || text[s.begin - 1] == '\n'));
      CHECK(s.end - s.begin <= text.size() / count + longest);
      at = s.end;
    }
    CHECK(at == text.size());
  }
  CHECK(job::slice_of(d / "f", 0, {0, 3}) == job::slice{0, 0});
}

TEST_CASE(
    "job shard: from flags or JOB_COMPLETION_INDEX and FRUGAL_SHARD_COUNT; a disagreement is an error") {
  using job::resolve_shard;
  CHECK(resolve_shard(std::nullopt, std::nullopt, env_of({})) == job::shard{0, 1});
  CHECK(resolve_shard(2, 4, env_of({})) == job::shard{2, 4});
  CHECK(resolve_shard(std::nullopt, std::nullopt,
                      env_of({{"JOB_COMPLETION_INDEX", "3"}, {"FRUGAL_SHARD_COUNT", "5"}})) ==
        job::shard{3, 5});
  CHECK(resolve_shard(std::nullopt, 5, env_of({{"JOB_COMPLETION_INDEX", "3"}})) == job::shard{3, 5});
  CHECK(resolve_shard(3, 5, env_of({{"JOB_COMPLETION_INDEX", "3"}, {"FRUGAL_SHARD_COUNT", "5"}})) ==
        job::shard{3, 5});
  auto what = [](auto f) {
    const job::error e = error_of(f);
    CHECK(e.code() == job_errc::invalid_options);
    return std::string(e.what());
  };
  CHECK(what([] {
          resolve_shard(1, 5, env_of({{"JOB_COMPLETION_INDEX", "3"}}));
        }).find("--shard-index 1 disagrees with JOB_COMPLETION_INDEX=3") != std::string::npos);
  CHECK(what([] {
          resolve_shard(3, 4, env_of({{"JOB_COMPLETION_INDEX", "3"}, {"FRUGAL_SHARD_COUNT", "5"}}));
        }).find("--shard-count 4 disagrees with FRUGAL_SHARD_COUNT=5") != std::string::npos);
  CHECK(what([] {
          resolve_shard(std::nullopt, std::nullopt, env_of({{"JOB_COMPLETION_INDEX", "3"}}));
        }).find("has no count") != std::string::npos);
  CHECK(what([] { resolve_shard(std::nullopt, 4, env_of({})); }).find("has no index") != std::string::npos);
  CHECK(what([] { resolve_shard(4, 4, env_of({})); }).find("not below count 4") != std::string::npos);
  CHECK(what([] { resolve_shard(0, 0, env_of({})); }).find("count must be >= 1") != std::string::npos);
  for (const char* bad : {"", "-1", "+1", "1x", "4294967296"})
    CHECK(what([&] {
            resolve_shard(std::nullopt, 4, env_of({{"JOB_COMPLETION_INDEX", bad}}));
          }).find("JOB_COMPLETION_INDEX") != std::string::npos);
}

TEST_CASE("job shard: shards run apart and merged give the single run's output and errors, byte for byte") {
  temp_dir d;
  spit(d / "in.jsonl", corpus(97));
  REQUIRE(job::runner(opts(d / "in.jsonl", d / "ref.jsonl", d / "ref-ckpt"), doubler).run() ==
          job::run_result::completed);
  for (const std::uint32_t count : {1u, 2u, 5u, 150u}) {
    CAPTURE(count);
    std::uint64_t records = 0;
    for (std::uint32_t i = 0; i < count; ++i) {
      job::runner r(shard_opts(d, {i, count}), doubler);
      REQUIRE(r.run() == job::run_result::completed);
      records += r.stats().records_done;
      const auto c = job::read_checkpoint(job::files_of(d / "prefix", {i, count}).checkpoint_dir);
      REQUIRE(c);
      CHECK(c->extent.has_value() == (count > 1));
    }
    CHECK(records == 97);
    const job::merge_result m = job::merge_shards(
        {.prefix = d / "prefix", .count = count, .output = d / "merged.jsonl", .name = "t"});
    CHECK(m.records == 97);
    CHECK(m.bad_records == 1);
    CHECK(slurp(d / "merged.jsonl") == slurp(d / "ref.jsonl"));
    CHECK(slurp(d / "merged.jsonl.errors") == slurp(d / "ref.jsonl.errors"));  // the input's line numbers
    CHECK(!std::filesystem::exists(d / "merged.jsonl.tmp"));
  }
}

TEST_CASE("job shard: a checkpoint of another shard or count is refused") {
  temp_dir d;
  spit(d / "in.jsonl", corpus(40));
  const std::string ckpt = d / "ckpt";
  REQUIRE(job::runner(opts(d / "in.jsonl", d / "out", ckpt, {1, 3}), doubler).run() ==
          job::run_result::completed);
  for (const job::shard other : {job::shard{2, 3}, job::shard{1, 4}, job::shard{0, 1}}) {
    const job::error e =
        error_of([&] { job::runner(opts(d / "in.jsonl", d / "out", ckpt, other), doubler).run(); });
    CHECK(e.code() == job_errc::checkpoint_mismatch);
    CHECK(std::string(e.what()).find("was written for shard 1 of 3") != std::string::npos);
  }
}

TEST_CASE("job shard: a shard killed part-way resumes from its checkpoint and merges to the single run") {
  temp_dir d;
  spit(d / "in.jsonl", corpus(60));
  REQUIRE(job::runner(opts(d / "in.jsonl", d / "ref.jsonl", d / "ref-ckpt"), doubler).run() ==
          job::run_result::completed);
  for (std::uint32_t i = 0; i < 3; ++i) {
    job::options o = shard_opts(d, {i, 3});
    if (i == 1) {
      // A run that dies after its first checkpoint: results past it are in the output, and the resume drops
      // them.
      job::options dying = o;
      dying.testing.fail_write_after = 4;
      CHECK(error_of([&] { job::runner(dying, doubler).run(); }).code() == job_errc::io);
      REQUIRE(job::read_checkpoint(o.checkpoint_dir));
      CHECK(!job::read_checkpoint(o.checkpoint_dir)->done);
    }
    job::runner r(o, doubler);
    REQUIRE(r.run() == job::run_result::completed);
    CHECK(r.stats().resumed == (i == 1));
  }
  job::merge_shards({.prefix = d / "prefix", .count = 3, .output = d / "merged.jsonl"});
  CHECK(slurp(d / "merged.jsonl") == slurp(d / "ref.jsonl"));
  CHECK(slurp(d / "merged.jsonl.errors") == slurp(d / "ref.jsonl.errors"));
}

TEST_CASE("job merge: a missing, unfinished or truncated shard is an error naming it; nothing is written") {
  temp_dir d;
  spit(d / "in.jsonl", corpus(50));
  for (std::uint32_t i = 0; i < 4; ++i)
    REQUIRE(job::runner(shard_opts(d, {i, 4}), doubler).run() == job::run_result::completed);
  const job::shard_files f2 = job::files_of(d / "prefix", {2, 4});
  std::string expect, name = "t";
  job_errc code = job_errc::shard_incomplete;
  SUBCASE("missing") {
    std::filesystem::remove(f2.checkpoint_dir + "/checkpoint.json");
    expect = "shard 2 of 4 (" + f2.dir + ") has no checkpoint";
  }
  SUBCASE("unfinished") {
    auto c = *job::read_checkpoint(f2.checkpoint_dir);
    c.done = false;
    job::write_checkpoint(f2.checkpoint_dir, c);
    expect = "shard 2 of 4 (" + f2.dir + ") is incomplete";
  }
  SUBCASE("truncated output") {
    std::filesystem::resize_file(f2.output, std::filesystem::file_size(f2.output) - 1);
    expect = "shard 2 of 4 (" + f2.dir + ") has its output " + f2.output;
  }
  SUBCASE("another input") {
    auto c = *job::read_checkpoint(f2.checkpoint_dir);
    c.input.hash ^= 1;
    job::write_checkpoint(f2.checkpoint_dir, c);
    expect = "shard 2 of 4 (" + f2.dir + ") ran over another input";
    code = job_errc::checkpoint_mismatch;
  }
  SUBCASE("another job") {
    name = "u";
    expect = "belongs to job \"t\", not \"u\"";
    code = job_errc::checkpoint_mismatch;
  }
  const job::error e = error_of([&] {
    job::merge_shards({.prefix = d / "prefix", .count = 4, .output = d / "merged.jsonl", .name = name});
  });
  CHECK(e.code() == code);
  CHECK(std::string(e.what()).find(expect) != std::string::npos);
  CHECK(!std::filesystem::exists(d / "merged.jsonl"));
  // A merge over another count finds none of these shards.
  CHECK(error_of([&] {
          job::merge_shards({.prefix = d / "prefix", .count = 3, .output = d / "m"});
        }).code() == job_errc::shard_incomplete);
}

TEST_CASE(
    "job checkpoint: a shard's extent round-trips; partial shard fields, out-of-range or mistyped fields are "
    "corrupt") {
  temp_dir d;
  const job::checkpoint c{.job_name = "embed",
                          .input = {.size = 1000, .hash = 7},
                          .input_offset = 300,
                          .input_line = 9,
                          .extent = job::shard_extent{{2, 5}, {250, 410}}};
  job::write_checkpoint(d.path.string(), c);
  CHECK(*job::read_checkpoint(d.path.string()) == c);
  // Re-signed with a valid checksum, so that only the field checks can refuse them.
  const std::string good = slurp(d / "checkpoint.json");
  auto tampered = [&](auto edit) {
    nlohmann::json j = nlohmann::json::parse(good);
    j.erase("checksum");
    edit(j);
    j["checksum"] = job::detail::hex64(job::detail::checksum_of(j));
    spit(d / "checkpoint.json", j.dump());
    const job::error e = error_of([&] { job::read_checkpoint(d.path.string()); });
    CHECK(e.code() == job_errc::checkpoint_corrupt);
    return std::string(e.what());
  };
  CHECK(tampered([](nlohmann::json& j) { j["records_done"] = -1; }).find("not a non-negative integer") !=
        std::string::npos);
  CHECK(tampered([](nlohmann::json& j) { j["input_size"] = 1.6e95; }).find("not a non-negative integer") !=
        std::string::npos);
  CHECK(tampered([](nlohmann::json& j) { j["input_hash"] = " -1"; }).find("16 hex digits") !=
        std::string::npos);
  CHECK(tampered([](nlohmann::json& j) { j["format"] = 1; }).find("no format string") != std::string::npos);
  CHECK(tampered([](nlohmann::json& j) { j.erase("slice_end"); }).find("all together") != std::string::npos);
  CHECK(tampered([](nlohmann::json& j) { j["shard_index"] = 5; }).find("shard_index") != std::string::npos);
  CHECK(tampered([](nlohmann::json& j) { j["shard_count"] = 1ull << 33; }).find("shard_index") !=
        std::string::npos);
  CHECK(tampered([](nlohmann::json& j) { j["slice_end"] = 1001; }).find("slice not within") !=
        std::string::npos);
  CHECK(tampered([](nlohmann::json& j) { j["input_offset"] = 411; }).find("outside the slice") !=
        std::string::npos);
}

TEST_CASE("job lock: a run waits while another holds the checkpoint directory; a stop ends the wait") {
  temp_dir d;
  spit(d / "in.jsonl", corpus(30));
  std::filesystem::create_directories(d / "ckpt");
  std::string holder;
  auto held = job::detail::dir_lock::try_lock(d / "ckpt/lock", "host test pid 1\n", holder);
  REQUIRE(held);
  CHECK(!job::detail::dir_lock::try_lock(d / "ckpt/lock", "other", holder));
  CHECK(holder == "host test pid 1");

  SUBCASE("a stop request while waiting: preempted, nothing written") {
    job::runner r(opts(d / "in.jsonl", d / "out", d / "ckpt"), doubler);
    std::thread t([&] {
      while (!r.stats().waited_for_lock) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      r.request_stop();
    });
    CHECK(r.run() == job::run_result::preempted);
    t.join();
    CHECK(r.stats().waited_for_lock);
    CHECK(!std::filesystem::exists(d / "out"));
    CHECK(!job::read_checkpoint(d / "ckpt"));
  }
  SUBCASE("released: the waiting run takes the lock and completes") {
    job::runner r(opts(d / "in.jsonl", d / "out", d / "ckpt"), doubler);
    std::thread t([&] {
      while (!r.stats().waited_for_lock) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      held.reset();
    });
    CHECK(r.run() == job::run_result::completed);
    t.join();
    CHECK(r.stats().records_done == 30);
  }
}
