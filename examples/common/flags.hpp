#pragma once

// The command line of every example binary: one reader of `--name VALUE` and `--name=VALUE` flags, with
// one set of error texts. A bad command line is a usage_error, which each binary turns into its usage
// exit status.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace examples {

/// @brief A bad command line: an unknown flag, a missing value, a value out of its range.
struct usage_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// @brief The integer value @p v of flag @p flag, in [lo, hi]; anything else (a sign, trailing text, out of
/// range) throws usage_error naming the flag, the range and the value.
inline std::uint64_t integer_flag(const std::string& flag, const std::string& v, std::uint64_t lo,
                                  std::uint64_t hi) {
  std::size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(v, &pos);
  } catch (...) {
    pos = 0;
  }
  if (v.empty() || v[0] == '-' || pos != v.size() || n < lo || n > hi)
    throw usage_error(flag + " must be an integer in " + std::to_string(lo) + " .. " + std::to_string(hi) +
                      ", not \"" + v + "\"");
  return n;
}

/// @brief The number @p v of flag @p flag, in [lo, hi]; anything else (trailing text, NaN, out of range)
/// throws usage_error naming the flag, the range and the value.
inline double number_flag(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= lo && x <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "%g .. %g", lo, hi);
    throw usage_error(flag + " must be a number in " + range + ", not \"" + v + "\"");
  }
  return x;
}

/// @brief main()'s arguments, one flag at a time:
///
///   examples::flags f(argc, argv);
///   while (f.next()) {
///     if (f.is("--port")) port = f.integer(0, 65535);
///     else if (f.is("--verbose")) verbose = true;
///     else f.unknown();
///   }
///
/// A flag's value is the text after its `=`, or else the next argument. A flag given `=VALUE` that reads
/// no value is refused by the next call to next().
class flags {
 public:
  flags(int argc, char** argv) : args_(argv + (argc > 0 ? 1 : 0), argv + (argc > 0 ? argc : 0)) {}

  /// @brief Moves to the next argument; false after the last.
  bool next() {
    if (inline_ && !taken_) throw usage_error(name_ + " takes no value, not \"" + arg_ + "\"");
    if (at_ >= args_.size()) return false;
    arg_ = args_[at_++];
    const auto eq = arg_.find('=');
    inline_ = arg_.rfind("--", 0) == 0 && eq != std::string::npos;
    name_ = inline_ ? arg_.substr(0, eq) : arg_;
    taken_ = false;
    return true;
  }

  /// @brief Whether the current argument is flag @p name (alone or as `name=VALUE`).
  bool is(std::string_view name) const { return name_ == name; }
  /// @brief The current flag's name, without any `=VALUE`.
  const std::string& name() const { return name_; }

  /// @brief The current flag's value: after its `=`, or else the next argument.
  std::string value() {
    if (inline_) {
      taken_ = true;
      return arg_.substr(name_.size() + 1);
    }
    if (at_ >= args_.size()) throw usage_error(name_ + " needs a value");
    return args_[at_++];
  }
  std::uint64_t integer(std::uint64_t lo, std::uint64_t hi) { return integer_flag(name_, value(), lo, hi); }
  double number(double lo, double hi) { return number_flag(name_, value(), lo, hi); }

  /// @brief The current argument whole, `=VALUE` included, taken as it stands (e.g. a config override).
  const std::string& take() {
    taken_ = true;
    return arg_;
  }
  /// @brief The argument after the current one without taking it; empty after the last.
  std::string_view peek() const {
    return at_ < args_.size() ? std::string_view(args_[at_]) : std::string_view();
  }

  [[noreturn]] void unknown() const { throw usage_error("unknown argument \"" + arg_ + "\""); }

 private:
  std::vector<std::string> args_;
  std::size_t at_ = 0;
  std::string arg_, name_;
  bool inline_ = false, taken_ = false;
};

}  // namespace examples
