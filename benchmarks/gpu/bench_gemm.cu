// GPU GEMM benchmark: each of our kernels against cuBLASLt on the same shapes in the same run. Self-contained
// (no Google Benchmark, so it runs on a bare CUDA machine): CUDA events around CUDA-graph replays of many
// launches, median of the replays, rotating over input sets larger than the L2 so HBM is timed, not the
// cache. Each row is printed as soon as it is measured, so a hang or a kill keeps the rows before it; cases
// past --budget-s seconds are listed as skipped. The memory roof of the floor column is the device-to-device
// copy bandwidth measured at the start of the same run.
//   bench_gpu_gemm [--quick] [--sweep] [--md FILE] [--budget-s S]
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "frugal/cuda/gemm.cuh"

namespace fc = frugal::cuda;

namespace {

double hbm_bytes_per_s = 4.3e12;            // replaced by the copy bandwidth measured in main()
constexpr double int8_ops_per_s = 1979e12;  // H200 datasheet, dense
constexpr double f16_ops_per_s = 989e12;

bool failed = false;
void check(const fc::status& s, const char* what) {
  if (!s) {
    std::fprintf(stderr, "FAILED %s: %s\n", what, s.str().c_str());
    failed = true;
  }
}
void check_cuda(cudaError_t e, const char* what) { check(fc::cuda_status(e, what), what); }

__global__ void fill_random_bytes(std::uint32_t* p, std::size_t words, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ seed;
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    p[i] = x;
  }
}
// Random fp16/bf16 in [-1, 1): keep sign and a small exponent so nothing is Inf/NaN.
__global__ void fill_random_half(std::uint16_t* p, std::size_t n, std::uint32_t seed, bool bf16) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ seed;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    const float v = static_cast<float>(x & 0xFFFFFF) / 8388608.0f - 1.0f;
    p[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
  }
}

struct blob {
  fc::device_buffer<unsigned char> buf;
  explicit blob(std::size_t bytes, std::uint32_t seed) : buf((bytes + 15) / 16 * 16) {
    fill_random_bytes<<<1024, 256>>>(reinterpret_cast<std::uint32_t*>(buf.data()), buf.size() / 4, seed);
    check(fc::launch_status("fill_random_bytes"), "fill");
  }
  blob(std::size_t elems, std::uint32_t seed, bool bf16) : buf(elems * 2) {
    fill_random_half<<<1024, 256>>>(reinterpret_cast<std::uint16_t*>(buf.data()), elems, seed, bf16);
    check(fc::launch_status("fill_random_half"), "fill");
  }
  void* data() { return buf.data(); }
};

// Scales and zero-filled helpers are small and shared across sets.
struct scales {
  fc::device_buffer<float> f;
  fc::device_buffer<__half> h;
  explicit scales(std::size_t n) : f(n), h(n) {
    std::vector<float> hf(n, 0.01f);
    std::vector<__half> hh(n, __float2half_rn(0.01f));
    f.upload(hf.data(), n);
    h.upload(hh.data(), n);
  }
};

int sets_for(std::size_t set_bytes) {
  const std::size_t target = std::size_t(200) << 20;  // > 3x the 60 MB L2
  return static_cast<int>(std::clamp<std::size_t>((target + set_bytes - 1) / set_bytes, 2, 32));
}

struct timing {
  double median_us = NAN, min_us = NAN;
};

