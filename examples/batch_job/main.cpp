// A resumable embedding job: reads JSON lines {"id": ..., "text": ...}, embeds each text with
// all-MiniLM-L6-v2 (examples/models/bert.hpp) and writes {"id": ..., "result": {"embedding": [...]}} in
// input order. Kill it at any point and run the same command again: it resumes from its checkpoint.
// With --task generate it generates instead: {"id": ..., "prompt": ...} in, {"id": ..., "result": {"ids":
// [...], "text": ..., "finish_reason": ..., "prompt_tokens": N}} out, with a Llama-family GGUF model under
// frugal::scheduler, as many sequences at once as the KV budget allows (generate.hpp). One binary for both
// tasks: the same shards, checkpoints, merge, exit codes and Kubernetes manifest serve each.
// Exit codes: 0 done, 75 preempted (run it again), 74 I/O error (fix the cause, run it again), 78 a
// checkpoint of another job or input, 64 bad flags, 1 a model that does not load.
//
//   frugal_batch_job --input corpus.jsonl --output out.jsonl --checkpoint-dir ckpt
//                    [--model DIR|stand-in] [--precision fp32|fp16|bf16|int8|...] [--calibration FILE]
//                    [--threads N] [--every N] [--every-ms N] [--batch N] [--name NAME] [--errors PATH]
//                    [--deadline-ms N] [--stop-on-bad]
//                    [--ledger FILE --billing spot|on_demand --price MONEY]
//   frugal_batch_job --task generate --model FILE.gguf [--chat] [--max-tokens 64] [--temperature T]
//                    [--top-p P] [--seed S] [--kv-budget-mb 256] [--batch N (sequences at once)]
//                    [--precision native|fp32|int8|int4] [run or shard flags as for embedding]
//   frugal_batch_job --input corpus.jsonl --output-prefix DIR [--shard-index I] [--shard-count N] [...]
//   frugal_batch_job --merge --output-prefix DIR --shard-count N --output out.jsonl [--errors PATH]
//   frugal_batch_job --fortunes DIR PATH [--repeat K]   a corpus of Debian's fortunes (fortunes-min/-bin)
//   frugal_batch_job --generate N PATH                  a synthetic corpus of N short sentences
//   frugal_batch_job --prompts PATH OUT                 one prompt a line (plain text) to JSON lines
//
// With --output-prefix the job runs one shard of the input (frugal/job/shard.hpp): the index from
// --shard-index or JOB_COMPLETION_INDEX (a Kubernetes Indexed Job's pod), the count from --shard-count or
// FRUGAL_SHARD_COUNT; its output, errors and checkpoint go to DIR/shard-IIIII-of-NNNNN/. --merge checks
// that every shard completed and writes their outputs in input order; exit 66 names a missing or
// unfinished shard.
// --model defaults to $FRUGAL_MODEL_DIR, else the build's FRUGAL_MODEL_DIR. "stand-in" selects a seeded
// trigram-hash MLP that costs microseconds a record: the kill tests use it under the sanitizers, where the
// real model's load and encode would take minutes across the 30-odd runs a kill test makes.
// --ledger writes this run's frugal::cost ledger (JSON) at the end: the device's busy time and spend under
// the billing, and, when the run resumed an interrupted one, the preemption and the records redone.
//
// Test hooks: FRUGAL_JOB_FAIL_WRITE_AFTER=N fails the write after N with ENOSPC; FRUGAL_JOB_SLOW_MS=N
// sleeps N ms in every batch; FRUGAL_JOB_CHECKPOINT_PAUSE_MS=N sleeps between a checkpoint's temporary file
// and its rename.

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <frugal/cost.hpp>
#include <frugal/job.hpp>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../common/corpus.hpp"
#include "../common/flags.hpp"
#include "../common/write.hpp"
#ifdef FRUGAL_BATCH_JOB_LLAMA
#  include "generate.hpp"
#endif
#ifdef FRUGAL_BATCH_JOB_BERT
#  include "../common/load_model.hpp"
#endif

