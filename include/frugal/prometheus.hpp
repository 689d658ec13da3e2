#pragma once
/// @file
/// @brief Prometheus text exposition (format 0.0.4) that every component's exporter writes into:
/// prometheus_writer groups samples by metric family, so several instances of a component (two caches, a
/// batcher per model) share one HELP and TYPE line per family, told apart by prometheus_options::labels.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A metric family's type, as its TYPE line says it.
enum class prometheus_type { counter, gauge, histogram, summary };

inline constexpr const char* to_string(prometheus_type t) noexcept {
  switch (t) {
    case prometheus_type::counter:
      return "counter";
    case prometheus_type::gauge:
      return "gauge";
    case prometheus_type::histogram:
      return "histogram";
    case prometheus_type::summary:
      return "summary";
  }
  return "untyped";
}

/// @brief Label names and values, in the order they are written.
using prometheus_labels = std::vector<std::pair<std::string, std::string>>;

/// @brief What every exporter (append_prometheus, to_prometheus) takes besides the stats.
struct prometheus_options {
  /// The start of every metric name, e.g. "frugal_batcher"; empty: the exporter's own (each documents it).
  /// Change it to keep two kinds of use of one component apart, e.g. a result cache and an embedding cache.
  std::string prefix{};
  /// Labels written first on every sample, e.g. {{"model", "minilm"}}: what tells the instances apart when
  /// several are written into one prometheus_writer. They must not repeat a label the exporter writes.
  prometheus_labels labels{};
};

namespace detail {

// The shortest of %.15g and %.17g that reads back as the same double; Prometheus' spellings for the
// non-finite ones.
inline std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Exact decimal seconds from integer nanoseconds, with two to nine decimals as money prints its nano-units
// ("0.0015", "2.00", "-0.25"): no rounding through a double.
inline std::string seconds(std::chrono::nanoseconds d) {
  const std::int64_t n = d.count();
  const std::uint64_t a =
      n < 0 ? std::uint64_t(0) - static_cast<std::uint64_t>(n) : static_cast<std::uint64_t>(n);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%llu.%09llu", n < 0 ? "-" : "",
                static_cast<unsigned long long>(a / 1'000'000'000),
                static_cast<unsigned long long>(a % 1'000'000'000));
  std::string out = buf;
  while (out.size() > 3 && out.back() == '0' && out[out.size() - 3] != '.') out.pop_back();
  return out;
}

inline std::string prom_escape(std::string_view v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\')
      out += "\\\\";
    else if (ch == '"')
      out += "\\\"";
    else if (ch == '\n')
      out += "\\n";
    else
      out += ch;
  }
  return out;
}

inline bool prom_name_char(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
  return alpha || (!first && c >= '0' && c <= '9');
}
// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names, without ':' for label names.
inline bool prom_valid_name(std::string_view s, bool colon) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i)
    if (!prom_name_char(s[i], i == 0, colon)) return false;
  return true;
}

}  // namespace detail

/// @brief Collects metric families and their samples, and writes them as Prometheus text: each family's
/// HELP and TYPE once, its samples together after them, families in the order they were first declared.
///
/// A family may be declared any number of times with the same type and help; declaring it again with
/// another type or help, a sample of an undeclared family, a series written twice, an invalid name or a
/// repeated label name throws std::invalid_argument naming it: each is a text Prometheus would refuse or
/// misread.
class prometheus_writer {
 public:
  void family(std::string_view name, prometheus_type type, std::string_view help) {
    if (!detail::prom_valid_name(name, true))
      throw std::invalid_argument("frugal::prometheus_writer: \"" + std::string(name) +
                                  "\" is not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)");
    if (help.find('\n') != std::string_view::npos)
      throw std::invalid_argument("frugal::prometheus_writer: the help of " + std::string(name) +
                                  " has a line break");
    if (auto it = index_.find(name); it != index_.end()) {
      const entry& e = families_[it->second];
      if (e.type != type || e.help != help)
        throw std::invalid_argument("frugal::prometheus_writer: family " + std::string(name) +
                                    " declared again with another " + (e.type != type ? "type" : "help") +
                                    " (two exporters with one prefix?)");
      return;
    }
    index_.emplace(std::string(name), families_.size());
    families_.push_back({std::string(name), type, std::string(help), {}});
  }

