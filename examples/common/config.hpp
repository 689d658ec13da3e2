#pragma once

// The examples' JSON configs (the demo's --config, the server's --models): a document read from a file
// and changed by command-line overrides, then read field by field, each with its type and range. Every
// error is a config_error of the form "<origin>: <path>: <what>": the origin is the file, or the
// override that set the value; the path is the field's whole path (batcher.max_batch,
// traffic.phases[0].requests). A key that no reader asked for is an error, never silently ignored.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace examples {

using json = nlohmann::json;

/// @brief A config that cannot be used: names where the value came from and the field's path.
struct config_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

namespace detail {

// The path of the value being parsed, kept by nlohmann's parser callback, so that a parse error (a number
// too large for a double) can name its field.
class parse_path {
 public:
  bool operator()(int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        element();
        frames_.push_back({ev == json::parse_event_t::array_start, {}, -1});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        break;
      case json::parse_event_t::key:
        frames_.back().key = parsed.get<std::string>();
        break;
      case json::parse_event_t::value:
        element();
        break;
    }
    return true;
  }
  // Where the parser stopped: inside an array, the element after the last one it finished.
  std::string where() const {
    std::string p;
    for (std::size_t i = 0; i < frames_.size(); ++i) {
      const frame& f = frames_[i];
      if (f.array)
        p += "[" + std::to_string(i + 1 == frames_.size() ? f.index + 1 : f.index) + "]";
      else if (!f.key.empty())
        p += (p.empty() ? "" : ".") + f.key;
    }
    return p;
  }

 private:
  struct frame {
    bool array;
    std::string key;
    long index;
  };
  void element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  std::vector<frame> frames_;
};

// JSON text to a value; nlohmann's parse errors become config_errors naming `origin` and the position.
inline json parse_json(std::string_view text, const std::string& origin) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw config_error(origin + ": is empty; a config is a JSON object");
  parse_path path;
  const auto position = [&](std::size_t byte) {
    const std::size_t at = std::min<std::size_t>(byte ? byte - 1 : 0, text.size());
    const std::size_t line = 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + at, '\n'));
    const std::size_t nl = at ? text.rfind('\n', at - 1) : std::string_view::npos;
    return "line " + std::to_string(line) + ", column " +
           std::to_string(nl == std::string_view::npos ? at + 1 : at - nl);
  };
  try {
    return json::parse(text, std::ref(path));
  } catch (const json::out_of_range& e) {  // 406: a number too large for a double; the field is known
    if (e.id != 406) throw config_error(origin + ": " + e.what());
    const std::string field = path.where();
    throw config_error(origin + ": " + (field.empty() ? std::string("the value") : field) +
                       ": a number is too large for a double");
  } catch (const json::parse_error& e) {
    std::string why = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    const auto colon = why.find(": ");
    why = colon == std::string::npos ? "not valid JSON" : why.substr(colon + 2);
    throw config_error(origin + ": not valid JSON at " + position(e.byte) + ": " + why);
  }
}

// A number is too large for a double where JSON reading says so (nlohmann: out_of_range 406).
inline bool overflows_double(std::string_view text) {
  try {
    [[maybe_unused]] const json v = json::parse(text);
  } catch (const json::out_of_range& e) {
    return e.id == 406;
  } catch (const json::exception&) {
  }
  return false;
}

