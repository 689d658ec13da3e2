// A short, scripted run of the main demo: every request is answered, the ladder's figures agree with
// the ledger's own exports, and the exports are valid. And the plumbing it shares with the other examples
// (examples/common): its config reader, flags and writes.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../common/flags.hpp"
#include "../common/write.hpp"
#include "../support/errors.hpp"
#include "../support/requires.hpp"
#include "demo.hpp"

namespace {

demo::json tiny_config() {
  return demo::json::parse(R"({
    "seed": 7,
    "model": {"name": "tiny", "dims": [128, 256, 128]},
    "gpu": {"name": "test-gpu", "hourly_usd": "3.60"},
    "batcher": {"window_ms": 1, "max_batch": 8, "latency_target_ms": 20},
    "cache": {"max_entries": 64, "max_bytes": 1048576},
    "traffic": {"pool": 200, "zipf_s": 1.1, "accuracy_sample": 64,
      "phases": [{"kind": "closed", "clients": 16, "requests": 300},
                 {"kind": "idle", "ms": 20},
                 {"kind": "poisson", "rate": 2000, "requests": 100}]},
    "ladder": [
      {"name": "fp32", "precision": "fp32", "batching": false},
      {"name": "batched", "precision": "fp32"},
      {"name": "int8", "precision": "int8"},
      {"name": "cache", "precision": "int8", "cache": true},
      {"name": "adaptive", "precision": "int8", "cache": true, "policy": "adaptive"}]
  })");
}

// The value of a Prometheus sample line `name{labels} value`, or -1.
double prom_value(const std::string& text, const std::string& series) {
  const auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

}  // namespace

TEST_CASE("demo: a scripted ladder answers every request and its figures agree with the ledger's exports") {
  const demo::config cfg = demo::parse_config(tiny_config());
  const auto plan = demo::make_plan(cfg);
  REQUIRE(plan.size() == 400);
  const auto results = demo::run(cfg);
  REQUIRE(results.size() == 5);
  const bool promtool = frugal_test::available(frugal_test::tool("promtool", FRUGAL_PROMTOOL));

  for (std::size_t i = 0; i < results.size(); ++i) {
    CAPTURE(i);
    const auto& r = results[i];
    CHECK(r.answered == plan.size());
    CHECK(r.failed == 0);
    CHECK(r.requests == plan.size());
    // Every request is either a cache hit or rode in a model call.
    CHECK(r.snapshot.total.batched_items + r.cache_hits == plan.size());
    CHECK(r.model_calls == r.snapshot.total.batches);
    // Paid = busy + overhead + idle, exactly, in nano-dollars.
    CHECK(r.snapshot.total_cost == r.snapshot.busy_cost + r.snapshot.overhead_cost + r.snapshot.idle_cost);
    CHECK(r.cost_per_1k == r.snapshot.total_cost.mul_div(1000, static_cast<std::int64_t>(plan.size())));
    CHECK(r.utilization > 0);
    CHECK(r.utilization <= 1);

    const demo::json j = demo::json::parse(r.json_export);
    CHECK(j.dump().find("\"requests\"") != std::string::npos);
    CHECK(prom_value(r.prometheus, "frugal_requests_total{feature=\"tiny\",outcome=\"ok\"}") ==
          doctest::Approx(400));
    CHECK(r.prometheus.find("frugal_cost_usd_total") != std::string::npos);
    if (promtool) {
      const std::string path =
          (std::filesystem::temp_directory_path() / ("frugal_test_demo_step" + std::to_string(i) + ".prom"))
              .string();
      std::ofstream(path) << r.prometheus;
      CHECK(std::system(
                (std::string(FRUGAL_PROMTOOL) + " check metrics < " + path + " > /dev/null 2>&1").c_str()) ==
            0);
    }
  }
  // One request per call without batching; batches of more than one with it.
  CHECK(results[0].mean_batch == doctest::Approx(1.0));
  CHECK(results[1].mean_batch > 1.0);
  // fp32 with and without batching computes the same function; int8 stays close to it.
  CHECK(results[1].cosine_mean > 0.99999);
  CHECK(results[2].cosine_mean > 0.999);
  CHECK(results[2].cosine_mean < 1.0);
  // No cache, no hits; with the cache, Zipf traffic repeats and the ledger counts the hits.
  CHECK(results[2].cache_hits == 0);
  CHECK(results[3].cache_hits > 0);
  CHECK(results[3].hit_ratio == doctest::Approx(static_cast<double>(results[3].cache_hits) / plan.size()));
}

