// GPU fault paths: an allocation that cannot be satisfied, a launch with an invalid configuration and an
// unsupported shape each come back as a status with a message, and the next call in the same process works.
// The "faults-host" suite runs everywhere (without a device every CUDA call must fail as a status, never as
// an abort); the rest needs a device and is skipped, with the reason printed, without one. Sticky faults
// (illegal address, trap) are never provoked: they would poison the context for every later test.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "frugal/cuda/gemm.cuh"
#include "gpu_test.hpp"

namespace fc = frugal::cuda;

namespace {

__global__ void frugal_fault_kernel(int* x) {
  if (x != nullptr) x[threadIdx.x] = static_cast<int>(threadIdx.x);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A test that only makes sense without a device says so when it is skipped.
bool device_present() {
  static const bool present = [] {
    const bool p = fc::no_device_reason().empty();
    if (p) std::printf("skipped the no-device fault checks: a CUDA device is present\n");
    return p;
  }();
  return present;
}

// 1 PiB: more than any device has.
constexpr std::size_t huge_bytes = std::size_t(1) << 50;

// Host storage standing in for device pointers where a call must fail before touching them.
alignas(256) std::int8_t host8[4096];
alignas(256) float host_f[64];
alignas(256) unsigned char host_out[8192];

}  // namespace

TEST_SUITE("faults-host") {
  TEST_CASE("device_buffer::create: more bytes than any device has is a cuda_error naming the bytes") {
    fc::device_buffer<std::uint8_t> buf;
    fc::status s;
    CHECK_NOTHROW(s = fc::device_buffer<std::uint8_t>::create(huge_bytes, buf));
    CHECK_FALSE(static_cast<bool>(s));
    CHECK(s.code == frugal::cuda_errc::cuda_error);
    CHECK(contains(s.message, "cudaMalloc of " + std::to_string(huge_bytes) + " bytes"));
    CHECK(contains(s.message, "cudaError"));  // the CUDA error's name, e.g. cudaErrorMemoryAllocation
    CHECK(buf.data() == nullptr);
    CHECK(buf.size() == 0);
  }

  TEST_CASE(
      "device_buffer::create: a byte count that overflows size_t is invalid_problem, with no CUDA call") {
    const std::size_t n = std::numeric_limits<std::size_t>::max() / 2;
    fc::device_buffer<float> buf;
    const fc::status s = fc::device_buffer<float>::create(n, buf);
    CHECK(s.code == frugal::cuda_errc::invalid_problem);
    CHECK(contains(s.message, std::to_string(n) + " elements of 4 bytes overflow"));
    CHECK(buf.data() == nullptr);
    CHECK_THROWS_WITH_AS(fc::device_buffer<float>{n}, s.message.c_str(), std::runtime_error);
  }

  TEST_CASE("device_buffer::create: zero elements succeeds without allocating") {
    fc::device_buffer<float> buf;
    CHECK(static_cast<bool>(fc::device_buffer<float>::create(0, buf)));
    CHECK(buf.data() == nullptr);
    CHECK(buf.size() == 0);
  }

  TEST_CASE("device_buffer's throwing constructor reports a failed cudaMalloc as std::runtime_error") {
    try {
      fc::device_buffer<std::uint8_t> buf(huge_bytes);
      FAIL("allocating 1 PiB succeeded");
    } catch (const std::runtime_error& e) {
      CHECK(contains(e.what(), "cudaMalloc of " + std::to_string(huge_bytes) + " bytes"));
    }
  }

  TEST_CASE("without a device, allocations, launches and every GEMM entry point return a status" *
            doctest::skip(device_present())) {
    // Twice each: the second call must fail the same way, not crash on state the first left behind.
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      fc::device_buffer<float> buf;
      const fc::status alloc = fc::device_buffer<float>::create(1024, buf);
      CHECK(alloc.code == frugal::cuda_errc::cuda_error);
      CHECK(contains(alloc.message, "cudaMalloc of 4096 bytes (1024 elements of 4)"));
      CHECK_THROWS_AS(fc::device_buffer<float>{16}, std::runtime_error);

      frugal_fault_kernel<<<1, 32>>>(nullptr);
      const fc::status launch = fc::launch_status("frugal_fault_kernel");
      CHECK(launch.code == frugal::cuda_errc::cuda_error);
      CHECK(contains(launch.message, "frugal_fault_kernel: "));

      const fc::gemm_w8a8_arguments w8a8{.m = 16,
                                         .n = 32,
                                         .k = 64,
                                         .a = host8,
                                         .lda = 64,
                                         .b = host8,
                                         .ldb = 64,
                                         .c = host_out,
                                         .ldc = 32,
                                         .c_type = frugal::element_type::i32};
      const fc::gemm_f16_arguments f16{
          .m = 16, .n = 32, .k = 64, .a = host8, .lda = 64, .b = host8, .ldb = 64, .c = host_out, .ldc = 32};
      const fc::gemm_w8a16_arguments w8a16{.m = 1,
                                           .n = 32,
                                           .k = 64,
                                           .x = host8,
                                           .ldx = 64,
                                           .w = host8,
                                           .ldw = 64,
                                           .scale = host_f,
                                           .c = host_out,
                                           .ldc = 32,
                                           .split_k = 1};
      const fc::gemm_w4a16_arguments w4a16{.m = 1,
                                           .n = 32,
                                           .k = 128,
                                           .x = host8,
                                           .ldx = 128,
                                           .w = reinterpret_cast<const std::uint8_t*>(host8),
                                           .ldw = 64,
                                           .group_size = 64,
                                           .scale = reinterpret_cast<const __half*>(host_f),
                                           .c = host_out,
                                           .ldc = 32,
                                           .split_k = 1};
      const fc::quantize_rows_arguments quant{.m = 4,
                                              .k = 64,
                                              .x = host8,
                                              .ldx = 64,
                                              .q = reinterpret_cast<std::int8_t*>(host_out),
                                              .ldq = 64,
                                              .scale = host_f};
      fc::status s;
      CHECK_NOTHROW(s = fc::run(w8a8));
      CHECK(s.code == frugal::cuda_errc::cuda_error);
      CHECK_FALSE(s.message.empty());
      CHECK_NOTHROW(s = fc::run(f16));
      CHECK(s.code == frugal::cuda_errc::cuda_error);
      CHECK_NOTHROW(s = fc::run(w8a16));
      CHECK(s.code == frugal::cuda_errc::cuda_error);
      CHECK_NOTHROW(s = fc::run(w4a16));
      CHECK(s.code == frugal::cuda_errc::cuda_error);
      CHECK_NOTHROW(s = fc::run(quant));
      CHECK(s.code == frugal::cuda_errc::cuda_error);
      CHECK(fc::can_implement(w8a8).code == frugal::cuda_errc::cuda_error);
      fc::dispatcher d;
      CHECK_NOTHROW(s = d.run(w8a8));
      CHECK(s.code == frugal::cuda_errc::cuda_error);
      CHECK(d.stats().frugal_runs + d.stats().cublaslt_runs == 0);
    }
  }
}

