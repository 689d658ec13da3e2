// Host-side checks of the GEMM API: every can_implement status, split-K and workspace sizing, and the
// dispatcher's table. Needs no device; devices are described by a device_info.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "frugal/cuda/gemm.cuh"

namespace fc = frugal::cuda;

namespace {
const fc::device_info ampere{8, 0, 108};
const fc::device_info hopper{9, 0, 132};
const fc::device_info turing{7, 5, 40};

// Only alignment is inspected, never the contents, so host storage stands in for device pointers.
alignas(256) std::int8_t a8[4096];
alignas(256) std::int8_t b8[4096];
alignas(256) float scales[64];
alignas(256) std::int32_t i32[64];
alignas(256) unsigned char out[8192];

fc::gemm_w8a8_arguments w8a8() {
  return {.m = 16,
          .n = 32,
          .k = 64,
          .a = a8,
          .lda = 64,
          .b = b8,
          .ldb = 64,
          .scale_a = scales,
          .scale_b = scales,
          .c = out,
          .ldc = 32,
          .c_type = frugal::element_type::f16};
}
fc::gemm_f16_arguments f16() {
  return {.m = 16,
          .n = 32,
          .k = 64,
          .ab_type = frugal::element_type::f16,
          .a = a8,
          .lda = 64,
          .b = b8,
          .ldb = 64,
          .c = out,
          .ldc = 32,
          .c_type = frugal::element_type::f16};
}
fc::gemm_w8a16_arguments w8a16() {
  return {.m = 1,
          .n = 32,
          .k = 64,
          .x = a8,
          .ldx = 64,
          .w = b8,
          .ldw = 64,
          .scale = scales,
          .c = out,
          .ldc = 32,
          .split_k = 1};
}
fc::gemm_w4a16_arguments w4a16() {
  return {.m = 1,
          .n = 32,
          .k = 128,
          .x = a8,
          .ldx = 128,
          .w = reinterpret_cast<std::uint8_t*>(b8),
          .ldw = 64,
          .group_size = 64,
          .scale = reinterpret_cast<const __half*>(scales),
          .c = out,
          .ldc = 32,
          .split_k = 1};
}

template <class Args>
frugal::cuda_errc code(const Args& a, const fc::device_info& dev = ampere) {
  return fc::can_implement(a, dev).code;
}
template <class Args>
std::string message(const Args& a, const fc::device_info& dev = ampere) {
  return fc::can_implement(a, dev).message;
}
}  // namespace

TEST_CASE("cuda status: codes print their names and a status is true only on success") {
  CHECK(std::string(frugal::to_string(frugal::cuda_errc::misaligned_operand)) == "misaligned_operand");
  fc::status ok = fc::status::ok();
  CHECK(static_cast<bool>(ok));
  fc::status bad = fc::make_status(frugal::cuda_errc::invalid_k, "K is 7");
  CHECK_FALSE(static_cast<bool>(bad));
  CHECK(bad.str() == "invalid_k: K is 7");
}

