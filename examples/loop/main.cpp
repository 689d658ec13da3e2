// The composed loop from the README: a batcher in front of an int8 model, a result cache in front of
// the batcher, and a ledger that prices it all. The model call stays in the user's own loop.
#include <cmath>
#include <cstdio>
#include <span>
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
  frugal::cost::ledger<> ledger{
      {.prices = {{.gpu_class = "L4",
                   .on_demand = frugal::cost::rate::per_hour(frugal::cost::money::parse("$0.80"))}},
       .devices = {{.gpu_class = "L4"}}}};
  const auto feature = ledger.feature("embed");

  // The user's worker loop: one model call per batch, every caller gets its own row back.
  std::jthread worker([&](std::stop_token stop) {
    while (auto batch = batcher.next_batch(stop)) {
      q::row_matrix x(static_cast<Eigen::Index>(batch->size()), 256);
      for (std::size_t i = 0; i < batch->size(); ++i)
        x.row(static_cast<Eigen::Index>(i)) =
            Eigen::Map<const Eigen::RowVectorXf>(batch->requests()[i].data(), 256);
      const auto t0 = std::chrono::steady_clock::now();
      const q::row_matrix y = model(x);
      const auto busy = std::chrono::steady_clock::now() - t0;
      std::vector<embedding> out;
      for (Eigen::Index i = 0; i < y.rows(); ++i)
        out.emplace_back(y.row(i).data(), y.row(i).data() + y.cols());
      ledger.record_batch(
          {.feature = feature, .busy = busy, .batch_size = static_cast<std::uint32_t>(batch->size())});
      batch->fulfill(std::move(out));
    }
  });

  // Callers: a cache hit never reaches the model; a miss waits for its batch. Each round draws 64 inputs
  // from a pool of 112, sliding by 16, so every round after the first mixes hits and misses. A miss keeps
  // its own key beside its future: pairing the i-th pending future with the i-th input would store one
  // input's embedding under another's key as soon as a round holds a hit.
  std::vector<embedding> pool(112, embedding(256));
  for (std::size_t i = 0; i < pool.size(); ++i) {
    pool[i][i % 256] = 1.0f;
    pool[i][(7 * i + 3) % 256] -= 0.5f;
  }
  auto key_of = [](const embedding& in) { return frugal::hash_key("embed-v1", std::span<const float>(in)); };
  struct miss {
    frugal::key128 key;
    std::size_t input;
    frugal::light_future<embedding> result;  // kept as it is: a std::future would cost a promise per request
  };
  std::size_t mixed_rounds = 0;
  for (std::size_t round = 0; round < 4; ++round) {
    std::vector<miss> pending;
    std::size_t hits = 0;
    for (std::size_t i = 16 * round; i < 16 * round + 64; ++i) {
      const frugal::key128 key = key_of(pool[i]);
      if (auto hit = cache.get(key)) {
        ledger.record_cache_hit(feature);
        ledger.record_request(feature, 0ns);
        ++hits;
        continue;
      }
      pending.push_back({key, i, batcher.submit(pool[i])});
    }
    if (hits > 0 && !pending.empty()) ++mixed_rounds;
    for (miss& m : pending) {
      const auto t0 = std::chrono::steady_clock::now();
      embedding e = m.result.get();
      ledger.record_request(feature, std::chrono::steady_clock::now() - t0);
      cache.put(m.key, std::move(e));
    }
  }

  // The example checks itself (ctest runs it): every cached embedding is the model's answer for the
  // input it is keyed by. Per-token quantization makes a row's answer independent of its batch.
  std::size_t wrong = 0;
  for (const embedding& in : pool) {
    const auto cached = cache.get(key_of(in));
    if (!cached) continue;
    const q::row_matrix y = model(Eigen::Map<const Eigen::RowVectorXf>(in.data(), 256));
    for (std::size_t j = 0; j < 256; ++j)
      if (std::abs((*cached)[j] - y(0, static_cast<Eigen::Index>(j))) >
          1e-4f * (1.0f + std::abs(y(0, static_cast<Eigen::Index>(j))))) {
        ++wrong;
        break;
      }
  }
  batcher.close();
  std::printf("%s", frugal::cost::to_table(ledger.snapshot()).c_str());
  std::printf("batches: %llu, cache hit ratio: %.2f\n",
              static_cast<unsigned long long>(batcher.stats().batches), cache.stats().hit_ratio);
  if (mixed_rounds != 3 || wrong != 0) {
    std::fprintf(stderr,
                 "frugal_loop: %zu of 3 rounds mixed hits and misses; %zu cached embeddings do not match "
                 "their key's input\n",
                 mixed_rounds, wrong);
    return 1;
  }
  std::printf(
      "rounds mixing hits and misses: %zu, cached embeddings checked against their inputs: all match\n",
      mixed_rounds);
}