#ifndef FRUGAL_DEFAULT_MODEL_DIR
#  define FRUGAL_DEFAULT_MODEL_DIR ""
#endif
#ifndef FRUGAL_DEFAULT_CALIBRATION
#  define FRUGAL_DEFAULT_CALIBRATION ""
#endif

namespace {

using examples::usage_error;

// The model behind the job: texts in, unit-norm embeddings out.
class text_model {
 public:
  virtual ~text_model() = default;
  virtual std::vector<std::vector<float>> embed(std::span<const std::string> texts) const = 0;
  virtual std::string describe() const = 0;
};

// The stand-in: hashed character trigrams into 256 features, then a fixed random-projection MLP
// (256 -> 64, ReLU, -> 32), L2-normalised. Seeded, so every run gives the same numbers.
class stand_in_model final : public text_model {
 public:
  static constexpr int in = 256, hidden = 64, out = 32;
  stand_in_model() {
    std::mt19937 rng(22);
    auto weight = [&] { return float(double(rng()) / 4294967296.0 * 2 - 1) * 0.125f; };
    for (auto& w : w1_) w = weight();
    for (auto& w : w2_) w = weight();
  }
  std::vector<std::vector<float>> embed(std::span<const std::string> texts) const override {
    std::vector<std::vector<float>> r;
    for (const auto& t : texts) r.push_back(embed_one(t));
    return r;
  }
  std::string describe() const override { return "stand-in trigram MLP (32-d)"; }

 private:
  std::vector<float> embed_one(std::string_view text) const {
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
  std::array<float, in * hidden> w1_{};
  std::array<float, hidden * out> w2_{};
};

#ifdef FRUGAL_BATCH_JOB_BERT
class minilm_model final : public text_model {
 public:
  explicit minilm_model(bert::encoder e) : enc_(std::move(e)) {}
  std::vector<std::vector<float>> embed(std::span<const std::string> texts) const override {
    return enc_.encode_texts(texts);
  }
  std::string describe() const override {
    return std::string("MiniLM ") + bert::to_string(enc_.weights()) + " (" +
           std::to_string(enc_.dimension()) + "-d)";
  }

