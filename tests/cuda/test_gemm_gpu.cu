// GPU checks of every kernel against a float64 host reference on fresh random data (the seed is printed),
// with poisoned outputs, and against cuBLASLt where it supports the shape. Skipped, with the reason, without
// a device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "frugal/cuda/gemm.cuh"
#include "gpu_test.hpp"

namespace fc = frugal::cuda;

namespace {

struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(next() >> 40) * 0x1p-24f; }
  void fill_s8(std::vector<std::int8_t>& v) {
    for (std::size_t i = 0; i < v.size(); i += 8) {
      std::uint64_t r = next();
      for (std::size_t j = 0; j < 8 && i + j < v.size(); ++j)
        v[i + j] = static_cast<std::int8_t>(r >> (8 * j));
    }
  }
  void fill_u8(std::vector<std::uint8_t>& v) {
    for (std::size_t i = 0; i < v.size(); i += 8) {
      std::uint64_t r = next();
      for (std::size_t j = 0; j < 8 && i + j < v.size(); ++j)
        v[i + j] = static_cast<std::uint8_t>(r >> (8 * j));
    }
  }
};

rng& test_rng() {
  static rng r = [] {
    const std::uint64_t seed =
        std::random_device{}() ^
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::printf("gemm GPU tests: seed %llu\n", static_cast<unsigned long long>(seed));
    return rng{seed};
  }();
  return r;
}

template <class T>
fc::device_buffer<T> to_device(const std::vector<T>& h) {
  fc::device_buffer<T> d(h.size());
  d.upload(h.data(), h.size());
  return d;
}
template <class T>
std::vector<T> to_host(const fc::device_buffer<T>& d) {
  std::vector<T> h(d.size());
  d.download(h.data(), h.size());
  return h;
}

float to_float(__half h) { return __half2float(h); }
float to_float(__nv_bfloat16 h) { return __bfloat162float(h); }

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double activate(double v, frugal::quant::activation_kind a) {
  if (a == frugal::quant::activation_kind::relu) return v > 0 ? v : 0;
  if (a == frugal::quant::activation_kind::gelu) return gelu(v);
  return v;
}

// Reads element (m, n) of a typed output buffer as double; NaN when the poison was left.
double read_out(const std::vector<unsigned char>& c, frugal::element_type t, std::size_t idx) {
  switch (t) {
    case frugal::element_type::f32: {
      float v;
      std::memcpy(&v, c.data() + 4 * idx, 4);
      return v;
    }
    case frugal::element_type::bf16: {
      __nv_bfloat16 v;
      std::memcpy(&v, c.data() + 2 * idx, 2);
      return to_float(v);
    }
    default: {
      __half v;
      std::memcpy(&v, c.data() + 2 * idx, 2);
      return to_float(v);
    }
  }
}
// Half an ulp of the output type, relative.
double rounding(frugal::element_type t) {
  if (t == frugal::element_type::f32) return 0x1p-24;
  if (t == frugal::element_type::bf16) return 0x1p-9;
  return 0x1p-11;
}

// The rows and columns a check visits: all of them when the product is small, else a random sample plus the
// edges.
std::vector<int> sample(int n, int want) {
  std::vector<int> v;
  if (n <= want) {
    for (int i = 0; i < n; ++i) v.push_back(i);
    return v;
  }
  v = {0, n - 1};
  while (static_cast<int>(v.size()) < want) v.push_back(static_cast<int>(test_rng().next() % n));
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

struct shape {
  int m, n, k;
};
// The issue's M list, each paired with N, K from 64 to 8192 including non-multiples of the tiles.
const shape w8a8_shapes[] = {{1, 64, 64},       {1, 8192, 8192},    {2, 200, 208},      {3, 4096, 4096},
                             {7, 1000, 1008},   {16, 8192, 1024},   {17, 520, 8192},    {64, 64, 8192},
                             {128, 4096, 4096}, {1024, 1032, 2064}, {4096, 4096, 4096}, {4096, 136, 64}};

std::int64_t dot_s8(const std::int8_t* a, const std::int8_t* b, int k) {
  std::int64_t s = 0;
  for (int i = 0; i < k; ++i) s += static_cast<int>(a[i]) * static_cast<int>(b[i]);
  return s;
}

}  // namespace