TEST_CASE("gemm_w8a8: can_implement names each unsupported problem") {
  CHECK(code(w8a8()) == frugal::cuda_errc::success);
  CHECK(code(w8a8(), hopper) == frugal::cuda_errc::success);
  SUBCASE("bad M, N or K") {
    auto a = w8a8();
    a.m = 0;
    CHECK(code(a) == frugal::cuda_errc::invalid_problem);
    CHECK(message(a).find("M, N and K must be > 0") != std::string::npos);
    a = w8a8();
    a.n = -1;
    CHECK(code(a) == frugal::cuda_errc::invalid_problem);
  }
  SUBCASE("K not a multiple of 16") {
    auto a = w8a8();
    a.k = 40;
    CHECK(code(a) == frugal::cuda_errc::invalid_k);
    CHECK(message(a).find("K (40)") != std::string::npos);
  }
  SUBCASE("null pointers") {
    auto a = w8a8();
    a.a = nullptr;
    CHECK(code(a) == frugal::cuda_errc::invalid_pointer);
    CHECK(message(a).find("a is null") != std::string::npos);
    a = w8a8();
    a.scale_b = nullptr;
    CHECK(code(a) == frugal::cuda_errc::invalid_pointer);
    CHECK(message(a).find("scale_b") != std::string::npos);
    a = w8a8();
    a.zero_a = i32;
    CHECK(code(a) == frugal::cuda_errc::invalid_pointer);
    CHECK(message(a).find("colsum_b") != std::string::npos);
    a.colsum_b = i32;
    CHECK(code(a) == frugal::cuda_errc::success);
    a = w8a8();
    a.c = nullptr;
    CHECK(code(a) == frugal::cuda_errc::invalid_pointer);
  }
  SUBCASE("raw int32 output needs no scales") {
    auto a = w8a8();
    a.c_type = frugal::element_type::i32;
    a.scale_a = a.scale_b = nullptr;
    CHECK(code(a) == frugal::cuda_errc::success);
  }
  SUBCASE("misaligned pointers and leading dimensions") {
    auto a = w8a8();
    a.a = a8 + 8;
    CHECK(code(a) == frugal::cuda_errc::misaligned_operand);
    CHECK(message(a).find("16-byte aligned") != std::string::npos);
    a = w8a8();
    a.ldb = 72;
    CHECK(code(a) == frugal::cuda_errc::misaligned_operand);
    CHECK(message(a).find("ldb (72)") != std::string::npos);
    a = w8a8();
    a.c = out + 1;
    CHECK(code(a) == frugal::cuda_errc::misaligned_operand);
    a = w8a8();
    a.lda = 48;
    CHECK(code(a) == frugal::cuda_errc::invalid_problem);
    a = w8a8();
    a.ldc = 31;
    CHECK(code(a) == frugal::cuda_errc::invalid_problem);
  }
  SUBCASE("unsupported output type") {
    auto a = w8a8();
    a.c_type = frugal::element_type::i8;
    CHECK(code(a) == frugal::cuda_errc::unsupported_type);
    CHECK(message(a).find("i8") != std::string::npos);
  }
  SUBCASE("architecture") {
    CHECK(code(w8a8(), turing) == frugal::cuda_errc::unsupported_arch);
    CHECK(message(w8a8(), turing).find("sm_75") != std::string::npos);
  }
}

TEST_CASE("mma.sync GEMMs: small M or too few large tiles pick the 32x64 tile, unless a tile is forced") {
  auto a = w8a8();
  CHECK(fc::selected_tile(a, hopper) == fc::gemm_tile::small);  // M = 16
  a.m = a.n = 4096;
  CHECK(fc::selected_tile(a, hopper) == fc::gemm_tile::large);  // 1024 large tiles
  a.n = 256;
  CHECK(fc::selected_tile(a, hopper) == fc::gemm_tile::small);  // 64 large tiles < 132 SMs
  a.tile = fc::gemm_tile::large;
  CHECK(fc::selected_tile(a, hopper) == fc::gemm_tile::large);
  auto f = f16();
  f.m = 65;
  f.n = 128 * 132;
  CHECK(fc::selected_tile(f, hopper) == fc::gemm_tile::large);
  f.tile = fc::gemm_tile::small;
  CHECK(fc::selected_tile(f, hopper) == fc::gemm_tile::small);
  SUBCASE("the wgmma kernel is opt-in and needs sm_90a") {
    auto w = w8a8();
    w.tile = fc::gemm_tile::wgmma_sm90;
    CHECK(code(w, hopper) == frugal::cuda_errc::success);
    CHECK(code(w, ampere) == frugal::cuda_errc::unsupported_arch);
    CHECK(message(w, ampere).find("sm_80") != std::string::npos);
    CHECK(code(w, fc::device_info{10, 0, 148}) == frugal::cuda_errc::unsupported_arch);
    auto g = f16();
    g.tile = fc::gemm_tile::wgmma_sm90;
    CHECK(code(g, hopper) == frugal::cuda_errc::success);
    CHECK(code(g, ampere) == frugal::cuda_errc::unsupported_arch);
    CHECK(fc::selected_tile(w8a8(), hopper) != fc::gemm_tile::wgmma_sm90);
  }
}

TEST_CASE("gemm_f16: can_implement checks types, K and alignment") {
  CHECK(code(f16()) == frugal::cuda_errc::success);
  auto a = f16();
  a.ab_type = frugal::element_type::i8;
  CHECK(code(a) == frugal::cuda_errc::unsupported_type);
  a = f16();
  a.c_type = frugal::element_type::i32;
  CHECK(code(a) == frugal::cuda_errc::unsupported_type);
  a = f16();
  a.k = 60;
  CHECK(code(a) == frugal::cuda_errc::invalid_k);
  a = f16();
  a.k = 56;
  a.lda = a.ldb = 56;
  CHECK(code(a) == frugal::cuda_errc::success);
  a.lda = 60;
  CHECK(code(a) == frugal::cuda_errc::misaligned_operand);
  a = f16();
  a.b = b8 + 2;
  CHECK(code(a) == frugal::cuda_errc::misaligned_operand);
  CHECK(code(f16(), turing) == frugal::cuda_errc::unsupported_arch);
}

