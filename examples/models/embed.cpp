// frugal_embed: sentence embeddings from a BERT-family model directory, one JSON array per input line.
//
//   frugal_embed --model DIR --input FILE --output FILE
//                [--precision fp32|fp16|bf16|int8|int8-per-channel|int8-per-tensor|int8-7bit|int4]
//                [--batch N] [--threads N] [--calibration FILE] [--device cpu|cuda[:N]] [--stats]
//
// Input: UTF-8 text, one sentence per line (the line is used as it is, without its '\n'). Output: one
// line per input line, in input order, each a JSON array of the model's hidden size (384 for MiniLM)
// floats with unit L2 norm. "-" reads stdin or writes stdout. --stats prints throughput and memory to
// stderr. --device cuda runs the int8 and fp16/bf16 linear layers on a GPU through frugal::cuda (a build
// with CUDA; fp32 and int4 stay on the CPU, and say so). Exit codes: 0 done, 1 a runtime error (bad model
// files, unreadable input, an output that cannot be written, each named), 2 a usage error.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../common/flags.hpp"
#include "../common/lines.hpp"
#include "../common/load_model.hpp"
#include "../common/write.hpp"
#include "bert.hpp"
#if FRUGAL_EMBED_CUDA
#  include "bert_cuda.hpp"
#endif

#ifndef FRUGAL_DEFAULT_CALIBRATION
#  define FRUGAL_DEFAULT_CALIBRATION ""
#endif

int main(int argc, char** argv) try {
  examples::encoder_source src;
  src.calibration = FRUGAL_DEFAULT_CALIBRATION;
  std::string input, output, device = "cpu";
  std::size_t batch = 32;
  bool stats = false;
  int ordinal = -1;  // the CUDA device, or -1 for the CPU
  bert::load_options opt;
  try {
    examples::flags f(argc, argv);
    while (f.next()) {
      if (f.is("--model"))
        src.dir = f.value();
      else if (f.is("--input"))
        input = f.value();
      else if (f.is("--output"))
        output = f.value();
      else if (f.is("--precision"))
        src.precision = f.value();
      else if (f.is("--calibration"))
        src.calibration = f.value();
      else if (f.is("--batch"))
        batch = f.integer(1, 4096);
      else if (f.is("--threads"))
        src.threads = f.integer(1, 256);
      else if (f.is("--device"))
        device = f.value();
      else if (f.is("--stats"))
        stats = true;
      else if (f.is("--help") || f.is("-h")) {
        std::printf(
            "usage: %s --model DIR --input FILE --output FILE [--precision fp32|fp16|bf16|int8|"
            "int8-per-channel|int8-per-tensor|int8-7bit|int4] [--batch N] [--threads N] [--calibration FILE] "
            "[--device cpu|cuda[:N]] [--stats]\n",
            argv[0]);
        return 0;
      } else
        f.unknown();
    }
    if (src.dir.empty()) throw examples::usage_error("--model DIR is required");
    if (input.empty()) throw examples::usage_error("--input FILE is required");
    if (output.empty()) throw examples::usage_error("--output FILE is required");
    if (device == "cuda")
      ordinal = 0;
    else if (device.rfind("cuda:", 0) == 0)
      ordinal = static_cast<int>(examples::integer_flag("--device cuda:N", device.substr(5), 0, 63));
    else if (device != "cpu")
      throw examples::usage_error("--device \"" + device + "\" is not cpu, cuda or cuda:N");
    opt = examples::encoder_options(src);  // the precision, and the calibration sentences it needs
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "frugal_embed: %s (see --help)\n", e.what());
    return 2;
  }
  if (ordinal >= 0) {
#if FRUGAL_EMBED_CUDA
    opt.device = bert::make_cuda_linear_device(ordinal);
#else
    throw std::runtime_error(
        "--device " + device +
        ": this frugal_embed was built without CUDA (configure with -DFRUGAL_ENABLE_CUDA=ON)");
#endif
  }
  examples::check_writable(output);  // before the model loads, not after
  const auto t0 = std::chrono::steady_clock::now();
  const bert::encoder enc = bert::encoder::load(src.dir, opt);
  const auto t1 = std::chrono::steady_clock::now();
  if (ordinal >= 0 && !enc.device())
    std::fprintf(stderr, "frugal_embed: --device %s: %s layers have no device path and run on the CPU\n",
                 device.c_str(), bert::to_string(enc.weights()));
  const std::vector<std::string> lines = examples::read_lines(input, "--input");
  examples::output_file out(output);
  std::size_t tokens = 0;
  std::string buf;
  char num[32];
  for (std::size_t i = 0; i < lines.size(); i += batch) {
    const std::size_t n = std::min(batch, lines.size() - i);
    std::vector<std::vector<std::int32_t>> ids;
    for (std::size_t j = 0; j < n; ++j) {
      ids.push_back(enc.tokenize(lines[i + j]));
      tokens += ids.back().size();
    }
    const auto emb = enc.encode(ids);
    buf.clear();
    for (const auto& e : emb) {
      buf += '[';
      for (std::size_t k = 0; k < e.size(); ++k) {
        const int len = std::snprintf(num, sizeof num, k ? ",%.7g" : "%.7g", static_cast<double>(e[k]));
        buf.append(num, static_cast<std::size_t>(len));
      }
      buf += "]\n";
    }
    out.write(buf);
  }
  out.close();
  const auto t2 = std::chrono::steady_clock::now();
  if (stats) {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const double secs = std::chrono::duration<double>(t2 - t1).count();
    std::fprintf(stderr,
                 "frugal_embed: %s, %zu sentences, %zu tokens in %.3f s: %.1f sentences/s, %.0f tokens/s "
                 "(batch %zu, %zu threads, linear layers on %s); load %.2f s; linear weights %.2f MB, other "
                 "weights %.2f MB; "
                 "peak RSS %.1f MB\n",
                 bert::to_string(enc.weights()), lines.size(), tokens, secs, lines.size() / secs,
                 tokens / secs, batch, src.threads, enc.device() ? enc.device()->name().c_str() : "the CPU",
                 std::chrono::duration<double>(t1 - t0).count(), enc.linear_bytes() / 1e6,
                 enc.other_bytes() / 1e6, ru.ru_maxrss / 1024.0);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "frugal_embed: %s\n", e.what());
  return 1;
}