TEST_CASE("gemm_w8a8: int32 accumulators are bit-exact against the host and cuBLASLt on the issue's shapes" *
          FRUGAL_NEEDS_GPU) {
  fc::cublaslt_context lt;
  REQUIRE(lt.initialize().str() == "success");
  for (const shape s : w8a8_shapes) {
    CAPTURE(s.m);
    CAPTURE(s.n);
    CAPTURE(s.k);
    std::vector<std::int8_t> a(static_cast<std::size_t>(s.m) * s.k), b(static_cast<std::size_t>(s.n) * s.k);
    test_rng().fill_s8(a);
    test_rng().fill_s8(b);
    auto da = to_device(a);
    auto db = to_device(b);
    fc::device_buffer<std::int32_t> dc(static_cast<std::size_t>(s.m) * s.n);
    dc.fill_bytes(0x7F);  // 0x7F7F7F7F is beyond any |acc| <= 128*128*K here
    fc::gemm_w8a8_arguments args{.m = s.m,
                                 .n = s.n,
                                 .k = s.k,
                                 .a = da.data(),
                                 .lda = s.k,
                                 .b = db.data(),
                                 .ldb = s.k,
                                 .c = dc.data(),
                                 .ldc = s.n,
                                 .c_type = frugal::element_type::i32};
    const fc::status st = fc::run(args);
    REQUIRE_MESSAGE(st, st.str());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto c = to_host(dc);
    CHECK(std::count(c.begin(), c.end(), 0x7F7F7F7F) == 0);
    int bad = 0;
    for (int m : sample(s.m, 48))
      for (int n : sample(s.n, 256)) {
        const auto ref =
            dot_s8(&a[static_cast<std::size_t>(m) * s.k], &b[static_cast<std::size_t>(n) * s.k], s.k);
        if (ref != c[static_cast<std::size_t>(m) * s.n + n] && ++bad < 5)
          FAIL_CHECK("acc(" << m << ", " << n << ") = " << c[static_cast<std::size_t>(m) * s.n + n]
                            << ", host " << ref);
      }
    CHECK(bad == 0);

    // The other tile must agree bit for bit (the automatic choice covers only one of them per shape).
    fc::device_info dev;
    REQUIRE(static_cast<bool>(fc::query_device(dev)));
    auto other = args;
    other.tile =
        fc::selected_tile(args, dev) == fc::gemm_tile::small ? fc::gemm_tile::large : fc::gemm_tile::small;
    fc::device_buffer<std::int32_t> d2(c.size());
    d2.fill_bytes(0x7F);
    other.c = d2.data();
    REQUIRE(fc::run(other).str() == "success");
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(to_host(d2) == c);

    fc::cublaslt_gemm_w8a8 base;
    fc::device_buffer<std::int32_t> dl(c.size());
    dl.fill_bytes(0x7F);
    auto largs = args;
    largs.c = dl.data();
    if (auto is = base.initialize(lt, largs); !is) {
      MESSAGE("cuBLASLt int8 declines " << s.m << "x" << s.n << "x" << s.k << ": " << is.str());
      continue;
    }
    REQUIRE(base.run(largs).str() == "success");
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(to_host(dl) == c);  // both are exact: every element must agree
  }
}

