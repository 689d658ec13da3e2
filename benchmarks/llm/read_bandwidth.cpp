// The machine's sustained read bandwidth: T threads stream-sum disjoint slices of one buffer larger than
// the last-level cache. LLM decode reads every weight once per token, so this is the ceiling its GB/s of
// weights read is compared with.
//
// The widest loads are not always the fastest stream: on the project's Xeon VM the baseline loop (SSE2
// at 16 bytes a load) reads about 15% faster than AVX-512 or AVX2. So every kernel the CPU runs (AVX-512,
// AVX2, the compiler's baseline; chosen at run time, capped by FRUGAL_MAX_CPU_ISA like frugal's kernels)
// is timed and the best is the machine's figure. Each kernel runs one unmeasured pass, then --passes
// timed ones between two barriers. One JSON line per buffer size and thread count: {"threads", "bytes",
// "gb_per_s" (best pass of the best kernel, GB = 1e9 bytes), "median_gb_per_s" (that kernel's median
// pass), "isa" (that kernel), "by_isa" (each kernel's best pass), "passes"}. The buffer holds the words
// 0, 1, 2, ..., so every pass's sum is checked against n(n-1)/2: a kernel that skipped data stops the
// program rather than report a bandwidth it never read.
//
// A VM's reported L3 can be large (480 MiB on the project's Xeon VM), so several sizes are run; trust
// the figures once they stop changing with the size.
//
//   bench_read_bandwidth [--bytes 512M,1G,2G] [--threads 1,2] [--passes 10]
//                        [--isa all|avx512|avx2|portable]
#include <sys/mman.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "frugal/quant/detail/cpu.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#  define BENCH_X86 1
#else
#  define BENCH_X86 0
#endif

namespace {

using word = std::uint64_t;
// Slices are whole multiples of this, so every kernel's unrolled loop covers its slice exactly.
constexpr std::size_t slice_granule = 4096;

enum class isa { portable, avx2, avx512 };

const char* to_string(isa i) {
  switch (i) {
    case isa::portable:
      return "portable";
    case isa::avx2:
      return "avx2";
    case isa::avx512:
      return "avx512";
  }
  return "?";
}

// Four independent accumulators per kernel: one chain of adds would bound the loop at one vector a
// cycle's latency, below what two load ports can take from L3 or memory.
word sum_portable(const word* p, std::size_t n) {
  word a = 0, b = 0, c = 0, d = 0;
  for (std::size_t i = 0; i < n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

#if BENCH_X86
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#  endif
__attribute__((target("avx2"))) word sum_avx2(const word* p, std::size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (std::size_t i = 0; i < n; i += 16) {
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  alignas(32) word lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

__attribute__((target("avx512f"))) word sum_avx512(const word* p, std::size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (std::size_t i = 0; i < n; i += 32) {
    a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
    b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 8));
    c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 16));
    d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 24));
  }
  return static_cast<word>(
      _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d))));
}
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#  endif
#endif

word sum(isa i, const word* p, std::size_t n) {
#if BENCH_X86
  if (i == isa::avx512) return sum_avx512(p, n);
  if (i == isa::avx2) return sum_avx2(p, n);
#endif
  (void)i;
  return sum_portable(p, n);
}

bool supported(isa i) {
  const auto& f = frugal::quant::host_cpu_features();
  return i == isa::portable || (i == isa::avx2 && f.avx2) || (i == isa::avx512 && f.avx512);
}

std::vector<isa> all_supported() {
  std::vector<isa> out;
  for (isa i : {isa::avx512, isa::avx2, isa::portable})
    if (supported(i)) out.push_back(i);
  return out;
}

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "bench_read_bandwidth: %s\nusage: bench_read_bandwidth [--bytes 512M,1G,2G] [--threads 1,2] "
               "[--passes 10] [--isa all|avx512|avx2|portable]\n",
               what.c_str());
  std::exit(2);
}

std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',' || c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::uint64_t parse_count(const std::string& s, const char* option, bool with_suffix) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (const std::exception&) {
    usage_error(std::string(option) + " takes a positive number, not \"" + s + "\"");
  }
  std::uint64_t scale = 1;
  const std::string rest = s.substr(used);
  if (with_suffix && (rest == "K" || rest == "k")) {
    scale = std::uint64_t{1} << 10;
  } else if (with_suffix && (rest == "M" || rest == "m")) {
    scale = std::uint64_t{1} << 20;
  } else if (with_suffix && (rest == "G" || rest == "g")) {
    scale = std::uint64_t{1} << 30;
  } else if (!rest.empty()) {
    usage_error(std::string(option) + " takes " + (with_suffix ? "a size such as 512M or 2G" : "a number") +
                ", not \"" + s + "\"");
  }
  if (v == 0 || v > (std::uint64_t{1} << 44) / scale)
    usage_error(std::string(option) + " value \"" + s + "\" is out of range");
  return v * scale;
}

struct params {
  std::vector<std::uint64_t> bytes;
  std::vector<unsigned> threads;
  unsigned passes = 10;
  std::vector<isa> paths = all_supported();
};

