// money parsing and arithmetic on arbitrary text and integers. Property: no UB (the sanitizers watch),
// every overflow reported as std::overflow_error, and every result equal to a 128-bit reference.
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "frugal/cost/money.hpp"

namespace c = frugal::cost;

namespace {

__extension__ typedef __int128 i128;

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_money: %s (%lld, %lld)\n", what, a, b);
  std::abort();
}

constexpr i128 lo64 = std::numeric_limits<std::int64_t>::min();
constexpr i128 hi64 = std::numeric_limits<std::int64_t>::max();

// Round half to even of n / d (d > 0), written from floor division rather than truncation.
i128 ref_div(i128 n, i128 d) {
  i128 q = n / d, r = n % d;
  if (r < 0) q -= 1, r += d;  // now floor: n = q*d + r, 0 <= r < d
  if (2 * r > d || (2 * r == d && q % 2 != 0)) q += 1;
  return q;
}

// Runs op, which returns the library's result; want is the exact result, or empty if it overflows.
template <class Op>
void expect(Op op, i128 want, const char* what) {
  const bool fits = want >= lo64 && want <= hi64;
  try {
    const c::money got = op();
    if (!fits) fail(what, 0, 0);
    if (got.nanos() != static_cast<std::int64_t>(want)) fail(what, got.nanos(), static_cast<long long>(want));
  } catch (const std::overflow_error&) {
    if (fits) fail(what, static_cast<long long>(want), 1);
  }
}