TEST_CASE("gemm_w8a8: the fused epilogue matches the host within the output type's rounding" *
          FRUGAL_NEEDS_GPU) {
  struct epi_case {
    shape s;
    frugal::element_type out;
    frugal::quant::activation_kind act;
    bool bias, zero_point;
    int ldc_pad;
  };
  const epi_case cases[] = {
      {{1, 8192, 1024}, frugal::element_type::f16, frugal::quant::activation_kind::none, false, false, 0},
      {{7, 1000, 1008}, frugal::element_type::bf16, frugal::quant::activation_kind::relu, true, false, 8},
      {{17, 520, 2048}, frugal::element_type::f32, frugal::quant::activation_kind::gelu, true, true, 3},
      {{128, 264, 512}, frugal::element_type::f16, frugal::quant::activation_kind::gelu, true, true, 0},
      {{1024, 1032, 2064}, frugal::element_type::f16, frugal::quant::activation_kind::relu, true, false, 8},
      {{4096, 4096, 4096}, frugal::element_type::bf16, frugal::quant::activation_kind::none, true, true, 0},
  };
  for (const epi_case& e : cases) {
    const shape s = e.s;
    CAPTURE(s.m);
    CAPTURE(s.n);
    CAPTURE(s.k);
    CAPTURE(frugal::to_string(e.out));
    CAPTURE(static_cast<int>(e.act));
    std::vector<std::int8_t> a(static_cast<std::size_t>(s.m) * s.k), b(static_cast<std::size_t>(s.n) * s.k);
    test_rng().fill_s8(a);
    test_rng().fill_s8(b);
    std::vector<float> sa(s.m), sb(s.n), bias(s.n);
    std::vector<std::int32_t> za(s.m), colsum(s.n);
    for (auto& v : sa) v = test_rng().uniform(1e-3f, 2e-2f);
    for (auto& v : sb) v = test_rng().uniform(1e-3f, 2e-2f);
    for (auto& v : bias) v = test_rng().uniform(-2.0f, 2.0f);
    for (auto& v : za) v = static_cast<int>(test_rng().next() % 256) - 128;
    for (int n = 0; n < s.n; ++n)
      colsum[n] = static_cast<std::int32_t>(
          dot_s8(&b[static_cast<std::size_t>(n) * s.k], std::vector<std::int8_t>(s.k, 1).data(), s.k));
    auto da = to_device(a), db = to_device(b);
    auto dsa = to_device(sa), dsb = to_device(sb), dbias = to_device(bias);
    auto dza = to_device(za), dcs = to_device(colsum);
    const int ldc = s.n + e.ldc_pad;
    const std::size_t esz = static_cast<std::size_t>(frugal::element_bits(e.out) / 8);
    fc::device_buffer<unsigned char> dc(static_cast<std::size_t>(s.m) * ldc * esz);
    dc.fill_bytes(0xFF);
    fc::gemm_w8a8_arguments args{.m = s.m,
                                 .n = s.n,
                                 .k = s.k,
                                 .a = da.data(),
                                 .lda = s.k,
                                 .b = db.data(),
                                 .ldb = s.k,
                                 .scale_a = dsa.data(),
                                 .scale_b = dsb.data(),
                                 .zero_a = e.zero_point ? dza.data() : nullptr,
                                 .colsum_b = e.zero_point ? dcs.data() : nullptr,
                                 .bias = e.bias ? dbias.data() : nullptr,
                                 .act = e.act,
                                 .c = dc.data(),
                                 .ldc = ldc,
                                 .c_type = e.out};
    const fc::status st = fc::run(args);
    REQUIRE_MESSAGE(st, st.str());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto c = to_host(dc);
    int bad = 0, poisoned = 0, pad_written = 0;
    for (int m = 0; m < s.m; ++m)
      for (int n = 0; n < ldc; ++n) {
        const bool is_nan = std::isnan(read_out(c, e.out, static_cast<std::size_t>(m) * ldc + n));
        if (n < s.n && is_nan) ++poisoned;
        if (n >= s.n && !is_nan) ++pad_written;
      }
    CHECK(poisoned == 0);
    CHECK(pad_written == 0);  // the padding past N stays poisoned: nothing is written out of bounds
    for (int m : sample(s.m, 32))
      for (int n : sample(s.n, 256)) {
        const double acc = static_cast<double>(
            dot_s8(&a[static_cast<std::size_t>(m) * s.k], &b[static_cast<std::size_t>(n) * s.k], s.k) -
            (e.zero_point ? static_cast<std::int64_t>(za[m]) * colsum[n] : 0));
        const double pre = acc * sa[m] * sb[n] + (e.bias ? bias[n] : 0.0);
        const double ref = activate(pre, e.act);
        const double got = read_out(c, e.out, static_cast<std::size_t>(m) * ldc + n);
        const double tol =
            2 * rounding(e.out) * std::fabs(ref) + 1e-6 * (std::fabs(acc * sa[m] * sb[n]) + 2.0) + 0x1p-24;
        if (!(std::fabs(got - ref) <= tol) && ++bad < 5)
          FAIL_CHECK("c(" << m << ", " << n << ") = " << got << ", host " << ref);
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("quantize_rows and gemm_w8a8 run end to end from fp16 activations, bit-exact against the host" *
          FRUGAL_NEEDS_GPU) {
  for (const shape s : {shape{1, 4096, 4096}, shape{17, 264, 8200}, shape{64, 1024, 1024}}) {
    CAPTURE(s.m);
    CAPTURE(s.k);
    for (const bool bf16 : {false, true}) {
      CAPTURE(bf16);
      const int k_pad =
          (s.k + 15) / 16 * 16;  // the GEMM needs K % 16; quantize the valid part, pad with zeros
      std::vector<std::uint16_t> x(static_cast<std::size_t>(s.m) * s.k);
      std::vector<float> xf(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const float v = test_rng().uniform(-4.0f, 4.0f) * (i % 97 == 0 ? 8.0f : 1.0f);
        if (bf16) {
          __nv_bfloat16 h = __float2bfloat16_rn(v);
          std::memcpy(&x[i], &h, 2);
          xf[i] = to_float(h);
        } else {
          __half h = __float2half_rn(v);
          std::memcpy(&x[i], &h, 2);
          xf[i] = to_float(h);
        }
      }
      if (s.m > 3) std::fill(xf.begin() + 2 * s.k, xf.begin() + 3 * s.k, 0.0f);  // an all-zero row
      if (s.m > 3) std::fill(x.begin() + 2 * s.k, x.begin() + 3 * s.k, std::uint16_t(0));
      auto dx = to_device(x);
      fc::device_buffer<std::int8_t> dq(static_cast<std::size_t>(s.m) * k_pad);
      CHECK(cudaMemset(dq.data(), 0, dq.bytes()) == cudaSuccess);
      fc::device_buffer<float> dscale(s.m);
      dscale.fill_bytes(0xFF);
      fc::quantize_rows_arguments qa{.m = s.m,
                                     .k = s.k,
                                     .x_type = bf16 ? frugal::element_type::bf16 : frugal::element_type::f16,
                                     .x = dx.data(),
                                     .ldx = s.k,
                                     .q = dq.data(),
                                     .ldq = k_pad,
                                     .scale = dscale.data()};
      const fc::status qs = fc::run(qa);
      REQUIRE_MESSAGE(qs, qs.str());
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const auto q = to_host(dq);
      const auto scale = to_host(dscale);
      int bad = 0;
      for (int m = 0; m < s.m; ++m) {
        float amax = 0;
        for (int k = 0; k < s.k; ++k)
          amax = std::max(amax, std::fabs(xf[static_cast<std::size_t>(m) * s.k + k]));
        const float sc = amax / 127.0f;
        if (sc != scale[m] && ++bad < 5) FAIL_CHECK("scale[" << m << "] = " << scale[m] << ", host " << sc);
        for (int k = 0; k < s.k; ++k) {
          const int ref =
              amax > 0 ? std::clamp(
                             static_cast<int>(std::nearbyint(xf[static_cast<std::size_t>(m) * s.k + k] / sc)),
                             -127, 127)
                       : 0;
          if (q[static_cast<std::size_t>(m) * k_pad + k] != ref && ++bad < 5)
            FAIL_CHECK("q(" << m << ", " << k << ") = " << int(q[static_cast<std::size_t>(m) * k_pad + k])
                            << ", host " << ref);
        }
      }
      CHECK(bad == 0);

      std::vector<std::int8_t> w(static_cast<std::size_t>(s.n) * k_pad);
      test_rng().fill_s8(w);
      std::vector<float> sw(s.n);
      for (auto& v : sw) v = test_rng().uniform(1e-3f, 1e-2f);
      auto dw = to_device(w);
      auto dsw = to_device(sw);
      fc::device_buffer<__half> dc(static_cast<std::size_t>(s.m) * s.n);
      dc.fill_bytes(0xFF);
      fc::gemm_w8a8_arguments ga{.m = s.m,
                                 .n = s.n,
                                 .k = k_pad,
                                 .a = dq.data(),
                                 .lda = k_pad,
                                 .b = dw.data(),
                                 .ldb = k_pad,
                                 .scale_a = dscale.data(),
                                 .scale_b = dsw.data(),
                                 .c = dc.data(),
                                 .ldc = s.n,
                                 .c_type = frugal::element_type::f16};
      const fc::status gs = fc::run(ga);
      REQUIRE_MESSAGE(gs, gs.str());
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const auto c = to_host(dc);
      bad = 0;
      for (int m = 0; m < s.m; ++m)
        for (int n : sample(s.n, 128)) {
          const double ref = static_cast<double>(dot_s8(&q[static_cast<std::size_t>(m) * k_pad],
                                                        &w[static_cast<std::size_t>(n) * k_pad], k_pad)) *
                             scale[m] * sw[n];
          const double got = to_float(c[static_cast<std::size_t>(m) * s.n + n]);
          if (!(std::fabs(got - ref) <= 2 * 0x1p-11 * std::fabs(ref) + 1e-5) && ++bad < 5)
            FAIL_CHECK("c(" << m << ", " << n << ") = " << got << ", host " << ref);
        }
      CHECK(bad == 0);
    }
  }
}

namespace {
template <class T>
std::vector<T> random_half(std::size_t n, float lo, float hi, std::vector<float>& as_float) {
  std::vector<T> v(n);
  as_float.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, __half>)
      v[i] = __float2half_rn(test_rng().uniform(lo, hi));
    else
      v[i] = __float2bfloat16_rn(test_rng().uniform(lo, hi));
    as_float[i] = to_float(v[i]);
  }
  return v;
}

template <class T>
void check_f16_gemm(shape s, frugal::element_type out, bool epilogue, fc::cublaslt_context& lt,
                    fc::gemm_tile tile = fc::gemm_tile::automatic) {
  constexpr frugal::element_type ab =
      std::is_same_v<T, __half> ? frugal::element_type::f16 : frugal::element_type::bf16;
  CAPTURE(s.m);
  CAPTURE(s.n);
  CAPTURE(s.k);
  CAPTURE(frugal::to_string(ab));
  CAPTURE(frugal::to_string(out));
  CAPTURE(static_cast<int>(tile));
  std::vector<float> af, bf;
  auto a = random_half<T>(static_cast<std::size_t>(s.m) * s.k, -1.0f, 1.0f, af);
  auto b = random_half<T>(static_cast<std::size_t>(s.n) * s.k, -1.0f, 1.0f, bf);
  std::vector<float> sa(s.m), sb(s.n), bias(s.n);
  for (auto& v : sa) v = test_rng().uniform(0.5f, 1.5f);
  for (auto& v : sb) v = test_rng().uniform(0.5f, 1.5f);
  for (auto& v : bias) v = test_rng().uniform(-1.0f, 1.0f);
  auto da = to_device(a), db = to_device(b);
  auto dsa = to_device(sa), dsb = to_device(sb), dbias = to_device(bias);
  const std::size_t esz = static_cast<std::size_t>(frugal::element_bits(out) / 8);
  fc::device_buffer<unsigned char> dc(static_cast<std::size_t>(s.m) * s.n * esz);
  dc.fill_bytes(0xFF);
  fc::gemm_f16_arguments args{
      .m = s.m,
      .n = s.n,
      .k = s.k,
      .ab_type = ab,
      .a = da.data(),
      .lda = s.k,
      .b = db.data(),
      .ldb = s.k,
      .alpha = epilogue ? 0.5f : 1.0f,
      .scale_a = epilogue ? dsa.data() : nullptr,
      .scale_b = epilogue ? dsb.data() : nullptr,
      .bias = epilogue ? dbias.data() : nullptr,
      .act = epilogue ? frugal::quant::activation_kind::gelu : frugal::quant::activation_kind::none,
      .c = dc.data(),
      .ldc = s.n,
      .c_type = out};
  args.tile = tile;
  const fc::status st = fc::run(args);
  REQUIRE_MESSAGE(st, st.str());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto c = to_host(dc);
  int bad = 0, poisoned = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(s.m) * s.n; ++i)
    poisoned += std::isnan(read_out(c, out, i));
  CHECK(poisoned == 0);
  for (int m : sample(s.m, 24))
    for (int n : sample(s.n, 128)) {
      double acc = 0, mag = 0;
      for (int k = 0; k < s.k; ++k) {
        const double p = static_cast<double>(af[static_cast<std::size_t>(m) * s.k + k]) *
                         bf[static_cast<std::size_t>(n) * s.k + k];
        acc += p;
        mag += std::fabs(p);
      }
      double ref = acc;
      if (epilogue) ref = gelu(0.5 * acc * sa[m] * sb[n] + bias[n]);
      const double got = read_out(c, out, static_cast<std::size_t>(m) * s.n + n);
      // fp32 accumulation in another order, then the output rounding.
      const double tol = 2 * rounding(out) * std::fabs(ref) + 0x1p-18 * mag * (epilogue ? 2.0 : 1.0) + 1e-6;
      if (!(std::fabs(got - ref) <= tol) && ++bad < 5)
        FAIL_CHECK("c(" << m << ", " << n << ") = " << got << ", host " << ref);
    }
  CHECK(bad == 0);
  if (epilogue) return;
  fc::cublaslt_gemm_f16 base;
  fc::device_buffer<unsigned char> dl(dc.size());
  dl.fill_bytes(0xFF);
  auto largs = args;
  largs.c = dl.data();
  if (auto is = base.initialize(lt, largs); !is) {
    MESSAGE("cuBLASLt declines: " << is.str());
    return;
  }
  REQUIRE(base.run(largs).str() == "success");
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto l = to_host(dl);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(s.m) * s.n; ++i) {
    const double d = read_out(c, out, i) - read_out(l, out, i);
    num += d * d;
    den += read_out(l, out, i) * read_out(l, out, i);
  }
  CHECK(std::sqrt(num / den) < std::max(4 * rounding(out), 1e-5));
}
}  // namespace