// Times launch(set) rotating over `sets` inputs: a CUDA graph of L launches is replayed R times; per-launch
// time is the replay time over L. Falls back to direct launches when capture fails.
timing time_launches(const std::function<bool(int, cudaStream_t)>& launch, int sets, cudaStream_t stream,
                     bool quick) {
  for (int s = 0; s < sets; ++s)
    if (!launch(s, stream)) return {};
  check_cuda(cudaStreamSynchronize(stream), "warm-up");
  fc::event_guard e0, e1;
  e0.record(stream);
  for (int i = 0; i < 2 * sets; ++i) launch(i % sets, stream);
  e1.record(stream);
  const double est_us = std::max(1.0, 1000.0 * e1.elapsed_ms_since(e0) / (2 * sets));
  const int per_graph = static_cast<int>(std::clamp(2000.0 / est_us, static_cast<double>(sets), 2000.0));
  const int replays = quick ? 5 : 15;

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool graphed = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess;
  if (graphed) {
    bool ok = true;
    for (int i = 0; i < per_graph && ok; ++i) ok = launch(i % sets, stream);
    graphed = cudaStreamEndCapture(stream, &graph) == cudaSuccess && ok &&
              cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  }
  if (!graphed) (void)cudaGetLastError();
  std::vector<double> us;
  for (int r = 0; r < replays + 1; ++r) {
    e0.record(stream);
    if (graphed) {
      check_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    } else {
      for (int i = 0; i < per_graph; ++i) launch(i % sets, stream);
    }
    e1.record(stream);
    const double t = 1000.0 * e1.elapsed_ms_since(e0) / per_graph;
    if (r > 0) us.push_back(t);  // the first replay uploads the graph
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front()};
}

struct row {
  std::string kernel;
  int m, n, k;
  timing ours, theirs;
  double bytes, ops, ops_per_s;
  std::string note;
};
std::vector<row> rows;

// Tuning sweeps (--sweep) rerun the same cases with one knob forced and without the baseline.
struct overrides {
  fc::gemm_tile tile = fc::gemm_tile::automatic;
  int split_k = 0, block_n = 0;
  bool baseline = true;
  std::string suffix;
} ov;

double floor_us(const row& r) { return 1e6 * std::max(r.bytes / hbm_bytes_per_s, r.ops / r.ops_per_s); }