TEST_CASE(
    "demo: a timed closed-loop phase serves until its deadline, and every request it issued is answered") {
  examples::config_document j(tiny_config());
  j.apply_override(R"(--traffic.phases=[{"kind": "closed", "clients": 16, "seconds": 0.3},
                                               {"kind": "poisson", "rate": 2000, "requests": 50}])");
  j.apply_override(R"(--ladder=[{"name": "fp32", "precision": "fp32", "batching": false},
                                       {"name": "int8", "precision": "int8", "cache": true, "policy": "adaptive"}])");
  const demo::config cfg = demo::parse_config(j);
  CHECK(demo::make_plan(cfg).size() == 50);  // the timed phase's count is not known before the run
  const auto results = demo::run(cfg);
  REQUIRE(results.size() == 2);
  for (const auto& r : results) {
    CAPTURE(r.name);
    CHECK(r.failed == 0);
    CHECK(r.answered == r.requests);
    CHECK(r.requests == r.closed_requests + 50);
    CHECK(r.closed_requests > 16);
    // The phase lasts its 0.3 s plus the drain of what was in flight at the deadline.
    CHECK(r.closed_seconds >= 0.3);
    CHECK(r.closed_seconds < 5.0);
    CHECK(r.throughput == doctest::Approx(static_cast<double>(r.closed_requests) / r.closed_seconds));
    // The worker's tally of saturated batches is part of the ledger's.
    CHECK(r.closed_calls <= r.model_calls);
    CHECK(r.closed_batched <= r.snapshot.total.batched_items);
    CHECK(r.closed_busy_s <= r.busy_s + 1e-9);
    CHECK(r.closed_cpu_s > 0);
    CHECK(r.closed_cpu_s <=
          r.closed_busy_s + 0.05);  // CPU time cannot exceed wall time (clock granularity aside)
    CHECK(r.snapshot.total.batched_items + r.cache_hits == r.requests);
    CHECK(r.cost_per_1k == r.snapshot.total_cost.mul_div(1000, static_cast<std::int64_t>(r.requests)));
  }
  CHECK(results[0].closed_mean_batch == doctest::Approx(1.0));
  CHECK(results[1].cache_hits > 0);
  const std::string report = demo::format_report(cfg, results);
  CHECK(report.find("16 closed-loop clients for 0.3 s") != std::string::npos);
  CHECK(report.find("cost per 1k x") != std::string::npos);
}

TEST_CASE("demo: each phase draws the same request stream at every step, whatever the others consumed") {
  const demo::config cfg = demo::parse_config(tiny_config());
  const demo::zipf_inputs z(cfg);
  demo::phase_stream a(z, cfg, 0), b(z, cfg, 0), other(z, cfg, 2);
  int same = 0, differs = 0;
  for (int i = 0; i < 200; ++i) {
    const auto x = a.next(), y = b.next(), w = other.next();
    same += x.input == y.input;
    differs += x.input != w.input;
    CHECK(x.input >= 0);
    CHECK(x.input < cfg.pool);
  }
  CHECK(same == 200);
  CHECK(differs > 100);
  // Poisson offsets grow at about 1/rate per request (rate 2000/s for phase 2).
  demo::phase_stream p(z, cfg, 2);
  demo::planned_request last{};
  for (int i = 0; i < 2000; ++i) last = p.next();
  CHECK(std::chrono::duration<double>(last.offset).count() == doctest::Approx(1.0).epsilon(0.1));
}

TEST_CASE("demo: the batched fp32 path (column-major GEMM) computes what one request at a time does") {
  demo::model_config mc;
  mc.dims = {128, 256, 128};
  mc.seed = 3;
  const demo::mlp m(mc, demo::recipe::fp32);
  const demo::matrix x = demo::make_input_pool(9, 128, 3);
  const demo::matrix batched = m.forward(x);
  REQUIRE(batched.rows() == 9);
  REQUIRE(batched.cols() == 128);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    CAPTURE(r);
    const demo::matrix one = m.forward(x.row(r));
    CHECK((one.row(0) - batched.row(r)).norm() <= 1e-5f * batched.row(r).norm());
  }
}