TEST_CASE("gemm_f16: fp16 and bf16 match the host and cuBLASLt" * FRUGAL_NEEDS_GPU) {
  fc::cublaslt_context lt;
  REQUIRE(lt.initialize().str() == "success");
  check_f16_gemm<__half>({1, 8192, 8192}, frugal::element_type::f16, false, lt);
  check_f16_gemm<__half>({3, 200, 72}, frugal::element_type::f32, true, lt);
  check_f16_gemm<__half>({17, 1000, 1000}, frugal::element_type::f16, false, lt);
  check_f16_gemm<__half>({128, 520, 4096}, frugal::element_type::f16, true, lt, fc::gemm_tile::large);
  check_f16_gemm<__half>({4096, 4096, 4096}, frugal::element_type::f16, false, lt);
  check_f16_gemm<__nv_bfloat16>({7, 4096, 4096}, frugal::element_type::bf16, false, lt);
  check_f16_gemm<__nv_bfloat16>({1024, 1032, 2056}, frugal::element_type::f32, true, lt);
  check_f16_gemm<__nv_bfloat16>({64, 64, 8192}, frugal::element_type::bf16, false, lt);
  check_f16_gemm<__nv_bfloat16>({300, 1000, 1024}, frugal::element_type::bf16, false, lt,
                                fc::gemm_tile::large);
  check_f16_gemm<__half>({2048, 2048, 1024}, frugal::element_type::f32, true, lt, fc::gemm_tile::small);
}

