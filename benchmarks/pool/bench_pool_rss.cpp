// Real loads of all-MiniLM-L6-v2 from its files through frugal::model_pool (examples/models/bert.hpp as the
// loader, one warm-up sentence as the pool's warm-up hook): load time, and the process's RSS before the
// load, at its peak during the load, after it, after the idle unload, and after malloc_trim(0), for a few
// load/unload cycles per precision, so that growth per cycle would show.
//
// The pool unloads by destroying the model (no unload hook here, so that the RSS right after the unload is
// what the pool alone gives back); malloc_trim(0) then returns what glibc's allocator kept. The peak is
// VmHWM, reset before each load through /proc/self/clear_refs where the kernel allows it.
//
//   bench_pool_rss [--dir MODEL_DIR] [--precision fp32,int8] [--cycles 3] [--calibration FILE] [--out FILE]
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bert.hpp"
#include "frugal/pool.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using pool_t = frugal::model_pool<bert::encoder>;

struct params {
  std::string dir = FRUGAL_MODEL_DIR;
  std::vector<std::string> precisions = {"fp32", "int8"};
  int cycles = 3;
  std::string calibration = FRUGAL_DEFAULT_CALIBRATION;
  std::string out;
};

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// A "Vm...:" or "Rss...:" line of /proc/self/status, in bytes; 0 when absent.
std::size_t status_bytes(const std::string& key) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  return 0;
}