TEST_CASE("gemm_w8a16 and gemm_w4a16: can_implement checks groups, types and workspace") {
  CHECK(code(w8a16()) == frugal::cuda_errc::success);
  CHECK(code(w4a16()) == frugal::cuda_errc::success);
  SUBCASE("group size") {
    auto a = w4a16();
    a.group_size = 96;
    CHECK(code(a) == frugal::cuda_errc::unsupported_group);
    CHECK(message(a).find("96") != std::string::npos);
    a.group_size = 128;
    a.k = 192;
    a.ldx = 192;
    a.ldw = 96;
    CHECK(code(a) == frugal::cuda_errc::unsupported_group);
    a.group_size = 32;
    CHECK(code(a) == frugal::cuda_errc::success);
  }
  SUBCASE("K, types and pointers") {
    auto a = w8a16();
    a.k = 40;
    CHECK(code(a) == frugal::cuda_errc::invalid_k);
    a = w8a16();
    a.scale = nullptr;
    CHECK(code(a) == frugal::cuda_errc::invalid_pointer);
    a = w8a16();
    a.x_type = frugal::element_type::f32;
    CHECK(code(a) == frugal::cuda_errc::unsupported_type);
    a = w8a16();
    a.c_type = frugal::element_type::bf16;  // activations are f16
    CHECK(code(a) == frugal::cuda_errc::unsupported_type);
    a.c_type = frugal::element_type::f32;
    CHECK(code(a) == frugal::cuda_errc::success);
    auto b = w4a16();
    b.ldw = 32;  // smaller than K/2
    CHECK(code(b) == frugal::cuda_errc::invalid_problem);
    b = w4a16();
    b.ldw = 72;
    CHECK(code(b) == frugal::cuda_errc::misaligned_operand);
    b = w4a16();
    b.split_k = -1;
    CHECK(code(b) == frugal::cuda_errc::invalid_problem);
  }
  SUBCASE("split-K needs a large enough workspace") {
    auto a = w8a16();
    a.k = 8192;
    a.ldx = a.ldw = 8192;
    a.n = a.ldc = 64;
    a.split_k = 4;
    CHECK(fc::resolved_split_k(a, hopper) == 4);
    CHECK(fc::get_workspace_size(a, hopper) == 4u * 1 * 64 * sizeof(float));
    CHECK(code(a, hopper) == frugal::cuda_errc::workspace_too_small);
    alignas(16) static float ws[256];
    a.workspace = ws;
    a.workspace_bytes = sizeof ws;
    CHECK(code(a, hopper) == frugal::cuda_errc::success);
    a.workspace_bytes = 100;
    CHECK(code(a, hopper) == frugal::cuda_errc::workspace_too_small);
  }
  SUBCASE("automatic split-K fills the SMs and gives every warp work") {
    auto a = w4a16();
    a.k = 8192;
    a.n = 8192;
    a.split_k = 0;
    CHECK(fc::resolved_block_n(a) == 64);
    const int s = fc::resolved_split_k(a, hopper);
    CHECK(s >= 2);  // 128 blocks of 64 rows are too few for 4 per SM on 132 SMs
    CHECK((8192 / 64) * s >= 4 * 132);
    a.block_n = 32;
    CHECK(fc::resolved_split_k(a, hopper) * (8192 / 32) >= 4 * 132);
    a.block_n = 0;
    a.n = 4096;
    a.k = 128;
    CHECK(fc::resolved_split_k(a, hopper) == 1);  // one K step: nothing to split
    a.k = 14336;
    a.m = 64;
    const int s64 = fc::resolved_split_k(a, hopper);
    CHECK(s64 >= 1);
    CHECK(s64 <= 16);
    a.n = 1000;
    CHECK(fc::resolved_block_n(a) == 32);  // small N keeps more blocks
    a.block_n = 48;
    CHECK(code(a) == frugal::cuda_errc::invalid_problem);
    CHECK(message(a).find("block_n 48") != std::string::npos);
    auto b = w8a16();
    b.split_k = 100;
    CHECK(fc::resolved_split_k(b, hopper) == 1);  // K = 64 is one step
  }
}

