// frugal::job with all-MiniLM-L6-v2: what checkpoints cost, and what a preemption costs.
//
//   bench_job [--records N] [--rounds R] [--kills K] [--precision P] [--corpus FILE] [--dir DIR]
//   bench_job --table --rate R --redo-s S --checkpoint-ms C [--restart-s 120] [--preemptions-per-hour 0.5]
//             [--every 1000] [--job-records 1e6] [--on-demand 0.40] [--discount 0.70]
//
// 1. Throughput of one corpus job with no checkpoint but the final one, against checkpoints every 1,000
//    records and every 10 s (time-based), in R interleaved rounds (none, 1k, 10 s, none, ...): the overhead
//    is each round's ratio to its own "none" run, so drift on a shared machine cancels.
// 2. The checkpoint itself: the fsyncs and the rename, timed alone on the same disk.
// 3. Redone work per preemption: K SIGKILLs of a forked child running the job (every 1k records), each at a
//    uniform random time in (load, load + the full run), seeded; after each, the results past the
//    checkpoint are the records a resume drops and computes again. The restart cost (model load and the
//    input hash) is timed too.
// The corpus is Debian's fortunes (one record a fortune) where /usr/share/games/fortunes exists, else the
// synthetic sentences of frugal_batch_job --generate. Output goes under DIR (default: build/job-bench, a
// real disk: on a tmpfs fsync costs nothing and the overhead would read low).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <frugal/job.hpp>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bert.hpp"
#include "corpus.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
double secs(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

struct config {
  std::size_t records = 2000, rounds = 3, kills = 8;
  std::string precision = "fp32", corpus, dir = "build/job-bench";
};

frugal::job::batch_function embedder(const bert::encoder& enc) {
  return [&enc](std::span<const frugal::job::record> batch) {
    std::vector<std::string> texts;
    for (const auto& r : batch) texts.push_back(r.request.at("text").get<std::string>());
    const auto emb = enc.encode_texts(texts);
    std::vector<nlohmann::json> out;
    for (const auto& e : emb) out.push_back({{"embedding", e}});
    return out;
  };
}

frugal::job::options job_options(const std::string& dir, const std::string& input,
                                 std::uint64_t every_records, std::chrono::nanoseconds every) {
  return {.name = "bench",
          .input = input,
          .output = dir + "/out.jsonl",
          .checkpoint_dir = dir + "/ckpt",
          .batch_size = 32,
          .checkpoint_every_records = every_records,
          .checkpoint_every = every,
          .handle_signals = false};
}

void fresh(const std::string& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
}

std::uint64_t lines_after(const std::string& path, std::uint64_t offset) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(std::streamoff(offset));
  std::uint64_t n = 0;
  for (std::string l; std::getline(f, l);) ++n;
  return n;
}

