#pragma once

// The examples' text corpora: Debian's fortunes (the `fortunes` package), read by one rule, and seeded
// synthetic sentences. Shared by the demo, the batch job and benchmarks/job.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "lines.hpp"

namespace examples {

/// @brief Every fortune of every file without an extension in @p dir (the strfile sources: fortunes
/// separated by "%" lines, each fortune's lines joined by spaces), in file-name order. Throws
/// std::runtime_error naming @p dir when it cannot be read or holds no fortune.
inline std::vector<std::string> read_fortunes(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path());
  if (ec) throw std::runtime_error(dir + ": " + ec.message() + " (Debian's fortunes package)");
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (const auto& p : files) {
    std::string cur;
    for (const std::string& l : read_lines(p.string(), "")) {
      if (l == "%") {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else {
        cur += (cur.empty() ? "" : " ") + l;
      }
    }
    if (!cur.empty()) out.push_back(cur);
  }
  if (out.empty()) throw std::runtime_error(dir + ": no fortunes (Debian's fortunes package)");
  return out;
}

/// @brief @p count distinct fortunes of @p dir of @p min_bytes to @p max_bytes (sentence-sized requests),
/// in a seeded shuffled order. Throws std::runtime_error naming @p dir when it has fewer.
inline std::vector<std::string> sample_fortunes(const std::string& dir, std::size_t count, std::uint64_t seed,
                                                std::size_t min_bytes = 20, std::size_t max_bytes = 100) {
  std::set<std::string> distinct;
  for (auto& f : read_fortunes(dir))
    if (f.size() >= min_bytes && f.size() <= max_bytes) distinct.insert(std::move(f));
  if (distinct.size() < count)
    throw std::runtime_error(dir + " has " + std::to_string(distinct.size()) + " distinct fortunes of " +
                             std::to_string(min_bytes) + " to " + std::to_string(max_bytes) +
                             " bytes, fewer than the " + std::to_string(count) + " asked for");
  std::vector<std::string> out(distinct.begin(), distinct.end());
  std::mt19937_64 rng(seed ^ 0x5bd1e995ull);
  std::shuffle(out.begin(), out.end(), rng);
  out.resize(count);
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

}  // namespace examples
