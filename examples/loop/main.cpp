// The composed loop from the README: a batcher in front of an int8 model, a result cache in front of
// the batcher, and a ledger that prices it all. The model call stays in the user's own loop.
#include <cstdio>
#include <thread>
#include <vector>

#include <frugal/frugal.hpp>

using namespace std::chrono_literals;
namespace q = frugal::quant;

int main() {
  // An int8 layer: 256 -> 256, weights quantized per output channel.
  const q::row_matrix w = q::row_matrix::Random(256, 256);
  const q::quantized_weights qw = q::quantize_weights_per_channel(w);
  auto model = [&](const q::row_matrix& x) {
    q::row_matrix y;
    q::gemm_w8a8(q::quantize_rows(x), qw, y, {.activation = q::activation_kind::gelu});
    return y;
  };

  using embedding = std::vector<float>;
  frugal::batcher<embedding, embedding> batcher{{.window = 2ms, .max_batch = 32}};
  frugal::lru_cache<embedding> cache{{.max_entries = 10'000, .max_bytes = 64 << 20, .ttl = 10min}};
  frugal::cost::ledger<> ledger{{.prices = {{.gpu_class = "L4", .on_demand = frugal::cost::rate::per_hour(
                                                                     frugal::cost::money::parse("$0.80"))}},
                                 .devices = {{.gpu_class = "L4"}}}};
  const auto tag = ledger.tag("embed");

  // The user's worker loop: one model call per batch, every caller gets its own row back.
  std::jthread worker([&](std::stop_token stop) {
    while (auto batch = batcher.next_batch(stop)) {
      q::row_matrix x(static_cast<Eigen::Index>(batch->size()), 256);
      for (std::size_t i = 0; i < batch->size(); ++i)
        x.row(static_cast<Eigen::Index>(i)) = Eigen::Map<const Eigen::RowVectorXf>(batch->requests()[i].data(), 256);
      const auto t0 = std::chrono::steady_clock::now();
      const q::row_matrix y = model(x);
      const auto busy = std::chrono::steady_clock::now() - t0;
      std::vector<embedding> out;
      for (Eigen::Index i = 0; i < y.rows(); ++i) out.emplace_back(y.row(i).data(), y.row(i).data() + y.cols());
      ledger.record_batch({.tag = tag, .busy = busy, .batch_size = static_cast<std::uint32_t>(batch->size())});
      batch->fulfill(std::move(out));
    }
  });

  // Callers: a cache hit never reaches the model; a miss waits for its batch.
  std::vector<embedding> inputs(64, embedding(256));
  for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i][i % 256] = 1.0f;
  for (int round = 0; round < 4; ++round) {
    std::vector<std::future<embedding>> pending;
    for (const auto& in : inputs) {
      const frugal::key128 key = frugal::hash_key("embed-v1", std::span<const float>(in));
      if (auto hit = cache.get(key)) {
        ledger.record_cache_hit(tag);
        ledger.record_request(tag, 0ns);
        continue;
      }
      pending.push_back(batcher.submit(in));
    }
    for (std::size_t i = 0; i < pending.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      embedding e = pending[i].get();
      ledger.record_request(tag, std::chrono::steady_clock::now() - t0);
      cache.put(frugal::hash_key("embed-v1", std::span<const float>(inputs[i])), std::move(e));
    }
  }
  batcher.close();
  std::printf("%s", frugal::cost::to_table(ledger.snapshot()).c_str());
  std::printf("batches: %llu, cache hit ratio: %.2f\n", static_cast<unsigned long long>(batcher.stats().batches),
              cache.stats().hit_ratio);
}