// The cost table: a corpus job priced on-demand, on spot restarting from zero at each preemption, and on
// spot with checkpoints, by cost::advise_spot, from a measured throughput, redo per preemption and
// checkpoint cost and an assumed preemption rate, prices and restart time.
int cost_table(int argc, char** argv) {
  namespace fc = frugal::cost;
  double rate = 0, redo_s = 0, checkpoint_ms = 0, restart_s = 120, per_hour = 0.5, every = 1000;
  double records = 1e6, on_demand = 0.40, discount = 0.70;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const double v = std::stod(argv[i + 1]);
    if (a == "--rate")
      rate = v;
    else if (a == "--redo-s")
      redo_s = v;
    else if (a == "--checkpoint-ms")
      checkpoint_ms = v;
    else if (a == "--restart-s")
      restart_s = v;
    else if (a == "--preemptions-per-hour")
      per_hour = v;
    else if (a == "--every")
      every = v;
    else if (a == "--job-records")
      records = v;
    else if (a == "--on-demand")
      on_demand = v;
    else if (a == "--discount")
      discount = v;
    else
      throw std::invalid_argument("--table: unknown flag " + a);
  }
  if (!(rate > 0)) throw std::invalid_argument("--table needs --rate (measured records/s)");
  auto ns = [](double s) { return std::chrono::nanoseconds(std::llround(s * 1e9)); };
  const auto od = fc::rate::per_hour(fc::money::from_nanos(std::llround(on_demand * 1e9)));
  const auto spot = fc::rate::per_hour(fc::money::from_nanos(std::llround(on_demand * (1 - discount) * 1e9)));
  const auto length = ns(records / rate);
  const fc::spot_job base{.length = length,
                          .on_demand = od,
                          .spot = spot,
                          .preemptions_per_hour = per_hour,
                          .checkpoint_interval = length,
                          .restart_overhead = ns(restart_s)};
  const fc::spot_advice none = fc::advise_spot(base);
  fc::spot_job with = base;
  with.checkpoint_interval = ns(every / rate);
  with.checkpoint_cost = ns(checkpoint_ms / 1e3);
  with.redo_per_preemption = ns(redo_s);
  const fc::spot_advice ck = fc::advise_spot(with);
  std::printf(
      "job: %.0f records at %.1f records/s = %.2f h; on-demand $%.2f/h, spot %.0f%% off ($%.3f/h); %.2f "
      "preemptions/h; restart %.1f s; checkpoints every %.0f records (%.2f ms each), %.2f s redone per "
      "preemption\n\n",
      records, rate, double(length.count()) / 3.6e12, on_demand, discount * 100, on_demand * (1 - discount),
      per_hour, restart_s, every, checkpoint_ms, redo_s);
  std::printf(
      "| billing | expected hours | expected preemptions | cost | vs on-demand | spot price ceiling |\n"
      "|---|---:|---:|---:|---:|---:|\n");
  std::printf("| on-demand | %.2f | 0 | %s | 1.00x | |\n", double(length.count()) / 3.6e12,
              none.on_demand_cost.to_string().c_str());
  for (const auto& [name, a] :
       {std::pair<const char*, const fc::spot_advice&>{"spot, no checkpoints (restart from zero)", none},
        {"spot, checkpoints", ck}})
    std::printf(
        "| %s | %.2f | %.2f | %s | %.2fx | %s/h |\n", name, double(a.expected_spot_time.count()) / 3.6e12,
        a.expected_preemptions, a.expected_spot_cost.to_string().c_str(),
        a.expected_spot_cost.to_double() / a.on_demand_cost.to_double(), a.price_ceiling.to_string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc > 1 && std::string(argv[1]) == "--table") return cost_table(argc, argv);
  config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--records")
      c.records = std::stoul(v);
    else if (a == "--rounds")
      c.rounds = std::stoul(v);
    else if (a == "--kills")
      c.kills = std::stoul(v);
    else if (a == "--precision")
      c.precision = v;
    else if (a == "--corpus")
      c.corpus = v;
    else if (a == "--dir")
      c.dir = v;
    else
      throw std::invalid_argument("unknown flag " + a);
  }
  if (argc % 2 == 0) throw std::invalid_argument("flags come in pairs: --flag value");
  const char* env = std::getenv("FRUGAL_MODEL_DIR");
  const std::string model = env && *env ? env : FRUGAL_MODEL_DIR;

  const std::string fortunes = c.corpus.empty() ? "/usr/share/games/fortunes" : c.corpus;
  std::vector<std::string> texts;
  if (std::filesystem::is_directory(fortunes)) texts = examples::read_fortunes(fortunes);
  const std::string corpus_name = texts.empty() ? "synthetic sentences" : "Debian fortunes";
  if (texts.empty()) texts = examples::synthetic_sentences(c.records);
  while (texts.size() < c.records) texts.insert(texts.end(), texts.begin(), texts.end());
  texts.resize(c.records);
  std::filesystem::create_directories(c.dir);
  const std::string input = c.dir + "/corpus.jsonl";
  {
    std::ofstream f(input, std::ios::trunc);
    for (std::size_t i = 0; i < texts.size(); ++i)
      f << nlohmann::json{{"id", i}, {"text", texts[i]}}.dump() << "\n";
  }

  const auto l0 = clock_type::now();
  const bert::encoder enc = bert::encoder::load(model, {.weights = bert::parse_precision(c.precision)});
  const double load_s = secs(clock_type::now() - l0);
  const auto h0 = clock_type::now();
  (void)frugal::job::identify_input(input);
  const double hash_s = secs(clock_type::now() - h0);
  std::printf(
      "bench_job: MiniLM %s, 1 thread, %zu records of %s, batch 32; model load %.3f s, input hash %.4f s\n",
      c.precision.c_str(), c.records, corpus_name.c_str(), load_s, hash_s);

  // 1. Throughput, interleaved.
  struct mode {
    const char* name;
    std::uint64_t every_records;
    std::chrono::nanoseconds every;
    std::vector<double> rate, ratio;
    std::uint64_t checkpoints = 0;
  };
  std::vector<mode> modes = {{"none (final only)", 0, std::chrono::nanoseconds(0), {}, {}},
                             {"every 1000 records", 1000, std::chrono::nanoseconds(0), {}, {}},
                             {"every 10 s", 0, std::chrono::seconds(10), {}, {}}};
  const std::string run_dir = c.dir + "/run";
  double full_s = 0;
  for (std::size_t r = 0; r < c.rounds; ++r) {
    double base = 0;
    for (auto& m : modes) {
      fresh(run_dir);
      frugal::job::runner job(job_options(run_dir, input, m.every_records, m.every), embedder(enc));
      const auto t0 = clock_type::now();
      job.run();
      const double s = secs(clock_type::now() - t0);
      const double rate = double(c.records) / s;
      if (&m == &modes[0]) base = rate, full_s = std::max(full_s, s);
      m.rate.push_back(rate);
      m.ratio.push_back(rate / base);
      m.checkpoints = job.stats().checkpoints;
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("\n%-20s %12s %12s %14s %12s\n", "checkpoints", "records/s", "checkpoints", "vs none",
              "overhead");
  for (const auto& m : modes) {
    const double ratio = median(m.ratio);
    std::printf("%-20s %12.1f %12llu %13.4fx %11.2f%%\n", m.name, median(m.rate),
                (unsigned long long)m.checkpoints, ratio, (1 / ratio - 1) * 100);
  }
  std::printf("(medians of %zu interleaved rounds; the ratio is each round's against its own \"none\" run)\n",
              c.rounds);

  // 2. One checkpoint alone: 1,000 records' output (sized from the last run's) appended, then the fsync of
  // the output and write_checkpoint.
  {
    const std::size_t per_record = std::filesystem::file_size(run_dir + "/out.jsonl") / c.records;
    fresh(run_dir);
    frugal::job::detail::file f(run_dir + "/o.jsonl", O_WRONLY | O_CREAT | O_APPEND);
    const std::string block(per_record * 1000, 'x');
    std::vector<double> t;
    for (std::uint64_t i = 0; i < 20; ++i) {
      f.write_all(block);
      const auto t0 = clock_type::now();
      f.sync();
      frugal::job::write_checkpoint(run_dir,
                                    frugal::job::checkpoint{.job_name = "bench", .records_done = 1000 * i});
      t.push_back(secs(clock_type::now() - t0));
    }
    std::printf(
        "\none checkpoint (fsync of 1000 results, %.1f MB, then temp file, fsync, rename, dir fsync): "
        "median %.2f ms, max %.2f ms\n",
        double(block.size()) / 1e6, median(t) * 1e3, *std::max_element(t.begin(), t.end()) * 1e3);
  }

  // 3. Redone work per preemption.
  if (c.kills) {
    fresh(run_dir);
    std::mt19937_64 rng(22);
    std::vector<double> redone;
    std::size_t kills = 0;
    while (kills < c.kills) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        try {
          frugal::job::runner job(job_options(run_dir, input, 1000, std::chrono::nanoseconds(0)),
                                  embedder(enc));
          job.run();
          std::_Exit(0);
        } catch (...) {
          std::_Exit(1);
        }
      }
      // The child does not load the model (it has the parent's): the load is added to each restart below.
      const double wait = std::uniform_real_distribution<double>(0, full_s)(rng);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (WIFEXITED(status)) {  // finished first: start the chain again
        fresh(run_dir);
        continue;
      }
      ++kills;
      std::uint64_t out_size = 0;
      if (std::filesystem::exists(run_dir + "/ckpt/checkpoint.json"))
        out_size = frugal::job::read_checkpoint(run_dir + "/ckpt")->output_size;
      redone.push_back(double(lines_after(run_dir + "/out.jsonl", out_size)));
    }
    double sum = 0;
    for (double r : redone) sum += r;
    const double rate = median(modes[0].rate);
    std::printf(
        "\n%zu SIGKILLs at uniform random times (seed 22), checkpoints every 1000 records: redone records "
        "per preemption mean %.0f, median %.0f, max %.0f; at %.1f records/s that is %.2f s of work, plus "
        "%.2f s restart (model load + input hash)\n",
        kills, sum / double(redone.size()), median(redone), *std::max_element(redone.begin(), redone.end()),
        rate, sum / double(redone.size()) / rate, load_s + hash_s);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_job: %s\n", e.what());
  return 1;
}