 private:
  bert::encoder enc_;
};
#endif

std::unique_ptr<text_model> load_model(const std::string& dir, const std::string& prec,
                                       const std::string& calibration, std::size_t threads) {
  if (dir == "stand-in") return std::make_unique<stand_in_model>();
#ifdef FRUGAL_BATCH_JOB_BERT
  bert::load_options opt;
  try {
    opt = examples::encoder_options(
        {.dir = dir, .precision = prec, .calibration = calibration, .threads = threads});
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  return std::make_unique<minilm_model>(bert::encoder::load(dir, opt));
#else
  (void)prec, (void)calibration, (void)threads;
  throw usage_error("this build has no MiniLM encoder (no safetensors/wordpiece); use --model stand-in");
#endif
}

// A float as the shortest decimal that reads back to it, held in a double so that JSON prints those
// digits and not the float's 17-digit double expansion.
double short_decimal(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// The one call into the model: records without a "text" string get an error result, the rest are embedded
// in one model call.
std::vector<nlohmann::json> embed_batch(const text_model& model, std::span<const frugal::job::record> batch) {
  std::vector<std::string> texts;
  std::vector<std::size_t> where(batch.size(), SIZE_MAX);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto it = batch[i].request.find("text");
    if (it == batch[i].request.end() || !it->is_string()) continue;
    where[i] = texts.size();
    texts.push_back(it->get<std::string>());
  }
  const std::vector<std::vector<float>> emb =
      texts.empty() ? decltype(model.embed(texts)){} : model.embed(texts);
  std::vector<nlohmann::json> results;
  results.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (where[i] == SIZE_MAX) {
      results.push_back({{"error", "no \"text\" string"}});
      continue;
    }
    nlohmann::json v = nlohmann::json::array();
    for (const float x : emb[where[i]]) v.push_back(short_decimal(x));
    results.push_back({{"embedding", std::move(v)}});
  }
  return results;
}

// The I/O error exit of the job (frugal::job::exit_code), for the example's own files.
constexpr int exit_io = 74;

int write_corpus(const std::string& path, const std::vector<std::string>& texts, const std::string& prefix) {
  try {
    examples::output_file f(path);
    for (std::size_t i = 0; i < texts.size(); ++i)
      f.write(nlohmann::json{{"id", prefix + std::to_string(i)}, {"text", texts[i]}}.dump() + "\n");
    f.close();
  } catch (const examples::write_error& e) {
    std::fprintf(stderr, "frugal_batch_job: %s\n", e.what());
    return exit_io;
  }
  return 0;
}

int generate(std::uint64_t n, const std::string& path) {
  return write_corpus(path, examples::synthetic_sentences(n), "r");
}

// Every fortune in `dir`, `repeat` times over; ids are "f0", "f1", ...
int fortunes(const std::string& dir, const std::string& path, std::uint64_t repeat) {
  std::vector<std::string> one;
  try {
    one = examples::read_fortunes(dir);
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "frugal_batch_job: --fortunes %s\n", e.what());
    return exit_io;
  }
  std::vector<std::string> texts;
  for (std::uint64_t r = 0; r < repeat; ++r) texts.insert(texts.end(), one.begin(), one.end());
  return write_corpus(path, texts, "f");
}

// One prompt a line (blank lines skipped) to {"id": "p<line>", "prompt": ...}.
int prompts(const std::string& in, const std::string& path) {
  std::ifstream f(in, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "frugal_batch_job: --prompts %s cannot be read\n", in.c_str());
    return exit_io;
  }
  try {
    examples::output_file out(path);
    std::uint64_t n = 0;
    for (std::string l; std::getline(f, l);) {
      ++n;
      if (l.find_first_not_of(" \t\r") == std::string::npos) continue;
      out.write(nlohmann::json{{"id", "p" + std::to_string(n)}, {"prompt", l}}.dump(
                    -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                "\n");
    }
    out.close();
  } catch (const examples::write_error& e) {
    std::fprintf(stderr, "frugal_batch_job: %s\n", e.what());
    return exit_io;
  }
  return 0;
}

// --merge: the shards under `prefix` into o.output, in input order.
int merge_shards(const std::string& prefix, std::optional<std::uint32_t> count,
                 const frugal::job::options& o) {
  if (!count)
    if (const char* e = std::getenv(frugal::job::shard_count_env))
      count = std::uint32_t(examples::integer_flag(frugal::job::shard_count_env, e, 1, UINT32_MAX));
  if (prefix.empty() || !count || o.output.empty())
    throw usage_error("--merge needs --output-prefix, --shard-count and --output");
  const frugal::job::merge_result r = frugal::job::merge_shards(
      {.prefix = prefix, .count = *count, .output = o.output, .errors = o.errors, .name = o.name});
  std::fprintf(stderr, "%s: merged %u shards: %llu records, %llu bad, into %s\n", o.name.c_str(), *count,
               (unsigned long long)r.records, (unsigned long long)r.bad_records, o.output.c_str());
  return 0;
}

const char* usage_text =
    "usage: frugal_batch_job --input IN --output OUT --checkpoint-dir DIR [--model DIR|stand-in]\n"
    "         [--precision fp32|fp16|bf16|int8|int8-per-channel|int8-per-tensor|int8-7bit|int4] "
    "[--calibration FILE]\n"
    "         [--threads N] [--every N] [--every-ms N] [--batch N] [--name NAME] [--errors PATH]\n"
    "         [--deadline-ms N] [--stop-on-bad] [--ledger FILE [--billing spot|on_demand] [--price MONEY]]\n"
    "       frugal_batch_job --input IN --output-prefix DIR [--shard-index I] [--shard-count N] [run flags]\n"
    "       frugal_batch_job --merge --output-prefix DIR --shard-count N --output OUT [--errors PATH] "
    "[--name NAME]\n"
    "       frugal_batch_job --fortunes DIR PATH [--repeat K]\n"
    "       frugal_batch_job --generate N PATH\n"
    "       frugal_batch_job --prompts PATH OUT\n"
    "       frugal_batch_job --task generate --model FILE.gguf [--chat] [--max-tokens N] [--temperature T]\n"
    "         [--top-p P] [--seed S] [--kv-budget-mb N] [--batch N] [--precision native|fp32|int8|int4]\n"
    "         [run or shard flags]\n";

std::uint64_t env_count(const char* name) {
  const char* v = std::getenv(name);
  return v ? examples::integer_flag(name, v, 0, UINT32_MAX) : 0;
}

struct ledger_flags {
  std::string path;
  frugal::cost::billing pricing = frugal::cost::billing::on_demand;
  std::string price = "1.00 USD";
};

// This run's ledger: one device under the chosen billing, paid from the run's start, with every batch's
// busy time; at the end, when the run resumed an interrupted one, the preemption and the records it redid,
// their time at this run's mean time per record.
class job_ledger {
 public:
  explicit job_ledger(const ledger_flags& lf)
      : ledger_(options(lf)), feature_(ledger_.feature("batch_job")) {}
  // Called on the runner's batch thread, a new one per batch: kept here and recorded from write()'s thread,
  // so that the ledger does not grow a stripe per batch thread.
  void batch(std::size_t n, std::chrono::nanoseconds busy) {
    std::lock_guard lk(mu_);
    batches_.emplace_back(n, busy);
  }
  void write(const std::string& path, const frugal::job::stats& s) {
    std::lock_guard lk(mu_);
    for (const auto& [n, busy] : batches_) {
      ledger_.record_batch({.feature = feature_,
                            .device = 0,
                            .busy = std::min(busy, frugal::cost::max_record_duration),
                            .batch_size = std::uint32_t(n)});
      busy_ += busy;
    }
    if (s.resumed) {
      const double per_record = s.records_this_run ? double(busy_.count()) / double(s.records_this_run) : 0;
      ledger_.record_preemption(
          0, s.redone_records, std::chrono::nanoseconds(std::llround(per_record * double(s.redone_records))));
    }
    try {
      examples::write_file(path, frugal::cost::to_json(ledger_.snapshot()) + "\n");
    } catch (const examples::write_error& e) {
      throw frugal::job::error(frugal::job_errc::io, std::string("--ledger ") + e.what());
    }
  }

