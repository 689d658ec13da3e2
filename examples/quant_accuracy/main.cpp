// The accuracy table: one realistic linear layer (4096 x 4096 weights, Gaussian with a few outlier
// output channels; activations with a few outlier input features, as LLM layers have) under each
// precision and scheme. It prints the weight error, the layer-output error against fp32, and memory.
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "frugal/quant.hpp"

namespace q = frugal::quant;

namespace {

struct row {
  std::string name;
  double w_rel = 0, w_sqnr = 0, y_rel = 0, y_sqnr = 0, y_cos = 0;
  std::size_t bytes = 0;
  bool has_weight_error = true;
};

void print(const std::vector<row>& rows, std::size_t fp32_bytes) {
  std::printf(
      "| scheme | weight rel. error | weight SQNR (dB) | output rel. error | output SQNR (dB) | output "
      "cosine | weight memory (MiB) | vs fp32 |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : rows) {
    if (r.has_weight_error)
      std::printf("| %s | %.2e | %.1f | %.2e | %.1f | %.6f | %.2f | %.2fx |\n", r.name.c_str(), r.w_rel,
                  r.w_sqnr, r.y_rel, r.y_sqnr, r.y_cos, static_cast<double>(r.bytes) / (1 << 20),
                  static_cast<double>(fp32_bytes) / static_cast<double>(r.bytes));
    else
      std::printf("| %s | - | - | %.2e | %.1f | %.6f | %.2f | %.2fx |\n", r.name.c_str(), r.y_rel, r.y_sqnr,
                  r.y_cos, static_cast<double>(r.bytes) / (1 << 20),
                  static_cast<double>(fp32_bytes) / static_cast<double>(r.bytes));
  }
}

}  // namespace

int main() {
  constexpr int n = 4096, k = 4096, tokens = 64;
  std::mt19937 rng(2024);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  q::row_matrix w(n, k), x(tokens, k);
  for (int i = 0; i < w.size(); ++i) w.data()[i] = 0.02f * nd(rng);
  for (int c : {17, 911, 2048, 3333}) w.row(c) *= 20.0f;  // outlier output channels
  for (int i = 0; i < x.size(); ++i) x.data()[i] = nd(rng);
  for (int f : {5, 1000, 2500, 4000}) x.col(f) *= 40.0f;  // outlier activation features
  const q::row_matrix y = x * w.transpose();
  const std::size_t fp32_bytes = static_cast<std::size_t>(w.size()) * sizeof(float);

  std::vector<row> rows;
  const auto weight_only = [&](const std::string& name, const q::row_matrix& wq, std::size_t bytes) {
    const q::row_matrix yq = x * wq.transpose();
    rows.push_back({name, q::relative_error(w, wq), q::sqnr_db(w, wq), q::relative_error(y, yq),
                    q::sqnr_db(y, yq), q::cosine_similarity(y, yq), bytes});
  };
  rows.push_back({"fp32 (reference)", 0, 0, 0, 0, 1, fp32_bytes});
  rows.back().w_sqnr = rows.back().y_sqnr = std::numeric_limits<double>::infinity();

  {
    const std::span<const float> ws(w.data(), static_cast<std::size_t>(w.size()));
    std::vector<q::half> h(ws.size());
    std::vector<q::bfloat16> b(ws.size());
    q::row_matrix back(n, k);
    q::convert(ws, h);
    q::convert(h, std::span<float>(back.data(), ws.size()));
    weight_only("fp16", back, h.size() * 2);
    q::convert(ws, b);
    q::convert(b, std::span<float>(back.data(), ws.size()));
    weight_only("bf16", back, b.size() * 2);
  }
  const auto int_scheme = [&](const std::string& name, const q::scheme& s) {
    const auto t = q::quantize(w, s);
    weight_only(name, q::dequantize(t), t.memory_bytes());
  };
  int_scheme("int8 per-tensor", {});
  int_scheme("int8 per-channel", {.granularity = q::granularity::per_channel, .axis = 0});
  int_scheme("int8 per-group (g128)", {.granularity = q::granularity::per_group, .group_size = 128});
  for (bool sym : {true, false}) {
    const auto w4 = q::quantize_int4(w, {.group_size = 128, .symmetric = sym});
    weight_only(sym ? "int4 g128 symmetric (fp16 scales)" : "int4 g128 asymmetric (fp16 scales, u8 zp)",
                q::dequantize(w4), w4.memory_bytes());
  }

  // W8A8 on the CPU kernel: per-channel weights with per-token, per-tensor or SmoothQuant activations.
  const auto w8a8 = [&](const std::string& name, const q::row_matrix& wmat, const q::row_matrix& xmat,
                        const q::quantize_rows_options& opt) {
    const auto qw = q::quantize_weights_per_channel(wmat);
    q::row_matrix yq;
    q::gemm_w8a8(q::quantize_rows(xmat, opt), qw, yq);
    row r{name,
          0,
          0,
          q::relative_error(y, yq),
          q::sqnr_db(y, yq),
          q::cosine_similarity(y, yq),
          qw.memory_bytes()};
    r.has_weight_error = false;
    rows.push_back(r);
  };
  w8a8("W8A8, per-token dynamic activations", w, x, {});
  const float amax = x.cwiseAbs().maxCoeff();
  w8a8("W8A8, per-tensor static activations", w, x, {.static_scale = amax / 127.0f});
  std::vector<float> act_absmax(k);
  for (int j = 0; j < k; ++j) act_absmax[static_cast<std::size_t>(j)] = x.col(j).cwiseAbs().maxCoeff();
  const auto sq = q::smoothquant(w, act_absmax, 0.5f);
  q::row_matrix xs = x;
  q::smooth_activations(xs, sq.factors);
  w8a8("SmoothQuant (a=0.5) W8A8, per-tensor static activations", sq.weights, xs,
       {.static_scale = sq.act_scale});
  w8a8("SmoothQuant (a=0.5) W8A8, per-token dynamic activations", sq.weights, xs, {});

  std::printf(
      "frugal quant accuracy: W %d x %d (N(0, 0.02^2), 4 output channels x20), X %d x %d (N(0,1), 4 features "
      "x40)\n\n",
      n, k, tokens, k);
  print(rows, fp32_bytes);
  const auto h = q::error_histogram(
      std::span<const float>(w.data(), static_cast<std::size_t>(w.size())),
      [&] {
        static q::row_matrix wq;
        wq = q::fake_quantize(w, {.granularity = q::granularity::per_channel, .axis = 0});
        return std::span<const float>(wq.data(), static_cast<std::size_t>(wq.size()));
      }(),
      9);
  std::printf("\nint8 per-channel weight error histogram (9 bins over [%.2e, %.2e]):", h.lo, h.hi);
  for (auto c : h.counts) std::printf(" %zu", c);
  std::printf("\n");
  return 0;
}
