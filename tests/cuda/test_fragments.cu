// Host models of what the GEMM kernels do at the register level, built from the kernels' own index functions
// and constants (gemm_tn_sm80.cuh, weight_only_sm80.cuh), so that they cannot drift from the code: the TN
// kernel's swizzled shared memory and ldmatrix addressing pushed through the mma.sync fragment layouts of the
// PTX ISA, and the weight-only kernels' lane-to-k mapping, int4 nibble pairs and PRMT pairing. Also the
// registry of prepared kernels. None of it needs a device.
#include <cuda_fp16.h>
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "frugal/cuda/gemm/device/prepared.cuh"
#include "frugal/cuda/gemm/kernel/gemm_tn_sm80.cuh"
#include "frugal/cuda/gemm/kernel/weight_only_sm80.cuh"

namespace fc = frugal::cuda;
namespace fk = frugal::cuda::kernel;

namespace {

struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// ---- The PTX ISA's fragment layouts (the independent reference), at byte level: both the int8 m16n8k32 and
// the fp16/bf16 m16n8k16 fragments hold 4 consecutive bytes of K per register.
// A (16 x 32 bytes): register r of lane l holds row gid + 8*(r&1), bytes tig*4 + 16*(r>>1) .. +3.
int a_frag_row(int lane, int reg) { return (lane >> 2) + ((reg & 1) ? 8 : 0); }
int a_frag_kbyte(int lane, int reg) { return (lane & 3) * 4 + ((reg & 2) ? 16 : 0); }
// B (32 bytes x 8): register r holds column (n) gid, bytes tig*4 + 16*r .. +3.
int b_frag_kbyte(int lane, int reg) { return (lane & 3) * 4 + 16 * reg; }
// C/D (16 x 8): element e of lane l is row gid + 8*(e>>1), column tig*2 + (e&1).
int c_frag_row(int lane, int e) { return (lane >> 2) + ((e >> 1) ? 8 : 0); }
int c_frag_col(int lane, int e) { return (lane & 3) * 2 + (e & 1); }

using word = std::array<std::uint8_t, 4>;

// ldmatrix.x4: lanes 8j..8j+7 give the row addresses of matrix j; lane t receives, in register j, the 4 bytes
// at (t%4)*4 of row t/4 of matrix j.
std::array<std::array<word, 4>, 32> ldmatrix_x4(const std::vector<std::uint8_t>& smem,
                                                const std::array<int, 32>& addr) {
  std::array<std::array<word, 4>, 32> regs{};
  for (int t = 0; t < 32; ++t)
    for (int j = 0; j < 4; ++j) {
      const int a = addr[8 * j + t / 4] + (t % 4) * 4;
      for (int b = 0; b < 4; ++b) regs[t][j][b] = smem[a + b];
    }
  return regs;
}

// One int8 mma m16n8k32 on the fragments: D[16][8] += A[16][32] * B[32][8].
void mma_s8(std::array<std::array<int, 4>, 32>& d, const std::array<std::array<word, 4>, 32>& a,
            const std::array<std::array<word, 2>, 32>& b) {
  int am[16][32] = {}, bm[32][8] = {};
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r)
      for (int x = 0; x < 4; ++x)
        am[a_frag_row(l, r)][a_frag_kbyte(l, r) + x] = static_cast<std::int8_t>(a[l][r][x]);
    for (int r = 0; r < 2; ++r)
      for (int x = 0; x < 4; ++x) bm[b_frag_kbyte(l, r) + x][l >> 2] = static_cast<std::int8_t>(b[l][r][x]);
  }
  for (int l = 0; l < 32; ++l)
    for (int e = 0; e < 4; ++e) {
      int s = 0;
      for (int k = 0; k < 32; ++k) s += am[c_frag_row(l, e)][k] * bm[k][c_frag_col(l, e)];
      d[l][e] += s;
    }
}