namespace {
// Weight-only: the reference is float64 on the dequantised weights; the check is the relative error norm.
template <class T>
void check_weight_only(shape s, bool int4, int group, bool asym, int split_k, frugal::element_type out,
                       fc::cublaslt_context* lt, int block_n = 0) {
  constexpr frugal::element_type xt =
      std::is_same_v<T, __half> ? frugal::element_type::f16 : frugal::element_type::bf16;
  CAPTURE(s.m);
  CAPTURE(s.n);
  CAPTURE(s.k);
  CAPTURE(int4);
  CAPTURE(group);
  CAPTURE(asym);
  CAPTURE(split_k);
  CAPTURE(block_n);
  CAPTURE(frugal::to_string(xt));
  std::vector<float> xf;
  auto x = random_half<T>(static_cast<std::size_t>(s.m) * s.k, -1.0f, 1.0f, xf);
  std::vector<float> wd(static_cast<std::size_t>(s.n) * s.k);  // dequantised
  std::vector<float> bias(s.n);
  for (auto& v : bias) v = test_rng().uniform(-0.5f, 0.5f);
  auto dx = to_device(x);
  auto dbias = to_device(bias);
  fc::device_buffer<std::int8_t> dw8;
  fc::device_buffer<std::uint8_t> dw4, dzp;
  fc::device_buffer<float> dscale8;
  fc::device_buffer<__half> dscale4;
  if (!int4) {
    std::vector<std::int8_t> w(static_cast<std::size_t>(s.n) * s.k);
    test_rng().fill_s8(w);
    std::vector<float> sc(s.n);
    for (auto& v : sc) v = test_rng().uniform(1e-3f, 1e-2f);
    for (int n = 0; n < s.n; ++n)
      for (int k = 0; k < s.k; ++k)
        wd[static_cast<std::size_t>(n) * s.k + k] =
            static_cast<float>(w[static_cast<std::size_t>(n) * s.k + k]) * sc[n];
    dw8 = to_device(w);
    dscale8 = to_device(sc);
  } else {
    const int groups = s.k / group;
    std::vector<std::uint8_t> w(static_cast<std::size_t>(s.n) * s.k / 2),
        zp(static_cast<std::size_t>(s.n) * groups);
    test_rng().fill_u8(w);
    test_rng().fill_u8(zp);
    for (auto& z : zp) z &= 0xF;
    std::vector<__half> sc(static_cast<std::size_t>(s.n) * groups);
    for (auto& v : sc) v = __float2half_rn(test_rng().uniform(1e-2f, 5e-2f));
    for (int n = 0; n < s.n; ++n)
      for (int k = 0; k < s.k; ++k) {
        const std::uint8_t byte = w[static_cast<std::size_t>(n) * s.k / 2 + k / 2];
        const int nib = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        const std::size_t gi = static_cast<std::size_t>(n) * groups + k / group;
        const int q = asym ? nib - zp[gi] : (nib >= 8 ? nib - 16 : nib);
        wd[static_cast<std::size_t>(n) * s.k + k] = static_cast<float>(q) * to_float(sc[gi]);
      }
    dw4 = to_device(w);
    dzp = to_device(zp);
    dscale4 = to_device(sc);
  }
  const std::size_t esz = static_cast<std::size_t>(frugal::element_bits(out) / 8);
  fc::device_buffer<unsigned char> dc(static_cast<std::size_t>(s.m) * s.n * esz);
  dc.fill_bytes(0xFF);
  fc::status st;
  if (!int4) {
    fc::gemm_w8a16_arguments args{.m = s.m,
                                  .n = s.n,
                                  .k = s.k,
                                  .x_type = xt,
                                  .x = dx.data(),
                                  .ldx = s.k,
                                  .w = dw8.data(),
                                  .ldw = s.k,
                                  .scale = dscale8.data(),
                                  .bias = dbias.data(),
                                  .c = dc.data(),
                                  .ldc = s.n,
                                  .c_type = out,
                                  .split_k = split_k,
                                  .block_n = block_n};
    std::size_t ws_bytes = 0;
    REQUIRE(fc::get_workspace_size(args, ws_bytes).str() == "success");
    fc::device_buffer<unsigned char> ws(std::max<std::size_t>(ws_bytes, 1));
    args.workspace = ws.data();
    args.workspace_bytes = ws.size();
    st = fc::run(args);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  } else {
    fc::gemm_w4a16_arguments args{.m = s.m,
                                  .n = s.n,
                                  .k = s.k,
                                  .x_type = xt,
                                  .x = dx.data(),
                                  .ldx = s.k,
                                  .w = dw4.data(),
                                  .ldw = s.k / 2,
                                  .group_size = group,
                                  .scale = dscale4.data(),
                                  .zero_point = asym ? dzp.data() : nullptr,
                                  .bias = dbias.data(),
                                  .c = dc.data(),
                                  .ldc = s.n,
                                  .c_type = out,
                                  .split_k = split_k,
                                  .block_n = block_n};
    std::size_t ws_bytes = 0;
    REQUIRE(fc::get_workspace_size(args, ws_bytes).str() == "success");
    fc::device_buffer<unsigned char> ws(std::max<std::size_t>(ws_bytes, 1));
    args.workspace = ws.data();
    args.workspace_bytes = ws.size();
    st = fc::run(args);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  REQUIRE_MESSAGE(st, st.str());
  const auto c = to_host(dc);
  int poisoned = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(s.m) * s.n; ++i)
    poisoned += std::isnan(read_out(c, out, i));
  CHECK(poisoned == 0);
  double num = 0, den = 0;
  for (int m : sample(s.m, 16))
    for (int n : sample(s.n, 512)) {
      double ref = bias[n];
      for (int k = 0; k < s.k; ++k)
        ref += static_cast<double>(xf[static_cast<std::size_t>(m) * s.k + k]) *
               wd[static_cast<std::size_t>(n) * s.k + k];
      const double d = read_out(c, out, static_cast<std::size_t>(m) * s.n + n) - ref;
      num += d * d;
      den += ref * ref;
    }
  const double rel = std::sqrt(num / den);
  CHECK(rel < 1e-2);
  if (lt == nullptr || !std::is_same_v<T, __half>) return;
  // cuBLASLt fp16 on the same weights dequantised to fp16 (its own inputs, so the relative error is
  // compared).
  std::vector<__half> wh(wd.size());
  for (std::size_t i = 0; i < wd.size(); ++i) wh[i] = __float2half_rn(static_cast<float>(wd[i]));
  auto dwh = to_device(wh);
  fc::device_buffer<float> dl(static_cast<std::size_t>(s.m) * s.n);
  fc::gemm_f16_arguments la{.m = s.m,
                            .n = s.n,
                            .k = s.k,
                            .ab_type = frugal::element_type::f16,
                            .a = dx.data(),
                            .lda = s.k,
                            .b = dwh.data(),
                            .ldb = s.k,
                            .c = dl.data(),
                            .ldc = s.n,
                            .c_type = frugal::element_type::f32};
  fc::cublaslt_gemm_f16 base;
  if (auto is = base.initialize(*lt, la); !is) {
    MESSAGE("cuBLASLt declines: " << is.str());
    return;
  }
  REQUIRE(base.run(la).str() == "success");
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto l = to_host(dl);
  num = den = 0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    const double ref = l[i] + bias[i % s.n];
    const double d = read_out(c, out, i) - ref;
    num += d * d;
    den += ref * ref;
  }
  CHECK(std::sqrt(num / den) < 1e-2);
}
}  // namespace

