// frugal's main demo: a user-owned inference loop built from frugal's parts, served the same traffic
// under a ladder of configurations, with one table of what each step costs and saves.
//
//   frugal_demo [--config path.json] [--model DIR] [--quiet] [--key.path=value ...]
//
// Exit codes: 0 done, 1 a run that failed (a model that does not load, an export that cannot be written),
// 2 a bad command line or config.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../common/flags.hpp"
#include "../common/write.hpp"
#include "demo.hpp"

#ifndef FRUGAL_DEMO_DEFAULT_CONFIG
#  define FRUGAL_DEMO_DEFAULT_CONFIG "config.json"
#endif

namespace {

// The run's exports, in the order they are written.
std::vector<std::string> export_paths(const demo::config& cfg) {
  std::vector<std::string> paths;
  for (std::size_t i = 1; i <= cfg.ladder.size(); ++i) {
    paths.push_back(cfg.out_dir + "/step" + std::to_string(i) + ".prom");
    paths.push_back(cfg.out_dir + "/step" + std::to_string(i) + ".json");
  }
  paths.push_back(cfg.out_dir + "/report.md");
  return paths;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path = FRUGAL_DEMO_DEFAULT_CONFIG;
  std::vector<std::string> overrides;
  bool quiet = false;
  demo::config cfg;
  try {
    examples::flags f(argc, argv);
    while (f.next()) {
      if (f.is("--config"))
        config_path = f.value();
      else if (f.is("--quiet") || f.is("-q"))
        quiet = true;
      else if (f.is("--model"))
        overrides.push_back("--model.path=" + f.value());
      else if (f.is("--help") || f.is("-h")) {
        std::printf(
            "usage: %s [--config file.json] [--model DIR] [--quiet] [--key.path=value ...]\n"
            "  --model DIR: a BERT-family model directory (config.json, model.safetensors, vocab.txt)\n"
            "  --config %s/config_mlp.json: the synthetic MLP instead of MiniLM\n"
            "  e.g. --traffic.pool=1024 --batcher.max_batch=16 --ladder[2].max_batch=8 "
            "--gpu.hourly_usd=2.50\n",
            argv[0], std::filesystem::path(FRUGAL_DEMO_DEFAULT_CONFIG).parent_path().c_str());
        return 0;
      } else
        overrides.push_back(f.take());
    }
    auto doc = examples::config_document::from_file(config_path);
    for (const auto& o : overrides) doc.apply_override(o);
    cfg = demo::parse_config(doc);
  } catch (const std::exception& e) {  // usage_error, config_error
    std::fprintf(stderr, "frugal_demo: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    // The exports are checked before the run: a run of minutes whose results cannot be written is lost.
    const std::vector<std::string> exports = export_paths(cfg);
    examples::prepare_output_dir(cfg.out_dir);
    for (const auto& p : exports) examples::check_writable(p);
    quiet = quiet || cfg.quiet;

    const bool tty = isatty(fileno(stderr));
    demo::progress_fn progress;
    if (!quiet)
      progress = [tty](const std::string& what, std::uint64_t done, std::uint64_t total, double rate) {
        char of[32] = "";
        if (total) std::snprintf(of, sizeof of, "/%llu", static_cast<unsigned long long>(total));
        std::fprintf(stderr,
                     tty ? "\r\033[K%s: %llu%s requests, %.0f req/s" : "%s: %llu%s requests, %.0f req/s\n",
                     what.c_str(), static_cast<unsigned long long>(done), of, rate);
        if (what.find(": done") != std::string::npos && tty) std::fputc('\n', stderr);
      };

    const char* simd = "portable";
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512vnni"))
      simd = "AVX-512 VNNI";
    else if (__builtin_cpu_supports("avx2"))
      simd = "AVX2";
#endif
    std::string why;
    const bool gpu = cfg.device != "cpu" && demo::gpu_available(why);
    std::printf("frugal %s demo: %s\n", frugal::version_string(),
                gpu ? "fp32 and int8 steps run on the GPU through frugal::cuda; weight-only steps on the CPU"
                    : ("the model runs on the CPU (" + std::string(simd) +
                       " int8 kernels, Eigen fp32); GPU not used: " + why)
                          .c_str());
    const auto results = demo::run(cfg, progress);
    const std::string report = demo::format_report(cfg, results);
    std::printf("\n%s", report.c_str());

    for (std::size_t i = 0; i < results.size(); ++i) {
      examples::write_file(exports[2 * i], results[i].prometheus);
      examples::write_file(exports[2 * i + 1], results[i].json_export);
    }
    examples::write_file(exports.back(), report);
    std::printf("\nledger of the last step:\n%s\nexports: %s/step<N>.prom, step<N>.json, report.md\n",
                results.back().table.c_str(), cfg.out_dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal_demo: %s\n", e.what());
    return 1;
  }
}