// The TN kernel on one block tile and one 128-byte K stage: the loader's swizzled layout, the kernel's
// ldmatrix addresses (tn_roles), the mma, and the epilogue's coordinates (tn_acc_row/col), against A·Bᵀ.
template <class Cfg>
long tn_mismatches(rng& r) {
  constexpr int kb = Cfg::bk_bytes;
  std::vector<std::uint8_t> A(Cfg::BM * kb), B(Cfg::BN * kb);
  for (auto& v : A) v = static_cast<std::uint8_t>(r.next());
  for (auto& v : B) v = static_cast<std::uint8_t>(r.next());
  std::vector<std::uint8_t> sa(Cfg::BM * kb), sb(Cfg::BN * kb);
  for (int row = 0; row < Cfg::BM; ++row)
    for (int c = 0; c < kb / 16; ++c) std::memcpy(&sa[fk::swizzle(row, c)], &A[row * kb + c * 16], 16);
  for (int row = 0; row < Cfg::BN; ++row)
    for (int c = 0; c < kb / 16; ++c) std::memcpy(&sb[fk::swizzle(row, c)], &B[row * kb + c * 16], 16);

  std::vector<int> got(Cfg::BM * Cfg::BN, 0x7F7F7F7F);
  for (int warp = 0; warp < Cfg::WM * Cfg::WN; ++warp) {
    std::array<std::array<int, 4>, 32> acc[Cfg::MF][Cfg::NF] = {};
    for (int ks = 0; ks < kb / 32; ++ks) {
      std::array<std::array<word, 4>, 32> af[Cfg::MF];
      std::array<std::array<word, 2>, 32> bf[Cfg::NF];
      for (int i = 0; i < Cfg::MF; ++i) {
        std::array<int, 32> addr{};
        for (int l = 0; l < 32; ++l) {
          const fk::tn_lane_roles ro = fk::tn_roles<Cfg>(warp, l);
          addr[l] = fk::swizzle(ro.a_row + i * 16, ks * 2 + ro.a_chunk);
        }
        af[i] = ldmatrix_x4(sa, addr);
      }
      for (int j = 0; j < Cfg::NF; j += 2) {
        std::array<int, 32> addr{};
        for (int l = 0; l < 32; ++l) {
          const fk::tn_lane_roles ro = fk::tn_roles<Cfg>(warp, l);
          addr[l] = fk::swizzle(ro.b_row + j * 8, ks * 2 + ro.b_chunk);
        }
        const auto regs = ldmatrix_x4(sb, addr);
        for (int l = 0; l < 32; ++l) {
          bf[j][l] = {regs[l][0], regs[l][1]};
          bf[j + 1][l] = {regs[l][2], regs[l][3]};
        }
      }
      for (int i = 0; i < Cfg::MF; ++i)
        for (int j = 0; j < Cfg::NF; ++j) mma_s8(acc[i][j], af[i], bf[j]);
    }
    for (int i = 0; i < Cfg::MF; ++i)
      for (int j = 0; j < Cfg::NF; ++j)
        for (int l = 0; l < 32; ++l)
          for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e)
              got[fk::tn_acc_row<Cfg>(warp, l, i, h) * Cfg::BN + fk::tn_acc_col<Cfg>(warp, l, j, e)] =
                  acc[i][j][l][2 * h + e];
  }
  long bad = 0;
  for (int m = 0; m < Cfg::BM; ++m)
    for (int n = 0; n < Cfg::BN; ++n) {
      int want = 0;
      for (int k = 0; k < kb; ++k)
        want += static_cast<std::int8_t>(A[m * kb + k]) * static_cast<std::int8_t>(B[n * kb + k]);
      bad += got[m * Cfg::BN + n] != want;
    }
  return bad;
}

// ldmatrix phases (8 row addresses each) whose rows share a 16-byte bank group, i.e. conflict.
template <class Cfg>
int tn_conflicted_phases() {
  int conflicts = 0;
  for (int warp = 0; warp < Cfg::WM * Cfg::WN; ++warp)
    for (int ks = 0; ks < Cfg::bk_bytes / 32; ++ks)
      for (bool b : {false, true}) {
        std::array<int, 32> addr{};
        for (int l = 0; l < 32; ++l) {
          const fk::tn_lane_roles ro = fk::tn_roles<Cfg>(warp, l);
          addr[l] =
              b ? fk::swizzle(ro.b_row, ks * 2 + ro.b_chunk) : fk::swizzle(ro.a_row, ks * 2 + ro.a_chunk);
        }
        for (int j = 0; j < 4; ++j) {
          std::set<int> groups;
          for (int q = 0; q < 8; ++q) groups.insert(addr[8 * j + q] % 128 / 16);
          conflicts += groups.size() != 8;
        }
      }
  return conflicts;
}