 private:
  static frugal::cost::ledger_options options(const ledger_flags& lf) {
    using namespace frugal::cost;
    const rate r = rate::per_hour(money::parse(lf.price, currency::from_code("USD")));
    return {.prices = {{.gpu_class = "job", .on_demand = r, .spot = r}},
            .devices = {{.gpu_class = "job", .pricing = lf.pricing}}};
  }
  frugal::cost::ledger<> ledger_;
  frugal::cost::feature_id feature_;
  std::mutex mu_;
  std::vector<std::pair<std::size_t, std::chrono::nanoseconds>> batches_;
  std::chrono::nanoseconds busy_{0};
};

#ifdef FRUGAL_BATCH_JOB_LLAMA
// The generation task: the runner drives the generator (a stream_model) on its worker thread. The ledger
// gets the run's steps as one record (busy time, tokens in and out) and, when this run found tokens lost
// by a preemption before it, a preemption with those lines and their time at this run's time per token.
int run_generation(const frugal::job::options& o, const batch_job::generation_options& gen,
                   const ledger_flags& lf) {
  std::unique_ptr<batch_job::generator> g;
  try {
    g = batch_job::make_generator(gen);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "frugal_batch_job: %s\n", e.what());
    return 64;
  }
  if (!lf.path.empty()) {
    try {
      examples::check_writable(lf.path);
    } catch (const examples::write_error& e) {
      std::fprintf(stderr, "frugal_batch_job: --ledger %s\n", e.what());
      return exit_io;
    }
  }
  try {
    frugal::job::runner job(o, *g);
    const frugal::job::run_result result = job.run();
    const frugal::job::stats s = job.stats();
    const batch_job::generation_accounting a = g->accounting();
    std::fprintf(
        stderr,
        "%s: %s; %s; %llu records (%llu this run, %.3f s in the model, %llu steps, %llu tokens "
        "prefilled, %llu generated), %llu bad, %llu checkpoints%s, %llu redone after resume; "
        "tokens over %llu attempts: %llu generated, %llu in the output, %llu redone (%llu found at "
        "this start, of %llu finished lines)\n",
        o.name.c_str(), result == frugal::job::run_result::completed ? "completed" : "preempted, resumable",
        g->describe().c_str(), (unsigned long long)s.records_done, (unsigned long long)s.records_this_run,
        g->busy_seconds(), (unsigned long long)g->steps(), (unsigned long long)g->prefill_tokens(),
        (unsigned long long)g->generated_tokens(), (unsigned long long)s.bad_records,
        (unsigned long long)s.checkpoints, s.resumed ? ", resumed" : "", (unsigned long long)s.redone_records,
        (unsigned long long)a.attempts, (unsigned long long)a.generated_tokens,
        (unsigned long long)a.output_tokens, (unsigned long long)a.redone_tokens,
        (unsigned long long)a.redone_at_start, (unsigned long long)a.redone_lines_at_start);
    if (!lf.path.empty()) {
      using namespace frugal::cost;
      const rate r = rate::per_hour(money::parse(lf.price, currency::from_code("USD")));
      ledger<> l({.prices = {{.gpu_class = "job", .on_demand = r, .spot = r}},
                  .devices = {{.gpu_class = "job", .pricing = lf.pricing}}});
      const feature_id f = l.feature("generate_job");
      const auto busy = std::chrono::nanoseconds(std::llround(g->busy_seconds() * 1e9));
      if (g->steps())
        l.record_batch({.feature = f,
                        .device = 0,
                        .busy = std::min(busy, max_record_duration),
                        .batch_size = std::uint32_t(std::min<std::uint64_t>(g->max_running(), UINT32_MAX)),
                        .tokens_in = g->prefill_tokens(),
                        .tokens_out = g->generated_tokens()});
      // The ledger counts redone records and time; the redone tokens are in the stats line above.
      if (a.redone_at_start) {
        const double per_token =
            g->generated_tokens() ? double(busy.count()) / double(g->generated_tokens()) : 0;
        l.record_preemption(0, a.redone_lines_at_start,
                            std::chrono::nanoseconds(std::llround(per_token * double(a.redone_at_start))));
      }
      try {
        examples::write_file(lf.path, to_json(l.snapshot()) + "\n");
      } catch (const examples::write_error& e) {
        throw frugal::job::error(frugal::job_errc::io, std::string("--ledger ") + e.what());
      }
    }
    return frugal::job::exit_code(result);
  } catch (const frugal::job::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return frugal::job::exit_code(e.code());
  }
}
#endif

}  // namespace

