// frugal's main demo: a user-owned inference loop built from frugal's parts, served the same traffic
// under a ladder of configurations, with one table of what each step costs and saves. The default config
// serves a chat model (SmolLM2 from its GGUF file, chat_demo.hpp); config_minilm.json serves the sentence
// encoder and config_mlp.json a synthetic MLP (demo.hpp).
//
//   frugal_demo [--config path.json] [--model PATH] [--quiet] [--check-config] [--key.path=value ...]
//
// --check-config reads and checks the config (every value, the files it names, out_dir) and exits without
// a run. Exit codes: 0 done, 1 a run that failed (a model that does not load, an export that cannot be
// written, out_dir that cannot be created: each before the run where it can be), 2 a bad command line or
// config.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <frugal/quant/cpu.hpp>

#include "../common/flags.hpp"
#include "../common/write.hpp"
#include "chat_demo.hpp"
#include "demo.hpp"

#ifndef FRUGAL_DEMO_DEFAULT_CONFIG
#  define FRUGAL_DEMO_DEFAULT_CONFIG "config.json"
#endif
#ifndef FRUGAL_DEMO_PLOT
#  define FRUGAL_DEMO_PLOT "plot.py"
#endif

namespace {

// The run's exports, in the order they are written: per step its ledger's Prometheus text and JSON, then
// `last` (each a file name in out_dir).
std::vector<std::string> export_paths(const std::string& out_dir, std::size_t steps,
                                      std::initializer_list<const char*> last) {
  std::vector<std::string> paths;
  for (std::size_t i = 1; i <= steps; ++i) {
    paths.push_back(out_dir + "/step" + std::to_string(i) + ".prom");
    paths.push_back(out_dir + "/step" + std::to_string(i) + ".json");
  }
  for (const char* f : last) paths.push_back(out_dir + "/" + f);
  return paths;
}

// Creates out_dir and checks that every export can be written there, before any work: a run of minutes
// whose results cannot be written is lost. A failure names the config key (out_dir, from `origin`) and the
// path.
void prepare_exports(const std::string& out_dir, const std::vector<std::string>& exports,
                     const std::string& origin) {
  try {
    examples::prepare_output_dir(out_dir);
    for (const auto& p : exports) examples::check_writable(p);
  } catch (const examples::write_error& e) {
    throw examples::write_error(origin + ": out_dir: " + e.what());
  }
}

// The widest path the library's kernels take here, as they choose it (FRUGAL_MAX_CPU_ISA caps it).
const char* simd_name() {
  using frugal::quant::simd_path;
  for (const simd_path p :
       {simd_path::amx, simd_path::avx512_vnni, simd_path::avx512, simd_path::avx_vnni, simd_path::avx2})
    if (frugal::quant::is_supported(p)) return frugal::quant::to_string(p);
  return "portable";
}

// The language-model ladder: run, print, export, plot.
std::vector<std::string> chat_exports(const demo::chat_config& cfg, bool plot) {
  std::vector<std::string> exports =
      export_paths(cfg.out_dir, cfg.ladder.size(), {"ladder.json", "report.md"});
  if (plot) exports.push_back(cfg.out_dir + "/ladder.png");
  return exports;
}

int run_chat(const demo::chat_config& cfg, bool quiet, bool plot) {
  const std::vector<std::string> exports =
      export_paths(cfg.out_dir, cfg.ladder.size(), {"ladder.json", "report.md"});
  const std::string png = cfg.out_dir + "/ladder.png";
  quiet = quiet || cfg.quiet;
  const bool tty = isatty(fileno(stderr));
  demo::chat_progress_fn progress;
  if (!quiet)
    progress = [tty](const std::string& step, std::size_t done, std::size_t total, std::uint64_t tokens,
                     double secs) {
      if (!tty && done != total && done % 10 != 0) return;
      std::fprintf(stderr,
                   tty ? "\r\033[K%s: %zu/%zu requests, %llu tokens, %.0f tok/s"
                       : "%s: %zu/%zu requests, %llu tokens, %.0f tok/s\n",
                   step.c_str(), done, total, static_cast<unsigned long long>(tokens),
                   secs > 0 ? static_cast<double>(tokens) / secs : 0.0);
      if (tty && done == total) std::fputc('\n', stderr);
    };
  std::printf(
      "frugal %s demo: %s, %zu threads, the model on the CPU (%s kernels); every step serves the same "
      "chat traffic from a freshly loaded model\n",
      frugal::version_string(), cfg.model_name.c_str(), cfg.threads, simd_name());
  demo::chat_traffic traffic;
  const auto results = demo::run_chat(cfg, progress, &traffic);
  const nlohmann::json ladder = demo::chat_results_json(cfg, traffic, results);
  const std::string report = demo::format_chat_report(cfg, ladder);
  std::printf("\n%s", report.c_str());
  for (std::size_t i = 0; i < results.size(); ++i) {
    examples::write_file(exports[2 * i], results[i].prometheus);
    examples::write_file(exports[2 * i + 1], results[i].json_export);
  }
  examples::write_file(exports[exports.size() - 2], ladder.dump(2) + "\n");
  examples::write_file(exports.back(), report);
  std::printf(
      "\nledger of the last step:\n%s\nexports: %s/step<N>.prom, step<N>.json, ladder.json, report.md\n",
      results.back().table.c_str(), cfg.out_dir.c_str());
  if (plot) {
    const char* py = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    const std::string cmd =
        std::string(py) + " '" + FRUGAL_DEMO_PLOT + "' '" + exports[exports.size() - 2] + "' '" + png + "'";
    if (std::system(cmd.c_str()) != 0)
      throw std::runtime_error("the plot failed (" + cmd +
                               "); the other exports are written. matplotlib: apt-get install -y "
                               "python3-matplotlib, or --no-plot");
    std::printf("plot: %s\n", png.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path = FRUGAL_DEMO_DEFAULT_CONFIG;
  std::vector<std::string> overrides;
  bool quiet = false, plot = true, check_only = false;
  demo::config cfg;
  std::optional<demo::chat_config> chat;
  std::string out_dir_origin;
  try {
    examples::flags f(argc, argv);
    while (f.next()) {
      if (f.is("--config"))
        config_path = f.value();
      else if (f.is("--quiet") || f.is("-q"))
        quiet = true;
      else if (f.is("--no-plot"))
        plot = false;
      else if (f.is("--check-config"))
        check_only = true;
      else if (f.is("--model"))
        overrides.push_back("--model.path=" + f.value());
      else if (f.is("--help") || f.is("-h")) {
        std::printf(
            "usage: %s [--config file.json] [--model PATH] [--quiet] [--no-plot] [--check-config]\n"
            "          [--key.path=value ...]\n"
            "  the default config serves SmolLM2 (--model: its GGUF file; default $FRUGAL_GGUF_MODEL)\n"
            "  --config %s/config_minilm.json: the sentence-encoder ladder (--model: a BERT directory)\n"
            "  --config %s/config_mlp.json: the synthetic MLP\n"
            "  --no-plot: no ladder.png (the language-model ladder draws it with python3-matplotlib)\n"
            "  --check-config: check the config (its values, the files it names, out_dir) and exit\n"
            "  e.g. --traffic.requests=20 --scheduler.max_running=8 --ladder[1].precision=int8 "
            "--gpu.hourly_usd=2.50\n",
            argv[0], std::filesystem::path(FRUGAL_DEMO_DEFAULT_CONFIG).parent_path().c_str(),
            std::filesystem::path(FRUGAL_DEMO_DEFAULT_CONFIG).parent_path().c_str());
        return 0;
      } else
        overrides.push_back(f.take());
    }
    auto doc = examples::config_document::from_file(config_path);
    for (const auto& o : overrides) doc.apply_override(o);
    if (demo::config_model_kind(doc) == "smollm2") {
      chat = demo::parse_chat_config(doc);
      demo::check_paths(*chat, doc);
    } else {
      cfg = demo::parse_config(doc);
      demo::check_paths(cfg, doc);
    }
    out_dir_origin = doc.origin("out_dir");
  } catch (const std::exception& e) {  // usage_error, config_error
    std::fprintf(stderr, "frugal_demo: %s (see --help)\n", e.what());
    return 2;
  }
  try {  // out_dir and the exports, before any work
    if (chat)
      prepare_exports(chat->out_dir, chat_exports(*chat, plot), out_dir_origin);
    else
      prepare_exports(cfg.out_dir, export_paths(cfg.out_dir, cfg.ladder.size(), {"report.md"}),
                      out_dir_origin);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal_demo: %s\n", e.what());
    return 1;
  }
  if (check_only) {
    std::printf("frugal_demo: config %s is valid; out_dir %s is writable\n", config_path.c_str(),
                (chat ? chat->out_dir : cfg.out_dir).c_str());
    return 0;
  }
  if (chat) try {
      return run_chat(*chat, quiet, plot);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "frugal_demo: %s\n", e.what());
      return 1;
    }
  try {
    const std::vector<std::string> exports = export_paths(cfg.out_dir, cfg.ladder.size(), {"report.md"});
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

    const char* simd = simd_name();
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