// ---- Weight-only: host versions of the device intrinsics the dequant uses.
std::uint32_t byte_perm(std::uint32_t x, std::uint32_t y, unsigned sel) {
  const std::uint64_t v = (static_cast<std::uint64_t>(y) << 32) | x;
  std::uint32_t r = 0;
  for (int i = 0; i < 4; ++i)
    r |= static_cast<std::uint32_t>((v >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return r;
}
float half_bits(std::uint16_t b) {
  __half_raw raw;
  raw.x = b;
  return __half2float(__half(raw));
}
std::uint16_t to_half_bits(float f) { return __half_raw(__float2half_rn(f)).x; }
std::array<float, 2> halves(std::uint32_t v) { return {half_bits(v & 0xFFFF), half_bits(v >> 16)}; }

// One fp16 mma m16n8k16 on fragments given as value pairs: A reg r of lane l is row gid + 8*(r&1), k slots
// tig*2 + 8*(r>>1) .. +1; B reg r is column gid, k slots tig*2 + 8*r .. +1 (PTX ISA).
void mma_f16(double (&d)[16][8], const std::array<std::array<float, 2>, 4> (&a)[32],
             const std::array<std::array<float, 2>, 2> (&b)[32]) {
  double am[16][16] = {}, bm[16][8] = {};
  for (int l = 0; l < 32; ++l) {
    const int gid = l >> 2, tig = l & 3;
    for (int r = 0; r < 4; ++r)
      for (int x = 0; x < 2; ++x) am[gid + ((r & 1) ? 8 : 0)][tig * 2 + ((r & 2) ? 8 : 0) + x] = a[l][r][x];
    for (int r = 0; r < 2; ++r)
      for (int x = 0; x < 2; ++x) bm[tig * 2 + 8 * r + x][gid] = b[l][r][x];
  }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) d[m][n] += am[m][k] * bm[k][n];
}

}  // namespace

TEST_CASE("TN kernel model: the swizzled tiles, ldmatrix roles and epilogue coordinates give A x B^T") {
  rng r{1};
  CHECK(tn_mismatches<fk::tile_large>(r) == 0);
  CHECK(tn_mismatches<fk::tile_small>(r) == 0);
}

TEST_CASE("TN kernel model: no ldmatrix phase of either tile has a shared-memory bank conflict") {
  CHECK(tn_conflicted_phases<fk::tile_large>() == 0);
  CHECK(tn_conflicted_phases<fk::tile_small>() == 0);
}

TEST_CASE("TN kernel model: the swizzle is a permutation of each 128-byte row's 16-byte chunks") {
  for (int row = 0; row < 16; ++row) {
    std::set<int> seen;
    for (int c = 0; c < 8; ++c) {
      const int a = fk::swizzle(row, c);
      CHECK(a / 128 == row);
      CHECK(a % 16 == 0);
      seen.insert(a);
    }
    CHECK(seen.size() == 8u);
  }
}