TEST_CASE("gemm_w8a16: within 1e-2 relative error of the dequantised reference, and of cuBLASLt fp16" *
          FRUGAL_NEEDS_GPU) {
  fc::cublaslt_context lt;
  REQUIRE(lt.initialize().str() == "success");
  check_weight_only<__half>({1, 8192, 8192}, false, 0, false, 0, frugal::element_type::f16, &lt);
  check_weight_only<__half>({2, 200, 208}, false, 0, false, 1, frugal::element_type::f32, &lt);
  check_weight_only<__half>({7, 1000, 1008}, false, 0, false, 3, frugal::element_type::f16, nullptr, 64);
  check_weight_only<__half>({16, 4096, 14336}, false, 0, false, 0, frugal::element_type::f16, &lt);
  check_weight_only<__half>({17, 520, 4096}, false, 0, false, 0, frugal::element_type::f16, nullptr);
  check_weight_only<__nv_bfloat16>({3, 4096, 4096}, false, 0, false, 0, frugal::element_type::bf16, nullptr,
                                   32);
  check_weight_only<__nv_bfloat16>({64, 264, 1024}, false, 0, false, 2, frugal::element_type::f32, nullptr);
}

TEST_CASE("gemm_w4a16: symmetric and asymmetric groups, within 1e-2 relative error, and of cuBLASLt fp16" *
          FRUGAL_NEEDS_GPU) {
  fc::cublaslt_context lt;
  REQUIRE(lt.initialize().str() == "success");
  check_weight_only<__half>({1, 8192, 8192}, true, 128, false, 0, frugal::element_type::f16, &lt);
  check_weight_only<__half>({1, 4096, 14336}, true, 64, true, 0, frugal::element_type::f16, &lt);
  check_weight_only<__half>({2, 200, 256}, true, 32, false, 1, frugal::element_type::f32, nullptr);
  check_weight_only<__half>({7, 1000, 1024}, true, 64, false, 5, frugal::element_type::f16, nullptr, 64);
  check_weight_only<__half>({16, 4096, 4096}, true, 128, true, 0, frugal::element_type::f16, &lt);
  check_weight_only<__half>({17, 520, 2048}, true, 128, false, 0, frugal::element_type::f32, nullptr);
  check_weight_only<__nv_bfloat16>({3, 4096, 4096}, true, 128, false, 0, frugal::element_type::bf16, nullptr,
                                   32);
  check_weight_only<__nv_bfloat16>({128, 264, 1024}, true, 64, true, 2, frugal::element_type::f32, nullptr);
}

