// The semantic cache's lookup against an exact brute-force scan (Eigen, one matrix-vector product) at
// 100k random unit 384-d entries: time per lookup, recall@1 and bytes per entry. Then, where the
// MiniLM model is found, precision and hit rate over thresholds on the paraphrase fixture.
//
//   bench_semantic [--entries N] [--m M] [--clustered] [--out DIR]
//   writes DIR/speed_{random,clustered}_mM.md, DIR/precision.md and DIR/precision.csv

#include <malloc.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <frugal/semantic.hpp>

#include "bert.hpp"
#include "pairs.hpp"

namespace {

using clk = std::chrono::steady_clock;
using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr std::size_t dim = 384;

void random_unit(std::mt19937& rng, float* out) {
  std::normal_distribution<float> n;
  double sum = 0;
  for (std::size_t i = 0; i < dim; ++i) {
    out[i] = n(rng);
    sum += double(out[i]) * out[i];
  }
  for (std::size_t i = 0; i < dim; ++i) out[i] = float(out[i] / std::sqrt(sum));
}

// A unit vector at cosine c to the unit vector v.
std::vector<float> near(const float* v, float c, std::mt19937& rng) {
  std::vector<float> u(dim);
  random_unit(rng, u.data());
  double dot = 0;
  for (std::size_t i = 0; i < dim; ++i) dot += double(u[i]) * v[i];
  double sum = 0;
  for (std::size_t i = 0; i < dim; ++i) {
    u[i] = float(u[i] - dot * v[i]);
    sum += double(u[i]) * u[i];
  }
  const double s = std::sqrt(1.0 - double(c) * c) / std::sqrt(sum);
  for (std::size_t i = 0; i < dim; ++i) u[i] = float(c * v[i] + s * u[i]);
  return u;
}

double seconds(clk::duration d) { return std::chrono::duration<double>(d).count(); }

struct query_set {
  std::string name;
  std::vector<std::vector<float>> queries;
};

std::string speed(std::size_t n, std::size_t m, bool clustered, const std::string& out_dir) {
  std::mt19937 rng(42);
  row_matrix data(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(dim));
  if (clustered) {
    // 1000 random centres, each entry at cosine 0.7 to one: closer to real embeddings than uniform.
    std::vector<std::vector<float>> centres(1000, std::vector<float>(dim));
    for (auto& c : centres) random_unit(rng, c.data());
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = near(centres[rng() % centres.size()].data(), 0.7f, rng);
      std::copy(v.begin(), v.end(), data.row(Eigen::Index(i)).data());
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) random_unit(rng, data.row(Eigen::Index(i)).data());
  }

  const std::size_t heap_before = mallinfo2().uordblks + mallinfo2().hblkhd;
  frugal::semantic_cache<std::uint32_t> cache(
      {.dimension = dim, .threshold = 1e-6f, .max_entries = n, .hnsw_m = m});
  const auto t0 = clk::now();
  for (std::size_t i = 0; i < n; ++i)
    cache.put(std::span<const float>(data.row(Eigen::Index(i)).data(), dim), std::uint32_t(i));
  const double build_s = seconds(clk::now() - t0);
  const std::size_t heap_after = mallinfo2().uordblks + mallinfo2().hblkhd;
  const auto st = cache.stats();

  std::vector<query_set> sets(2);
  sets[0].name = "near (cosine 0.9 to a cached entry)";
  sets[1].name = "random (no entry near)";
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  for (int q = 0; q < 1000; ++q) {
    sets[0].queries.push_back(near(data.row(Eigen::Index(pick(rng))).data(), 0.9f, rng));
    std::vector<float> r(dim);
    random_unit(rng, r.data());
    sets[1].queries.push_back(std::move(r));
  }

  std::ostringstream md;
  md << "| queries | ef_search | HNSW lookup (semantic_cache::get) | brute force (Eigen gemv + argmax) | "
        "speed "
        "ratio | recall@1 |\n|---|---:|---:|---:|---:|---:|\n";
  for (const auto& s : sets) {
    // Exact answers first, timed over the first 200 queries (each scans n x 384 floats).
    std::vector<std::uint32_t> truth(s.queries.size());
    clk::duration brute{};
    for (std::size_t q = 0; q < s.queries.size(); ++q) {
      const Eigen::Map<const Eigen::VectorXf> v(s.queries[q].data(), Eigen::Index(dim));
      const auto a = clk::now();
      const Eigen::VectorXf scores = data * v;
      Eigen::Index best = 0;
      scores.maxCoeff(&best);
      if (q < 200) brute += clk::now() - a;
      truth[q] = std::uint32_t(best);
    }
    const double brute_us = seconds(brute) / 200 * 1e6;
    for (std::size_t ef : {16, 32, 64, 128, 256}) {
      cache.set_ef_search(ef);
      std::size_t correct = 0;
      const auto a = clk::now();
      for (std::size_t q = 0; q < s.queries.size(); ++q) {
        const auto h = cache.get(s.queries[q]);
        correct += h && *h->value == truth[q];
      }
      const double hnsw_us = seconds(clk::now() - a) / double(s.queries.size()) * 1e6;
      char line[512];
      std::snprintf(line, sizeof line, "| %s | %zu%s | %.1f µs | %.0f µs | **%.1fx** | %.3f |\n",
                    s.name.c_str(), ef, ef == 64 ? " (default)" : "", hnsw_us, brute_us, brute_us / hnsw_us,
                    double(correct) / double(s.queries.size()));
      md << line;
      std::cout << line << std::flush;
    }
  }
  char tail[1024];
  std::snprintf(
      tail, sizeof tail,
      "\n%zu %s entries of %zu floats, HNSW M=%zu, ef_construction=200; built in "
      "%.1f s on one thread.\n\nMemory per entry: %.0f bytes by the cache's estimate (index %.0f, cache "
      "metadata %.0f; a raw vector is %zu), %.0f bytes by malloc's count of the heap growth while "
      "building. The values (uint32) are not counted.\n",
      n, clustered ? "clustered" : "uniformly random", dim, m, build_s,
      double(st.index_bytes + st.metadata_bytes) / double(n), double(st.index_bytes) / double(n),
      double(st.metadata_bytes) / double(n), dim * sizeof(float),
      double(heap_after - heap_before) / double(n));
  md << tail;
  std::ofstream(out_dir + "/speed_" + (clustered ? "clustered" : "random") + "_m" + std::to_string(m) + ".md")
      << md.str();
  return md.str();
}

