#pragma once

// The batch job's corpora, shared by examples/batch_job and benchmarks/job: Debian's fortunes, and
// synthetic sentences.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace batch_job {

/// @brief Every fortune of every plain file in @p dir (the strfile sources: fortunes separated by "%"
/// lines, each fortune's lines joined by spaces), in file-name order; empty when @p dir has none.
inline std::vector<std::string> read_fortunes(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const auto& p : files) {
    std::ifstream f(p, std::ios::binary);
    std::string cur;
    for (std::string l; std::getline(f, l);) {
      if (l == "%") {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else {
        cur += (cur.empty() ? "" : " ") + l;
      }
    }
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

/// @brief @p n seeded sentences of 3 to 14 words from a 10-word vocabulary.
inline std::vector<std::string> synthetic_sentences(std::uint64_t n) {
  std::mt19937 rng(7);
  const char* words[] = {"spot",  "instance", "checkpoint", "resume", "batch",
                         "model", "cheap",    "gpu",        "token",  "cache"};
  std::vector<std::string> texts;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::string text;
    const int len = 3 + int(rng() % 12);
    for (int w = 0; w < len; ++w) text += std::string(w ? " " : "") + words[rng() % 10];
    texts.push_back(std::move(text));
  }
  return texts;
}

}  // namespace batch_job