int main(int argc, char** argv) try {
  frugal::job::options o{.name = "batch_job", .checkpoint_every = std::chrono::seconds(30)};
  const char* env_model = std::getenv("FRUGAL_MODEL_DIR");
  std::string model = env_model && *env_model ? env_model : FRUGAL_DEFAULT_MODEL_DIR;
  const std::string env_model_or_default = model;
  std::string prec = "fp32", calibration = FRUGAL_DEFAULT_CALIBRATION;
  std::size_t threads = 1;
  bool generate_task = false, precision_given = false, batch_given = false;
#ifdef FRUGAL_BATCH_JOB_LLAMA
  batch_job::generation_options gen;
#endif
  ledger_flags lf;
  std::string prefix;
  std::optional<std::uint32_t> shard_index, shard_count;
  bool merge = false;
  try {
    examples::flags f(argc, argv);
    while (f.next()) {
      if (f.is("--generate")) {
        const std::uint64_t n = f.integer(1, 100'000'000);
        return generate(n, f.value());
      } else if (f.is("--fortunes")) {
        const std::string dir = f.value(), path = f.value();
        std::uint64_t repeat = 1;
        if (f.peek() == "--repeat") {
          f.next();
          repeat = f.integer(1, 1000);
        }
        return fortunes(dir, path, repeat);
      } else if (f.is("--prompts")) {
        const std::string in = f.value(), path = f.value();
        return prompts(in, path);
      } else if (f.is("--task")) {
        const std::string t = f.value();
        if (t != "embed" && t != "generate")
          throw usage_error("--task must be embed or generate, not \"" + t + "\"");
        generate_task = t == "generate";
#ifdef FRUGAL_BATCH_JOB_LLAMA
      } else if (f.is("--chat")) {
        gen.chat = true;
      } else if (f.is("--max-tokens")) {
        gen.max_tokens = f.integer(1, 1 << 20);
      } else if (f.is("--temperature")) {
        gen.temperature = float(f.number(0.0, 100.0));
      } else if (f.is("--top-p")) {
        gen.top_p = float(f.number(0.0, 1.0));
        if (gen.top_p <= 0) throw usage_error("--top-p must be in (0, 1], not 0");
      } else if (f.is("--seed")) {
        gen.seed = f.integer(0, UINT64_MAX);
      } else if (f.is("--kv-budget-mb")) {
        gen.kv_budget_mb = f.integer(1, 1 << 24);
#endif
      } else if (f.is("--merge")) {
        merge = true;
      } else if (f.is("--output-prefix")) {
        prefix = f.value();
      } else if (f.is("--shard-index")) {
        shard_index = std::uint32_t(f.integer(0, UINT32_MAX - 1));
      } else if (f.is("--shard-count")) {
        shard_count = std::uint32_t(f.integer(1, UINT32_MAX));
      } else if (f.is("--input")) {
        o.input = f.value();
      } else if (f.is("--output")) {
        o.output = f.value();
      } else if (f.is("--checkpoint-dir")) {
        o.checkpoint_dir = f.value();
      } else if (f.is("--errors")) {
        o.errors = f.value();
      } else if (f.is("--name")) {
        o.name = f.value();
        if (o.name.empty()) throw usage_error("--name: must not be empty (it names the job's checkpoints)");
      } else if (f.is("--model")) {
        model = f.value();
      } else if (f.is("--precision")) {
        prec = f.value();
        precision_given = true;
      } else if (f.is("--calibration")) {
        calibration = f.value();
      } else if (f.is("--threads")) {
        threads = f.integer(1, 256);
      } else if (f.is("--every")) {
        o.checkpoint_every_records = f.integer(0, UINT64_MAX);
      } else if (f.is("--every-ms")) {
        o.checkpoint_every = std::chrono::milliseconds(f.integer(0, 86'400'000));
      } else if (f.is("--batch")) {
        o.batch_size = f.integer(1, 4096);
        batch_given = true;
      } else if (f.is("--deadline-ms")) {
        o.preemption_deadline = std::chrono::milliseconds(f.integer(0, 86'400'000));
      } else if (f.is("--stop-on-bad")) {
        o.stop_on_bad_record = true;
      } else if (f.is("--ledger")) {
        lf.path = f.value();
      } else if (f.is("--billing")) {
        const std::string b = f.value();
        if (b == "spot")
          lf.pricing = frugal::cost::billing::spot;
        else if (b == "on_demand" || b == "on-demand")
          lf.pricing = frugal::cost::billing::on_demand;
        else
          throw usage_error("--billing must be spot or on_demand, not \"" + b + "\"");
      } else if (f.is("--price")) {
        lf.price = f.value();
        try {  // the ledger's price: named by its flag, not by the money parser or the ledger
          if (frugal::cost::money::parse(lf.price, frugal::cost::currency::from_code("USD")).nanos() <= 0)
            throw std::invalid_argument("must be a price > 0, not \"" + lf.price + "\"");
        } catch (const std::invalid_argument& e) {
          throw usage_error(std::string("--price: ") + e.what());
        }
      } else if (f.is("--help") || f.is("-h")) {
        std::fputs(usage_text, stdout);
        return 0;
      } else {
        f.unknown();
      }
    }
    if (generate_task && o.name == "batch_job") o.name = "generate_job";
    if (merge) return merge_shards(prefix, shard_count, o);
    const frugal::job::shard shard = frugal::job::resolve_shard(shard_index, shard_count);
    if (!prefix.empty()) {
      if (!o.output.empty() || !o.errors.empty() || !o.checkpoint_dir.empty())
        throw usage_error(
            "--output-prefix names the shard's output, errors and checkpoint; drop --output, "
            "--errors and --checkpoint-dir");
      const frugal::job::shard_files sf = frugal::job::files_of(prefix, shard);
      frugal::job::detail::make_dir(prefix);
      o.output = sf.output;
      o.errors = sf.errors;
      o.checkpoint_dir = sf.checkpoint_dir;
      o.shard = shard;
    } else if (shard.count > 1) {
      throw usage_error(frugal::job::to_string(shard) + " needs --output-prefix for its files");
    }
    if (generate_task) {
#ifdef FRUGAL_BATCH_JOB_LLAMA
      if (model.empty() || model == env_model_or_default)
        throw usage_error("--task generate needs --model FILE.gguf");
      gen.model = model;
      gen.precision = precision_given ? prec : "native";
      gen.threads = threads;
      if (batch_given) gen.max_running = o.batch_size;
      o.batch_size = gen.max_running;
      gen.checkpoint_dir = o.checkpoint_dir;
      gen.output = o.output;
#else
      throw usage_error("this build has no Llama decoder (no gguf/bpe); --task generate is not available");
#endif
    }
    if (model.empty()) throw usage_error("no model: pass --model DIR (or stand-in) or set FRUGAL_MODEL_DIR");
    o.testing.fail_write_after = env_count("FRUGAL_JOB_FAIL_WRITE_AFTER");
    o.testing.pause_before_rename = std::chrono::milliseconds(env_count("FRUGAL_JOB_CHECKPOINT_PAUSE_MS"));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "frugal_batch_job: %s\n%s", e.what(), usage_text);
    return 64;
  } catch (const frugal::job::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return frugal::job::exit_code(e.code());
  }
  const auto slow = std::chrono::milliseconds(env_count("FRUGAL_JOB_SLOW_MS"));