TEST_CASE("weight-only model: int4 nibble pairs and the PRMT pairing of activations give X x Q^T") {
  using cfg = fk::weight_only_config<true, 4>;
  using xt = fk::x_traits<__half>;
  rng r{2};
  constexpr int K = cfg::step_k;  // one warp iteration
  float X[16][K];
  int Q[8][K];
  std::uint8_t packed[8][K / 2];
  for (auto& row : X)
    for (float& v : row) v = half_bits(to_half_bits(static_cast<float>(r.next() % 17) / 8.0f - 1.0f));
  for (auto& row : Q)
    for (int& q : row) q = static_cast<int>(r.next() % 16) - 8;
  for (int n = 0; n < 8; ++n)
    for (int j = 0; j < K / 2; ++j)
      packed[n][j] = static_cast<std::uint8_t>((Q[n][2 * j] & 0xF) | ((Q[n][2 * j + 1] & 0xF) << 4));
  auto x_word = [&](int row,
                    int k) {  // two consecutive activations as the kernel's 32-bit register holds them
    return static_cast<std::uint32_t>(to_half_bits(X[row][k])) |
           (static_cast<std::uint32_t>(to_half_bits(X[row][k + 1])) << 16);
  };
  double D[16][8] = {};
  for (int wi = 0; wi < 4; ++wi)
    for (int st = 0; st < 2; ++st) {
      std::array<std::array<float, 2>, 4> a[32];
      std::array<std::array<float, 2>, 2> b[32];
      for (int l = 0; l < 32; ++l) {
        const int gid = l >> 2, tig = l & 3;
        const int k = cfg::lane_k_begin(0, tig);
        std::uint32_t u = 0;
        std::memcpy(&u, &packed[gid][k / 2 + 4 * wi], 4);
        std::array<float, 2> bq[4];
        for (int q = 0; q < 4; ++q) {
          const std::uint32_t v = ((u >> (4 * q)) & fk::nibble_pair_mask) ^ xt::magic_s4;
          const auto h = halves(v);
          bq[q] = {h[0] - xt::bias_s4, h[1] - xt::bias_s4};
        }
        // xra[4*wi + st] holds k + 8*wi + 2*st (and +1); xra[4*wi + st + 2] holds 4 further.
        const int kx = k + 8 * wi + 2 * st;
        const std::uint32_t lo0 = x_word(gid, kx), hi0 = x_word(gid, kx + 4);
        const std::uint32_t lo1 = x_word(gid + 8, kx), hi1 = x_word(gid + 8, kx + 4);
        a[l] = {halves(byte_perm(lo0, hi0, fk::prmt_low_halves)),
                halves(byte_perm(lo1, hi1, fk::prmt_low_halves)),
                halves(byte_perm(lo0, hi0, fk::prmt_high_halves)),
                halves(byte_perm(lo1, hi1, fk::prmt_high_halves))};
        b[l] = {bq[2 * st], bq[2 * st + 1]};
      }
      mma_f16(D, a, b);
    }
  long bad = 0;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double want = 0;
      for (int k = 0; k < K; ++k) want += static_cast<double>(X[m][k]) * Q[n][k];
      bad += D[m][n] != want;  // small integers over 8: exact in double
    }
  CHECK(bad == 0);
}

TEST_CASE("weight-only model: int8 lanes feed the mma the k slots their activations hold") {
  using cfg = fk::weight_only_config<false, 4>;
  rng r{3};
  constexpr int K = cfg::step_k;
  float X[16][K];
  int W[8][K];
  for (auto& row : X)
    for (float& v : row) v = static_cast<float>(r.next() % 9) - 4.0f;
  for (auto& row : W)
    for (int& w : row) w = static_cast<int>(r.next() % 256) - 128;
  double D[16][8] = {};
  for (int wi = 0; wi < 4; ++wi) {
    std::array<std::array<float, 2>, 4> a[32];
    std::array<std::array<float, 2>, 2> b[32];
    for (int l = 0; l < 32; ++l) {
      const int gid = l >> 2, tig = l & 3;
      const int k =
          cfg::lane_k_begin(0, tig) + 4 * wi;  // wr[wi]: 4 weights; xra[2wi], xra[2wi+1]: 4 activations
      b[l] = {std::array<float, 2>{float(W[gid][k]), float(W[gid][k + 1])},
              std::array<float, 2>{float(W[gid][k + 2]), float(W[gid][k + 3])}};
      a[l] = {std::array<float, 2>{X[gid][k], X[gid][k + 1]},
              std::array<float, 2>{X[gid + 8][k], X[gid + 8][k + 1]},
              std::array<float, 2>{X[gid][k + 2], X[gid][k + 3]},
              std::array<float, 2>{X[gid + 8][k + 2], X[gid + 8][k + 3]}};
    }
    mma_f16(D, a, b);
  }
  long bad = 0;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double want = 0;
      for (int k = 0; k < K; ++k) want += static_cast<double>(X[m][k]) * W[n][k];
      bad += D[m][n] != want;
    }
  CHECK(bad == 0);
}

