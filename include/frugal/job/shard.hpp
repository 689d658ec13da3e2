#pragma once

// A job's shards: one input cut into `count` contiguous byte ranges, each run by its own process (a pod of a
// Kubernetes Indexed Job, say) with its own checkpoint and output under one output prefix. Contiguous
// ranges rather than round-robin: a shard reads only its own bytes, its checkpoint stays one byte offset,
// and the merge is a concatenation in shard order, which is input order. The cut is by bytes, not by
// lines, so that a shard's work follows its text's length (what an encoder's cost follows) and no pass
// over the input is needed to count lines first: shard i holds the lines that begin in
// [floor(i·size/count), floor((i+1)·size/count)), the rule of Hadoop's text splits.

#include <fcntl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "frugal/job/errors.hpp"
#include "frugal/job/io.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job {

/// @brief One shard of a job: `index` in [0, count).
struct shard {
  std::uint32_t index = 0;
  std::uint32_t count = 1;
  friend bool operator==(const shard&, const shard&) = default;
};

/// @brief The environment variable Kubernetes sets in each pod of an Indexed Job.
inline constexpr const char* shard_index_env = "JOB_COMPLETION_INDEX";
/// @brief The shard count's environment variable: Kubernetes gives a pod its index but not the Job's
/// completions, so the manifest sets this to the same number.
inline constexpr const char* shard_count_env = "FRUGAL_SHARD_COUNT";

namespace detail {

inline std::uint32_t parse_shard_number(const char* var, const char* text) {
  const std::string s = text;
  std::uint64_t v = 0;
  bool ok = !s.empty() && s.size() <= 10;
  for (const char ch : s) {
    if (ch < '0' || ch > '9') ok = false;
    if (ok) v = v * 10 + std::uint64_t(ch - '0');
  }
  if (!ok || v > UINT32_MAX)
    throw error(job_errc::invalid_options,
                std::string(var) + "=\"" + s + "\" is not an integer in 0 .. " + std::to_string(UINT32_MAX));
  return static_cast<std::uint32_t>(v);
}

}  // namespace detail

/// @brief The shard to run, from flags (nullopt where not given) and the environment (`getenv`, so tests
/// can give their own): the index from `index_flag` or JOB_COMPLETION_INDEX, the count from `count_flag`
/// or FRUGAL_SHARD_COUNT. A flag and its variable that disagree, an index without a count (or a count
/// without an index), an index past the count or a count of 0 throw job_errc::invalid_options naming
/// them. Neither given: {0, 1}, the whole input.
inline shard resolve_shard(std::optional<std::uint32_t> index_flag, std::optional<std::uint32_t> count_flag,
                           const std::function<const char*(const char*)>& getenv = ::getenv) {
  auto from = [&](const char* flag, std::optional<std::uint32_t> given,
                  const char* var) -> std::optional<std::uint32_t> {
    const char* text = getenv(var);
    if (!text) return given;
    const std::uint32_t env = detail::parse_shard_number(var, text);
    if (given && *given != env)
      throw error(job_errc::invalid_options, std::string(flag) + " " + std::to_string(*given) +
                                                 " disagrees with " + var + "=" + std::to_string(env));
    return env;
  };
  const auto index = from("--shard-index", index_flag, shard_index_env);
  const auto count = from("--shard-count", count_flag, shard_count_env);
  if (!index && !count) return {};
  if (!count)
    throw error(job_errc::invalid_options, "shard index " + std::to_string(*index) +
                                               " has no count: give --shard-count or " + shard_count_env +
                                               " (Kubernetes sets only " + shard_index_env + ")");
  if (!index)
    throw error(job_errc::invalid_options, "shard count " + std::to_string(*count) +
                                               " has no index: give --shard-index or " + shard_index_env);
  if (*count == 0) throw error(job_errc::invalid_options, "shard count must be >= 1");
  if (*index >= *count)
    throw error(job_errc::invalid_options,
                "shard index " + std::to_string(*index) + " is not below count " + std::to_string(*count));
  return {*index, *count};
}

/// @brief "shard 3 of 8".
inline std::string to_string(const shard& s) {
  return "shard " + std::to_string(s.index) + " of " + std::to_string(s.count);
}

/// @brief Where a shard's files live under an output prefix (a directory shared by every shard).
struct shard_files {
  std::string dir;             ///< PREFIX/shard-00003-of-00008: the count is in the name, so a rerun
                               ///< with another count never mixes with this one
  std::string output;          ///< dir/output.jsonl
  std::string errors;          ///< dir/errors.jsonl
  std::string checkpoint_dir;  ///< dir itself: checkpoint.json and the lock sit beside the output
};

inline shard_files files_of(const std::string& prefix, const shard& s) {
  char name[48];
  std::snprintf(name, sizeof name, "shard-%05u-of-%05u", static_cast<unsigned>(s.index),
                static_cast<unsigned>(s.count));
  const std::string dir = prefix + "/" + name;
  return {dir, dir + "/output.jsonl", dir + "/errors.jsonl", dir};
}

/// @brief The bytes [begin, end) of the input that a shard holds; begin is the start of a line.
struct slice {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  friend bool operator==(const slice&, const slice&) = default;
};

namespace detail {

// The first line start at or after byte k of `f`, a file of `size` bytes.
inline std::uint64_t line_start_from(file& f, std::uint64_t size, std::uint64_t k) {
  if (k == 0) return 0;
  if (k >= size) return size;
  f.seek(k - 1);
  char buf[1 << 12];
  std::uint64_t at = k - 1;
  for (;;) {
    const std::size_t n = f.read_some(buf, sizeof buf);
    if (n == 0) return size;
    for (std::size_t i = 0; i < n; ++i)
      if (buf[i] == '\n') return at + i + 1;
    at += n;
  }
}

}  // namespace detail

/// @brief Shard `s`'s slice of the file at `path`, `size` bytes long. The slices of one count are
/// disjoint, in order, and cover the file; a shard may be empty (a count above the number of lines).
inline job::slice slice_of(const std::string& path, std::uint64_t size, const shard& s) {
  if (s.count == 0 || s.index >= s.count)
    throw error(job_errc::invalid_options, "slice_of: bad " + to_string(s));
  if (s.count == 1) return {0, size};
  detail::file f(path, O_RDONLY);
  auto cut = [&](std::uint64_t i) {
    // floor(size·i/count) without overflow: size = q·count + r, and r·i < 2^64.
    const std::uint64_t k = size / s.count * i + size % s.count * i / s.count;
    return detail::line_start_from(f, size, k);
  };
  return {cut(s.index), cut(s.index + 1ull)};
}

}  // namespace job
FRUGAL_END_NAMESPACE