namespace {

fc::device_info current_device() {
  fc::device_info dev;
  REQUIRE(static_cast<bool>(fc::query_device(dev)));
  return dev;
}

template <class T>
fc::device_buffer<T> upload(const std::vector<T>& h) {
  fc::device_buffer<T> d;
  const fc::status s = fc::device_buffer<T>::create(h.size(), d);
  REQUIRE_MESSAGE(static_cast<bool>(s), s.str());
  d.upload(h.data(), h.size());
  return d;
}

// A small W8A8 problem with a raw int32 output, checked bit-exactly against the host; every GPU test ends
// with one to show that the process is still usable after the fault it provoked.
struct w8a8_problem {
  static constexpr int m = 40, n = 136, k = 64;
  std::vector<std::int8_t> ha, hb;
  fc::device_buffer<std::int8_t> a, b;
  fc::device_buffer<std::int32_t> c;

  w8a8_problem() : ha(m * k), hb(n * k) {
    for (int i = 0; i < m * k; ++i) ha[i] = static_cast<std::int8_t>((i * 7 + 3) % 255 - 127);
    for (int i = 0; i < n * k; ++i) hb[i] = static_cast<std::int8_t>((i * 13 + 5) % 251 - 125);
    a = upload(ha);
    b = upload(hb);
    REQUIRE(static_cast<bool>(fc::device_buffer<std::int32_t>::create(std::size_t(m) * n, c)));
  }
  fc::gemm_w8a8_arguments args(fc::gemm_tile tile = fc::gemm_tile::automatic) {
    return {.m = m,
            .n = n,
            .k = k,
            .a = a.data(),
            .lda = k,
            .b = b.data(),
            .ldb = k,
            .c = c.data(),
            .ldc = n,
            .c_type = frugal::element_type::i32,
            .tile = tile};
  }
  // Poisons C, runs, and returns how many elements differ from the host (or -1 when run() failed).
  long run_and_check(cudaStream_t stream, fc::gemm_tile tile = fc::gemm_tile::automatic) {
    c.fill_bytes(0xFF);
    const fc::status s = fc::run(args(tile), stream);
    CHECK_MESSAGE(static_cast<bool>(s), s.str());
    if (!s) return -1;
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    return mismatches();
  }
  // Whether C still holds the poison everywhere, i.e. no kernel wrote it.
  bool untouched() const {
    std::vector<std::int32_t> hc(std::size_t(m) * n);
    c.download(hc.data(), hc.size());
    for (std::int32_t v : hc)
      if (v != -1) return false;
    return true;
  }
  long mismatches() const {
    std::vector<std::int32_t> hc(std::size_t(m) * n);
    c.download(hc.data(), hc.size());
    long bad = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        std::int32_t want = 0;
        for (int l = 0; l < k; ++l) want += int(ha[i * k + l]) * int(hb[j * k + l]);
        bad += hc[std::size_t(i) * n + j] != want;
      }
    return bad;
  }
};

}  // namespace