TEST_CASE("demo: bad configs are refused with the field named") {
  auto expect = [](const std::string& patch_key, const demo::json& v, const std::string& words) {
    examples::config_document j(tiny_config());
    j.apply_override("--" + patch_key + "=" + v.dump());
    CAPTURE(patch_key);
    try {
      (void)demo::parse_config(j);
      FAIL("no error");
    } catch (const std::exception& e) {
      CHECK(std::string(e.what()).find(words) != std::string::npos);
    }
  };
  expect("batcher.max_batch", 0, "batcher.max_batch");
  expect("traffic.pool", -1, "traffic.pool");
  expect("ladder", demo::json::parse(R"([{"precision": "fp8"}])"), "fp8");
  expect("traffic.phases", demo::json::parse(R"([{"kind": "burst"}])"), "traffic.phases[0].kind");
  expect("gpu.hourly_usd", "cheap", "cheap");
  expect("traffic.phases", demo::json::parse(R"([{"kind": "closed", "clients": 4}])"), "seconds > 0");
  expect("traffic.phases",
         demo::json::parse(R"([{"kind": "closed", "clients": 4, "seconds": -1, "requests": 3}])"),
         "traffic.phases[0].seconds");
  expect("batcher.max_batc", 3, "batcher.max_batc: unknown key");
  expect("traffic.phases", demo::json::parse(R"([{"kind": "idle", "ms": 1, "msec": 2}])"),
         "traffic.phases[0].msec");
  expect("ladder", demo::json::parse(R"([{"precision": "fp32", "cach": true}])"), "ladder[0].cach");
  expect("model.kind", "gpt", "model.kind");
  expect("modle", 1, "modle: unknown key");
  examples::config_document j(tiny_config());
  CHECK_THROWS_WITH_AS(j.apply_override("max_batch=3"), doctest::Contains("--key.path=value"),
                       std::invalid_argument);
}

TEST_CASE("demo: command-line overrides reach nested fields and keep their JSON types") {
  examples::config_document j(tiny_config());
  j.apply_override("--batcher.max_batch=16");
  j.apply_override("--gpu.name=H200");
  j.apply_override("--traffic.zipf_s=0.5");
  const auto cfg = demo::parse_config(j);
  CHECK(cfg.max_batch == 16);
  CHECK(cfg.gpu_name == "H200");
  CHECK(cfg.zipf_s == doctest::Approx(0.5));
}

TEST_CASE("demo: the MiniLM ladder serves real sentences, counts tokens, and int8 stays close to fp32" *
          frugal_test::needs(frugal_test::model(),
                             frugal_test::file("fortunes", "/usr/share/games/fortunes"))) {
  const std::string dir = frugal_test::model_dir();
  examples::config_document j(demo::json::parse(R"({
    "seed": 3,
    "model": {"kind": "minilm", "name": "minilm", "calibration_sentences": 16},
    "batcher": {"window_ms": 2, "max_batch": 64, "max_batch_tokens": 64},
    "cache": {"max_entries": 64, "max_bytes": 1048576},
    "traffic": {"pool": 48, "zipf_s": 1.1, "accuracy_sample": 48,
      "phases": [{"kind": "closed", "clients": 32, "requests": 60}]},
    "ladder": [
      {"name": "fp32", "precision": "fp32"},
      {"name": "int8 cached", "precision": "int8", "cache": true}]
  })"));
  j.apply_override("--model.path=" + dir);
  const auto cfg = demo::parse_config(j);
  const auto results = demo::run(cfg);
  REQUIRE(results.size() == 2);
  for (const auto& r : results) {
    CHECK(r.answered == 60);
    CHECK(r.failed == 0);
    CHECK(r.snapshot.total.batched_items + r.cache_hits == 60);
  }
  CHECK(results[0].cosine_mean > 0.99999);
  CHECK(results[1].precision == "int8 W8A8 SmoothQuant");
  CHECK(results[1].cosine_mean > 0.99);
  CHECK(results[1].cache_hits > 0);
  CHECK(results[1].weight_bytes * 3 < results[0].weight_bytes);
  // Cut by tokens: 32 clients would fill batches of up to 64 sentences, but a batch holds at most 64
  // tokens, so never more sentences than 64 over the pool's shortest sentence.
  const auto pool = examples::sample_fortunes(cfg.corpus, static_cast<std::size_t>(cfg.pool), cfg.model.seed);
  const auto enc = bert::encoder::load(dir);
  std::size_t shortest = 1000;
  for (const auto& t : pool) shortest = std::min(shortest, enc.tokenize(t).size());
  CHECK(results[0].closed_mean_batch > 0);
  CHECK(results[0].closed_mean_batch <= 64.0 / static_cast<double>(shortest));
  j.apply_override("--model.path=/nonexistent/minilm");
  CHECK_THROWS_WITH(demo::run(demo::parse_config(j)), doctest::Contains("/nonexistent/minilm/config.json"));
}