TEST_CASE("quantize_rows: can_implement checks types, K and the int8 output") {
  alignas(16) static float sc[4];
  fc::quantize_rows_arguments q{.m = 4, .k = 64, .x = a8, .ldx = 64, .q = b8, .ldq = 64, .scale = sc};
  CHECK(code(q) == frugal::cuda_errc::success);
  auto r = q;
  r.k = 12;
  CHECK(code(r) == frugal::cuda_errc::invalid_k);
  r = q;
  r.x_type = frugal::element_type::i8;
  CHECK(code(r) == frugal::cuda_errc::unsupported_type);
  r = q;
  r.ldq = 60;
  CHECK(code(r) == frugal::cuda_errc::misaligned_operand);
  CHECK(message(r).find("multiple of 8") != std::string::npos);
  SUBCASE("ldq and q need 8, as documented and as the kernel's 8-byte stores need, not 16") {
    static_assert(fc::quantize_rows_q_align == 8);
    r = q;
    r.ldq = 72;  // a multiple of 8, not of 16
    CHECK(code(r) == frugal::cuda_errc::success);
    r.q = b8 + 8;  // 8-byte aligned, not 16
    CHECK(code(r) == frugal::cuda_errc::success);
    r.q = b8 + 4;
    CHECK(code(r) == frugal::cuda_errc::misaligned_operand);
    r = q;
    r.ldq = 68;
    CHECK(code(r) == frugal::cuda_errc::misaligned_operand);
  }
  r = q;
  r.scale = nullptr;
  CHECK(code(r) == frugal::cuda_errc::invalid_pointer);
  r = q;
  r.m = 0;
  CHECK(code(r) == frugal::cuda_errc::invalid_problem);
}

TEST_CASE("cublaslt baselines: can_implement reflects what cuBLASLt supports") {
  CHECK(static_cast<bool>(fc::cublaslt_gemm_w8a8::can_implement(w8a8())));
  auto a = w8a8();
  a.k = 18;
  a.lda = a.ldb = 18;
  CHECK(fc::cublaslt_gemm_w8a8::can_implement(a).code == frugal::cuda_errc::misaligned_operand);
  CHECK(static_cast<bool>(fc::cublaslt_gemm_f16::can_implement(f16())));
  auto f = f16();
  f.bias = scales;
  CHECK(fc::cublaslt_gemm_f16::can_implement(f).code == frugal::cuda_errc::unsupported_type);
}

TEST_CASE("pair stores: frugal's kernels and the cuBLASLt dequant judge C's alignment by one check") {
  auto a = w8a8();
  CHECK(fc::detail::pair_store_ok(a.c, a.ldc, a.c_type));
  CHECK(fc::cublaslt_gemm_w8a8::epilogue(a).pair_store);
  // Even ldc, but C one f16 element past an aligned address: a half2 store there would be misaligned.
  a.c = out + 2;
  CHECK_FALSE(fc::detail::pair_store_ok(a.c, a.ldc, a.c_type));
  CHECK_FALSE(fc::cublaslt_gemm_w8a8::epilogue(a).pair_store);
  CHECK(code(a) == frugal::cuda_errc::success);  // still runnable, with single stores
  CHECK(static_cast<bool>(fc::cublaslt_gemm_w8a8::can_implement(a)));
  a = w8a8();
  a.ldc = 33;
  CHECK_FALSE(fc::cublaslt_gemm_w8a8::epilogue(a).pair_store);
  a = w8a8();
  a.c_type = frugal::element_type::f32;
  a.c = out + 4;  // 4-byte aligned, not 8
  CHECK_FALSE(fc::cublaslt_gemm_w8a8::epilogue(a).pair_store);
  a.c = out + 8;
  CHECK(fc::cublaslt_gemm_w8a8::epilogue(a).pair_store);
}

TEST_CASE("cublaslt baselines: can_implement refuses an output frugal's own check refuses") {
  auto a = w8a8();
  a.c = out + 1;  // not aligned to f16
  CHECK(code(a) == frugal::cuda_errc::misaligned_operand);
  CHECK(fc::cublaslt_gemm_w8a8::can_implement(a).code == frugal::cuda_errc::misaligned_operand);
  CHECK(fc::cublaslt_gemm_w8a8::can_implement(a).message.find("c is not aligned") != std::string::npos);
  a = w8a8();
  a.ldc = 31;  // smaller than N
  CHECK(fc::cublaslt_gemm_w8a8::can_implement(a).code == frugal::cuda_errc::invalid_problem);
  a = w8a8();
  a.c_type = frugal::element_type::i8;
  CHECK(fc::cublaslt_gemm_w8a8::can_implement(a).code == frugal::cuda_errc::unsupported_type);
  auto f = f16();
  f.c = out + 1;
  CHECK(fc::cublaslt_gemm_f16::can_implement(f).code == frugal::cuda_errc::misaligned_operand);
  f = f16();
  f.ldc = 16;
  CHECK(fc::cublaslt_gemm_f16::can_implement(f).code == frugal::cuda_errc::invalid_problem);
}