TEST_CASE("out of memory: twice the device's memory is a cuda_error, and the next allocation and GEMM work" *
          FRUGAL_NEEDS_GPU) {
  std::size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  const std::size_t want = 2 * total_bytes;
  fc::device_buffer<std::uint8_t> big;
  const fc::status s = fc::device_buffer<std::uint8_t>::create(want, big);
  CHECK(s.code == frugal::cuda_errc::cuda_error);
  CHECK(contains(s.message, "cudaMalloc of " + std::to_string(want) + " bytes"));
  CHECK(contains(s.message, cudaGetErrorString(cudaErrorMemoryAllocation)));
  CHECK(big.data() == nullptr);
  // The failure was reported, so it is no longer pending for the next launch to be blamed for.
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK_THROWS_AS(fc::device_buffer<std::uint8_t>{want}, std::runtime_error);
  CHECK(cudaPeekAtLastError() == cudaSuccess);

  fc::device_buffer<float> small;
  REQUIRE(static_cast<bool>(fc::device_buffer<float>::create(1 << 20, small)));
  CHECK(small.data() != nullptr);
  fc::stream_guard stream;
  w8a8_problem p;
  CHECK(p.run_and_check(stream) == 0);
}

TEST_CASE(
    "launch errors: an invalid configuration comes back from launch_status, and the next GEMM on the "
    "same stream is correct" *
    FRUGAL_NEEDS_GPU) {
  fc::stream_guard stream;
  w8a8_problem p;
  SUBCASE("too many threads per block") {
    frugal_fault_kernel<<<1, 4096, 0, stream>>>(nullptr);
    const fc::status s = fc::launch_status("frugal_fault_kernel<4096 threads>");
    CHECK(s.code == frugal::cuda_errc::cuda_error);
    CHECK(s.message == std::string("frugal_fault_kernel<4096 threads>: ") +
                           cudaGetErrorString(cudaErrorInvalidConfiguration));
  }
  SUBCASE("more dynamic shared memory than any block may have") {
    frugal_fault_kernel<<<1, 32, (16u << 20), stream>>>(nullptr);
    const fc::status s = fc::launch_status("frugal_fault_kernel<16 MiB smem>");
    CHECK(s.code == frugal::cuda_errc::cuda_error);
    CHECK(contains(s.message, "frugal_fault_kernel<16 MiB smem>: "));
  }
  // launch_status consumed the error: the next check is clean and the next GEMM runs.
  CHECK(static_cast<bool>(fc::launch_status("nothing launched")));
  CHECK(p.run_and_check(stream) == 0);
  CHECK(p.run_and_check(stream, fc::gemm_tile::large) == 0);
}