#ifdef FRUGAL_BATCH_JOB_LLAMA
  if (generate_task) {
    gen.slow_step = slow;
    return run_generation(o, gen, lf);
  }
#endif

  std::unique_ptr<text_model> m;
  try {
    m = load_model(model, prec, calibration, threads);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "frugal_batch_job: %s\n", e.what());
    return 64;
  }
  std::optional<job_ledger> ledger;
  if (!lf.path.empty()) {
    try {  // written at the end: a path it cannot go to is refused before the run
      examples::check_writable(lf.path);
    } catch (const examples::write_error& e) {
      std::fprintf(stderr, "frugal_batch_job: --ledger %s\n", e.what());
      return exit_io;
    }
    ledger.emplace(lf);
  }
  std::int64_t busy_ns = 0;  // written by the batch thread, read after run()
  try {
    frugal::job::runner job(o, [&](std::span<const frugal::job::record> batch) {
      const auto t0 = std::chrono::steady_clock::now();
      if (slow.count()) std::this_thread::sleep_for(slow);
      auto r = embed_batch(*m, batch);
      const auto busy = std::chrono::steady_clock::now() - t0;
      busy_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(busy).count();
      if (ledger) ledger->batch(batch.size(), busy);
      return r;
    });
    const frugal::job::run_result result = job.run();
    const frugal::job::stats s = job.stats();
    std::fprintf(
        stderr,
        "%s: %s; %s; %llu records (%llu this run, %.3f s in the model), %llu bad, %llu checkpoints%s, "
        "%llu redone after resume\n",
        o.name.c_str(), result == frugal::job::run_result::completed ? "completed" : "preempted, resumable",
        m->describe().c_str(), (unsigned long long)s.records_done, (unsigned long long)s.records_this_run,
        double(busy_ns) / 1e9, (unsigned long long)s.bad_records, (unsigned long long)s.checkpoints,
        s.resumed ? ", resumed" : "", (unsigned long long)s.redone_records);
    if (ledger) ledger->write(lf.path, s);
    return frugal::job::exit_code(result);
  } catch (const frugal::job::error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return frugal::job::exit_code(e.code());
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "frugal_batch_job: %s\n", e.what());
  return 1;
}
