// Every public host header, and the templates a user instantiates first, compiled by
// check_warnings.cmake with -Wall -Wextra -Wpedantic -Werror at -O2 and -O3 on GCC and clang: a user who
// includes frugal into a -Werror build must not stop on a warning of ours (issue 19, class 10). GCC's
// middle-end warnings (-Wrestrict, -Wstringop-overflow) only fire on code that is instantiated and
// inlined, hence the calls below (the cache, the ledger and its exports, the batcher, the Prometheus
// exporters, an int8 GEMM, the KV cache and its attention).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "frugal/cost/nvml.hpp"
#include "frugal/frugal.hpp"
#include "frugal/job.hpp"
#include "frugal/model/gguf.hpp"
#include "frugal/model/safetensors.hpp"
#include "frugal/version.hpp"
#if __has_include(<utf8proc.h>)
#  include "frugal/model/bpe.hpp"
#  include "frugal/model/chat_template.hpp"
#  include "frugal/model/wordpiece.hpp"
#endif
#if __has_include(<hiredis/hiredis.h>)
#  include "frugal/redis.hpp"
#endif
#if __has_include(<hnswlib/hnswlib.h>)
#  include "frugal/semantic.hpp"
#endif

using namespace std::chrono_literals;
namespace fc = frugal::cost;

int main() {
  const char text[] = "embed-v1";
  const frugal::key128 k = frugal::hash_key(text, std::string("prompt"), 42, 1.5f);
  frugal::lru_cache<std::string> cache{{.max_entries = 16}};
  cache.put(k, "value");
  const auto hit = cache.get(k);

  frugal::manual_clock clock;
  fc::ledger<frugal::manual_clock> ledger(
      {.prices = {{.gpu_class = "L4", .on_demand = fc::rate::per_hour(fc::money::parse("$0.80"))}},
       .devices = {{.gpu_class = "L4"}}},
      clock);
  const fc::feature_id feature = ledger.feature("chat");
  ledger.record_batch({.feature = feature, .busy = 5ms, .batch_size = 4, .capacity = 8});
  ledger.record_request(feature, 7ms);
  clock.advance(1s);
  const fc::ledger_snapshot s = ledger.snapshot();
  const std::string out = fc::to_json(s) + fc::to_prometheus(s) + fc::to_table(s) + s.total_cost.to_string();
  frugal::batcher<int, int> batcher{{.window = 1ms, .max_batch = 8}};
  std::future<int> f = batcher.submit(21);
  if (auto b = batcher.next_batch()) b->fulfill(std::vector<int>(b->requests().begin(), b->requests().end()));
  frugal::prometheus_writer metrics;
  fc::append_prometheus(metrics, s, {.labels = {{"replica", "a"}}});
  frugal::append_prometheus(metrics, batcher.stats(), {.labels = {{"model", "m"}}});
  frugal::append_prometheus(metrics, cache.stats());
  frugal::kv_cache kv({.layers = 1, .kv_heads = 1, .head_dim = 16, .budget_bytes = 1 << 16});
  const std::int32_t prompt[] = {1, 2, 3};
  const auto seq = kv.open(prompt, frugal::kv_salt::of("m")).id;
  if (kv.append(seq, prompt)) {
    std::vector<float> kv_q(3 * 2 * 16, 0.5f), kv_out(kv_q.size()), kv_kv(3 * 16, 0.25f);
    kv.write(seq, 0, 0, kv_kv, kv_kv);
    frugal::kv_attention(kv, seq, 0, 0, kv_q, kv_out, {.heads = 2});
    kv.commit(seq);
  }
  frugal::append_prometheus(metrics, kv.stats());
  namespace q = frugal::quant;
  const q::row_matrix w = q::row_matrix::Random(16, 64), x = q::row_matrix::Random(4, 64);
  q::row_matrix y;
  q::gemm_w8a8(q::quantize_rows(x), q::quantize_weights_per_channel(w), y, {});
  std::string why;
  const bool nvml = fc::nvml::open("libnvidia-ml.so.1", &why).has_value();
  std::printf("%zu %zu %d %d %g %d\n", out.size(), metrics.str().size(), hit ? 1 : 0, f.get(),
              static_cast<double>(y(0, 0)), nvml ? 1 : 0);
  return 0;
}