  /// @brief One sample. @p name is the family's name, or for a histogram its name with _bucket, _sum or
  /// _count, for a summary with _sum or _count.
  void sample(std::string_view name, const prometheus_labels& labels, std::string_view value) {
    entry& e = families_[family_of(name)];
    std::string line(name);
    if (!labels.empty()) {
      line += '{';
      for (std::size_t i = 0; i < labels.size(); ++i) {
        const std::string& l = labels[i].first;
        if (!detail::prom_valid_name(l, false) || l.starts_with("__"))
          throw std::invalid_argument("frugal::prometheus_writer: \"" + l + "\" on " + std::string(name) +
                                      " is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*, no leading __)");
        for (std::size_t j = 0; j < i; ++j)
          if (labels[j].first == l)
            throw std::invalid_argument("frugal::prometheus_writer: label \"" + l + "\" repeats on " +
                                        std::string(name));
        if (i) line += ',';
        line += l;
        line += "=\"";
        line += detail::prom_escape(labels[i].second);
        line += '"';
      }
      line += '}';
    }
    if (!series_.insert(line).second)
      throw std::invalid_argument("frugal::prometheus_writer: series " + line +
                                  " written twice (give each instance its own labels)");
    e.body += line;
    e.body += ' ';
    e.body += value;
    e.body += '\n';
  }
  void sample(std::string_view name, const prometheus_labels& labels, double value) {
    sample(name, labels, std::string_view(detail::num(value)));
  }
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool>) void sample(std::string_view name,
                                                                          const prometheus_labels& labels,
                                                                          I value) {
    sample(name, labels, std::string_view(std::to_string(value)));
  }

  /// @brief The text so far.
  std::string str() const {
    std::string out;
    for (const entry& e : families_) {
      out += "# HELP ";
      out += e.name;
      out += ' ';
      out += e.help;
      out += "\n# TYPE ";
      out += e.name;
      out += ' ';
      out += to_string(e.type);
      out += '\n';
      out += e.body;
    }
    return out;
  }

 private:
  struct entry {
    std::string name;
    prometheus_type type;
    std::string help;
    std::string body;
  };

  std::size_t family_of(std::string_view name) const {
    if (auto it = index_.find(name); it != index_.end()) return it->second;
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (!name.ends_with(suffix)) continue;
      auto it = index_.find(name.substr(0, name.size() - suffix.size()));
      if (it == index_.end()) continue;
      const prometheus_type t = families_[it->second].type;
      if (t == prometheus_type::histogram || (t == prometheus_type::summary && suffix != "_bucket"))
        return it->second;
    }
    throw std::invalid_argument("frugal::prometheus_writer: sample " + std::string(name) +
                                " has no family declared for it");
  }

  std::vector<entry> families_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::set<std::string, std::less<>> series_;
};

namespace detail {

// What an exporter writes through: names are the prefix plus a suffix ("_hits_total"), and every sample
// starts with the options' labels.
class prom_scope {
 public:
  prom_scope(prometheus_writer& w, const prometheus_options& o, std::string_view default_prefix)
      : w_(w), prefix_(o.prefix.empty() ? std::string(default_prefix) : o.prefix), labels_(o.labels) {}

  std::string name(std::string_view suffix) const { return prefix_ + std::string(suffix); }
  void family(std::string_view suffix, prometheus_type t, std::string_view help) {
    w_.family(name(suffix), t, help);
  }
  template <class V>
  void sample(std::string_view suffix, const prometheus_labels& extra, const V& value) {
    prometheus_labels ls = labels_;
    ls.insert(ls.end(), extra.begin(), extra.end());
    write(name(suffix), ls, value);
  }
  template <class V>
  void sample(std::string_view suffix, const V& value) {
    write(name(suffix), labels_, value);
  }
  // A family of one sample.
  template <class V>
  void one(std::string_view suffix, prometheus_type t, std::string_view help, const V& value) {
    family(suffix, t, help);
    sample(suffix, value);
  }
  prometheus_writer& writer() const { return w_; }
  const std::string& prefix() const { return prefix_; }
  const prometheus_labels& labels() const { return labels_; }

 private:
  template <class V>
  void write(const std::string& n, const prometheus_labels& ls, const V& v) {
    if constexpr (std::is_same_v<V, std::chrono::nanoseconds>)
      w_.sample(n, ls, std::string_view(seconds(v)));
    else if constexpr (std::is_same_v<V, bool>)
      w_.sample(n, ls, v ? 1.0 : 0.0);
    else if constexpr (std::is_convertible_v<const V&, std::string_view>)
      w_.sample(n, ls, std::string_view(v));
    else
      w_.sample(n, ls, v);
  }

  prometheus_writer& w_;
  std::string prefix_;
  prometheus_labels labels_;
};

// A histogram family's samples for one series: cumulative counts at each bound, +Inf, then _sum unless
// it is not known (NaN) and _count.
inline void prom_histogram(prom_scope& sc, std::string_view suffix, const prometheus_labels& extra,
                           const std::vector<std::pair<double, std::uint64_t>>& cumulative,
                           std::uint64_t count, double sum) {
  const std::string b = std::string(suffix) + "_bucket";
  for (const auto& [le, n] : cumulative) {
    prometheus_labels ls = extra;
    ls.emplace_back("le", num(le));
    sc.sample(b, ls, n);
  }
  prometheus_labels ls = extra;
  ls.emplace_back("le", "+Inf");
  sc.sample(b, ls, count);
  if (!std::isnan(sum)) sc.sample(std::string(suffix) + "_sum", extra, sum);
  sc.sample(std::string(suffix) + "_count", extra, count);
}

// A summary family's samples for one series: a sample per quantile, then _count when it is known.
inline void prom_summary(prom_scope& sc, std::string_view suffix, const prometheus_labels& extra,
                         const std::vector<std::pair<double, std::chrono::nanoseconds>>& quantiles,
                         const std::uint64_t* count) {
  for (const auto& [q, v] : quantiles) {
    prometheus_labels ls = extra;
    ls.emplace_back("quantile", num(q));
    sc.sample(suffix, ls, v);
  }
  if (count) sc.sample(std::string(suffix) + "_count", extra, *count);
}

}  // namespace detail

FRUGAL_END_NAMESPACE
