#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <frugal/clock.hpp>
#include <frugal/job.hpp>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace frugal;
using job_test::temp_dir;

namespace {

std::string corpus(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += R"({"id":"r)" + std::to_string(i) + R"(","x":)" + std::to_string(i) + "}\n";
  return s;
}

// Doubles x: a model whose output is easy to check.
std::vector<nlohmann::json> doubler(std::span<const job::record> batch) {
  std::vector<nlohmann::json> out;
  for (const auto& r : batch) out.push_back(r.request["x"].get<int>() * 2);
  return out;
}

job::options opts(const temp_dir& d, std::size_t batch = 4, std::uint64_t every = 8) {
  return {.name = "t",
          .input = d / "in.jsonl",
          .output = d / "out.jsonl",
          .checkpoint_dir = d / "ckpt",
          .batch_size = batch,
          .checkpoint_every_records = every,
          .checkpoint_every = std::chrono::seconds(0),
          .handle_signals = false};
}

std::string expected_output(int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += R"({"id":"r)" + std::to_string(i) + R"(","result":)" + std::to_string(2 * i) + "}\n";
  return s;
}

template <class F>
job_errc code_of(F f) {
  try {
    f();
  } catch (const job::error& e) {
    return e.code();
  }
  FAIL("no job::error thrown");
  return job_errc::invalid_options;
}

template <class F>
std::string what_of(F f) {
  try {
    f();
  } catch (const job::error& e) {
    return e.what();
  }
  FAIL("no job::error thrown");
  return {};
}

}  // namespace

TEST_CASE("job checkpoint: written atomically and read back field for field") {
  temp_dir d;
  const job::checkpoint c{.job_name = "embed",
                          .input = {.size = 123, .hash = 0xdeadbeefcafef00dull},
                          .input_offset = 100,
                          .input_line = 7,
                          .records_done = 6,
                          .bad_records = 1,
                          .output_size = 4096,
                          .errors_size = 80,
                          .done = false};
  job::write_checkpoint(d.path.string(), c);
  CHECK(!std::filesystem::exists(d / "checkpoint.json.tmp"));
  const auto back = job::read_checkpoint(d.path.string());
  REQUIRE(back);
  CHECK(*back == c);
  CHECK(!job::read_checkpoint((d.path / "none").string()));
}

TEST_CASE(
    "job checkpoint: a flipped byte, a truncated file or garbage is refused as corrupt, naming the file") {
  temp_dir d;
  job::write_checkpoint(d.path.string(),
                        {.job_name = "embed", .input = {10, 20}, .input_offset = 5, .records_done = 3});
  const std::string good = job_test::slurp(d / "checkpoint.json");
  SUBCASE("a changed count") {
    std::string bad = good;
    const auto at = bad.find("\"records_done\":3");
    REQUIRE(at != std::string::npos);
    bad[at + 15] = '4';
    job_test::spit(d / "checkpoint.json", bad);
    const std::string what = what_of([&] { job::read_checkpoint(d.path.string()); });
    CHECK(what.find("checksum mismatch") != std::string::npos);
    CHECK(what.find(d / "checkpoint.json") != std::string::npos);
  }
  SUBCASE("truncated") { job_test::spit(d / "checkpoint.json", good.substr(0, good.size() / 2)); }
  SUBCASE("empty") { job_test::spit(d / "checkpoint.json", ""); }
  SUBCASE("another format") { job_test::spit(d / "checkpoint.json", R"({"format":"x","checksum":"0"})"); }
  CHECK(code_of([&] { job::read_checkpoint(d.path.string()); }) == job_errc::checkpoint_corrupt);
}

TEST_CASE("job checkpoint: another job's or another input's checkpoint is refused as a mismatch") {
  const job::checkpoint c{.job_name = "embed", .input = {10, 20}};
  CHECK_NOTHROW(job::check_checkpoint_matches(c, "embed", {10, 20}, "d"));
  CHECK(code_of([&] {
          job::check_checkpoint_matches(c, "other", {10, 20}, "d");
        }) == job_errc::checkpoint_mismatch);
  CHECK(code_of([&] {
          job::check_checkpoint_matches(c, "embed", {11, 20}, "d");
        }) == job_errc::checkpoint_mismatch);
  CHECK(what_of([&] {
          job::check_checkpoint_matches(c, "embed", {10, 21}, "d");
        }).find("another input") != std::string::npos);
}