TEST_CASE("weight-only model: the fp16 magic numbers turn int8 and int4 codes into their exact values") {
  using xt = fk::x_traits<__half>;
  long bad = 0;
  for (int w = -128; w < 128; ++w) {
    // s8x4: 1024 + (w ^ 0x80) as a half, less bias_s8 (1152).
    const std::uint32_t u = (static_cast<std::uint32_t>(w) & 0xFF) ^ 0x80u;
    const float v = half_bits(static_cast<std::uint16_t>(byte_perm(u, 0x64646464u, 0x4140) & 0xFFFF)) -
                    half_bits(static_cast<std::uint16_t>(xt::bias_s8 & 0xFFFF));
    bad += v != static_cast<float>(w);
  }
  for (int q = -8; q < 8; ++q) {
    const float v = half_bits(
        static_cast<std::uint16_t>((static_cast<std::uint32_t>(q) & 0xF) ^ (xt::magic_s4 & 0xFFFF)));
    bad += v - xt::bias_s4 != static_cast<float>(q);
  }
  for (int q = 0; q < 16; ++q)
    for (int zp = 0; zp < 16; ++zp) {
      const float v = half_bits(static_cast<std::uint16_t>(q | (xt::magic & 0xFFFF)));
      bad += v - (xt::bias_u4 + static_cast<float>(zp)) != static_cast<float>(q - zp);
    }
  CHECK(bad == 0);
  using bt = fk::x_traits<__nv_bfloat16>;
  CHECK(bt::bias_s4 - bt::bias_u4 == xt::bias_s4 - xt::bias_u4);  // both xor 8 into the code
}

namespace {
__global__ void frugal_prep_kernel_a(fk::gemm_tn_params) {}
__global__ void frugal_prep_kernel_b(fk::gemm_tn_params) {}
}  // namespace

TEST_CASE("prepared kernels: two kernels of one signature are prepared apart, each once per device") {
  // Like the i8, f16 and bf16 kernels of one tile: one function-pointer type, two kernels.
  static_assert(std::is_same_v<decltype(&frugal_prep_kernel_a), decltype(&frugal_prep_kernel_b)>);
  fc::detail::prepared_kernels reg;
  const void* ka = reinterpret_cast<const void*>(&frugal_prep_kernel_a);
  const void* kb = reinterpret_cast<const void*>(&frugal_prep_kernel_b);
  REQUIRE(ka != kb);
  int calls_a = 0, calls_b = 0;
  auto prep_a = [&] {
    ++calls_a;
    return fc::status::ok();
  };
  auto prep_b = [&] {
    ++calls_b;
    return fc::status::ok();
  };
  CHECK(static_cast<bool>(reg.ensure(ka, 0, prep_a)));
  CHECK(reg.prepared(ka, 0));
  CHECK_FALSE(reg.prepared(kb, 0));  // a's setup does not stand in for b's
  CHECK(static_cast<bool>(reg.ensure(kb, 0, prep_b)));
  CHECK(calls_b == 1);
  CHECK(static_cast<bool>(reg.ensure(ka, 0, prep_a)));
  CHECK(static_cast<bool>(reg.ensure(kb, 0, prep_b)));
  CHECK(calls_a == 1);
  CHECK(calls_b == 1);
  CHECK_FALSE(reg.prepared(ka, 1));  // and each device is its own
  CHECK(static_cast<bool>(reg.ensure(ka, 1, prep_a)));
  CHECK(calls_a == 2);
  CHECK(reg.size() == 3u);
}

TEST_CASE("prepared kernels: a failed preparation is returned and tried again, not remembered") {
  fc::detail::prepared_kernels reg;
  const void* k = reinterpret_cast<const void*>(&frugal_prep_kernel_a);
  int calls = 0;
  auto failing = [&] {
    ++calls;
    return fc::make_status(frugal::cuda_errc::unsupported_arch, "no image");
  };
  const fc::status s = reg.ensure(k, 0, failing);
  CHECK(s.code == frugal::cuda_errc::unsupported_arch);
  CHECK(s.message == "no image");
  CHECK_FALSE(reg.prepared(k, 0));
  CHECK(reg.ensure(k, 0, failing).code == frugal::cuda_errc::unsupported_arch);
  CHECK(calls == 2);
  CHECK(static_cast<bool>(reg.ensure(k, 0, [] { return fc::status::ok(); })));
  CHECK(reg.prepared(k, 0));
}
