#pragma once

// The merge of a sharded job: every shard's output, concatenated in shard order, is the job's output in
// input order. It runs once every shard has completed and checks first that together they are the whole
// input exactly once: each shard's checkpoint says done, all are of one job and one input, their slices
// follow each other from byte 0 to the input's end, and each output is as long as its checkpoint says. The
// result is written to a temporary file, fsynced and renamed into place, so a merge killed part-way leaves
// no partial output under the final name.

#include <fcntl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "frugal/job/checkpoint.hpp"
#include "frugal/job/errors.hpp"
#include "frugal/job/io.hpp"
#include "frugal/job/shard.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job {

struct merge_options {
  std::string prefix{};     ///< the output prefix the shards ran under
  std::uint32_t count = 0;  ///< the shard count they ran with
  std::string output{};     ///< the merged output
  std::string errors{};     ///< the merged errors file; empty: output + ".errors"
  std::string name{};       ///< the job's name, checked against every checkpoint; empty: not checked
};

struct merge_result {
  input_identity input;
  std::uint64_t records = 0;
  std::uint64_t bad_records = 0;
  std::uint64_t output_bytes = 0;
  std::uint64_t errors_bytes = 0;
};

namespace detail {

inline std::uint64_t copy_into(file& to, const std::string& from, std::uint64_t expect) {
  file f(from, O_RDONLY);
  std::vector<char> buf(1 << 16);
  std::uint64_t n = 0;
  while (n < expect) {
    const std::size_t got = f.read_some(buf.data(), std::min<std::uint64_t>(buf.size(), expect - n));
    if (got == 0) break;
    to.write_all(std::string_view(buf.data(), got));
    n += got;
  }
  if (n != expect)
    throw error(job_errc::shard_incomplete, from + " ended at byte " + std::to_string(n) +
                                                " while merging; " + std::to_string(expect) + " expected");
  return n;
}

inline void write_merged(const std::string& path,
                         const std::vector<std::pair<std::string, std::uint64_t>>& parts) {
  const std::string tmp = path + ".tmp";
  file out(tmp, O_WRONLY | O_CREAT | O_TRUNC);
  for (const auto& [from, size] : parts) copy_into(out, from, size);
  out.sync();
  out.close();
  rename_file(tmp, path);
  sync_dir(parent_dir(path));
}

}  // namespace detail

/// @brief Merges the `count` shards under `prefix` into one output and one errors file, in input order.
/// Throws job_errc::shard_incomplete naming the first shard that has no checkpoint, is not done, or has an
/// output or errors file of another size than its checkpoint says; job_errc::checkpoint_mismatch when the
/// shards are of different jobs or inputs, or their slices do not tile the input; job_errc::io on I/O.
inline merge_result merge_shards(const merge_options& o) {
  if (o.prefix.empty() || o.output.empty())
    throw error(job_errc::invalid_options, "merge_shards: prefix and output are required");
  if (o.count == 0) throw error(job_errc::invalid_options, "merge_shards: count must be >= 1");
  const std::string errors = o.errors.empty() ? o.output + ".errors" : o.errors;
  merge_result r;
  std::vector<std::pair<std::string, std::uint64_t>> outs, errs;
  std::optional<checkpoint> first;
  std::uint64_t next_begin = 0;
  for (std::uint32_t i = 0; i < o.count; ++i) {
    const shard s{i, o.count};
    const shard_files f = files_of(o.prefix, s);
    const std::string who = to_string(s) + " (" + f.dir + ")";
    auto incomplete = [&](const std::string& why) {
      return error(job_errc::shard_incomplete, "merge: " + who + " " + why);
    };
    auto mismatch = [&](const std::string& why) {
      return error(job_errc::checkpoint_mismatch, "merge: " + who + " " + why);
    };
    const std::optional<checkpoint> c = read_checkpoint(f.checkpoint_dir);
    if (!c)
      throw incomplete("has no checkpoint: it has not run; run it with shard index " + std::to_string(i));
    if (!c->done)
      throw incomplete("is incomplete: " + std::to_string(c->records_done) + " records done, at byte " +
                       std::to_string(c->input_offset) +
                       (c->extent ? " of its slice " + std::to_string(c->extent->slice.begin) + " .. " +
                                        std::to_string(c->extent->slice.end)
                                  : std::string()) +
                       "; run it again to finish it");
    const shard_extent e = c->extent.value_or(shard_extent{{0, 1}, {0, c->input.size}});
    if (!(e.shard == s)) throw mismatch("holds a checkpoint of " + to_string(e.shard));
    if (!o.name.empty() && c->job_name != o.name)
      throw mismatch("belongs to job \"" + c->job_name + "\", not \"" + o.name + "\"");
    if (first && c->job_name != first->job_name)
      throw mismatch("belongs to job \"" + c->job_name + "\", shard 0 to \"" + first->job_name + "\"");
    if (first && !(c->input == first->input))
      throw mismatch("ran over another input than shard 0 (size " + std::to_string(c->input.size) +
                     ", hash " + detail::hex64(c->input.hash) + " against size " +
                     std::to_string(first->input.size) + ", hash " + detail::hex64(first->input.hash) + ")");
    if (e.slice.begin != next_begin)
      throw mismatch("begins at byte " + std::to_string(e.slice.begin) + ", where the shards before end at " +
                     std::to_string(next_begin));
    next_begin = e.slice.end;
    for (const auto& [path, size, what] : {std::tuple{f.output, c->output_size, "output"},
                                           std::tuple{f.errors, c->errors_size, "errors file"}}) {
      const std::uint64_t have = detail::exists(path) ? detail::file(path, O_RDONLY).size() : 0;
      if (have != size)
        throw incomplete(std::string("has its ") + what + " " + path + " at " + std::to_string(have) +
                         " bytes where its checkpoint says " + std::to_string(size));
    }
    outs.emplace_back(f.output, c->output_size);
    errs.emplace_back(f.errors, c->errors_size);
    r.records += c->records_done;
    r.bad_records += c->bad_records;
    r.output_bytes += c->output_size;
    r.errors_bytes += c->errors_size;
    if (!first) first = *c;
  }
  if (next_begin != first->input.size)
    throw error(job_errc::checkpoint_mismatch, "merge: the shards end at byte " + std::to_string(next_begin) +
                                                   " of an input of " + std::to_string(first->input.size));
  r.input = first->input;
  detail::write_merged(o.output, outs);
  detail::write_merged(errors, errs);
  return r;
}

}  // namespace job
FRUGAL_END_NAMESPACE
