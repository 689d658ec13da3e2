#pragma once

// The paraphrase fixture (fixtures/pairs.jsonl) and the precision arithmetic, shared by the precision
// test and benchmarks/semantic.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace frugal_test {

struct text_pair {
  std::string a, b, topic;
  bool same = false;  // a paraphrase (same answer), else a near miss (same topic, another answer)
  int half = 0;       // 0: calibration, 1: held out; both pairs of one anchor sentence share a half
};

inline std::vector<text_pair> load_pairs(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<text_pair> pairs;
  std::map<std::string, int> anchors;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    text_pair p{j.at("a").get<std::string>(), j.at("b").get<std::string>(), j.at("topic").get<std::string>(),
                j.at("same").get<bool>()};
    const auto it = anchors.emplace(p.a, int(anchors.size())).first;
    p.half = it->second % 2;
    pairs.push_back(std::move(p));
  }
  return pairs;
}

struct scored_pair {
  float similarity = 0;
  bool same = false;
  int half = 0;
};

struct operating_point {
  float threshold = 0;
  std::size_t hits = 0;        // pairs at or above the threshold
  std::size_t false_hits = 0;  // near misses among them: wrong answers
  std::size_t paraphrases = 0;
  std::size_t near_misses = 0;
  double precision() const { return hits ? double(hits - false_hits) / double(hits) : 1.0; }
  double hit_rate() const { return paraphrases ? double(hits - false_hits) / double(paraphrases) : 0.0; }
  double false_hit_rate() const { return near_misses ? double(false_hits) / double(near_misses) : 0.0; }
};

// The pairs of one half (or of both, half < 0) at threshold t.
inline operating_point evaluate(const std::vector<scored_pair>& s, float t, int half) {
  operating_point p{t};
  for (const auto& x : s) {
    if (half >= 0 && x.half != half) continue;
    (x.same ? p.paraphrases : p.near_misses)++;
    if (x.similarity >= t) {
      ++p.hits;
      p.false_hits += !x.same;
    }
  }
  return p;
}

// The lowest threshold, among the half's similarities, at which the half's precision reaches target.
inline float choose_threshold(const std::vector<scored_pair>& s, int half, double target) {
  std::vector<float> candidates;
  for (const auto& x : s)
    if (x.half == half) candidates.push_back(x.similarity);
  std::sort(candidates.begin(), candidates.end());
  for (float t : candidates) {
    const auto p = evaluate(s, t, half);
    if (p.hits > 0 && p.precision() >= target) return t;
  }
  return 1.0f;
}

}  // namespace frugal_test
