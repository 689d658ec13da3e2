#pragma once

// The checkpoint: one small JSON file that says how far a job got. It is written to a temporary file,
// fsynced, renamed over the old one and the directory fsynced, so after a crash it is either the old
// checkpoint or the new one, never a mix. A checksum over its fields catches a file damaged some other way.

#include <fcntl.h>

// XXH3_state_t is needed by value, so the static part of the header is asked for, as in cache/key.hpp.
#ifndef XXH_STATIC_LINKING_ONLY
#  define XXH_STATIC_LINKING_ONLY
#  define FRUGAL_JOB_UNDEF_XXH_STATIC
#endif
#include <xxhash.h>
#ifdef FRUGAL_JOB_UNDEF_XXH_STATIC
#  undef XXH_STATIC_LINKING_ONLY
#  undef FRUGAL_JOB_UNDEF_XXH_STATIC
#endif

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "frugal/job/errors.hpp"
#include "frugal/job/io.hpp"
#include "frugal/job/shard.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job {

/// @brief What identifies an input: its size and the XXH3-64 hash of all its bytes.
struct input_identity {
  std::uint64_t size = 0;
  std::uint64_t hash = 0;
  friend bool operator==(const input_identity&, const input_identity&) = default;
};

/// @brief Which shard a checkpoint is for, and the bytes of the input that shard holds.
struct shard_extent {
  job::shard shard;
  job::slice slice;
  friend bool operator==(const shard_extent&, const shard_extent&) = default;
};

/// @brief How far a job got. Offsets are bytes: everything in the input before input_offset has its
/// result in the first output_size bytes of the output or its error in the first errors_size of the errors
/// file.
struct checkpoint {
  std::string job_name{};
  input_identity input;
  std::uint64_t input_offset = 0;
  std::uint64_t input_line = 0;  ///< lines consumed
  std::uint64_t records_done = 0;
  std::uint64_t bad_records = 0;
  std::uint64_t output_size = 0;
  std::uint64_t errors_size = 0;
  bool done = false;
  /// A shard's checkpoint; nullopt for a job over the whole input. input_offset lies in its slice.
  std::optional<shard_extent> extent{};
  friend bool operator==(const checkpoint&, const checkpoint&) = default;
};

/// @brief The checkpoint's file name inside the checkpoint directory.
inline constexpr const char* checkpoint_file_name = "checkpoint.json";

namespace detail {

inline constexpr const char* checkpoint_format = "frugal.job.checkpoint/1";

inline std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

inline nlohmann::json checkpoint_body(const checkpoint& c) {
  nlohmann::json j = {{"format", checkpoint_format},
                      {"job", c.job_name},
                      {"input_size", c.input.size},
                      {"input_hash", hex64(c.input.hash)},
                      {"input_offset", c.input_offset},
                      {"input_line", c.input_line},
                      {"records_done", c.records_done},
                      {"bad_records", c.bad_records},
                      {"output_size", c.output_size},
                      {"errors_size", c.errors_size},
                      {"done", c.done}};
  if (c.extent) {
    j["shard_index"] = c.extent->shard.index;
    j["shard_count"] = c.extent->shard.count;
    j["slice_begin"] = c.extent->slice.begin;
    j["slice_end"] = c.extent->slice.end;
  }
  return j;
}

inline std::uint64_t checksum_of(const nlohmann::json& body) {
  const std::string text = body.dump();
  return XXH3_64bits(text.data(), text.size());
}

}  // namespace detail

/// @brief Size and XXH3-64 of a whole file, read once.
inline input_identity identify_input(const std::string& path) {
  detail::file f(path, O_RDONLY);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  std::uint64_t size = 0;
  static thread_local char buf[1 << 16];
  for (;;) {
    const std::size_t n = f.read_some(buf, sizeof buf);
    if (n == 0) break;
    XXH3_64bits_update(&state, buf, n);
    size += n;
  }
  return {size, XXH3_64bits_digest(&state)};
}

namespace detail {

// The identity of the file at `path`, which must be `size` bytes long, and the number of lines before byte
// `begin` (a job shard's first line number, less one), in one read.
inline input_identity identify_and_count(const std::string& path, std::uint64_t size, std::uint64_t begin,
                                         std::uint64_t& lines_before) {
  file f(path, O_RDONLY);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  std::uint64_t read = 0;
  lines_before = 0;
  static thread_local char buf[1 << 16];
  for (;;) {
    const std::size_t n = f.read_some(buf, sizeof buf);
    if (n == 0) break;
    XXH3_64bits_update(&state, buf, n);
    if (read < begin) {
      const auto upto = static_cast<std::size_t>(std::min<std::uint64_t>(n, begin - read));
      for (std::size_t i = 0; i < upto; ++i) lines_before += buf[i] == '\n';
    }
    read += n;
  }
  if (read != size)
    throw error(job_errc::io, "input " + path + " changed while the job read it (" + std::to_string(size) +
                                  " bytes, then " + std::to_string(read) + ")");
  return {read, XXH3_64bits_digest(&state)};
}

}  // namespace detail

/// @brief The checkpoint as text: its fields and a checksum over them.
inline std::string serialize_checkpoint(const checkpoint& c) {
  nlohmann::json j = detail::checkpoint_body(c);
  j["checksum"] = detail::hex64(detail::checksum_of(j));
  return j.dump() + "\n";
}