TEST_CASE("demo: identical misses at the same time make one model call (the cache's single flight)") {
  // One input asked by 16 clients at once: the first miss computes it, the other callers wait for that
  // computation instead of each reaching the model (a get followed by a put sent all 16 to the model).
  demo::json j = tiny_config();
  j["traffic"]["pool"] = 1;
  j["traffic"]["accuracy_sample"] = 1;
  j["traffic"]["phases"] = demo::json::parse(R"([{"kind": "closed", "clients": 16, "requests": 200}])");
  j["batcher"]["window_ms"] = 20;
  j["ladder"] = demo::json::parse(R"([{"name": "cache", "precision": "fp32", "cache": true}])");
  const auto results = demo::run(demo::parse_config(j));
  REQUIRE(results.size() == 1);
  const auto& r = results.front();
  CHECK(r.answered == 200);
  CHECK(r.failed == 0);
  CHECK(r.model_calls == 1);
  CHECK(r.snapshot.total.batched_items == 1);
  CHECK(r.cache_hits == 199);
  CHECK(r.cosine_mean > 0.99999);
}

namespace {

using frugal_test::what_of;

// The error of parse_config on tiny_config() with one override.
std::string override_error(const std::string& arg) {
  return what_of([&] {
    examples::config_document d(tiny_config(), "config tiny.json");
    d.apply_override(arg);
    (void)demo::parse_config(d);
  });
}

}  // namespace

TEST_CASE("demo: a number out of its field's range is refused where it is read, naming its path and origin") {
  struct bad {
    const char* arg;
    const char* path;
  };
  // Unchecked, each would reach an allocation or a loop: a negative sample count, negative dims, a huge
  // or negative outlier-channel count, an outlier scale that overflows the weights.
  for (const bad& b :
       {bad{"--traffic.accuracy_sample=-1", "traffic.accuracy_sample: must be an integer in 1 .."},
        bad{"--model.dims=[128,-256,128]", "model.dims[1]: must be an integer in 128 .."},
        bad{"--model.dims=[128,200,128]", "model.dims[1]: must be a multiple of 128"},
        bad{"--model.outlier_channels=100000000", "model.outlier_channels: must be an integer in 0 .. 128"},
        bad{"--model.outlier_channels=-3", "model.outlier_channels: must be an integer in 0 .."},
        bad{"--model.outlier_scale=1e30", "model.outlier_scale: must be a number in 1 .. 1000"},
        bad{"--batcher.max_batch=-3", "batcher.max_batch: must be an integer in 1 .. 65536, not -3"},
        bad{"--ladder[0].max_batch=-1", "ladder[0].max_batch: must be an integer in 0 .."},
        bad{"--traffic.phases[0].requests=-5", "traffic.phases[0].requests: must be an integer"},
        bad{"--traffic.phases[2].rate=1e12", "traffic.phases[2].rate: must be a number in 0 .."},
        bad{"--cache.max_bytes=-1", "cache.max_bytes: must be an integer in 0 .."},
        bad{"--seed=-1", "seed: must be an integer in 0 .."}}) {
    CAPTURE(b.arg);
    const std::string e = override_error(b.arg);
    CHECK(e.find(b.path) != std::string::npos);
    CHECK(e.rfind(std::string(b.arg) + ": ", 0) == 0);  // the override that set it
  }
  // A bad value of the file names the file.
  demo::json j = tiny_config();
  j["traffic"]["phases"][1]["ms"] = -1;
  const std::string e = what_of([&] { (void)demo::parse_config(j, "config tiny.json"); });
  CHECK(e.rfind("config tiny.json: traffic.phases[1].ms: must be a number in 0 ..", 0) == 0);
}

