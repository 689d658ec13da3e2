#pragma once

// The models frugal_server serves, from its pool (frugal::model_pool): given on the command line
// (--model DIR --precision P --model-name N: one pinned model), or by --models FILE, a JSON file:
//
//   {"budget_mb": 600,
//    "models": [{"name": "minilm-int8", "precision": "int8", "pinned": true},
//               {"name": "minilm-fp32", "precision": "fp32", "path": "/models/all-MiniLM-L6-v2",
//                "idle_unload_s": 300, "estimated_mb": 100}]}
//
// name       what requests ask for in "model"; 1-64 of [A-Za-z0-9._:-] (it is a Prometheus label)
// precision  fp32, fp16, bf16, int8 or int4 (int8 is calibrated with --calibration's sentences)
// path       the model's directory; default: --model DIR (or FRUGAL_MODEL_DIR)
// pinned     loaded at start, never unloaded; /readyz waits for the pinned models. Default false
// idle_unload_s  unloaded after this long without a request; 0 (default) keeps it until evicted
// estimated_mb   its expected size, charged against the budget while it loads; default: the size of
//                its model.safetensors, the peak of every precision's load (the fp32 weights are read
//                first and converted); after a load, the size the encoder reports replaces it
// budget_mb  what all loaded models may take together; default: the sum of every model's estimate
//            (all fit). A load that does not fit unloads idle models, least recently used first.
//
// A language model (served on /v1/chat/completions and /v1/completions) is an entry of kind "chat":
//
//   {"name": "smollm2", "kind": "chat", "path": "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "pinned": true,
//    "precision": "native", "threads": 2, "kv_budget_mb": 256, "max_running": 32, "max_waiting": 256,
//    "step_tokens": 512, "max_context": 0, "default_max_tokens": 256}
//
// kind       "embedding" (default: the fields above) or "chat" (these fields, and name, pinned,
// idle_unload_s,
//            estimated_mb)
// path       the model's GGUF file (required)
// precision  native (default: the file's own blocks), fp32, int8 or int4 (examples/models/llama.hpp)
// threads    threads of the model's steps (default 1); each chat model also has one loop thread
// kv_budget_mb   its paged KV cache (default 256), reserved at load and charged to the pool
// max_running, max_waiting, step_tokens   its scheduler (frugal::scheduler_options); a request that finds
//            max_waiting sequences waiting is refused at once with 429
// max_context    the longest sequence (prompt and completion); 0 (default): the file's context_length
// default_max_tokens  a request's max_tokens when it gives none, cut to what fits its context
// estimated_mb   default: the file's size and the KV budget
//
// Everything is validated before any work, by examples/common/config.hpp, with the path of the bad field
// (models[1].precision); unknown keys are errors, not ignored.
#include <sys/stat.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../common/config.hpp"
#include "../common/load_model.hpp"

namespace server {

/// @brief One served model (see the file's comment for each field).
struct model_entry {
  std::string name;
  std::string precision = "int8";
  std::string path;
  bool pinned = false;
  double idle_unload_s = 0;
  std::size_t estimated_bytes = 0;
  /// "chat": a language model from a GGUF file (the fields below); "embedding": a BERT directory.
  bool chat = false;
  std::size_t threads = 1;
  std::size_t kv_budget_bytes = std::size_t{256} << 20;
  std::size_t max_running = 32;
  std::size_t max_waiting = 256;
  std::size_t step_tokens = 512;
  std::size_t max_context = 0;
  std::size_t default_max_tokens = 256;
};

/// @brief The served models and the pool's budget.
struct models_config {
  std::vector<model_entry> models;
  std::size_t budget_bytes = 0;
};

namespace detail {

inline bool valid_model_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (const unsigned char c : n)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != ':' && c != '-') return false;
  return true;
}

inline std::size_t file_bytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::invalid_argument("cannot read " + path);
  return static_cast<std::size_t>(st.st_size);
}

}  // namespace detail

/// @brief Checks a chat entry (see the file's comment) and fills its estimate; throws
/// std::invalid_argument naming @p at and the field.
inline void finish_chat_entry(model_entry& m, const std::string& at) {
  if (m.precision != "native" && m.precision != "fp32" && m.precision != "int8" && m.precision != "int4")
    throw std::invalid_argument(at + "precision: \"" + m.precision +
                                "\" is not one of native, fp32, int8, int4");
  if (m.path.empty()) throw std::invalid_argument(at + "path: a chat model needs its GGUF file");
  {
    std::error_code ec;
    if (std::filesystem::is_directory(m.path, ec))
      throw std::invalid_argument(at + "path: " + m.path + " is a directory; a chat model is a GGUF file");
    std::ifstream probe(m.path, std::ios::binary);
    char magic[4] = {};
    if (!probe) throw std::invalid_argument(at + "path: " + m.path + " cannot be opened");
    if (!probe.read(magic, 4) || std::string_view(magic, 4) != "GGUF")
      throw std::invalid_argument(at + "path: " + m.path + " is not a GGUF file");
  }
  if (m.max_running == 0 || m.step_tokens < m.max_running)
    throw std::invalid_argument(at + "step_tokens: " + std::to_string(m.step_tokens) + " must be at least " +
                                at + "max_running (" + std::to_string(m.max_running) + ")");
  if (!(m.idle_unload_s >= 0 && m.idle_unload_s <= 86400 * 365.0))
    throw std::invalid_argument(at + "idle_unload_s: must be in 0 .. 31536000 seconds");
  if (m.pinned && m.idle_unload_s > 0)
    throw std::invalid_argument(at + "idle_unload_s: with " + at +
                                "pinned: a pinned model is never unloaded; drop one of the two");
  if (m.estimated_bytes == 0) m.estimated_bytes = detail::file_bytes(m.path) + m.kv_budget_bytes;
}

