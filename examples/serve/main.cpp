// frugal's main demo: a user-owned inference loop built from frugal's parts, served the same traffic
// under a ladder of configurations, with one table of what each step costs and saves.
//
//   frugal_serve [--config path.json] [--model DIR] [--quiet] [--key.path=value ...]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "serve.hpp"

#ifndef FRUGAL_SERVE_DEFAULT_CONFIG
#  define FRUGAL_SERVE_DEFAULT_CONFIG "config.json"
#endif

int main(int argc, char** argv) try {
  std::string config_path = FRUGAL_SERVE_DEFAULT_CONFIG;
  std::vector<std::string> overrides;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      config_path = argv[++i];
    else if (a.rfind("--config=", 0) == 0)
      config_path = a.substr(9);
    else if (a == "--quiet" || a == "-q")
      quiet = true;
    else if (a == "--model" && i + 1 < argc)
      overrides.push_back(std::string("--model.path=") + argv[++i]);
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: %s [--config file.json] [--model DIR] [--quiet] [--key.path=value ...]\n"
          "  --model DIR: a BERT-family model directory (config.json, model.safetensors, vocab.txt)\n"
          "  --config %s/config_mlp.json: the synthetic MLP instead of MiniLM\n"
          "  e.g. --traffic.pool=1024 --batcher.max_batch=16 --gpu.hourly_usd=2.50\n",
          argv[0], std::filesystem::path(FRUGAL_SERVE_DEFAULT_CONFIG).parent_path().c_str());
      return 0;
    } else
      overrides.push_back(a);
  }
  std::ifstream f(config_path);
  if (!f) throw std::invalid_argument("cannot open config file \"" + config_path + "\"");
  serve::json j = serve::json::parse(f);
  for (const auto& o : overrides) serve::apply_override(j, o);
  serve::config cfg = serve::parse_config(j);
  quiet = quiet || cfg.quiet;

  const bool tty = isatty(fileno(stderr));
  serve::progress_fn progress;
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
  const bool gpu = cfg.device != "cpu" && serve::gpu_available(why);
  std::printf("frugal %s serve demo: %s\n", frugal::version_string(),
              gpu ? "fp32 and int8 steps run on the GPU through frugal::cuda; weight-only steps on the CPU"
                  : ("the model runs on the CPU (" + std::string(simd) +
                     " int8 kernels, Eigen fp32); GPU not used: " + why)
                        .c_str());
  auto results = serve::run(cfg, progress);
  const std::string report = serve::format_report(cfg, results);
  std::printf("\n%s", report.c_str());

  std::filesystem::create_directories(cfg.out_dir);
  for (std::size_t i = 0; i < results.size(); ++i) {
    std::ofstream(cfg.out_dir + "/step" + std::to_string(i + 1) + ".prom") << results[i].prometheus;
    std::ofstream(cfg.out_dir + "/step" + std::to_string(i + 1) + ".json") << results[i].json_export;
  }
  std::ofstream(cfg.out_dir + "/report.md") << report;
  std::printf("\nledger of the last step:\n%s\nexports: %s/step<N>.prom, step<N>.json, report.md\n",
              results.back().table.c_str(), cfg.out_dir.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "frugal_serve: %s\n", e.what());
  return 1;
}
