#pragma once

// Reading and checking Prometheus text in tests: one series' value, how often a line occurs, and
// `promtool check metrics` (Debian's prometheus package) on a text. FRUGAL_PROMTOOL is the path CMake
// found (frugal_test_promtool in tests/CMakeLists.txt), or a path that does not exist.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "requires.hpp"

namespace frugal_test {

// The value of the series `series` (name and labels as written), or "(absent)".
inline std::string prom_value(const std::string& text, const std::string& series) {
  const std::string all = "\n" + text;
  const auto at = all.find("\n" + series + " ");
  if (at == std::string::npos) return "(absent)";
  const auto start = at + series.size() + 2;
  return all.substr(start, all.find('\n', start) - start);
}

// How many lines of `text` are exactly `line`.
inline std::size_t prom_lines(const std::string& text, const std::string& line) {
  std::size_t n = 0;
  const std::string all = "\n" + text;
  for (auto at = all.find("\n" + line + "\n"); at != std::string::npos;
       at = all.find("\n" + line + "\n", at + 1))
    ++n;
  return n;
}

struct promtool_result {
  int status = -1;
  std::string output;  // empty when promtool found nothing to say
};

// `promtool check metrics` on `text`; nullopt when there is no promtool (the caller skips).
inline std::optional<promtool_result> promtool_check(const std::string& text) {
#ifdef FRUGAL_PROMTOOL
  const std::string promtool = FRUGAL_PROMTOOL;
#else
  const std::string promtool;
#endif
  if (promtool.empty() || !std::filesystem::exists(promtool)) return std::nullopt;
  static std::atomic<int> seq{0};
  const auto path = std::filesystem::temp_directory_path() /
                    ("frugal_promtool." + std::to_string(::getpid()) + "." + std::to_string(seq++) + ".prom");
  std::ofstream(path) << text;
  promtool_result r;
  if (FILE* p = ::popen(("'" + promtool + "' check metrics < '" + path.string() + "' 2>&1").c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
    const int st = ::pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::filesystem::remove(path);
  return r;
}

}  // namespace frugal_test

// Checks `text` with promtool: status 0 and nothing said. Without promtool the step is skipped, or fails
// under FRUGAL_REQUIRE (requires.hpp's available()).
#define FRUGAL_CHECK_PROMTOOL(text)                                                                    \
  do {                                                                                                 \
    if (const auto promtool_ = frugal_test::promtool_check(text)) {                                    \
      INFO("promtool check metrics said: " << promtool_->output);                                      \
      CHECK(promtool_->status == 0);                                                                   \
      CHECK(promtool_->output.empty());                                                                \
    } else {                                                                                           \
      (void)frugal_test::available(                                                                    \
          {"promtool", "no promtool (Debian's prometheus package): the exposition check cannot run"}); \
    }                                                                                                  \
  } while (0)