bool reset_peak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("bench_pool_rss: cannot open " + path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

struct cycle {
  std::string precision;
  int n = 0;
  double load_ms = 0, loader_ms = 0, pool_load_ms = 0;
  std::size_t model_bytes = 0;
  std::size_t before = 0, peak = 0, loaded = 0, unloaded = 0, trimmed = 0;
  bool peak_valid = false;
};

std::vector<cycle> run(const params& p, const std::string& prec,
                       const std::vector<std::string>& calibration) {
  double loader_ms = 0;
  pool_t pool({.budget_bytes = std::size_t{4} << 30,
               .models = {{.name = "minilm-" + prec,
                           .args = {{"dir", p.dir}, {"precision", prec}},
                           .estimated_bytes = std::size_t{100} << 20,
                           .idle_unload_after = std::chrono::milliseconds(1),
                           .warm_up_input = "frugal loads this model on demand and unloads it when idle."}},
               .load =
                   [&](const frugal::model_spec<>& s) {
                     const auto t0 = clock_type::now();
                     bert::load_options o{.weights = bert::parse_precision(s.args.at("precision"))};
                     if (bert::needs_calibration(o.weights)) o.calibration = calibration;
                     auto m = std::make_unique<bert::encoder>(bert::encoder::load(s.args.at("dir"), o));
                     loader_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
                     const std::size_t bytes = m->linear_bytes() + m->other_bytes();
                     return frugal::loaded_model<bert::encoder>{std::move(m), bytes};
                   },
               .warm_up =
                   [](bert::encoder& m, const frugal::model_spec<>& s) {
                     const std::vector<std::string> one = {s.warm_up_input};
                     if (m.encode_texts(one).at(0).size() != m.dimension())
                       throw std::runtime_error("bench_pool_rss: warm-up gave a wrong dimension");
                   }});
  const std::string name = "minilm-" + prec;
  std::vector<cycle> out;
  for (int i = 1; i <= p.cycles; ++i) {
    cycle c{.precision = prec, .n = i};
    c.before = rss_bytes();
    c.peak_valid = reset_peak();
    const auto t0 = clock_type::now();
    pool.preload(name);
    c.load_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    c.loaded = rss_bytes();
    c.peak = status_bytes("VmHWM");
    c.loader_ms = loader_ms;
    const frugal::pool_stats st = pool.stats();
    c.model_bytes = st.models.at(0).bytes;
    c.pool_load_ms = std::chrono::duration<double, std::milli>(st.models.at(0).last_load_time).count();
    // Idle for more than idle_unload_after on the steady clock, then the pool's own idle unload.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (pool.collect_idle() != 1 || pool.state(name) != frugal::model_state::unloaded)
      throw std::runtime_error("bench_pool_rss: the idle model was not unloaded");
    c.unloaded = rss_bytes();
    malloc_trim(0);
    c.trimmed = rss_bytes();
    out.push_back(c);
  }
  return out;
}

std::string fixed(double v, int decimals) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

std::string report(const params& p, const std::vector<cycle>& cs) {
  std::ostringstream o;
  o << "### bench_pool_rss: all-MiniLM-L6-v2 through frugal::model_pool, " << p.cycles
    << " load/unload cycles per precision\n\n";
  o << "Model directory: `" << p.dir << "`. RSS from /proc/self/statm; peak: VmHWM"
    << (cs.empty() || cs[0].peak_valid ? ", reset before each load"
                                       : " (not resettable here: the process's peak)")
    << ". Load: preload() wall time (loader + warm-up); loader: encoder::load alone.\n\n";
  o << "| precision | cycle | load ms | loader ms | model bytes (MiB) | RSS before | peak in load | after "
       "load | "
       "after unload | after malloc_trim | unload gave back | trim gave back |\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const cycle& c : cs) {
    const auto d = [](std::size_t a, std::size_t b) { return mib(a) - mib(b); };
    o << "| " << c.precision << " | " << c.n << " | " << fixed(c.load_ms, 0) << " | " << fixed(c.loader_ms, 0)
      << " | " << fixed(mib(c.model_bytes), 1) << " | " << fixed(mib(c.before), 1) << " | "
      << fixed(mib(c.peak), 1) << " | " << fixed(mib(c.loaded), 1) << " | " << fixed(mib(c.unloaded), 1)
      << " | " << fixed(mib(c.trimmed), 1) << " | " << fixed(d(c.loaded, c.unloaded), 1) << " | "
      << fixed(d(c.unloaded, c.trimmed), 1) << " |\n";
  }
  o << "\nAll figures in MiB except the times.";
  for (const std::string& prec : p.precisions) {
    const cycle* first = nullptr;
    const cycle* last = nullptr;
    for (const cycle& c : cs)
      if (c.precision == prec) {
        if (!first) first = &c;
        last = &c;
      }
    if (!first) continue;
    o << " " << prec << ": RSS after malloc_trim, last cycle minus first: "
      << fixed(mib(last->trimmed) - mib(first->trimmed), 1)
      << " MiB; left after unload without trim (mean over "
      << "cycles): ";
    double left = 0;
    int n = 0;
    for (const cycle& c : cs)
      if (c.precision == prec) left += mib(c.unloaded) - mib(c.before), ++n;
    o << fixed(left / n, 1) << " MiB above the RSS before the load.";
  }
  o << "\n";
  return o.str();
}

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "bench_pool_rss: " << why
            << "\nusage: bench_pool_rss [--dir MODEL_DIR] [--precision fp32,int8] [--cycles N] "
               "[--calibration FILE] "
               "[--out FILE]\n";
  std::exit(2);
}

params parse(int argc, char** argv) {
  params p;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--dir") {
      p.dir = v;
    } else if (a == "--precision") {
      p.precisions.clear();
      std::stringstream s(v);
      for (std::string x; std::getline(s, x, ',');) {
        try {
          bert::parse_precision(x);
        } catch (const std::invalid_argument& e) {
          usage(e.what());
        }
        p.precisions.push_back(x);
      }
    } else if (a == "--cycles") {
      p.cycles = std::atoi(v.c_str());
      if (p.cycles < 1 || p.cycles > 100) usage("--cycles must be in 1 .. 100");
    } else if (a == "--calibration") {
      p.calibration = v;
    } else if (a == "--out") {
      p.out = v;
    } else {
      usage("unknown flag " + a);
    }
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const params p = parse(argc, argv);
  try {
    const std::vector<std::string> calibration = read_lines(p.calibration);
    std::vector<cycle> cs;
    for (const std::string& prec : p.precisions)
      for (const cycle& c : run(p, prec, calibration)) cs.push_back(c);
    const std::string text = report(p, cs);
    std::cout << text;
    if (!p.out.empty()) {
      std::ofstream f(p.out);
      f << text;
      if (!f) throw std::runtime_error("cannot write " + p.out);
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_pool_rss: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