TEST_CASE(
    "launch errors: a failed launch inside gemm_w8a8 is a status naming its kernel; the next one works" *
    FRUGAL_NEEDS_GPU) {
  using L = fc::kernel::tile_large;
  const auto large_kernel = fc::kernel::gemm_s8s8_s32_tensorop_sm80<L>;
  fc::stream_guard stream;
  w8a8_problem p;
  CHECK(p.run_and_check(stream, fc::gemm_tile::large) == 0);  // frugal raises the kernel's smem limit once
  // Someone else lowers it behind frugal's back: the kernel's 128 KiB launch is now an invalid argument.
  REQUIRE(cudaFuncSetAttribute(large_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0) == cudaSuccess);
  p.c.fill_bytes(0xFF);
  const fc::status s = fc::run(p.args(fc::gemm_tile::large), stream);
  CHECK(s.code == frugal::cuda_errc::cuda_error);
  CHECK(contains(s.message, "gemm_s8s8_s32_tensorop_sm80<128x128>: "));
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);  // nothing sticky: the stream is fine
  CHECK(p.untouched());                                   // and the kernel did not run
  // Another kernel is unaffected, and restoring the limit makes the large tile work again.
  CHECK(p.run_and_check(stream, fc::gemm_tile::small) == 0);
  REQUIRE(cudaFuncSetAttribute(large_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::smem_bytes) ==
          cudaSuccess);
  CHECK(p.run_and_check(stream, fc::gemm_tile::large) == 0);
}

