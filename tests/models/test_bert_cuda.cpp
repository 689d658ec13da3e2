// The encoder's linear layers on a GPU (examples/models/bert_cuda.hpp) against the same precision on the CPU.
// The "bert-cuda-host" suite runs everywhere: without a device, asking for one fails with a reason. The GPU
// cases skip without a device, and say so.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bert.hpp"
#include "bert_cuda.hpp"
#include "cuda/gpu_test.hpp"

namespace {

using frugal_test::model;
using frugal_test::model_dir;

std::vector<std::string> lines(const std::string& name, std::size_t most) {
  std::ifstream in(std::string(FRUGAL_FIXTURE_DIR) + "/" + name);
  REQUIRE(in);
  std::vector<std::string> out;
  for (std::string l; out.size() < most && std::getline(in, l);) out.push_back(l);
  return out;
}

// The sentences of the embedding fixture (its "text" fields), cut to `most`.
std::vector<std::string> sentences(std::size_t most) {
  std::vector<std::string> out;
  for (const auto& l : lines("embeddings.jsonl", most)) out.push_back(nlohmann::json::parse(l).at("text"));
  return out;
}

// Per-sentence cosines of one precision on the GPU against the same precision on the CPU.
std::vector<double> device_against_cpu(bert::precision p, std::vector<std::string> calibration = {}) {
  const auto texts = sentences(64);
  const auto cpu = bert::encoder::load(model_dir(), {.weights = p, .calibration = calibration});
  const auto dev = bert::make_cuda_linear_device();
  const auto gpu =
      bert::encoder::load(model_dir(), {.weights = p, .calibration = calibration, .device = dev});
  REQUIRE(gpu.device() == dev.get());
  const auto a = cpu.encode_texts(texts), b = gpu.encode_texts(texts);
  // Every linear layer of every batch went through the device: 4 per layer, one batch.
  CHECK(dev->stats().forwards == 4 * gpu.shapes().layers);
  CHECK(dev->stats().weight_bytes > 0);
  std::vector<double> c;
  for (std::size_t i = 0; i < a.size(); ++i) c.push_back(bert::cosine(a[i], b[i]));
  return c;
}

}  // namespace

TEST_SUITE("bert-cuda-host") {
  TEST_CASE("without a device, asking for one says why") {
    if (!frugal::cuda::no_device_reason().empty()) {
      try {
        (void)bert::make_cuda_linear_device();
        FAIL("make_cuda_linear_device succeeded without a device");
      } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()).find("no CUDA device") != std::string::npos);
      }
    } else {
      CHECK_THROWS_AS((void)bert::make_cuda_linear_device(9999), std::invalid_argument);
    }
  }
}

TEST_CASE("int8 layers on the GPU equal the CPU's" * frugal_test::needs(frugal_test::gpu(), model())) {
  // W8A8 is exact in int32 on both sides; only the fp32 epilogue's rounding order differs.
  for (double c : device_against_cpu(bert::precision::int8, lines("calibration.txt", 256)))
    CHECK(c >= 0.9999);
  for (double c : device_against_cpu(bert::precision::int8_per_channel)) CHECK(c >= 0.9999);
}

TEST_CASE("fp16 and bf16 layers on the GPU stay close to the CPU's" *
          frugal_test::needs(frugal_test::gpu(), model())) {
  // The GPU rounds the layer inputs to 16 bits too (the CPU path widens the weights only).
  for (double c : device_against_cpu(bert::precision::fp16)) CHECK(c >= 0.999);
  for (double c : device_against_cpu(bert::precision::bf16)) CHECK(c >= 0.99);
}

TEST_CASE("fp32 and int4 stay on the CPU; a bad layer is refused by name" * FRUGAL_NEEDS_GPU) {
  const auto dev = bert::make_cuda_linear_device();
  if (frugal_test::available(model())) {
    const auto e = bert::encoder::load(model_dir(), {.weights = bert::precision::fp32, .device = dev});
    CHECK(e.device() == nullptr);
  }
  const std::vector<float> s(10, 1.0f);
  const auto w = frugal::quant::make_quantized_weights(std::vector<std::int8_t>(10 * 24), 10, 24, s);
  CHECK_THROWS_WITH_AS(dev->upload_int8(w, {}), doctest::Contains("multiple of 16"), std::invalid_argument);
  const auto w2 = frugal::quant::make_quantized_weights(std::vector<std::int8_t>(10 * 32), 10, 32, s);
  const std::size_t id = dev->upload_int8(w2, {});
  std::vector<float> y(3 * 10);
  CHECK_THROWS_WITH_AS(dev->forward_int8(id, std::vector<std::int8_t>(2 * 32), std::vector<float>(3), 3, y),
                       doctest::Contains("need 96 inputs"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(dev->forward_16bit(id, std::vector<std::uint16_t>(3 * 32), 3, y),
                       doctest::Contains("not a 16-bit layer"), std::invalid_argument);
}