// The grammar parse documents: [-][$][-]digits[.digits(1..9)][ CODE], spaces trimmed; a reference parse.
bool ref_parse(std::string t, i128& nanos, std::string& code) {
  while (!t.empty() && t.front() == ' ') t.erase(0, 1);
  while (!t.empty() && t.back() == ' ') t.pop_back();
  bool neg = false, dollar = false;
  std::size_t i = 0;
  if (i < t.size() && t[i] == '-') neg = true, ++i;
  if (i < t.size() && t[i] == '$') dollar = true, ++i;
  if (!neg && i < t.size() && t[i] == '-') neg = true, ++i;
  std::string num = t.substr(i);
  code.clear();
  if (auto sp = num.find(' '); sp != std::string::npos) {
    code = num.substr(sp + 1);
    while (!code.empty() && code.front() == ' ') code.erase(0, 1);
    num = num.substr(0, sp);
    if (dollar && code != "USD") return false;
  } else if (dollar) {
    code = "USD";
  }
  const auto dot = num.find('.');
  const std::string whole = num.substr(0, dot), frac = dot == std::string::npos ? "" : num.substr(dot + 1);
  if (whole.empty() || (dot != std::string::npos && (frac.empty() || frac.size() > 9))) return false;
  i128 v = 0;
  for (char ch : whole) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + (ch - '0');
    if (v > hi64) v = hi64 + 1;  // clamp; reported as overflow below
  }
  i128 f = 0;
  for (std::size_t k = 0; k < 9; ++k) {
    const char ch = k < frac.size() ? frac[k] : '0';
    if (ch < '0' || ch > '9') return false;
    f = f * 10 + (ch - '0');
  }
  nanos = v * 1'000'000'000 + f;
  if (neg) nanos = -nanos;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider fdp(bytes, size);
  const int op = fdp.ConsumeIntegralInRange<int>(0, 9);
  auto amount = [&]() -> std::int64_t {
    switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
        return std::numeric_limits<std::int64_t>::max() - fdp.ConsumeIntegralInRange<std::int64_t>(0, 3);
      case 1:
        return std::numeric_limits<std::int64_t>::min() + fdp.ConsumeIntegralInRange<std::int64_t>(0, 3);
      case 2:
        return fdp.ConsumeIntegralInRange<std::int64_t>(-3'000'000'000, 3'000'000'000);
      default:
        return fdp.ConsumeIntegral<std::int64_t>();
    }
  };
  const c::currency eur = c::currency::from_code("EUR");
  const std::int64_t a = amount(), b = amount();
  const bool mixed = fdp.ConsumeIntegralInRange<int>(0, 7) == 0;
  const c::money ma = c::money::from_nanos(a), mb = c::money::from_nanos(b, mixed ? eur : c::currency{});
  try {
    switch (op) {
      case 0: {
        const std::string text = fdp.ConsumeRandomLengthString(48);
        i128 want = 0;
        std::string code;
        const bool ok = ref_parse(text, want, code);
        try {
          const c::money m = c::money::parse(text);
          if (!ok) fail("parse accepted text outside its grammar");
          if (want < lo64 || want > hi64) fail("parse did not report overflow");
          if (m.nanos() != static_cast<std::int64_t>(want))
            fail("parse value", m.nanos(), static_cast<long long>(want));
          if (std::string(m.cur().code()) != (code.empty() ? "USD" : code)) fail("parse currency");
          // Printing and parsing back is exact.
          if (!(c::money::parse(m.to_string()) == m)) fail("to_string does not parse back", m.nanos());
          if (!(c::money::parse(m.to_decimal(), m.cur()) == m))
            fail("to_decimal does not parse back", m.nanos());
        } catch (const std::overflow_error&) {
          // Malformed text with too many digits may be reported as an overflow: an error either way.
          if (ok && want >= lo64 && want <= hi64) fail("parse overflow on text that fits");
        } catch (const std::invalid_argument& e) {
          // An unknown currency code is a clean error even when the grammar fits.
          if (ok && std::string(e.what()).find("currency") == std::string::npos)
            fail("parse rejected good text");
        }
        break;
      }
      case 1:
        expect([&] { return ma + mb; }, i128(a) + b, "+");
        break;
      case 2:
        expect([&] { return ma - mb; }, i128(a) - b, "-");
        break;
      case 3:
        expect([&] { return -ma; }, -i128(a), "unary -");
        break;
      case 4: {
        const std::int64_t k = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<std::int64_t>(-1000, 1000) : b;
        expect([&] { return ma * k; }, i128(a) * k, "*");
        break;
      }
      case 5: {
        const std::int64_t num = b, den = fdp.ConsumeIntegral<std::int64_t>();
        if (den <= 0) {
          try {
            (void)ma.mul_div(num, den);
            fail("mul_div accepted den <= 0");
          } catch (const std::invalid_argument&) {
          }
          break;
        }
        expect([&] { return ma.mul_div(num, den); }, ref_div(i128(a) * num, den), "mul_div");
        break;
      }
      case 6: {
        const std::int64_t units = amount(),
                           nanos = fdp.ConsumeIntegralInRange<std::int64_t>(-1'000'000'000, 1'000'000'000);
        const bool ok = nanos > -1'000'000'000 && nanos < 1'000'000'000 && !(units > 0 && nanos < 0) &&
                        !(units < 0 && nanos > 0);
        try {
          expect([&] { return c::money::from_units(units, nanos); }, i128(units) * 1'000'000'000 + nanos,
                 "from_units");
          if (!ok) fail("from_units accepted bad nanos");
        } catch (const std::invalid_argument&) {
          if (ok) fail("from_units rejected good input");
        }
        break;
      }
      case 7: {
        const auto ord = ma <=> mb;
        if ((ord < 0) != (a < b) || (ord == 0) != (a == b)) fail("ordering");
        break;
      }
      case 8: {
        const std::int64_t price = a < 0 ? -(a + 1) : a;
        const std::int64_t d = fdp.ConsumeIntegral<std::int64_t>();
        const bool hourly = fdp.ConsumeBool();
        const c::rate r = hourly ? c::rate::per_hour(c::money::from_nanos(price))
                                 : c::rate::per_second(c::money::from_nanos(price));
        if (d < 0) {
          try {
            (void)r.for_duration(std::chrono::nanoseconds(d));
            fail("negative duration accepted");
          } catch (const std::invalid_argument&) {
          }
          break;
        }
        expect([&] { return r.for_duration(std::chrono::nanoseconds(d)); },
               ref_div(i128(price) * d, hourly ? 3'600'000'000'000 : 1'000'000'000), "rate * duration");
        break;
      }
      case 9: {
        const std::int64_t price = a < 0 ? -(a + 1) : a;
        const std::uint64_t n = fdp.ConsumeIntegral<std::uint64_t>();
        const bool per_request = fdp.ConsumeBool();
        const c::rate r = per_request ? c::rate::per_request(c::money::from_nanos(price))
                                      : c::rate::per_million_tokens(c::money::from_nanos(price));
        expect([&] { return r.for_count(n); }, ref_div(i128(price) * i128(n), per_request ? 1 : 1'000'000),
               "rate * count");
        if (mb.nanos() < 0) {
          try {
            (void)c::rate::per_request(mb);
            fail("a negative price was accepted");
          } catch (const std::invalid_argument&) {
          }
        }
        break;
      }
    }
    if (mixed && op >= 1 && op <= 2) fail("mixing currencies was accepted");
  } catch (const std::invalid_argument& e) {
    if (!(mixed && (op == 1 || op == 2 || op == 7))) {
      std::fprintf(stderr, "%s\n", e.what());
      fail("unexpected invalid_argument");
    }
  }
  return 0;
}
