#pragma once

#include <array>
#include <chrono>
#include <compare>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {
namespace detail {

// __extension__ keeps -Wpedantic quiet about the 128-bit integer; gcc, clang and nvcc's host side have it.
__extension__ typedef __int128 int128;

[[noreturn]] inline void money_overflow(const char* what) {
  throw std::overflow_error(std::string("frugal::cost::money: overflow in ") + what);
}

inline std::int64_t narrow_checked(int128 v, const char* what) {
  if (v > std::numeric_limits<std::int64_t>::max() || v < std::numeric_limits<std::int64_t>::min())
    money_overflow(what);
  return static_cast<std::int64_t>(v);
}

// n / d rounded half to even (banker's rounding): ties go to the even quotient, so rounding errors do not
// drift in one direction when many small charges are summed. d must be > 0.
inline int128 div_half_even(int128 n, int128 d) {
  int128 q = n / d;
  int128 r = n % d;
  int128 twice = r < 0 ? -2 * r : 2 * r;
  if (twice > d || (twice == d && (q & 1) != 0)) q += n < 0 ? -1 : 1;
  return q;
}

}  // namespace detail

/// @brief An ISO 4217 currency from a fixed list of known codes; the default is USD.
class currency {
 public:
  constexpr currency() noexcept = default;

  /// @brief The currency for a code such as "USD" or "EUR"; throws std::invalid_argument for an unknown code.
  static currency from_code(std::string_view code) {
    for (std::string_view k : known_)
      if (k == code) return currency(k[0], k[1], k[2]);
    throw std::invalid_argument("frugal::cost::currency: unknown currency code \"" + std::string(code) +
                                "\" (known: USD EUR GBP JPY CNY INR CAD AUD CHF KRW SGD SEK NOK HKD BRL)");
  }

  /// @brief The three-letter code.
  constexpr std::string_view code() const noexcept { return {code_.data(), 3}; }

  friend constexpr bool operator==(const currency&, const currency&) = default;

 private:
  constexpr currency(char a, char b, char c) noexcept : code_{a, b, c} {}
  static constexpr std::array<std::string_view, 15> known_{"USD", "EUR", "GBP", "JPY", "CNY",
                                                           "INR", "CAD", "AUD", "CHF", "KRW",
                                                           "SGD", "SEK", "NOK", "HKD", "BRL"};
  std::array<char, 3> code_{'U', 'S', 'D'};
};

/// @brief An amount of one currency in integer nano-units (1e-9 of the unit), as google.type.Money: never a
/// float. An int64 holds about ±9.2 billion units. Arithmetic is exact; the only rounding (multiplication by
/// a fraction, division, pricing a duration) is half to even, and it happens in 128-bit. Overflow throws
/// std::overflow_error; mixing currencies throws std::invalid_argument.
class money {
 public:
  static constexpr std::int64_t nanos_per_unit = 1'000'000'000;

  constexpr money() noexcept = default;

  /// @brief An amount of `nanos` nano-units.
  static constexpr money from_nanos(std::int64_t nanos, currency c = {}) noexcept { return money(nanos, c); }

  /// @brief `units` whole units plus `nanos` (|nanos| < 1e9, same sign as units, as google.type.Money).
  static money from_units(std::int64_t units, std::int64_t nanos = 0, currency c = {}) {
    if (nanos <= -nanos_per_unit || nanos >= nanos_per_unit)
      throw std::invalid_argument("frugal::cost::money::from_units: nanos must be in (-1e9, 1e9)");
    if ((units > 0 && nanos < 0) || (units < 0 && nanos > 0))
      throw std::invalid_argument("frugal::cost::money::from_units: units and nanos must have the same sign");
    return money(detail::narrow_checked(detail::int128(units) * nanos_per_unit + nanos, "from_units"), c);
  }