TEST_CASE("job runner: results in input order, one per valid record, malformed records in the errors file") {
  temp_dir d;
  job_test::spit(d / "in.jsonl", R"({"id":"a","x":1})"
                                 "\nnot json\n\n"
                                 R"({"x":2})"
                                 "\n"
                                 R"([1,2])"
                                 "\n"
                                 R"({"id":1.5,"x":3})"
                                 "\n"
                                 R"({"id":7,"x":4})"
                                 "\n"
                                 R"({"id":"last","x":5})");  // no final newline
  job::runner r(opts(d, 2, 1), doubler);
  CHECK(r.run() == job::run_result::completed);
  CHECK(job_test::slurp(d / "out.jsonl") ==
        "{\"id\":\"a\",\"result\":2}\n{\"id\":7,\"result\":8}\n{\"id\":\"last\",\"result\":10}\n");
  const std::string errors = job_test::slurp(d / "out.jsonl.errors");
  CHECK(errors.find(R"({"line":2,"reason":"[json.exception.parse_error)") != std::string::npos);
  CHECK(errors.find(R"({"line":4,"reason":"no \"id\" field","text":"{\"x\":2}"})") != std::string::npos);
  CHECK(errors.find(R"({"line":5,"reason":"not a JSON object")") != std::string::npos);
  CHECK(errors.find(R"({"line":6,"reason":"\"id\" must be a string or an integer")") != std::string::npos);
  const job::stats s = r.stats();
  CHECK(s.records_done == 3);
  CHECK(s.bad_records == 4);
  CHECK(!s.resumed);
  const auto c = job::read_checkpoint(d / "ckpt");
  REQUIRE(c);
  CHECK(c->done);
  CHECK(c->input_line == 8);
  CHECK(c->input_offset == c->input.size);
}

TEST_CASE("job errors: each job_errc has a short name") {
  CHECK(std::string(to_string(job_errc::io)) == "io");
  CHECK(std::string(to_string(job_errc::checkpoint_corrupt)) == "checkpoint_corrupt");
  CHECK(std::string(to_string(job_errc::checkpoint_mismatch)) == "checkpoint_mismatch");
  CHECK(std::string(to_string(job_errc::bad_record)) == "bad_record");
  CHECK(std::string(to_string(job_errc::batch_failed)) == "batch_failed");
  CHECK(std::string(to_string(job_errc::invalid_options)) == "invalid_options");
  CHECK(std::string(to_string(static_cast<job_errc>(99))) == "unknown");
}

TEST_CASE("job runner: with stop_on_bad_record the first malformed record stops the job, naming its line") {
  temp_dir d;
  job_test::spit(d / "in.jsonl", corpus(3) + "{oops\n" + corpus(2));
  auto o = opts(d);
  o.stop_on_bad_record = true;
  job::runner r(o, doubler);
  const std::string what = what_of([&] { r.run(); });
  CHECK(what.find(d / "in.jsonl" + ":4: ") != std::string::npos);
  CHECK(code_of([&] { job::runner(o, doubler).run(); }) == job_errc::bad_record);
}

TEST_CASE(
    "job runner: a stop request checkpoints, and the resumed job's output equals an uninterrupted run") {
  temp_dir d;
  job_test::spit(d / "in.jsonl", corpus(50));
  job::runner* self = nullptr;
  int batches = 0;
  job::runner first(opts(d, 4, 1000), [&](std::span<const job::record> b) {
    if (++batches == 3) self->request_stop();
    return doubler(b);
  });
  self = &first;
  CHECK(first.run() == job::run_result::preempted);
  CHECK(first.stats().stop_requests == 1);
  const auto c = job::read_checkpoint(d / "ckpt");
  REQUIRE(c);
  CHECK(!c->done);
  CHECK(c->records_done == 12);
  CHECK(job_test::slurp(d / "out.jsonl") == expected_output(12));

  // Results written after the checkpoint, as if the process died before the next one.
  job_test::append(d / "out.jsonl", R"({"id":"r12","result":24})"
                                    "\n"
                                    R"({"id":"r13","res)");
  job::runner second(opts(d, 4, 1000), doubler);
  CHECK(second.run() == job::run_result::completed);
  CHECK(job_test::slurp(d / "out.jsonl") == expected_output(50));
  const job::stats s = second.stats();
  CHECK(s.resumed);
  CHECK(s.resumed_at_record == 12);
  CHECK(s.redone_records == 1);
  CHECK(s.records_this_run == 38);
  CHECK(s.records_done == 50);

  job::runner third(opts(d, 4, 1000), [](std::span<const job::record>) -> std::vector<nlohmann::json> {
    FAIL("a finished job ran a batch");
    return {};
  });
  CHECK(third.run() == job::run_result::completed);
  CHECK(job_test::slurp(d / "out.jsonl") == expected_output(50));
}

TEST_CASE(
    "job runner: a checkpoint of another input or job is refused, and so is an output shorter than it") {
  temp_dir d;
  job_test::spit(d / "in.jsonl", corpus(10));
  job::runner(opts(d), doubler).run();
  SUBCASE("the input changed") {
    job_test::append(d / "in.jsonl", corpus(1));
    CHECK(code_of([&] { job::runner(opts(d), doubler).run(); }) == job_errc::checkpoint_mismatch);
  }
  SUBCASE("another job") {
    auto o = opts(d);
    o.name = "other";
    CHECK(what_of([&] { job::runner(o, doubler).run(); }).find("belongs to job \"t\"") != std::string::npos);
  }
  SUBCASE("the output lost data") {
    job_test::spit(d / "out.jsonl", "");
    CHECK(what_of([&] { job::runner(opts(d), doubler).run(); }).find("shorter than checkpoint") !=
          std::string::npos);
  }
}

TEST_CASE("job runner: a failed write stops the job with the path and errno, and a resume completes it") {
  temp_dir d;
  job_test::spit(d / "in.jsonl", corpus(40));
  auto o = opts(d, 4, 4);
  o.testing.fail_write_after = 9;
  try {
    job::runner(o, doubler).run();
    FAIL("no error");
  } catch (const job::error& e) {
    CHECK(e.code() == job_errc::io);
    CHECK(e.sys_errno() == ENOSPC);
    CHECK(std::string(e.what()).find("No space left on device") != std::string::npos);
    CHECK(job::exit_code(e.code()) == 74);
  }
  job::runner again(opts(d, 4, 4), doubler);
  CHECK(again.run() == job::run_result::completed);
  CHECK(again.stats().resumed);
  CHECK(job_test::slurp(d / "out.jsonl") == expected_output(40));
}

TEST_CASE("job runner: a batch function that throws or miscounts fails the job with batch_failed") {
  temp_dir d;
  job_test::spit(d / "in.jsonl", corpus(5));
  CHECK(what_of([&] {
          job::runner(opts(d), [](std::span<const job::record>) -> std::vector<nlohmann::json> {
            throw std::runtime_error("GPU fell off");
          }).run();
        }).find("GPU fell off") != std::string::npos);
  CHECK(code_of([&] {
          job::runner(opts(d), [](std::span<const job::record>) {
            return std::vector<nlohmann::json>(1);
          }).run();
        }) == job_errc::batch_failed);
}

TEST_CASE(
    "job runner: with a time rule only, a checkpoint follows the first batch that ends past the interval") {
  temp_dir d;
  job_test::spit(d / "in.jsonl", corpus(40));
  manual_clock clock;
  auto o = opts(d, 4, 0);
  o.checkpoint_every = std::chrono::seconds(2);
  job::basic_runner<manual_clock> r(
      o,
      [&](std::span<const job::record> b) {
        clock.advance(std::chrono::seconds(1));
        return doubler(b);
      },
      clock);
  CHECK(r.run() == job::run_result::completed);
  CHECK(r.stats().batches == 10);
  CHECK(r.stats().checkpoints == 5 + 1);  // after batches 2, 4, 6, 8, 10, and the final one
}

TEST_CASE(
    "job runner: records go through the batcher's worker in full batches of batch_size, the last one short") {
  temp_dir d;
  job_test::spit(d / "in.jsonl", corpus(5) + "{oops\n\n" +
                                     R"({"id":"x","x":9})"
                                     "\n" +
                                     corpus(5));
  std::vector<std::size_t> sizes;
  std::vector<std::thread::id> threads;
  job::runner r(opts(d, 4, 4), [&](std::span<const job::record> b) {
    sizes.push_back(b.size());
    threads.push_back(std::this_thread::get_id());
    return doubler(b);
  });
  CHECK(r.run() == job::run_result::completed);
  CHECK(sizes == std::vector<std::size_t>{4, 4, 3});
  for (const auto& t : threads) CHECK(t != std::this_thread::get_id());
  CHECK(r.stats().batches == 3);
  CHECK(r.stats().records_done == 11);
  CHECK(r.stats().bad_records == 1);
  CHECK(r.stats().checkpoints == 2 + 1);
  const std::string out = job_test::slurp(d / "out.jsonl");
  CHECK(out.find(R"({"id":"r4","result":8})"
                 "\n"
                 R"({"id":"x","result":18})"
                 "\n"
                 R"({"id":"r0","result":0})") != std::string::npos);
  CHECK(job_test::slurp(d / "out.jsonl.errors").find(R"({"line":6,)") == 0);
}

TEST_CASE("job runner: invalid options are refused at construction, and a second run() on one runner") {
  temp_dir d;
  auto o = opts(d);
  o.batch_size = 0;
  CHECK(code_of([&] { job::runner(o, doubler); }) == job_errc::invalid_options);
  o = opts(d);
  o.output = o.input;
  CHECK(code_of([&] { job::runner(o, doubler); }) == job_errc::invalid_options);
  CHECK(code_of([&] { job::runner(opts(d), nullptr); }) == job_errc::invalid_options);
  job_test::spit(d / "in.jsonl", corpus(2));
  job::runner once(opts(d), doubler);
  CHECK(once.run() == job::run_result::completed);
  CHECK(code_of([&] { once.run(); }) == job_errc::invalid_options);
}

TEST_CASE("job failover: N preemptions within the window recommend on-demand, older ones do not count") {
  using tp = std::chrono::steady_clock::time_point;
  using std::chrono::minutes;
  const tp now = tp(std::chrono::hours(10));
  const job::failover_policy p{.max_preemptions = 3, .window = std::chrono::hours(1)};
  const auto price = cost::money::from_units(1);
  std::vector<tp> pre = {now - minutes(90), now - minutes(50), now - minutes(10)};
  auto a = job::advise_failover<tp>(pre, now, price, p);
  CHECK(!a.use_on_demand);
  CHECK(a.preemptions_in_window == 2);
  pre.push_back(now - minutes(60));  // exactly a window old: outside
  CHECK(job::advise_failover<tp>(pre, now, price, p).preemptions_in_window == 2);
  pre.push_back(now + minutes(5));  // in the future: ignored
  CHECK(!job::advise_failover<tp>(pre, now, price, p).use_on_demand);
  pre.push_back(now);
  a = job::advise_failover<tp>(pre, now, price, p);
  CHECK(a.use_on_demand);
  CHECK(a.preemptions_in_window == 3);
  CHECK(a.reason.find("3 preemptions") != std::string::npos);
}

TEST_CASE("job failover: a spot price above the ceiling recommends on-demand, at the ceiling it does not") {
  using tp = std::chrono::steady_clock::time_point;
  const tp now{};
  job::failover_policy p{.max_preemptions = 3, .price_ceiling = cost::money::from_units(2)};
  CHECK(!job::advise_failover<tp>({}, now, cost::money::from_units(2), p).use_on_demand);
  const auto a = job::advise_failover<tp>({}, now, cost::money::from_units(2, 1), p);
  CHECK(a.use_on_demand);
  CHECK(a.reason.find("above the ceiling") != std::string::npos);
  CHECK_THROWS_AS(
      job::advise_failover<tp>({}, now, cost::money::from_units(1, 0, cost::currency::from_code("EUR")), p),
      std::invalid_argument);
  p.max_preemptions = 0;
  CHECK_THROWS_AS(job::advise_failover<tp>({}, now, cost::money::from_units(1), p), std::invalid_argument);
}

TEST_CASE("job failover: spot_price_ceiling is on-demand x length / advise_spot's expected time") {
  using std::chrono::hours;
  using std::chrono::minutes;
  cost::spot_job j{.length = hours(10),
                   .on_demand = cost::rate::per_hour(cost::money::from_units(11)),
                   .spot = cost::rate::per_hour(cost::money::from_units(3)),
                   .preemptions_per_hour = 0,
                   .checkpoint_interval = hours(1),
                   .checkpoint_cost = minutes(6)};
  // No preemptions: 10 segments of 1.1 h, so $11 x 10 / 11 = $10.
  CHECK(job::spot_price_ceiling(j) == cost::money::from_units(10));
  j.preemptions_per_hour = 0.5;
  j.restart_overhead = minutes(5);
  const cost::money ceiling = job::spot_price_ceiling(j);
  CHECK(ceiling < cost::money::from_units(10));
  // advise_spot agrees on either side of the ceiling.
  j.spot = cost::rate::per_hour(ceiling - cost::money::from_nanos(1'000'000));
  CHECK(cost::advise_spot(j).use_spot);
  j.spot = cost::rate::per_hour(ceiling + cost::money::from_nanos(1'000'000));
  CHECK(!cost::advise_spot(j).use_spot);
}