TEST_CASE(
    "unsupported shapes: every GEMM entry point refuses with real device buffers, and a valid call "
    "right after is correct" *
    FRUGAL_NEEDS_GPU) {
  const fc::device_info dev = current_device();
  fc::stream_guard stream;
  constexpr int m = 4, n = 64, k = 128, g = 64;
  // Small integers: every product and sum is exact in fp16 inputs and an fp32 accumulator.
  std::vector<__half> hx(m * k);
  std::vector<std::int8_t> hw8(n * k);
  std::vector<std::uint8_t> hw4(n * k / 2);
  std::vector<int> q4(n * k);
  for (int i = 0; i < m * k; ++i) hx[i] = __float2half(static_cast<float>(i % 5 - 2));
  for (int i = 0; i < n * k; ++i) {
    hw8[i] = static_cast<std::int8_t>(i % 7 - 3);
    q4[i] = i % 16 - 8;
  }
  for (int i = 0; i < n * k / 2; ++i)
    hw4[i] = static_cast<std::uint8_t>((q4[2 * i] & 0xF) | ((q4[2 * i + 1] & 0xF) << 4));
  auto x = upload(hx);
  auto w8 = upload(hw8);
  auto w4 = upload(hw4);
  auto xb = upload(std::vector<__half>(n * k, __float2half(1.0f)));  // fp16 B for gemm_f16: all ones
  auto scale = upload(std::vector<float>(n, 1.0f));
  auto gscale = upload(std::vector<__half>(n * (k / g), __float2half(1.0f)));
  fc::device_buffer<float> c;
  REQUIRE(static_cast<bool>(fc::device_buffer<float>::create(std::size_t(m) * n, c)));

  // want(i, j) = sum_l x[i][l] * w(j, l); checks C after a run, exactly.
  auto check_c = [&](auto w_of) {
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    std::vector<float> hc(std::size_t(m) * n);
    c.download(hc.data(), hc.size());
    long bad = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        float want = 0;
        for (int l = 0; l < k; ++l) want += __half2float(hx[i * k + l]) * static_cast<float>(w_of(j, l));
        bad += hc[std::size_t(i) * n + j] != want;
      }
    return bad;
  };
  auto refused = [](const fc::status& s, frugal::cuda_errc want, const char* part) {
    CHECK(s.code == want);
    CHECK_MESSAGE(contains(s.message, part), s.message);
  };

  SUBCASE("gemm_w8a8") {
    w8a8_problem p;
    auto a = p.args();
    a.k = 24;
    a.lda = a.ldb = 32;
    refused(fc::run(a, stream), frugal::cuda_errc::invalid_k, "K (24) must be a multiple of 16");
    a = p.args();
    a.a = p.a.data() + 1;
    refused(fc::run(a, stream), frugal::cuda_errc::misaligned_operand, "a must be 16-byte aligned");
    a = p.args();
    a.c_type = frugal::element_type::i8;
    refused(fc::run(a, stream), frugal::cuda_errc::unsupported_type, "output type i8");
    a = p.args();
    a.c_type = frugal::element_type::f16;  // scales are required for a dequantised output
    refused(fc::run(a, stream), frugal::cuda_errc::invalid_pointer, "scale_a is null");
    if (dev.cc_major == 9 && dev.cc_minor == 0) {
      MESSAGE("sm_90 device: the wgmma tile is supported here, no unsupported_arch case to provoke");
    } else {
      refused(fc::run(p.args(fc::gemm_tile::wgmma_sm90), stream), frugal::cuda_errc::unsupported_arch,
              "the wgmma tile needs sm_90a");
    }
    CHECK(p.run_and_check(stream) == 0);
  }
  SUBCASE("gemm_f16") {
    fc::gemm_f16_arguments a{.m = m,
                             .n = n,
                             .k = k,
                             .a = x.data(),
                             .lda = k,
                             .b = xb.data(),
                             .ldb = k,
                             .c = c.data(),
                             .ldc = n,
                             .c_type = frugal::element_type::f32};
    auto bad = a;
    bad.k = 12;
    bad.lda = bad.ldb = 16;
    refused(fc::run(bad, stream), frugal::cuda_errc::invalid_k, "K (12) must be a multiple of 8");
    bad = a;
    bad.ldb = k + 4;
    refused(fc::run(bad, stream), frugal::cuda_errc::misaligned_operand, "ldb (132) must be a multiple of 8");
    bad = a;
    bad.ab_type = frugal::element_type::i8;
    refused(fc::run(bad, stream), frugal::cuda_errc::unsupported_type, "input type i8");
    c.fill_bytes(0xFF);
    const fc::status s = fc::run(a, stream);
    REQUIRE_MESSAGE(static_cast<bool>(s), s.str());
    CHECK(check_c([](int, int) { return 1; }) == 0);
  }
  SUBCASE("gemm_w8a16") {
    fc::gemm_w8a16_arguments a{.m = m,
                               .n = n,
                               .k = k,
                               .x = x.data(),
                               .ldx = k,
                               .w = w8.data(),
                               .ldw = k,
                               .scale = scale.data(),
                               .c = c.data(),
                               .ldc = n,
                               .c_type = frugal::element_type::f32,
                               .split_k = 1};
    auto bad = a;
    bad.k = 24;
    refused(fc::run(bad, stream), frugal::cuda_errc::invalid_k, "K (24) must be a multiple of 16");
    bad = a;
    bad.k = bad.ldx = bad.ldw = 1024;  // 16 steps of 64: room for 4 slices (never reached: refused first)
    bad.split_k = 4;                   // split-K without the workspace it needs
    refused(fc::run(bad, stream), frugal::cuda_errc::workspace_too_small,
            "split-K needs 4096 bytes of workspace, got 0");
    bad = a;
    bad.c_type = frugal::element_type::bf16;
    refused(fc::run(bad, stream), frugal::cuda_errc::unsupported_type, "output type bf16");
    c.fill_bytes(0xFF);
    const fc::status s = fc::run(a, stream);
    REQUIRE_MESSAGE(static_cast<bool>(s), s.str());
    CHECK(check_c([&](int j, int l) { return hw8[j * k + l]; }) == 0);
  }
  SUBCASE("gemm_w4a16") {
    fc::gemm_w4a16_arguments a{.m = m,
                               .n = n,
                               .k = k,
                               .x = x.data(),
                               .ldx = k,
                               .w = w4.data(),
                               .ldw = k / 2,
                               .group_size = g,
                               .scale = gscale.data(),
                               .c = c.data(),
                               .ldc = n,
                               .c_type = frugal::element_type::f32,
                               .split_k = 1};
    auto bad = a;
    bad.group_size = 96;
    refused(fc::run(bad, stream), frugal::cuda_errc::unsupported_group, "group_size 96 is not 32, 64 or 128");
    bad = a;
    bad.k = 96;  // not a multiple of the group
    refused(fc::run(bad, stream), frugal::cuda_errc::unsupported_group,
            "K (96) must be a multiple of group_size");
    bad = a;
    bad.w = w4.data() + 8;
    refused(fc::run(bad, stream), frugal::cuda_errc::misaligned_operand, "w must be 16-byte aligned");
    c.fill_bytes(0xFF);
    const fc::status s = fc::run(a, stream);
    REQUIRE_MESSAGE(static_cast<bool>(s), s.str());
    CHECK(check_c([&](int j, int l) { return q4[j * k + l]; }) == 0);
  }
}