/// @brief Fills the defaults (path, estimate, budget) and checks every entry; throws
/// std::invalid_argument naming @p where and the field.
inline void finish_models_config(models_config& c, const std::string& default_dir, const std::string& where,
                                 bool budget_given) {
  if (c.models.empty()) throw std::invalid_argument(where + "models: needs at least one model");
  std::set<std::string> names;
  std::size_t sum = 0;
  for (std::size_t i = 0; i < c.models.size(); ++i) {
    model_entry& m = c.models[i];
    const std::string at = where + "models[" + std::to_string(i) + "].";
    if (!detail::valid_model_name(m.name))
      throw std::invalid_argument(at + "name: \"" + m.name + "\" must be 1-64 of [A-Za-z0-9._:-]");
    if (!names.insert(m.name).second)
      throw std::invalid_argument(at + "name: \"" + m.name + "\" is given twice");
    if (m.chat) {
      finish_chat_entry(m, at);
      sum += m.estimated_bytes;
      continue;
    }
    (void)examples::encoder_precision(m.precision, at + "precision");
    if (m.path.empty()) m.path = default_dir;
    if (m.path.empty()) throw std::invalid_argument(at + "path: not given, and no --model DIR either");
    std::error_code ec;
    if (!std::filesystem::is_directory(m.path, ec))
      throw std::invalid_argument(
          at + "path: " + m.path +
          (std::filesystem::exists(m.path, ec) ? " is not a directory" : " does not exist") +
          "; an embedding model is a directory (config.json, vocab.txt, model.safetensors)");
    for (const char* f : {"/config.json", "/vocab.txt", "/model.safetensors"}) {
      std::ifstream probe(m.path + f);
      if (!probe) throw std::invalid_argument(at + "path: " + m.path + f + " cannot be opened");
    }
    if (!(m.idle_unload_s >= 0 && m.idle_unload_s <= 86400 * 365.0))
      throw std::invalid_argument(at + "idle_unload_s: must be in 0 .. 31536000 seconds");
    if (m.pinned && m.idle_unload_s > 0)
      throw std::invalid_argument(at + "idle_unload_s: with " + at +
                                  "pinned: a pinned model is never unloaded; drop one of the two");
    if (m.estimated_bytes == 0) m.estimated_bytes = detail::file_bytes(m.path + "/model.safetensors");
    sum += m.estimated_bytes;
  }
  if (!budget_given) c.budget_bytes = sum;
}

/// @brief The models of a --models document (the format above) named @p file in messages; throws
/// examples::config_error or std::invalid_argument naming the file and the field's path.
inline models_config parse_models_config(const examples::config_document& doc, const std::string& file,
                                         const std::string& default_dir) {
  examples::config_object root(doc);
  models_config c;
  std::uint64_t budget_mb = 0;
  root.get("budget_mb", budget_mb, std::uint64_t{1}, std::uint64_t{1} << 30);
  c.budget_bytes = static_cast<std::size_t>(budget_mb) << 20;
  root.each("models", [&](examples::config_object& e, std::size_t) {
    model_entry m;
    if (!e.has("name")) e.fail("name", "is required");
    std::string kind = "embedding";
    e.get("kind", kind, {"embedding", "chat"});
    m.chat = kind == "chat";
    if (m.chat) m.precision = "native";
    e.get("name", m.name);
    e.get("precision", m.precision);
    e.get("path", m.path);
    e.get("pinned", m.pinned);
    e.get("idle_unload_s", m.idle_unload_s, 0.0, 86400 * 365.0);
    std::uint64_t estimated_mb = 0;
    e.get("estimated_mb", estimated_mb, std::uint64_t{1}, std::uint64_t{1} << 30);
    m.estimated_bytes = static_cast<std::size_t>(estimated_mb) << 20;
    if (m.chat) {  // the chat fields only here: on an embedding entry they are unknown keys
      std::uint64_t kv_mb = m.kv_budget_bytes >> 20;
      e.get("kv_budget_mb", kv_mb, std::uint64_t{1}, std::uint64_t{1} << 20);
      m.kv_budget_bytes = static_cast<std::size_t>(kv_mb) << 20;
      e.get("threads", m.threads, std::size_t{1}, std::size_t{256});
      e.get("max_running", m.max_running, std::size_t{1}, std::size_t{4096});
      e.get("max_waiting", m.max_waiting, std::size_t{1}, std::size_t{1} << 20);
      e.get("step_tokens", m.step_tokens, std::size_t{1}, std::size_t{1} << 20);
      e.get("max_context", m.max_context, std::size_t{0}, std::size_t{1} << 24);
      e.get("default_max_tokens", m.default_max_tokens, std::size_t{1}, std::size_t{1} << 24);
    }
    c.models.push_back(std::move(m));
  });
  root.finish();
  finish_models_config(c, default_dir, "--models " + file + ": ", budget_mb != 0);
  return c;
}

/// @brief Reads --models FILE (the format above); throws examples::config_error naming the file and the
/// field's path.
inline models_config load_models_config(const std::string& file, const std::string& default_dir) {
  return parse_models_config(examples::config_document::from_file(file, "--models"), file, default_dir);
}

}  // namespace server