  /// @brief Parses "$12.34", "-$0.5", "12.345678901 EUR" or a bare "12.34" (in `default_currency`); at most 9
  /// decimals. Throws std::invalid_argument on malformed text or an unknown code, naming what was expected
  /// where the parse stopped (the amount or the code after it); std::overflow_error if too big.
  static money parse(std::string_view text, currency default_currency = {}) {
    const std::string_view original = text;
    auto fail = [&](const std::string& why) -> money {
      // The text as the message shows it: non-printable bytes as \xNN (a NUL would end the message).
      std::string shown;
      for (const char ch : original) {
        const auto b = static_cast<unsigned char>(ch);
        if (b >= 0x20 && b < 0x7f) {
          shown += ch;
        } else {
          constexpr char hex[] = "0123456789abcdef";
          shown += {'\\', 'x', hex[b >> 4], hex[b & 15]};
        }
      }
      throw std::invalid_argument("frugal::cost::money::parse: \"" + shown + "\": " + why +
                                  " (an amount is written e.g. $12.34 or 12.34 EUR)");
    };
    auto trim = [](std::string_view& s) {
      while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
      while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    };
    auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
    auto letter = [](char ch) { return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z'); };
    // Built by appending: GCC 12's `const char* + std::string&&` trips a false -Wrestrict at -O3 (bug
    // 105329).
    auto quoted = [](char ch) {
      if (ch == '\'') return std::string("\"'\"");
      std::string q(1, '\'');
      q += ch;
      q += '\'';
      return q;
    };
    trim(text);
    if (text.empty()) return fail("is empty; expected an amount");
    bool negative = false;
    bool dollar = false;
    if (text.front() == '-') negative = true, text.remove_prefix(1);
    if (!text.empty() && text.front() == '$') dollar = true, text.remove_prefix(1);
    if (!negative && !text.empty() && text.front() == '-') negative = true, text.remove_prefix(1);
    // The amount: digits, then optionally '.' and 1 to 9 digits.
    const std::string after = dollar ? "after '$'" : negative ? "after '-'" : "at the start";
    if (text.empty()) return fail("expected digits " + after + ", found nothing");
    if (!digit(text.front())) {
      if (text.front() == '.') return fail("expected a digit before the decimal point");
      if (letter(text.front())) {  // a word where the amount goes: "USD 12", "abc"
        const std::string_view word = text.substr(0, text.find(' '));
        std::string_view rest = word.size() < text.size() ? text.substr(word.size()) : std::string_view{};
        trim(rest);
        if (!rest.empty() && (digit(rest.front()) || rest.front() == '$'))
          return fail("expected the amount first, found \"" + std::string(word) +
                      "\"; a currency code goes after the amount (\"" + std::string(rest) + " " +
                      std::string(word) + "\")");
        return fail("expected a number " + after + ", found \"" + std::string(word) + "\"");
      }
      return fail("expected a digit " + after + ", found " + quoted(text.front()));
    }
    detail::int128 units = 0;
    std::size_t i = 0;
    for (; i < text.size() && digit(text[i]); ++i) {
      units = units * 10 + (text[i] - '0');
      if (units > std::numeric_limits<std::int64_t>::max()) detail::money_overflow("parse");
    }
    std::int64_t frac = 0;
    int digits = 0;
    if (i < text.size() && text[i] == '.') {
      for (++i; i < text.size() && digit(text[i]); ++i, ++digits) {
        if (digits == 9) return fail("more than 9 decimals");
        frac = frac * 10 + (text[i] - '0');
      }
      if (digits == 0)
        return fail("expected a digit after the decimal point of \"" + std::string(text.substr(0, i)) + "\"");
    }
    const std::string amount(text.substr(0, i));
    // Then the end, or a space and a currency code.
    currency c = dollar ? currency{} : default_currency;
    if (i < text.size()) {
      if (text[i] != ' ')
        return fail("expected a digit, '.' or a space and a currency code after \"" + amount + "\", found " +
                    quoted(text[i]));
      std::string_view code = text.substr(i);
      trim(code);
      const bool three_letters = code.size() == 3 && letter(code[0]) && letter(code[1]) && letter(code[2]);
      if (!three_letters)
        return fail("expected a three-letter currency code after the amount \"" + amount + "\", found \"" +
                    std::string(code) + "\"");
      std::string upper(code);
      for (char& ch : upper)
        if (ch >= 'a' && ch <= 'z') ch = static_cast<char>(ch - 'a' + 'A');
      if (upper != code) {
        try {
          (void)currency::from_code(upper);
        } catch (const std::invalid_argument&) {
          return fail("unknown currency code \"" + std::string(code) + "\" after the amount \"" + amount +
                      "\"");
        }
        return fail("currency code \"" + std::string(code) + "\" must be upper case: " + upper);
      }
      currency coded;
      try {
        coded = currency::from_code(code);
      } catch (const std::invalid_argument& e) {
        std::string why = e.what();  // "frugal::cost::currency: unknown currency code ... (known: ...)"
        const auto colon = why.find(": ");
        if (colon != std::string::npos) why = why.substr(colon + 2);
        const auto known = why.find(" (known");
        why.insert(known == std::string::npos ? why.size() : known, " after the amount \"" + amount + "\"");
        return fail(why);
      }
      if (dollar && !(coded == currency{})) return fail("'$' with a currency other than USD");
      c = coded;
    }
    for (; digits < 9; ++digits) frac *= 10;
    detail::int128 total = units * nanos_per_unit + frac;
    return money(detail::narrow_checked(negative ? -total : total, "parse"), c);
  }

  /// @brief The amount in nano-units.
  constexpr std::int64_t nanos() const noexcept { return nanos_; }
  /// @brief The currency.
  constexpr currency cur() const noexcept { return currency_; }
  /// @brief True when the amount is zero.
  constexpr bool is_zero() const noexcept { return nanos_ == 0; }
  /// @brief For exports and plots only; the ledger never computes with it.
  constexpr double to_double() const noexcept { return static_cast<double>(nanos_) / nanos_per_unit; }

  /// @brief The exact amount as a decimal number without symbol, trailing zeros trimmed to at least 2
  /// decimals: "12.345678", "-0.50".
  std::string to_decimal() const {
    decimal_buffer b;
    const char* p = write_decimal(b, false);
    return std::string(p, b.end());
  }

  /// @brief "$12.345678" for USD, "12.50 EUR" otherwise; negative amounts as "-$0.50".
  std::string to_string() const {
    decimal_buffer b;
    if (currency_ == currency{}) {
      const char* p = write_decimal(b, true);
      return std::string(p, b.end());
    }
    const char* p = write_decimal(b, false);
    std::string out(p, b.end());
    out.push_back(' ');
    out.append(currency_.code());
    return out;
  }

  money operator-() const {
    if (nanos_ == std::numeric_limits<std::int64_t>::min()) detail::money_overflow("negation");
    return money(-nanos_, currency_);
  }
  money& operator+=(money o) {
    same_currency(o, "+");
    if (__builtin_add_overflow(nanos_, o.nanos_, &nanos_)) detail::money_overflow("+");
    return *this;
  }
  money& operator-=(money o) {
    same_currency(o, "-");
    if (__builtin_sub_overflow(nanos_, o.nanos_, &nanos_)) detail::money_overflow("-");
    return *this;
  }
  friend money operator+(money a, money b) { return a += b; }
  friend money operator-(money a, money b) { return a -= b; }
  friend money operator*(money a, std::int64_t k) {
    std::int64_t r;
    if (__builtin_mul_overflow(a.nanos_, k, &r)) detail::money_overflow("*");
    return money(r, a.currency_);
  }
  friend money operator*(std::int64_t k, money a) { return a * k; }

  /// @brief The amount times num/den, computed in 128-bit and rounded half to even; den must be > 0.
  money mul_div(std::int64_t num, std::int64_t den) const {
    if (den <= 0) throw std::invalid_argument("frugal::cost::money::mul_div: den must be > 0");
    return money(detail::narrow_checked(detail::div_half_even(detail::int128(nanos_) * num, den), "mul_div"),
                 currency_);
  }
  /// @brief The amount divided by n > 0, rounded half to even (e.g. cost per request).
  money divided_by(std::int64_t n) const {
    if (n <= 0) throw std::invalid_argument("frugal::cost::money::divided_by: n must be > 0");
    return mul_div(1, n);
  }

  friend constexpr bool operator==(const money&, const money&) = default;
  /// @brief Orders amounts of one currency; throws std::invalid_argument across currencies.
  friend std::strong_ordering operator<=>(const money& a, const money& b) {
    a.same_currency(b, "comparison");
    return a.nanos_ <=> b.nanos_;
  }

 private:
  // Sign, "$", 19 digits, ".", 9 digits: the text of any amount fits, written backwards from the end.
  // The digits are written into one buffer and the string built once from it: no string concatenation,
  // whose inlined copies GCC 12 at -O3 misreads as overlapping (-Wrestrict, GCC bug 105329).
  struct decimal_buffer {
    char chars[32];
    const char* end() const noexcept { return chars + sizeof chars; }
  };
  const char* write_decimal(decimal_buffer& b, bool dollar) const noexcept {
    const bool negative = nanos_ < 0;
    // The magnitude in unsigned arithmetic, so that the most negative amount needs no negation.
    const std::uint64_t magnitude =
        negative ? std::uint64_t{0} - static_cast<std::uint64_t>(nanos_) : static_cast<std::uint64_t>(nanos_);
    std::uint64_t units = magnitude / static_cast<std::uint64_t>(nanos_per_unit);
    std::uint64_t frac = magnitude % static_cast<std::uint64_t>(nanos_per_unit);
    int frac_digits = 9;
    while (frac_digits > 2 && frac % 10 == 0) {
      frac /= 10;
      --frac_digits;
    }
    char* p = b.chars + sizeof b.chars;
    for (int i = 0; i < frac_digits; ++i) {
      *--p = static_cast<char>('0' + frac % 10);
      frac /= 10;
    }
    *--p = '.';
    do {
      *--p = static_cast<char>('0' + units % 10);
      units /= 10;
    } while (units != 0);
    if (dollar) *--p = '$';
    if (negative) *--p = '-';
    return p;
  }

  constexpr money(std::int64_t nanos, currency c) noexcept : nanos_(nanos), currency_(c) {}
  void same_currency(const money& o, const char* op) const {
    if (!(currency_ == o.currency_))
      throw std::invalid_argument("frugal::cost::money: " + std::string(op) + " mixes " +
                                  std::string(currency_.code()) + " and " + std::string(o.currency_.code()));
  }

  std::int64_t nanos_ = 0;
  currency currency_{};
};

/// @brief What a rate's price is for.
enum class rate_unit { hour, second, request, million_tokens };

/// @brief A price per hour, per second, per request or per 1M tokens. A time rate times a duration, or a
/// count rate times a count, gives money (rounded half to even to the nano-unit). Never negative.
class rate {
 public:
  constexpr rate() noexcept = default;
  static rate per_hour(money price) { return rate(price, rate_unit::hour); }
  static rate per_second(money price) { return rate(price, rate_unit::second); }
  static rate per_request(money price) { return rate(price, rate_unit::request); }
  static rate per_million_tokens(money price) { return rate(price, rate_unit::million_tokens); }

