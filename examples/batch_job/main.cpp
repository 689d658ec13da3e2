// A resumable embedding job: reads JSON lines {"id": ..., "text": ...}, embeds each text and writes
// {"id": ..., "result": {"embedding": [...]}} in input order. Kill it at any point and run the same command
// again: it resumes from its checkpoint. Exit codes: 0 done, 75 preempted (run it again), 74 I/O error
// (fix the cause, run it again), 78 a checkpoint of another job or input, 64 bad flags.
//
//   frugal_batch_job --input corpus.jsonl --output out.jsonl --checkpoint-dir ckpt [--every 1000] [--batch
//   32] frugal_batch_job --generate 10000 corpus.jsonl
//
// Test hooks: FRUGAL_JOB_FAIL_WRITE_AFTER=N fails the write after N with ENOSPC; FRUGAL_JOB_SLOW_MS=N
// sleeps N ms in every batch; FRUGAL_JOB_CHECKPOINT_PAUSE_MS=N sleeps between a checkpoint's temporary file
// and its rename.

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <frugal/job.hpp>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

// The stand-in model: hashed character trigrams into 256 features, then a fixed random-projection MLP
// (256 -> 64, ReLU, -> 32), L2-normalised. Seeded, so every run gives the same numbers. The MiniLM encoder
// replaces embed_batch when it lands.
class stand_in_model {
 public:
  static constexpr int in = 256, hidden = 64, out = 32;
  stand_in_model() {
    std::mt19937 rng(22);
    auto weight = [&] { return float(double(rng()) / 4294967296.0 * 2 - 1) * 0.125f; };
    for (auto& w : w1_) w = weight();
    for (auto& w : w2_) w = weight();
  }
  std::vector<float> embed(std::string_view text) const {
    std::array<float, in> x{};
    for (std::size_t i = 0; i + 3 <= text.size() || (i == 0 && !text.empty()); ++i) {
      std::uint32_t h = 2166136261u;
      for (std::size_t k = i; k < std::min(text.size(), i + 3); ++k)
        h = (h ^ std::uint8_t(text[k])) * 16777619u;
      x[h % in] += 1;
    }
    std::array<float, hidden> hid{};
    for (int j = 0; j < hidden; ++j) {
      float s = 0;
      for (int i = 0; i < in; ++i) s += w1_[std::size_t(j * in + i)] * x[std::size_t(i)];
      hid[std::size_t(j)] = std::max(0.0f, s);
    }
    std::vector<float> y(out);
    double norm = 0;
    for (int j = 0; j < out; ++j) {
      float s = 0;
      for (int i = 0; i < hidden; ++i) s += w2_[std::size_t(j * hidden + i)] * hid[std::size_t(i)];
      y[std::size_t(j)] = s;
      norm += double(s) * s;
    }
    if (norm > 0)
      for (float& v : y) v = float(v / std::sqrt(norm));
    return y;
  }

 private:
  std::array<float, in * hidden> w1_{};
  std::array<float, hidden * out> w2_{};
};

// The one call into the model.
std::vector<nlohmann::json> embed_batch(const stand_in_model& model,
                                        std::span<const frugal::job::record> batch) {
  std::vector<nlohmann::json> results;
  results.reserve(batch.size());
  for (const auto& r : batch) {
    const auto it = r.request.find("text");
    if (it == r.request.end() || !it->is_string()) {
      results.push_back({{"error", "no \"text\" string"}});
      continue;
    }
    results.push_back({{"embedding", model.embed(it->get_ref<const std::string&>())}});
  }
  return results;
}

int generate(long n, const char* path) {
  std::ofstream f(path);
  std::mt19937 rng(7);
  const char* words[] = {"spot",  "instance", "checkpoint", "resume", "batch",
                         "model", "cheap",    "gpu",        "token",  "cache"};
  for (long i = 0; i < n; ++i) {
    std::string text;
    const int len = 3 + int(rng() % 12);
    for (int w = 0; w < len; ++w) text += std::string(w ? " " : "") + words[rng() % 10];
    f << nlohmann::json{{"id", "r" + std::to_string(i)}, {"text", text}}.dump() << "\n";
  }
  return f.good() ? 0 : 74;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: frugal_batch_job --input IN --output OUT --checkpoint-dir DIR [--every N] [--every-ms N]\n"
      "                        [--batch N] [--name NAME] [--errors PATH] [--deadline-ms N] [--stop-on-bad]\n"
      "       frugal_batch_job --generate N PATH\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::job::options o{.name = "batch_job", .checkpoint_every = std::chrono::seconds(30)};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = a == "--stop-on-bad" ? "" : value();
    if (!v) return usage();
    if (a == "--generate") {
      const char* path = value();
      return path ? generate(std::atol(v), path) : usage();
    } else if (a == "--input") {
      o.input = v;
    } else if (a == "--output") {
      o.output = v;
    } else if (a == "--checkpoint-dir") {
      o.checkpoint_dir = v;
    } else if (a == "--errors") {
      o.errors = v;
    } else if (a == "--name") {
      o.name = v;
    } else if (a == "--every") {
      o.checkpoint_every_records = std::strtoull(v, nullptr, 10);
    } else if (a == "--every-ms") {
      o.checkpoint_every = std::chrono::milliseconds(std::atol(v));
    } else if (a == "--batch") {
      o.batch_size = std::strtoull(v, nullptr, 10);
    } else if (a == "--deadline-ms") {
      o.preemption_deadline = std::chrono::milliseconds(std::atol(v));
    } else if (a == "--stop-on-bad") {
      o.stop_on_bad_record = true;
    } else {
      return usage();
    }
  }
  if (const char* n = std::getenv("FRUGAL_JOB_FAIL_WRITE_AFTER"))
    o.testing.fail_write_after = std::strtoull(n, nullptr, 10);
  if (const char* n = std::getenv("FRUGAL_JOB_CHECKPOINT_PAUSE_MS"))
    o.testing.pause_before_rename = std::chrono::milliseconds(std::atol(n));
  const char* slow_env = std::getenv("FRUGAL_JOB_SLOW_MS");
  const auto slow = std::chrono::milliseconds(slow_env ? std::atol(slow_env) : 0);

  const stand_in_model model;
  try {
    frugal::job::runner job(o, [&](std::span<const frugal::job::record> batch) {
      if (slow.count()) std::this_thread::sleep_for(slow);
      return embed_batch(model, batch);
    });
    const frugal::job::outcome result = job.run();
    const frugal::job::stats s = job.stats();
    std::fprintf(
        stderr,
        "%s: %s; %llu records (%llu this run), %llu bad, %llu checkpoints%s, %llu redone after resume\n",
        o.name.c_str(), result == frugal::job::outcome::completed ? "completed" : "preempted, resumable",
        (unsigned long long)s.records_done, (unsigned long long)s.records_this_run,
        (unsigned long long)s.bad_records, (unsigned long long)s.checkpoints, s.resumed ? ", resumed" : "",
        (unsigned long long)s.redone_records);
    return frugal::job::exit_code(result);
  } catch (const frugal::job::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return frugal::job::exit_code(e.code());
  }
}