void print_row(FILE* f, const row& r) {
  const double fl = floor_us(r);
  const double t = r.ours.median_us;
  std::fprintf(
      f, "| %-16s | %5d | %5d | %5d | %9.2f | %9.2f | %5.2fx | %6.2f | %7.1f | %8.2f | %5.1f%% | %s |\n",
      r.kernel.c_str(), r.m, r.n, r.k, t, r.theirs.median_us, r.theirs.median_us / t, r.bytes / t * 1e-6,
      r.ops / t * 1e-6, fl, 100.0 * fl / t, r.note.c_str());
}
void print_header(FILE* f) {
  std::fprintf(f,
               "| kernel           |     M |     N |     K |  ours us | cuBLASLt us | speedup | TB/s | TOPS "
               "| floor us | "
               "%%floor | baseline |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}
void print_table(FILE* f) {
  print_header(f);
  for (const row& r : rows) print_row(f, r);
}
// Every measured row goes out at once, flushed.
void add_row(const row& r) {
  rows.push_back(r);
  print_row(stdout, r);
  std::fflush(stdout);
}

void bench_w8a8(int m, int n, int k, cudaStream_t st, fc::cublaslt_context& lt, bool quick) {
  const std::size_t a_b = std::size_t(m) * k, b_b = std::size_t(n) * k, c_b = std::size_t(m) * n * 2;
  const std::size_t x_b = std::size_t(m) * k * 2;
  const int sets = sets_for(a_b + b_b + c_b);
  std::vector<blob> a, b, c, x;
  std::vector<fc::device_buffer<float>> sa;
  for (int s = 0; s < sets; ++s) {
    a.emplace_back(a_b, 11u * s + 1);
    b.emplace_back(b_b, 13u * s + 2);
    c.emplace_back(c_b, 17u * s + 3);
    x.emplace_back(std::size_t(m) * k, 19u * s + 4, false);
    sa.emplace_back(m);
  }
  scales sc(std::max(m, n));
  for (auto& v : sa)
    check_cuda(cudaMemcpy(v.data(), sc.f.data(), m * sizeof(float), cudaMemcpyDeviceToDevice), "copy");
  auto args = [&](int s) {
    return fc::gemm_w8a8_arguments{.m = m,
                                   .n = n,
                                   .k = k,
                                   .a = static_cast<std::int8_t*>(a[s].data()),
                                   .lda = k,
                                   .b = static_cast<std::int8_t*>(b[s].data()),
                                   .ldb = k,
                                   .scale_a = sa[s].data(),
                                   .scale_b = sc.f.data(),
                                   .c = c[s].data(),
                                   .ldc = n,
                                   .c_type = frugal::element_type::f16,
                                   .tile = ov.tile};
  };
  auto quant = [&](int s) {
    return fc::quantize_rows_arguments{.m = m,
                                       .k = k,
                                       .x = x[s].data(),
                                       .ldx = k,
                                       .q = static_cast<std::int8_t*>(a[s].data()),
                                       .ldq = k,
                                       .scale = sa[s].data()};
  };
  fc::cublaslt_gemm_w8a8 base;
  const fc::status bs = base.initialize(lt, args(0));
  auto lt_ok = static_cast<bool>(bs);
  if (!lt_ok) std::printf("cuBLASLt int8 declines %dx%dx%d: %s\n", m, n, k, bs.str().c_str());

  row g{"w8a8 gemm",   m, n, k, {}, {}, double(a_b + b_b + c_b), 2.0 * m * n * k, int8_ops_per_s,
        "LT int8->i32"};
  g.ours = time_launches([&](int s, cudaStream_t t) { return static_cast<bool>(fc::run(args(s), t)); }, sets,
                         st, quick);
  if (lt_ok && ov.baseline)
    g.theirs = time_launches(
        [&](int s, cudaStream_t t) { return static_cast<bool>(base.run_gemm(args(s), t)); }, sets, st, quick);
  g.note += ov.suffix;
  add_row(g);
  if (!ov.baseline) return;
  row e{"w8a8 end2end",         m, n, k, {}, {}, double(x_b + b_b + c_b), 2.0 * m * n * k, int8_ops_per_s,
        "quant+LT int8+dequant"};
  e.ours = time_launches([&](int s, cudaStream_t t) { return fc::run(quant(s), t) && fc::run(args(s), t); },
                         sets, st, quick);
  if (lt_ok)
    e.theirs = time_launches(
        [&](int s, cudaStream_t t) { return fc::run(quant(s), t) && base.run(args(s), t); }, sets, st, quick);
  add_row(e);
}

void bench_f16(int m, int n, int k, cudaStream_t st, fc::cublaslt_context& lt, bool quick,
               bool bf16 = false) {
  const frugal::element_type t = bf16 ? frugal::element_type::bf16 : frugal::element_type::f16;
  const std::size_t a_e = std::size_t(m) * k, b_e = std::size_t(n) * k, c_e = std::size_t(m) * n;
  const int sets = sets_for(2 * (a_e + b_e + c_e));
  std::vector<blob> a, b, c;
  for (int s = 0; s < sets; ++s) {
    a.emplace_back(a_e, 23u * s + 1, bf16);
    b.emplace_back(b_e, 29u * s + 2, bf16);
    c.emplace_back(c_e * 2, 31u * s + 3);
  }
  auto args = [&](int s) {
    return fc::gemm_f16_arguments{.m = m,
                                  .n = n,
                                  .k = k,
                                  .ab_type = t,
                                  .a = a[s].data(),
                                  .lda = k,
                                  .b = b[s].data(),
                                  .ldb = k,
                                  .c = c[s].data(),
                                  .ldc = n,
                                  .c_type = t,
                                  .tile = ov.tile};
  };
  fc::cublaslt_gemm_f16 base;
  const fc::status bs = base.initialize(lt, args(0));
  row r{bf16 ? "bf16 gemm" : "f16 gemm",
        m,
        n,
        k,
        {},
        {},
        2.0 * (a_e + b_e + c_e),
        2.0 * m * n * k,
        f16_ops_per_s,
        bf16 ? "LT bf16" : "LT f16"};
  r.ours = time_launches([&](int s, cudaStream_t t) { return static_cast<bool>(fc::run(args(s), t)); }, sets,
                         st, quick);
  r.note += ov.suffix;
  if (bs && ov.baseline)
    r.theirs = time_launches([&](int s, cudaStream_t t) { return static_cast<bool>(base.run(args(s), t)); },
                             sets, st, quick);
  add_row(r);
}

void bench_weight_only(bool int4, int m, int n, int k, cudaStream_t st, fc::cublaslt_context& lt,
                       bool quick) {
  const int g = 128;
  const std::size_t w_b = int4 ? std::size_t(n) * k / 2 : std::size_t(n) * k;
  const std::size_t s_b = int4 ? std::size_t(n) * (k / g) * 2 : std::size_t(n) * 4;
  const std::size_t x_e = std::size_t(m) * k, c_e = std::size_t(m) * n;
  const int sets = sets_for(w_b + 2 * x_e);
  const int lt_sets = sets_for(2 * std::size_t(n) * k);
  std::vector<blob> w, x, c, wh;
  for (int s = 0; s < sets; ++s) {
    w.emplace_back(w_b, 37u * s + 1);
    x.emplace_back(x_e, 41u * s + 2, false);
    c.emplace_back(c_e * 2, 43u * s + 3);
  }
  for (int s = 0; ov.baseline && s < lt_sets; ++s) wh.emplace_back(std::size_t(n) * k, 47u * s + 5, false);
  scales sc(int4 ? std::size_t(n) * (k / g) : std::size_t(n));
  int split = 0, block_n = 0;
  std::size_t ws_bytes = 0;
  fc::device_info dev;
  check(fc::query_device(dev), "query_device");
  fc::gemm_w8a16_arguments a8{.m = m,
                              .n = n,
                              .k = k,
                              .x = x[0].data(),
                              .ldx = k,
                              .w = static_cast<std::int8_t*>(w[0].data()),
                              .ldw = k,
                              .scale = sc.f.data(),
                              .c = c[0].data(),
                              .ldc = n,
                              .split_k = ov.split_k,
                              .block_n = ov.block_n};
  fc::gemm_w4a16_arguments a4{.m = m,
                              .n = n,
                              .k = k,
                              .x = x[0].data(),
                              .ldx = k,
                              .w = static_cast<std::uint8_t*>(w[0].data()),
                              .ldw = k / 2,
                              .group_size = g,
                              .scale = sc.h.data(),
                              .c = c[0].data(),
                              .ldc = n,
                              .split_k = ov.split_k,
                              .block_n = ov.block_n};
  if (int4) {
    split = fc::resolved_split_k(a4, dev);
    block_n = fc::resolved_block_n(a4);
    ws_bytes = fc::get_workspace_size(a4, dev);
  } else {
    split = fc::resolved_split_k(a8, dev);
    block_n = fc::resolved_block_n(a8);
    ws_bytes = fc::get_workspace_size(a8, dev);
  }
  fc::device_buffer<unsigned char> ws(std::max<std::size_t>(ws_bytes, 16));
  auto launch = [&](int s, cudaStream_t t) {
    if (int4) {
      auto a = a4;
      a.x = x[s].data();
      a.w = static_cast<std::uint8_t*>(w[s].data());
      a.c = c[s].data();
      a.workspace = ws.data();
      a.workspace_bytes = ws.size();
      return static_cast<bool>(fc::run(a, t));
    }
    auto a = a8;
    a.x = x[s].data();
    a.w = static_cast<std::int8_t*>(w[s].data());
    a.c = c[s].data();
    a.workspace = ws.data();
    a.workspace_bytes = ws.size();
    return static_cast<bool>(fc::run(a, t));
  };
  fc::cublaslt_gemm_f16 base;
  auto largs = [&](int s) {
    return fc::gemm_f16_arguments{.m = m,
                                  .n = n,
                                  .k = k,
                                  .a = x[s % sets].data(),
                                  .lda = k,
                                  .b = wh[s].data(),
                                  .ldb = k,
                                  .c = c[s % sets].data(),
                                  .ldc = n,
                                  .c_type = frugal::element_type::f16};
  };
  const fc::status bs = ov.baseline ? base.initialize(lt, largs(0)) : fc::status::ok();
  row r{int4 ? "w4a16 g128" : "w8a16",
        m,
        n,
        k,
        {},
        {},
        double(w_b + s_b + 2 * x_e + 2 * c_e),
        2.0 * m * n * k,
        f16_ops_per_s,
        "LT f16 (fp16 W); split " + std::to_string(split) + ", rows/block " + std::to_string(block_n)};
  r.ours = time_launches(launch, sets, st, quick);
  if (bs && ov.baseline)
    r.theirs = time_launches([&](int s, cudaStream_t t) { return static_cast<bool>(base.run(largs(s), t)); },
                             lt_sets, st, quick);
  add_row(r);
}

// A failed case (an exception from a CUDA call) is reported and the run goes on, so the table is still
// printed. Past the time budget, cases are listed as skipped instead of run.
double budget_s = 1e9;
std::chrono::steady_clock::time_point started;
int skipped_cases = 0;
template <class F>
void guarded(F&& f) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (elapsed > budget_s) {
    ++skipped_cases;
    return;
  }
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    failed = true;
  }
}