/// @brief Parses serialize_checkpoint's text; throws job_errc::checkpoint_corrupt naming `path` on anything
/// else.
inline checkpoint parse_checkpoint(const std::string& text, const std::string& path) {
  auto corrupt = [&](const std::string& why) -> error {
    return error(job_errc::checkpoint_corrupt,
                 "checkpoint " + path + " is corrupt: " + why + "; delete it to start the job afresh");
  };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw corrupt("not a JSON object");
  if (!j.contains("checksum") || !j["checksum"].is_string()) throw corrupt("no checksum");
  const std::string stored = j["checksum"].get<std::string>();
  j.erase("checksum");
  if (detail::hex64(detail::checksum_of(j)) != stored) throw corrupt("checksum mismatch");
  const auto format = j.find("format");
  if (format == j.end() || !format->is_string()) throw corrupt("no format string");
  if (*format != detail::checkpoint_format)
    throw corrupt("unknown format \"" + format->get<std::string>() + "\"");
  // Counts are non-negative JSON integers: get<uint64_t> would wrap a negative one and cast a float past
  // the range (undefined behaviour).
  auto u64 = [&](const char* key) {
    const auto it = j.find(key);
    if (it == j.end()) throw corrupt(std::string("no \"") + key + "\"");
    if (!it->is_number_unsigned())
      throw corrupt(std::string("\"") + key + "\" is not a non-negative integer");
    return it->get<std::uint64_t>();
  };
  checkpoint c;
  try {
    c.job_name = j.at("job").get<std::string>();
    c.input.size = u64("input_size");
    const std::string hash = j.at("input_hash").get<std::string>();
    if (hash.size() != 16 || hash.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw corrupt("input_hash is not 16 hex digits");
    c.input.hash = std::stoull(hash, nullptr, 16);
    c.input_offset = u64("input_offset");
    c.input_line = u64("input_line");
    c.records_done = u64("records_done");
    c.bad_records = u64("bad_records");
    c.output_size = u64("output_size");
    c.errors_size = u64("errors_size");
    c.done = j.at("done").get<bool>();
    const int shard_fields = int(j.contains("shard_index")) + int(j.contains("shard_count")) +
                             int(j.contains("slice_begin")) + int(j.contains("slice_end"));
    if (shard_fields != 0 && shard_fields != 4)
      throw corrupt("shard_index, shard_count, slice_begin and slice_end come all together or not at all");
    if (shard_fields == 4) {
      const auto index = u64("shard_index"), count = u64("shard_count");
      if (count == 0 || count > UINT32_MAX || index >= count)
        throw corrupt("shard_index not below shard_count");
      c.extent =
          shard_extent{{std::uint32_t(index), std::uint32_t(count)}, {u64("slice_begin"), u64("slice_end")}};
    }
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    throw corrupt(std::string("bad field: ") + e.what());
  }
  if (c.input_offset > c.input.size) throw corrupt("input_offset beyond the input's size");
  if (c.extent) {
    const job::slice& r = c.extent->slice;
    if (r.begin > r.end || r.end > c.input.size) throw corrupt("slice not within the input");
    if (c.input_offset < r.begin || c.input_offset > r.end) throw corrupt("input_offset outside the slice");
  }
  return c;
}

/// @brief Writes `c` durably into `dir`: a temporary file, fsync, rename over checkpoint.json, fsync of
/// `dir`. A crash at any point leaves the previous checkpoint or the new one.
inline void write_checkpoint(const std::string& dir, const checkpoint& c,
                             detail::write_fault* fault = nullptr) {
  const std::string final_path = dir + "/" + checkpoint_file_name;
  const std::string tmp_path = final_path + ".tmp";
  detail::file f(tmp_path, O_WRONLY | O_CREAT | O_TRUNC);
  f.write_all(serialize_checkpoint(c), fault);
  f.sync();
  f.close();
  if (fault && fault->pause_before_rename.count() > 0)
    std::this_thread::sleep_for(fault->pause_before_rename);
  detail::rename_file(tmp_path, final_path);
  detail::sync_dir(dir);
}

/// @brief The checkpoint in `dir`, or nullopt when there is none; throws job_errc::checkpoint_corrupt.
inline std::optional<checkpoint> read_checkpoint(const std::string& dir) {
  const std::string path = dir + "/" + checkpoint_file_name;
  if (!detail::exists(path)) return std::nullopt;
  return parse_checkpoint(detail::read_whole(path), path);
}

/// @brief Throws job_errc::checkpoint_mismatch unless `c` is for this job and this input.
inline void check_checkpoint_matches(const checkpoint& c, const std::string& job_name,
                                     const input_identity& input, const std::string& dir,
                                     const std::optional<shard_extent>& extent = std::nullopt) {
  const std::string where = "checkpoint " + dir + "/" + checkpoint_file_name;
  if (c.job_name != job_name)
    throw error(job_errc::checkpoint_mismatch, where + " belongs to job \"" + c.job_name + "\", not \"" +
                                                   job_name + "\"; refusing to reuse it");
  if (c.input != input)
    throw error(job_errc::checkpoint_mismatch,
                where + " was written for another input (size " + std::to_string(c.input.size) + ", hash " +
                    detail::hex64(c.input.hash) + "; this input: size " + std::to_string(input.size) +
                    ", hash " + detail::hex64(input.hash) + "); refusing to reuse it");
  auto describe = [](const std::optional<shard_extent>& e) {
    return e ? to_string(e->shard) + " (bytes " + std::to_string(e->slice.begin) + " .. " +
                   std::to_string(e->slice.end) + ")"
             : std::string("the whole input");
  };
  if (c.extent != extent)
    throw error(job_errc::checkpoint_mismatch, where + " was written for " + describe(c.extent) + ", not " +
                                                   describe(extent) + "; refusing to reuse it");
}

}  // namespace job
FRUGAL_END_NAMESPACE