TEST_CASE("dispatcher: both backends give the same W8A8 result and are counted" * FRUGAL_NEEDS_GPU) {
  const shape s{256, 1024, 1024};
  std::vector<std::int8_t> a(static_cast<std::size_t>(s.m) * s.k), b(static_cast<std::size_t>(s.n) * s.k);
  test_rng().fill_s8(a);
  test_rng().fill_s8(b);
  std::vector<float> sa(s.m, 0.01f), sb(s.n, 0.02f);
  auto da = to_device(a), db = to_device(b);
  auto dsa = to_device(sa), dsb = to_device(sb);
  fc::device_buffer<float> c1(static_cast<std::size_t>(s.m) * s.n), c2(c1.size());
  c1.fill_bytes(0xFF);
  c2.fill_bytes(0xFF);
  fc::gemm_w8a8_arguments args{.m = s.m,
                               .n = s.n,
                               .k = s.k,
                               .a = da.data(),
                               .lda = s.k,
                               .b = db.data(),
                               .ldb = s.k,
                               .scale_a = dsa.data(),
                               .scale_b = dsb.data(),
                               .c = c1.data(),
                               .ldc = s.n,
                               .c_type = frugal::element_type::f32};
  fc::dispatcher ours({.force = fc::backend::frugal}), vendor({.force = fc::backend::cublaslt});
  REQUIRE(ours.run(args).str() == "success");
  args.c = c2.data();
  REQUIRE(vendor.run(args).str() == "success");
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(to_host(c1) == to_host(c2));  // same int32 products, same fp32 epilogue arithmetic
  CHECK(ours.stats().frugal_runs == 1);
  CHECK(vendor.stats().cublaslt_runs == 1);
  CHECK(vendor.stats().plans == 1);
}