std::string precision(const std::string& model_dir, const std::string& fixture, const std::string& out_dir) {
  const auto pairs = frugal_test::load_pairs(fixture);
  std::vector<std::string> texts;
  std::map<std::string, std::size_t> index;
  for (const auto& p : pairs)
    for (const auto* t : {&p.a, &p.b})
      if (index.emplace(*t, texts.size()).second) texts.push_back(*t);
  const auto enc = bert::encoder::load(model_dir, {.threads = 2});
  const auto vs = enc.encode_texts(texts);
  std::vector<frugal_test::scored_pair> scored;
  for (const auto& p : pairs) {
    const auto& a = vs[index.at(p.a)];
    const auto& b = vs[index.at(p.b)];
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d += double(a[i]) * b[i];
    scored.push_back({float(d), p.same, p.half});
  }
  const float chosen = frugal_test::choose_threshold(scored, 0, 0.99);
  std::vector<float> thresholds;
  for (int i = 50; i <= 95; i += 5) thresholds.push_back(float(i) / 100);
  for (float t : {0.97f, chosen, frugal::semantic_default_threshold}) thresholds.push_back(t);
  std::sort(thresholds.begin(), thresholds.end());

  std::ostringstream md, csv;
  std::size_t paraphrases = 0;
  for (const auto& s : scored) paraphrases += s.same;
  md << "all-MiniLM-L6-v2 (examples/models/bert.hpp, fp32) on tests/semantic/fixtures/pairs.jsonl: "
     << paraphrases << " paraphrase pairs and " << scored.size() - paraphrases
     << " near-miss pairs. A pair is a hit when its cosine is at or above the threshold; precision is the "
        "share "
        "of hits that are paraphrases, hit rate the share of paraphrases that hit.\n\n"
     << "| threshold | precision (all) | hit rate (all) | wrong hits / hits | near misses hit | precision "
        "(held-out half) | hit rate (held-out) |\n|---:|---:|---:|---:|---:|---:|---:|\n";
  csv << "threshold,precision,hit_rate,hits,false_hits,heldout_precision,heldout_hit_rate\n";
  for (float t : thresholds) {
    const auto all = frugal_test::evaluate(scored, t, -1);
    const auto held = frugal_test::evaluate(scored, t, 1);
    char line[512];
    std::snprintf(line, sizeof line, "| %.3f%s | %.1f%% | %.1f%% | %zu / %zu | %.1f%% | %.1f%% | %.1f%% |\n",
                  t,
                  t == chosen ? " (chosen)" : (t == frugal::semantic_default_threshold ? " (default)" : ""),
                  100 * all.precision(), 100 * all.hit_rate(), all.false_hits, all.hits,
                  100 * all.false_hit_rate(), 100 * held.precision(), 100 * held.hit_rate());
    md << line;
    std::snprintf(line, sizeof line, "%.4f,%.4f,%.4f,%zu,%zu,%.4f,%.4f\n", t, all.precision(), all.hit_rate(),
                  all.hits, all.false_hits, held.precision(), held.hit_rate());
    csv << line;
  }
  md << "\nThe threshold chosen on the calibration half (the lowest with precision >= 99% there) is "
     << chosen << "; a held-out precision of 100% at it means no hit at all, not a good cache.\n";
  std::ofstream(out_dir + "/precision.md") << md.str();
  std::ofstream(out_dir + "/precision.csv") << csv.str();
  return md.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t n = 100'000, m = 16;
  bool clustered = false;
  std::string out = FRUGAL_BENCH_RESULTS_DIR;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--clustered") clustered = true;
    if (i + 1 >= argc) continue;
    if (k == "--entries") n = std::stoul(argv[i + 1]);
    if (k == "--m") m = std::stoul(argv[i + 1]);
    if (k == "--out") out = argv[i + 1];
  }
  std::filesystem::create_directories(out);
  std::cout << speed(n, m, clustered, out) << '\n';
  const std::string model = FRUGAL_MODEL_DIR;
  if (std::filesystem::exists(model + "/model.safetensors")) {
    std::cout << precision(model, std::string(FRUGAL_FIXTURE_DIR) + "/pairs.jsonl", out);
  } else {
    std::cout << "no model at " << model << ": the precision table is skipped\n";
  }
}