TEST_CASE("demo: a value the cost library would refuse is named by the config key that the user wrote") {
  const auto error = [](const char* section, const char* key, const demo::json& v) {
    demo::json j = tiny_config();
    j[section][key] = v;
    return what_of([&] { (void)demo::parse_config(j, "config tiny.json"); });
  };
  // Not "options.prices[...].on_demand must be > 0", nor "frugal::cost::rate: price must not be negative".
  for (const char* price : {"0", "-1", "-$0.5", "0.00 EUR"}) {
    CAPTURE(std::string(price));
    const std::string e = error("gpu", "hourly_usd", price);
    CHECK(e.rfind("config tiny.json: gpu.hourly_usd: must be a price > 0", 0) == 0);
    CHECK(e.find("options.") == std::string::npos);
  }
  CHECK(error("gpu", "hourly_usd", "USD 12").rfind("config tiny.json: gpu.hourly_usd: ", 0) == 0);
  CHECK(error("gpu", "hourly_usd", "USD 12").find("unknown currency code") == std::string::npos);
  CHECK(error("gpu", "name", "").rfind("config tiny.json: gpu.name: must not be empty", 0) == 0);
  // Not "frugal::cost::ledger::feature: a feature name must not be empty".
  CHECK(error("model", "name", "").rfind("config tiny.json: model.name: must not be empty", 0) == 0);
  CHECK(error("model", "name", "a\x01b").rfind("config tiny.json: model.name: ", 0) == 0);
  // A config path that is a directory is said to be one, not "empty".
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK(what_of([&] { (void)examples::config_document::from_file(dir); }) ==
        "config " + dir + ": is a directory; a config is a JSON file");
}

TEST_CASE("demo: the JSON library's own errors become the config's, naming the file or the override") {
  using examples::config_document;
  CHECK(what_of([] { (void)config_document::from_text("  \n", "config empty.json"); }) ==
        "config empty.json: is empty; a config is a JSON object");
  CHECK(what_of([] {
          (void)config_document::from_text(R"({"traffic": {"pool": 1e400}})", "config big.json");
        }) == "config big.json: traffic.pool: a number is too large for a double");
  CHECK(what_of([] {
          (void)config_document::from_text(R"({"ladder": [{}, {"max_batch": -1e999}]})", "config big.json");
        }) == "config big.json: ladder[1].max_batch: a number is too large for a double");
  const std::string syntax =
      what_of([] { (void)config_document::from_text("{\n  \"seed\": 1,,\n}", "config x.json"); });
  CHECK(syntax.rfind("config x.json: not valid JSON at line 2, column 13: ", 0) == 0);
  CHECK(override_error("--traffic.zipf_s=1e400") ==
        "--traffic.zipf_s=1e400: traffic.zipf_s: 1e400 is too large for a double");
  CHECK(override_error("--batcher.max_batch.x=3") ==
        "--batcher.max_batch.x=3: batcher.max_batch is a number, not an object with key \"x\"");
  CHECK(override_error("--ladder[9].name=x").find("ladder has no entry [9] (it has 5)") != std::string::npos);
  CHECK(override_error("--ladder.name=x").find("ladder is an array") != std::string::npos);
  for (const std::string& e : {syntax, override_error("--batcher.max_batch.x=3")})
    CHECK(e.find("json.exception") == std::string::npos);
}