TEST_CASE("run: unsupported problems are statuses on a real device, never launches" * FRUGAL_NEEDS_GPU) {
  fc::device_info dev;
  REQUIRE(static_cast<bool>(fc::query_device(dev)));
  MESSAGE("device sm_" << dev.cc_major << dev.cc_minor << ", " << dev.sm_count << " SMs");
  fc::device_buffer<std::int8_t> a(64 * 64);
  fc::device_buffer<float> c(64 * 64);
  fc::gemm_w8a8_arguments args{.m = 64,
                               .n = 64,
                               .k = 40,
                               .a = a.data(),
                               .lda = 64,
                               .b = a.data(),
                               .ldb = 64,
                               .c = c.data(),
                               .ldc = 64,
                               .c_type = frugal::element_type::i32};
  CHECK(fc::run(args).code == frugal::cuda_errc::invalid_k);
  args.k = 64;
  args.a = a.data() + 4;
  CHECK(fc::run(args).code == frugal::cuda_errc::misaligned_operand);
  CHECK(cudaGetLastError() == cudaSuccess);
}

// Last in the file on purpose: were the new kernel to fault, the sticky CUDA error would only spoil what
// follows.
TEST_CASE("gemm sm_90a wgmma kernel: bit-exact with the mma.sync kernel, fp16/bf16 within rounding" *
          FRUGAL_NEEDS_GPU) {
  fc::device_info dev;
  REQUIRE(static_cast<bool>(fc::query_device(dev)));
  if (!(dev.cc_major == 9 && dev.cc_minor == 0)) {
    MESSAGE("device is sm_" << dev.cc_major << dev.cc_minor << ": the wgmma kernel needs sm_90a");
    CHECK(fc::run(fc::gemm_w8a8_arguments{.tile = fc::gemm_tile::wgmma_sm90}).code !=
          frugal::cuda_errc::success);
    return;
  }
  for (const shape s :
       {shape{1, 64, 64}, shape{7, 1000, 1008}, shape{130, 520, 8192}, shape{4096, 4096, 4096}}) {
    CAPTURE(s.m);
    CAPTURE(s.n);
    CAPTURE(s.k);
    std::vector<std::int8_t> a(static_cast<std::size_t>(s.m) * s.k), b(static_cast<std::size_t>(s.n) * s.k);
    test_rng().fill_s8(a);
    test_rng().fill_s8(b);
    auto da = to_device(a), db = to_device(b);
    fc::device_buffer<std::int32_t> ref(static_cast<std::size_t>(s.m) * s.n), got(ref.size());
    ref.fill_bytes(0x7F);
    got.fill_bytes(0x7F);
    fc::gemm_w8a8_arguments args{.m = s.m,
                                 .n = s.n,
                                 .k = s.k,
                                 .a = da.data(),
                                 .lda = s.k,
                                 .b = db.data(),
                                 .ldb = s.k,
                                 .c = ref.data(),
                                 .ldc = s.n,
                                 .c_type = frugal::element_type::i32,
                                 .tile = fc::gemm_tile::large};
    REQUIRE(fc::run(args).str() == "success");
    args.c = got.data();
    args.tile = fc::gemm_tile::wgmma_sm90;
    REQUIRE(fc::run(args).str() == "success");
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const auto r = to_host(ref), g = to_host(got);
    CHECK(std::count(g.begin(), g.end(), 0x7F7F7F7F) == 0);
    CHECK(g == r);
    CHECK(dot_s8(&a[0], &b[0], s.k) == r[0]);
  }
  fc::cublaslt_context lt;
  REQUIRE(lt.initialize().str() == "success");
  check_f16_gemm<__half>({4096, 4096, 4096}, frugal::element_type::f16, false, lt, fc::gemm_tile::wgmma_sm90);
  check_f16_gemm<__half>({17, 1000, 1000}, frugal::element_type::f32, true, lt, fc::gemm_tile::wgmma_sm90);
  check_f16_gemm<__nv_bfloat16>({300, 1000, 1024}, frugal::element_type::bf16, false, lt,
                                fc::gemm_tile::wgmma_sm90);
}