inline std::string format_number(double v) {
  char buf[32];
  if (v == std::floor(v) && std::abs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int prec = 1; prec <= 17; ++prec) {  // the shortest form that reads back
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace detail

/// @brief A JSON config: read from a file or given whole, then changed by overrides `--a.b[0].c=value`.
class config_document {
 public:
  /// @brief @p root, whose errors name @p origin (e.g. "config file.json").
  explicit config_document(json root, std::string origin = "config")
      : root_(std::move(root)), origin_(std::move(origin)) {}

  /// @brief Reads @p path; a directory, an unreadable, empty or malformed file throws config_error naming
  /// @p origin_name and the file.
  static config_document from_file(const std::string& path, const std::string& origin_name = "config") {
    const std::string origin = origin_name + " " + path;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))  // opens and reads as empty: say what it is
      throw config_error(origin + ": is a directory; a config is a JSON file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw config_error(origin + ": cannot be opened");
    std::stringstream text;
    text << in.rdbuf();
    if (in.bad()) throw config_error(origin + ": cannot be read");
    return from_text(text.str(), origin);
  }

  /// @brief Parses @p text; malformed JSON throws config_error naming @p origin.
  static config_document from_text(std::string_view text, const std::string& origin) {
    return config_document(detail::parse_json(text, origin), origin);
  }

  /// @brief Applies `--a.b[0].c=value`: the value is read as JSON, or else as a string. A path that
  /// walks into a value that is not an object (or, for [i], not an array with that entry) throws
  /// config_error naming the override.
  void apply_override(const std::string& arg) {
    const auto eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos || eq == 2)
      throw config_error("command line: \"" + arg + "\" is not of the form --key.path=value");
    const std::string path = arg.substr(2, eq - 2), text = arg.substr(eq + 1);
    json* node = &root_;
    std::string walked;
    std::size_t i = 0;
    while (i < path.size()) {
      if (path[i] == '[') {
        const auto close = path.find(']', i);
        std::size_t index = 0;
        const std::string digits = close == std::string::npos ? "" : path.substr(i + 1, close - i - 1);
        if (digits.empty() || digits.size() > 9 ||
            digits.find_first_not_of("0123456789") != std::string::npos)
          throw config_error(arg + ": \"" + path + "\" has a bad index; write entries as key[0]");
        index = std::stoul(digits);
        if (!node->is_array() || index >= node->size())
          throw config_error(arg + ": " + walked + " has no entry [" + digits + "]" +
                             (node->is_array() ? " (it has " + std::to_string(node->size()) + ")"
                                               : " (it is not an array)"));
        walked += "[" + digits + "]";
        node = &(*node)[index];
        i = close + 1;
        if (i < path.size() && path[i] == '.') ++i;
        continue;
      }
      const auto end = path.find_first_of(".[", i);
      const std::string key = path.substr(i, end == std::string::npos ? std::string::npos : end - i);
      if (key.empty()) throw config_error(arg + ": empty key in \"" + path + "\"");
      if (!node->is_object() && !node->is_null())
        throw config_error(arg + ": " + walked + " is " + kind_of(*node) + ", not an object with key \"" +
                           key + "\"");
      walked += (walked.empty() ? "" : ".") + key;
      node = &(*node)[key];
      i = end == std::string::npos ? path.size() : (path[end] == '.' ? end + 1 : end);
    }
    if (walked.empty()) throw config_error(arg + ": names no key");
    if (detail::overflows_double(text))  // an error, not a string
      throw config_error(arg + ": " + walked + ": " + text + " is too large for a double");
    json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) v = text;
    *node = std::move(v);
    overrides_.emplace_back(walked, arg);
  }

  const json& root() const noexcept { return root_; }

  /// @brief Where the value at @p path came from: the last override that set it or a value above it,
  /// else the document's origin.
  std::string origin(const std::string& path) const {
    for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
      const std::string& p = it->first;
      if (path.compare(0, p.size(), p) == 0 &&
          (path.size() == p.size() || path[p.size()] == '.' || path[p.size()] == '['))
        return it->second;
    }
    return origin_;
  }

  static std::string kind_of(const json& v) {
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_boolean()) return "true or false";
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    return "null";
  }

 private:
  json root_;
  std::string origin_;
  std::vector<std::pair<std::string, std::string>> overrides_;  // path, the override that set it
};

/// @brief One object of a config, read field by field: each get() checks the type and range of a field
/// that is present and leaves the default of one that is not; finish() refuses the keys no get() read.
class config_object {
 public:
  /// @brief The document's root.
  explicit config_object(const config_document& doc) : config_object(doc, doc.root(), "") {}
  config_object(const config_document& doc, const json& j, std::string path)
      : doc_(&doc), j_(&j), path_(std::move(path)) {
    if (!j.is_null() && !j.is_object()) fail_at(path_, "must be an object");
  }

  std::string path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  bool has(const char* key) const { return j_->is_object() && j_->contains(key); }

  /// @brief Throws config_error for @p key (a key of this object, or a path below it like "dims[2]").
  [[noreturn]] void fail(std::string_view key, const std::string& what) const { fail_at(path(key), what); }