TEST_CASE("demo: the examples' flags read --name VALUE and --name=VALUE, and refuse what they cannot use") {
  const auto run = [](std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    examples::flags f(static_cast<int>(argv.size()), argv.data());
    std::string out;
    while (f.next()) {
      if (f.is("--n"))
        out += "n=" + std::to_string(f.integer(1, 10)) + ";";
      else if (f.is("--x"))
        out += "x=" + std::to_string(f.number(0, 1)) + ";";
      else if (f.is("--on"))
        out += "on;";
      else
        f.unknown();
    }
    return out;
  };
  CHECK(run({"--n", "3", "--n=4", "--on"}) == "n=3;n=4;on;");
  CHECK_THROWS_WITH_AS(run({"--n"}), "--n needs a value", examples::usage_error);
  CHECK_THROWS_WITH_AS(run({"--n=11"}), "--n must be an integer in 1 .. 10, not \"11\"",
                       examples::usage_error);
  CHECK_THROWS_WITH_AS(run({"--x", "nan"}), doctest::Contains("--x must be a number in 0 .. 1"),
                       examples::usage_error);
  CHECK_THROWS_WITH_AS(run({"--on=yes"}), "--on takes no value, not \"--on=yes\"", examples::usage_error);
  CHECK_THROWS_WITH_AS(run({"--bogus"}), "unknown argument \"--bogus\"", examples::usage_error);
}

TEST_CASE(
    "demo: a write that fails is an error naming the path: a full disk, a directory, a file as a directory") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("frugal_test_demo_write_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "a_directory");
  examples::write_file((dir / "a_file").string(), "x");
  CHECK(what_of([] {
          examples::write_file("/dev/full", "a ledger");
        }).rfind("/dev/full: writing failed: ", 0) == 0);
  CHECK(what_of([&] {
          examples::write_file((dir / "a_directory").string(), "x");
        }).find("a_directory: cannot be opened for writing") != std::string::npos);
  CHECK(what_of([&] { examples::check_writable((dir / "a_directory").string()); }).find("a_directory") !=
        std::string::npos);
  CHECK(what_of([&] {
          examples::prepare_output_dir((dir / "a_file" / "out").string());
        }).find("a_file/out: cannot be created") != std::string::npos);
  examples::prepare_output_dir((dir / "new" / "out").string());
  examples::check_writable((dir / "new" / "out" / "step1.prom").string());
  CHECK(fs::is_empty(dir / "new" / "out"));  // the checks leave nothing behind
  fs::remove_all(dir);
}

#ifdef FRUGAL_DEMO_EXE
TEST_CASE(
    "demo: frugal_demo refuses an export target it cannot write before the run, exits non-zero and names "
    "it") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("frugal_test_demo_exe_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  demo::json j = tiny_config();
  j["quiet"] = true;
  j["traffic"]["phases"] = demo::json::parse(R"([{"kind": "closed", "clients": 2, "requests": 20}])");
  j["ladder"] = demo::json::parse(R"([{"name": "fp32", "precision": "fp32"}])");
  examples::write_file((dir / "config.json").string(), j.dump());
  examples::write_file((dir / "a_file").string(), "x");
  const std::string err = (dir / "err.txt").string();
  const auto run = [&](const std::string& out_dir) {
    const int rc = std::system((std::string(FRUGAL_DEMO_EXE) + " --config " + (dir / "config.json").string() +
                                " --out_dir=" + out_dir + " > /dev/null 2> " + err)
                                   .c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  const auto error_text = [&] {
    std::ifstream e(err);
    return std::string(std::istreambuf_iterator<char>(e), {});
  };
  // A path component that is a file.
  const std::string under_file = (dir / "a_file" / "out").string();
  CHECK(run(under_file) == 1);
  CHECK(error_text().find(under_file) != std::string::npos);
  // A directory where an export file must go.
  fs::create_directories(dir / "out" / "step1.json");
  CHECK(run((dir / "out").string()) == 1);
  CHECK(error_text().find((dir / "out" / "step1.json").string()) != std::string::npos);
  CHECK(!fs::exists(dir / "out" / "step1.prom"));  // refused before the run, not after it
  // Writable: every export is written.
  CHECK(run((dir / "ok").string()) == 0);
  for (const char* f : {"step1.prom", "step1.json", "report.md"}) CHECK(fs::file_size(dir / "ok" / f) > 0);
  fs::remove_all(dir);
}
#endif