  constexpr money price() const noexcept { return price_; }
  constexpr rate_unit unit() const noexcept { return unit_; }
  constexpr bool is_time() const noexcept { return unit_ == rate_unit::hour || unit_ == rate_unit::second; }

  /// @brief The cost of `d` at a time rate; throws for a count rate or a negative duration.
  money for_duration(std::chrono::nanoseconds d) const {
    if (!is_time())
      throw std::invalid_argument("frugal::cost::rate: a duration needs a per-hour or per-second rate");
    if (d.count() < 0) throw std::invalid_argument("frugal::cost::rate: negative duration");
    const std::int64_t period_ns = unit_ == rate_unit::hour ? 3'600'000'000'000 : 1'000'000'000;
    return money::from_nanos(
        detail::narrow_checked(detail::div_half_even(detail::int128(price_.nanos()) * d.count(), period_ns),
                               "rate * duration"),
        price_.cur());
  }
  /// @brief The cost of `n` requests (per-request rate) or `n` tokens (per-1M-tokens rate).
  money for_count(std::uint64_t n) const {
    if (is_time())
      throw std::invalid_argument("frugal::cost::rate: a count needs a per-request or per-token rate");
    const std::int64_t per = unit_ == rate_unit::request ? 1 : 1'000'000;
    return money::from_nanos(
        detail::narrow_checked(detail::div_half_even(detail::int128(price_.nanos()) * n, per),
                               "rate * count"),
        price_.cur());
  }

  template <class Rep, class Period>
  friend money operator*(const rate& r, std::chrono::duration<Rep, Period> d) {
    return r.for_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(d));
  }
  template <class Rep, class Period>
  friend money operator*(std::chrono::duration<Rep, Period> d, const rate& r) {
    return r * d;
  }

  /// @brief "$4.00/h", "$0.002/request", "$0.50/1M tokens".
  std::string to_string() const {
    static constexpr const char* suffix[] = {"/h", "/s", "/request", "/1M tokens"};
    return price_.to_string() + suffix[static_cast<int>(unit_)];
  }

  friend constexpr bool operator==(const rate&, const rate&) = default;

 private:
  rate(money price, rate_unit unit) : price_(price), unit_(unit) {
    if (price.nanos() < 0) throw std::invalid_argument("frugal::cost::rate: price must not be negative");
  }
  money price_{};
  rate_unit unit_ = rate_unit::hour;
};

}  // namespace cost
FRUGAL_END_NAMESPACE