  /// @brief An integer or floating-point field in [lo, hi].
  template <class T, std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>, int> = 0>
  void get(const char* key, T& out, T lo, T hi) {
    if (const json* v = find(key)) out = number<T>(*v, path(key), lo, hi);
  }
  void get(const char* key, bool& out) {
    if (const json* v = find(key)) {
      if (!v->is_boolean()) fail(key, "must be true or false, not " + v->dump());
      out = v->get<bool>();
    }
  }
  void get(const char* key, std::string& out) {
    if (const json* v = find(key)) {
      if (!v->is_string()) fail(key, "must be a string, not " + v->dump());
      out = v->get<std::string>();
    }
  }
  /// @brief A string field that must be one of @p allowed.
  void get(const char* key, std::string& out, std::initializer_list<const char*> allowed) {
    std::string v = out;
    get(key, v);
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return v == a; })) {
      std::string names;
      for (const char* a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
      fail(key, "\"" + v + "\" is not one of " + names);
    }
    out = std::move(v);
  }
  /// @brief An array of @p min_size to @p max_size numbers, each in [lo, hi].
  template <class T>
  void get(const char* key, std::vector<T>& out, std::size_t min_size, std::size_t max_size, T lo, T hi) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_array() || v->size() < min_size || v->size() > max_size)
      fail(key, "must be an array of " + std::to_string(min_size) + " to " + std::to_string(max_size) +
                    " numbers");
    out.clear();
    for (std::size_t i = 0; i < v->size(); ++i)
      out.push_back(number<T>((*v)[i], path(key) + "[" + std::to_string(i) + "]", lo, hi));
  }

  /// @brief The object at @p key (absent: an empty one), read by @p read and then finished.
  template <class F>
  void section(const char* key, F&& read) {
    static const json none;
    const json* v = find(key);
    config_object o(*doc_, v ? *v : none, path(key));
    read(o);
    o.finish();
  }
  /// @brief The array of objects at @p key: @p read(object, index) for each, then finished.
  template <class F>
  void each(const char* key, F&& read) {
    const json* v = find(key);
    if (!v) return;
    if (!v->is_array()) fail(key, "must be an array");
    for (std::size_t i = 0; i < v->size(); ++i) {
      config_object o(*doc_, (*v)[i], path(key) + "[" + std::to_string(i) + "]");
      if (!(*v)[i].is_object()) o.fail_at(o.path_, "must be an object");
      read(o, i);
      o.finish();
    }
  }

  /// @brief Refuses the keys that no get() asked for.
  void finish() const {
    if (!j_->is_object()) return;
    for (auto it = j_->begin(); it != j_->end(); ++it)
      if (!read_.count(it.key())) {
        std::string known;
        for (const auto& k : asked_) known += (known.empty() ? "" : ", ") + k;
        fail(it.key(), "unknown key (known: " + known + ")");
      }
  }

 private:
  const json* find(const char* key) {
    asked_.push_back(key);
    if (!j_->is_object()) return nullptr;
    const auto it = j_->find(key);
    if (it == j_->end()) return nullptr;
    read_.insert(key);
    return &*it;
  }

  [[noreturn]] void fail_at(const std::string& path, const std::string& what) const {
    throw config_error(doc_->origin(path) + ": " + (path.empty() ? std::string("the config") : path) + ": " +
                       what);
  }

  // nlohmann's get<int>() static_casts a double, which is undefined out of range: every number is checked
  // against its range first.
  template <class T>
  T number(const json& v, const std::string& at, T lo, T hi) const {
    std::string range;
    if constexpr (std::is_integral_v<T>)
      range = "an integer in " + std::to_string(lo) + " .. " + std::to_string(hi);
    else
      range = "a number in " + detail::format_number(static_cast<double>(lo)) + " .. " +
              detail::format_number(static_cast<double>(hi));
    const auto bad = [&] { fail_at(at, "must be " + range + ", not " + v.dump()); };
    if (!v.is_number()) bad();
    if constexpr (std::is_integral_v<T>) {
      if (v.is_number_integer()) {
        const bool negative = !v.is_number_unsigned() && v.get<std::int64_t>() < 0;
        if (!negative) {
          const std::uint64_t u = v.is_number_unsigned() ? v.get<std::uint64_t>()
                                                         : static_cast<std::uint64_t>(v.get<std::int64_t>());
          if (u > static_cast<std::uint64_t>(hi) || u < static_cast<std::uint64_t>(std::max<T>(lo, 0))) bad();
          return static_cast<T>(u);
        }
        if constexpr (std::is_signed_v<T>) {
          const std::int64_t s = v.get<std::int64_t>();
          if (s < static_cast<std::int64_t>(lo) || s > static_cast<std::int64_t>(hi)) bad();
          return static_cast<T>(s);
        }
        bad();
      }
      const double d = v.get<double>();
      if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)) || d != std::floor(d)) bad();
      return static_cast<T>(d);
    } else {
      const double d = v.get<double>();
      if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi))) bad();
      return static_cast<T>(d);
    }
  }

  const config_document* doc_;
  const json* j_;
  std::string path_;
  std::vector<std::string> asked_;
  std::set<std::string> read_;
};

}  // namespace examples