double measure_copy_bandwidth(cudaStream_t st) {
  const std::size_t bytes = std::size_t(1) << 30;
  fc::device_buffer<unsigned char> a(bytes), b(bytes);
  check_cuda(cudaMemsetAsync(a.data(), 1, bytes, st), "memset");
  fc::event_guard e0, e1;
  check_cuda(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, st), "copy");
  e0.record(st);
  for (int i = 0; i < 5; ++i)
    check_cuda(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, st), "copy");
  e1.record(st);
  return 5.0 * 2 * bytes / (e1.elapsed_ms_since(e0) * 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, sweep = false;
  const char* md = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--sweep")) sweep = true;
    if (!std::strcmp(argv[i], "--md") && i + 1 < argc) md = argv[++i];
    if (!std::strcmp(argv[i], "--budget-s") && i + 1 < argc) budget_s = std::atof(argv[++i]);
  }
  started = std::chrono::steady_clock::now();
  if (fc::device_count() == 0) {
    std::printf("SKIPPED GPU benchmark: %s\n", fc::no_device_reason().c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  fc::stream_guard stream;
  fc::cublaslt_context lt;
  check(lt.initialize(), "cublaslt");
  const double copy_bw = measure_copy_bandwidth(stream);
  std::printf("device: %s (sm_%d%d, %d SMs, L2 %d MB), driver %d, runtime %d; D2D copy %.2f TB/s\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20, driver,
              runtime, copy_bw * 1e-12);
  if (copy_bw > 0) hbm_bytes_per_s = copy_bw;
  std::printf("copy roof: %.2f TB/s (1 GiB device-to-device, read + write bytes)\n\n",
              hbm_bytes_per_s * 1e-12);
  print_header(stdout);
  std::fflush(stdout);

  if (sweep) {
    // The data the dispatcher's and the kernels' defaults should come from: tiles by M, and rows per block x
    // split-K for the weight-only kernels. Ours only.
    ov.baseline = false;
    for (int m : {16, 64, 128, 256, 1024})
      for (fc::gemm_tile t : {fc::gemm_tile::small, fc::gemm_tile::large}) {
        ov.tile = t;
        ov.suffix = t == fc::gemm_tile::small   ? " [tile 32x64]"
                    : t == fc::gemm_tile::large ? " [tile 128x128]"
                                                : " [wgmma sm_90a]";
        guarded([&] { bench_w8a8(m, 4096, 4096, stream, lt, true); });
        guarded([&] { bench_f16(m, 4096, 4096, stream, lt, true); });
      }
    ov.tile = fc::gemm_tile::automatic;
    for (bool int4 : {false, true})
      for (int m : {1, 16})
        for (const auto& nk : {std::pair{8192, 8192}, std::pair{4096, 14336}})
          for (int bn : {32, 64})
            for (int sk : {1, 2, 4, 8, 0}) {
              ov.block_n = bn;
              ov.split_k = sk;
              ov.suffix = sk == 0 ? " [auto split]" : "";
              guarded([&] { bench_weight_only(int4, m, nk.first, nk.second, stream, lt, true); });
            }
    if (prop.major == 9 && prop.minor == 0) {  // last, as in the main run
      ov.tile = fc::gemm_tile::wgmma_sm90;
      ov.block_n = ov.split_k = 0;
      ov.suffix = " [wgmma sm_90a]";
      for (int m : {16, 64, 128, 256, 1024}) {
        guarded([&] { bench_w8a8(m, 4096, 4096, stream, lt, true); });
        guarded([&] { bench_f16(m, 4096, 4096, stream, lt, true); });
      }
    }
    std::printf("\nsweep (ours only)\n\n");
    print_table(stdout);
    if (skipped_cases > 0)
      std::printf("\nSKIPPED %d cases: past the --budget-s %.0f s budget\n", skipped_cases, budget_s);
    if (md) {
      if (FILE* f = std::fopen(md, "w")) {
        print_table(f);
        std::fclose(f);
      }
    }
    return failed ? 1 : 0;
  }

  const int big[] = {4096, 8192};
  for (int sz : big) guarded([&] { bench_w8a8(sz, sz, sz, stream, lt, quick); });
  for (int sz : big) guarded([&] { bench_f16(sz, sz, sz, stream, lt, quick); });
  for (int sz : big) guarded([&] { bench_f16(sz, sz, sz, stream, lt, quick, true); });
  for (int m : {1, 16, 64}) guarded([&] { bench_w8a8(m, 8192, 8192, stream, lt, quick); });
  for (int m : {1, 16, 64}) guarded([&] { bench_f16(m, 8192, 8192, stream, lt, quick); });
  for (bool int4 : {false, true})
    for (int m : {1, 16, 64}) guarded([&] { bench_weight_only(int4, m, 8192, 8192, stream, lt, quick); });
  for (bool int4 : {false, true})
    guarded([&] { bench_weight_only(int4, 1, 4096, 14336, stream, lt, quick); });
  // Last: were the new kernel to fault, the sticky CUDA error would only lose these rows.
  if (prop.major == 9 && prop.minor == 0) {
    ov.tile = fc::gemm_tile::wgmma_sm90;
    ov.suffix = " [wgmma sm_90a]";
    for (int sz : big) guarded([&] { bench_w8a8(sz, sz, sz, stream, lt, quick); });
    for (int sz : big) guarded([&] { bench_f16(sz, sz, sz, stream, lt, quick); });
    for (int sz : big) guarded([&] { bench_f16(sz, sz, sz, stream, lt, quick, true); });
    ov = overrides{};
  }
  std::printf(
      "\nfloor = max(bytes / %.2f TB/s (measured copy), 2MNK / datasheet peak (int8 %.0f, fp16 %.0f TOPS)); "
      "speedup = cuBLASLt time / ours\n\n",
      hbm_bytes_per_s * 1e-12, int8_ops_per_s * 1e-12, f16_ops_per_s * 1e-12);
  print_table(stdout);
  if (md) {
    if (FILE* f = std::fopen(md, "w")) {
      std::fprintf(f, "device: %s, driver %d, runtime %d, D2D copy %.2f TB/s\n\n", prop.name, driver, runtime,
                   copy_bw * 1e-12);
      print_table(f);
      std::fclose(f);
    }
  }
  if (skipped_cases > 0)
    std::printf("\nSKIPPED %d cases: past the --budget-s %.0f s budget\n", skipped_cases, budget_s);
  if (failed) std::printf("\nSOME LAUNCHES FAILED (see stderr)\n");
  return failed ? 1 : 0;
}