params parse(int argc, char** argv) {
  params p;
  std::string bytes = "512M,1G,2G", threads = "1,2";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf(
          "bench_read_bandwidth [--bytes 512M,1G,2G] [--threads 1,2] [--passes 10] "
          "[--isa all|avx512|avx2|portable]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
    const std::string value = argv[++i];
    if (arg == "--bytes") {
      bytes = value;
    } else if (arg == "--threads") {
      threads = value;
    } else if (arg == "--passes") {
      p.passes =
          static_cast<unsigned>(std::min<std::uint64_t>(parse_count(value, "--passes", false), 100000));
    } else if (arg == "--isa") {
      if (value == "all") {
        p.paths = all_supported();
      } else if (value == "avx512" || value == "avx2" || value == "portable") {
        const isa i = value == "avx512" ? isa::avx512 : value == "avx2" ? isa::avx2 : isa::portable;
        if (!supported(i)) usage_error("--isa " + value + " is not supported by this CPU");
        p.paths = {i};
      } else {
        usage_error("--isa takes all, avx512, avx2 or portable, not \"" + value + "\"");
      }
    } else {
      usage_error("unknown option " + std::string(arg));
    }
  }
  for (const auto& s : split_list(bytes)) p.bytes.push_back(parse_count(s, "--bytes", true));
  for (const auto& s : split_list(threads))
    p.threads.push_back(
        static_cast<unsigned>(std::min<std::uint64_t>(parse_count(s, "--threads", false), 1024)));
  if (p.bytes.empty()) usage_error("--bytes lists no size");
  if (p.threads.empty()) usage_error("--threads lists no count");
  return p;
}

// The sum of the words lo, lo+1, ..., hi-1, modulo 2^64 like the kernels' own adds.
word series(word lo, word hi) {
  const word n = hi - lo, first = lo + lo + n - 1;
  return n % 2 == 0 ? (n / 2) * first : n * (first / 2);
}

struct buffer {
  word* data = nullptr;
  std::size_t bytes = 0;
  explicit buffer(std::size_t b) : bytes(b) {
    // 2 MiB alignment lets transparent huge pages back the whole buffer, so TLB misses do not
    // masquerade as memory bandwidth.
    data = static_cast<word*>(std::aligned_alloc(std::size_t{2} << 20, bytes));
    if (!data) throw std::runtime_error("cannot allocate " + std::to_string(bytes) + " bytes");
    madvise(data, bytes, MADV_HUGEPAGE);
  }
  ~buffer() { std::free(data); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
};

struct timing {
  double best = 0, median = 0;  // GB/s
};

timing time_kernel(isa path, unsigned passes, const buffer& buf, std::size_t words, unsigned threads) {
  const word expected = series(0, static_cast<word>(words) * threads);
  std::vector<word> sums(threads);
  std::vector<double> seconds;
  using clock = std::chrono::steady_clock;
  clock::time_point start;
  std::barrier go(threads, [&]() noexcept { start = clock::now(); });
  std::barrier done(threads);
  bool bad = false;
  auto worker = [&](unsigned t) {
    for (unsigned pass = 0; pass <= passes; ++pass) {
      go.arrive_and_wait();
      sums[t] = sum(path, buf.data + t * words, words);
      done.arrive_and_wait();
      if (t == 0) {
        const double s = std::chrono::duration<double>(clock::now() - start).count();
        word total = 0;
        for (word x : sums) total += x;
        if (total != expected) bad = true;
        if (pass > 0) seconds.push_back(s);
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& th : pool) th.join();
  const std::size_t bytes = words * sizeof(word) * threads;
  if (bad) {
    std::fprintf(stderr,
                 "bench_read_bandwidth: the %s sum over %zu bytes is wrong; not reporting a bandwidth\n",
                 to_string(path), bytes);
    std::exit(1);
  }
  std::sort(seconds.begin(), seconds.end());
  return {static_cast<double>(bytes) / seconds.front() / 1e9,
          static_cast<double>(bytes) / seconds[seconds.size() / 2] / 1e9};
}

void run(const params& p, const buffer& buf, std::uint64_t bytes, unsigned threads) {
  const std::size_t slice = bytes / threads / slice_granule * slice_granule;
  if (slice == 0)
    usage_error("--bytes " + std::to_string(bytes) + " is too small for " + std::to_string(threads) +
                " threads");
  const std::size_t words = slice / sizeof(word);
  std::string by_isa;
  timing best;
  isa best_path = p.paths.front();
  for (isa path : p.paths) {
    const timing t = time_kernel(path, p.passes, buf, words, threads);
    char entry[64];
    std::snprintf(entry, sizeof entry, "%s\"%s\": %.3f", by_isa.empty() ? "" : ", ", to_string(path), t.best);
    by_isa += entry;
    if (t.best > best.best) {
      best = t;
      best_path = path;
    }
  }
  std::printf(
      "{\"threads\": %u, \"bytes\": %zu, \"gb_per_s\": %.3f, \"median_gb_per_s\": %.3f, \"isa\": \"%s\", "
      "\"by_isa\": {%s}, \"passes\": %u}\n",
      threads, slice * threads, best.best, best.median, to_string(best_path), by_isa.c_str(), p.passes);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const params p = parse(argc, argv);
  const std::uint64_t largest = *std::max_element(p.bytes.begin(), p.bytes.end());
  // aligned_alloc wants a whole number of alignments.
  constexpr std::size_t huge = std::size_t{2} << 20;
  const std::size_t rounded = (largest + huge - 1) / huge * huge;
  try {
    buffer buf(rounded);
    for (std::size_t i = 0; i < rounded / sizeof(word); ++i) buf.data[i] = i;
    for (std::uint64_t b : p.bytes)
      for (unsigned t : p.threads) run(p, buf, b, t);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_read_bandwidth: %s\n", e.what());
    return 1;
  }
  return 0;
}