TEST_CASE("dispatcher: the default table, and a forced backend wins when it can run") {
  using fc::backend;
  SUBCASE("w8a8") {
    auto a = w8a8();
    a.m = 8;
    CHECK(fc::choose(a, hopper).chosen == backend::frugal);  // small M
    a.m = 4096;
    a.n = a.k = 4096;
    a.lda = a.ldb = a.ldc = 4096;
    CHECK(fc::choose(a, hopper).chosen == backend::cublaslt);
    CHECK(fc::choose(a, ampere).chosen == backend::frugal);
    CHECK(fc::choose(a, hopper, backend::frugal).chosen == backend::frugal);
    CHECK(fc::choose(a, ampere, backend::cublaslt).chosen == backend::cublaslt);
    a.k = 4098;  // cuBLASLt cannot: the request falls back, with a reason
    a.lda = a.ldb = 4098;
    const auto c = fc::choose(a, hopper, backend::cublaslt);
    CHECK(c.chosen == backend::frugal);
    CHECK(std::string(c.reason).find("cannot") != std::string::npos);
  }
  SUBCASE("f16") {
    auto f = f16();
    f.m = 4096;
    CHECK(fc::choose(f, hopper).chosen == backend::cublaslt);
    f.m = 8;
    CHECK(fc::choose(f, ampere).chosen == backend::frugal);
    f.m = 4096;
    f.act = frugal::quant::activation_kind::gelu;  // an epilogue the baseline does not run
    CHECK(fc::choose(f, hopper).chosen == backend::frugal);
    CHECK(fc::choose(f, hopper, backend::cublaslt).chosen == backend::frugal);
  }
}

TEST_CASE("run and can_implement never abort without a device") {
  if (fc::device_count() > 0) {
    // On a GPU machine the device path is exercised by test_cuda_gemm; here only the arch gate is left.
    fc::device_info dev;
    REQUIRE(static_cast<bool>(fc::query_device(dev)));
    CHECK(dev.sm_count > 0);
    return;
  }
  CHECK(fc::can_implement(w8a8()).code == frugal::cuda_errc::cuda_error);
  const fc::status s = fc::run(w8a8());
  CHECK(s.code == frugal::cuda_errc::cuda_error);
  CHECK_FALSE(s.message.empty());
  CHECK(fc::run(w4a16()).code == frugal::cuda_errc::cuda_error);
}

TEST_CASE("get_workspace_size: a failed device query is a status, not a silent 0 bytes" *
          doctest::skip(fc::device_count() > 0)) {
  auto a = w4a16();
  a.k = a.ldx = 8192;
  a.ldw = 4096;
  a.split_k = 4;  // needs a workspace on any device
  std::size_t bytes = 12345;
  const fc::status s = fc::get_workspace_size(a, bytes);
  CHECK(s.code == frugal::cuda_errc::cuda_error);
  CHECK_FALSE(s.message.empty());
  CHECK(bytes == 0u);
  CHECK(fc::get_workspace_size(a, hopper) > 0u);  // the device_info overload needs no device
}

TEST_CASE("can_implement: gelu_erf, the host's exact GELU, is refused by name on every GEMM and baseline") {
  using frugal::quant::activation_kind;
  const auto erf = activation_kind::gelu_erf;
  auto w = w8a8();
  w.act = erf;
  CHECK(code(w) == frugal::cuda_errc::unsupported_activation);
  CHECK(message(w).find("gelu_erf") != std::string::npos);
  CHECK(fc::cublaslt_gemm_w8a8::can_implement(w).code == frugal::cuda_errc::unsupported_activation);
  w.c_type = frugal::element_type::i32;  // raw accumulators: the epilogue, and so the activation, is not run
  CHECK(code(w) == frugal::cuda_errc::success);
  auto f = f16();
  f.act = erf;
  CHECK(code(f) == frugal::cuda_errc::unsupported_activation);
  auto w8 = w8a16();
  w8.act = erf;
  CHECK(code(w8) == frugal::cuda_errc::unsupported_activation);
  auto w4 = w4a16();
  w4.act = erf;
  CHECK(code(w4) == frugal::cuda_errc::unsupported_activation);
  for (const auto act : {activation_kind::none, activation_kind::relu, activation_kind::gelu}) {
    auto ok = w8a8();
    ok.act = act;
    CHECK(code(ok) == frugal::cuda_errc::success);
  }
}
