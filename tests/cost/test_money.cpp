#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "frugal/cost.hpp"

using namespace std::chrono_literals;
using frugal::cost::currency;
using frugal::cost::money;
using frugal::cost::rate;

namespace {
constexpr std::int64_t max64 = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t min64 = std::numeric_limits<std::int64_t>::min();
money usd(std::int64_t nanos) { return money::from_nanos(nanos); }
}  // namespace

TEST_CASE("money: amounts are exact nano-units and arithmetic throws on overflow, never wraps") {
  SUBCASE("units and nanos") {
    CHECK(money::from_units(12, 345'678'000).nanos() == 12'345'678'000);
    CHECK(money::from_units(-1, -500'000'000).nanos() == -1'500'000'000);
    CHECK_THROWS_AS(money::from_units(1, -1), std::invalid_argument);
    CHECK_THROWS_AS(money::from_units(0, 1'000'000'000), std::invalid_argument);
    CHECK_THROWS_AS(money::from_units(9'300'000'000), std::overflow_error);
    CHECK(money::from_units(9'223'372'036, 854'775'807).nanos() == max64);
  }
  SUBCASE("addition and subtraction at the int64 edges") {
    CHECK((usd(max64 - 1) + usd(1)).nanos() == max64);
    CHECK_THROWS_AS(usd(max64) + usd(1), std::overflow_error);
    CHECK_THROWS_AS(usd(min64) - usd(1), std::overflow_error);
    CHECK_THROWS_AS(-usd(min64), std::overflow_error);
    CHECK((usd(-5) - usd(7)).nanos() == -12);
    CHECK((usd(-5) + usd(7)).nanos() == 2);
  }
  SUBCASE("integer multiplication") {
    CHECK((usd(-3) * 4).nanos() == -12);
    CHECK((usd(max64 / 2) * 2).nanos() == max64 - 1);
    CHECK_THROWS_AS(usd(max64 / 2 + 1) * 2, std::overflow_error);
    CHECK((usd(-2) * (max64 / 2 + 1)).nanos() == min64);
    CHECK_THROWS_AS(usd(-2) * (max64 / 2 + 2), std::overflow_error);
  }
  SUBCASE("mul_div is 128-bit: the intermediate may exceed int64") {
    CHECK(usd(max64).mul_div(3, 3).nanos() == max64);
    CHECK(usd(max64 / 3).mul_div(3, 1).nanos() == max64 / 3 * 3);
    CHECK_THROWS_AS(usd(max64).mul_div(2, 1), std::overflow_error);
    CHECK_THROWS_AS(usd(1).mul_div(1, 0), std::invalid_argument);
  }
  SUBCASE("rounding is half to even, symmetric for negative amounts") {
    CHECK(usd(5).mul_div(1, 2).nanos() == 2);  // 2.5 -> 2
    CHECK(usd(7).mul_div(1, 2).nanos() == 4);  // 3.5 -> 4
    CHECK(usd(-5).mul_div(1, 2).nanos() == -2);
    CHECK(usd(-7).mul_div(1, 2).nanos() == -4);
    CHECK(usd(10).divided_by(3).nanos() == 3);  // 3.33 -> 3
    CHECK(usd(20).divided_by(3).nanos() == 7);  // 6.67 -> 7
    CHECK(usd(-20).divided_by(3).nanos() == -7);
    CHECK_THROWS_AS(usd(1).divided_by(0), std::invalid_argument);
  }
  SUBCASE("currencies do not mix") {
    const currency eur = currency::from_code("EUR");
    const money e = money::from_units(1, 0, eur);
    CHECK_THROWS_AS(e + usd(1), std::invalid_argument);
    CHECK_THROWS_AS((void)(e < usd(1)), std::invalid_argument);
    CHECK_FALSE(e == money::from_units(1));
    CHECK((e + e).nanos() == 2'000'000'000);
    CHECK_THROWS_AS(currency::from_code("XYZ"), std::invalid_argument);
    CHECK_THROWS_AS(currency::from_code("usd"), std::invalid_argument);
  }
}

TEST_CASE("money: formatting and parsing round-trip, and bad text gets a clear error") {
  CHECK(money::from_nanos(12'345'678'000).to_string() == "$12.345678");
  CHECK(money::from_nanos(12'000'000'000).to_string() == "$12.00");
  CHECK(money::from_nanos(1).to_string() == "$0.000000001");
  CHECK(money::from_nanos(-500'000'000).to_string() == "-$0.50");
  CHECK(money::from_nanos(min64).to_string() == "-$9223372036.854775808");
  CHECK(money::from_units(12, 500'000'000, currency::from_code("EUR")).to_string() == "12.50 EUR");

  CHECK(money::parse("$12.345678").nanos() == 12'345'678'000);
  CHECK(money::parse("-$0.5").nanos() == -500'000'000);
  CHECK(money::parse("$-0.5").nanos() == -500'000'000);
  CHECK(money::parse("7").nanos() == 7'000'000'000);
  CHECK(money::parse("0.000000001").nanos() == 1);
  CHECK(money::parse("12.50 EUR").cur() == currency::from_code("EUR"));
  CHECK(money::parse("$9223372036.854775807").nanos() == max64);
  for (std::int64_t v : {std::int64_t(0), std::int64_t(1), std::int64_t(-999'999'999), max64, min64 + 1,
                         std::int64_t(4'000'000'001)}) {
    CHECK(money::parse(money::from_nanos(v).to_string()).nanos() == v);
  }

  CHECK_THROWS_AS(money::parse(""), std::invalid_argument);
  CHECK_THROWS_AS(money::parse("$"), std::invalid_argument);
  CHECK_THROWS_AS(money::parse("$1.2.3"), std::invalid_argument);
  CHECK_THROWS_AS(money::parse("1."), std::invalid_argument);
  CHECK_THROWS_AS(money::parse(".5"), std::invalid_argument);
  CHECK_THROWS_AS(money::parse("1.0000000001"), std::invalid_argument);
  CHECK_THROWS_AS(money::parse("12 XYZ"), std::invalid_argument);
  CHECK_THROWS_AS(money::parse("$12 EUR"), std::invalid_argument);
  CHECK_THROWS_AS(money::parse("--1"), std::invalid_argument);
  CHECK_THROWS_AS(money::parse("$9223372037"), std::overflow_error);
  CHECK_THROWS_WITH_AS(money::parse("1.0000000001"), doctest::Contains("more than 9 decimals"),
                       std::invalid_argument);
}

TEST_CASE("money::parse: a malformed amount names what was expected where the parse stopped") {
  const auto why = [](const char* text) {
    try {
      (void)money::parse(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  // The number is never blamed as a currency code, nor the code as the number.
  for (const std::string text :
       {"12.3.4 USD", "USD", "1e5 USD", "abc", "12 usd", "USD 12", "12 34", "$ 12"}) {
    CAPTURE(text);
    const std::string w = why(text.c_str());
    CHECK(w != "parsed");
    CHECK(w.find("unknown currency code \"12") == std::string::npos);
    CHECK(w.find("unknown currency code \"34") == std::string::npos);
  }
  CHECK(why("12.3.4 USD").find("after \"12.3\", found '.'") != std::string::npos);
  CHECK(why("1e5 USD").find("after \"1\", found 'e'") != std::string::npos);
  CHECK(why("USD").find("expected a number at the start, found \"USD\"") != std::string::npos);
  CHECK(why("abc").find("expected a number at the start, found \"abc\"") != std::string::npos);
  CHECK(why("USD 12").find("a currency code goes after the amount (\"12 USD\")") != std::string::npos);
  CHECK(why("12 usd").find("\"usd\" must be upper case: USD") != std::string::npos);
  CHECK(why("12 34").find("expected a three-letter currency code after the amount \"12\", found \"34\"") !=
        std::string::npos);
  CHECK(why("12 XYZ").find("unknown currency code \"XYZ\" after the amount \"12\"") != std::string::npos);
  CHECK(why("$").find("expected digits after '$', found nothing") != std::string::npos);
  CHECK(why("$ 12").find("expected a digit after '$', found ' '") != std::string::npos);
  CHECK(why("--1").find("expected a digit after '-', found '-'") != std::string::npos);
  CHECK(why("1.").find("expected a digit after the decimal point") != std::string::npos);
  CHECK(why(".5").find("expected a digit before the decimal point") != std::string::npos);
  CHECK(why("").find("is empty") != std::string::npos);
  // Well-formed amounts still parse.
  CHECK(money::parse("$12").nanos() == 12'000'000'000);
  CHECK(money::parse(" 12.5 USD ").nanos() == 12'500'000'000);
  CHECK(money::parse("12  EUR").cur() == currency::from_code("EUR"));
}

TEST_CASE("rate: a price per hour, second, request or 1M tokens priced exactly with half-even rounding") {
  const rate hourly = rate::per_hour(money::parse("$3.60"));  // 1 nano-dollar per microsecond
  CHECK((hourly * 1s).nanos() == 1'000'000);
  CHECK((hourly * 1h).nanos() == 3'600'000'000);
  CHECK((hourly * 1500ns).nanos() == 2);  // 1.5 -> 2
  CHECK((hourly * 2500ns).nanos() == 2);  // 2.5 -> 2
  CHECK((hourly * 3500ns).nanos() == 4);  // 3.5 -> 4
  CHECK((rate::per_second(money::parse("$0.001")) * 250ms).nanos() == 250'000);
  CHECK(rate::per_request(money::parse("$0.002")).for_count(3).nanos() == 6'000'000);
  CHECK(rate::per_million_tokens(money::parse("$0.50")).for_count(3).nanos() == 1'500);
  CHECK(hourly.to_string() == "$3.60/h");
  // An hour at the largest price an int64 holds needs 128-bit intermediate math, and still fits.
  CHECK((rate::per_hour(money::from_nanos(max64)) * 1h).nanos() == max64);
  CHECK_THROWS_AS(rate::per_hour(money::from_nanos(max64)) * 2h, std::overflow_error);
  CHECK_THROWS_AS(hourly * -1s, std::invalid_argument);
  CHECK_THROWS_AS(rate::per_request(money::parse("$1")) * 1s, std::invalid_argument);
  CHECK_THROWS_AS(hourly.for_count(1), std::invalid_argument);
  CHECK_THROWS_AS(rate::per_hour(money::parse("-$1")), std::invalid_argument);
}

TEST_CASE("histogram: buckets tile the integers, 1024 per power of two above 2048") {
  using frugal::cost::histogram_snapshot;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t v = rng() >> (rng() % 64);
    const auto b = histogram_snapshot::bucket_of(v);
    CHECK(histogram_snapshot::bucket_lowest(b) <= v);
    CHECK(v - histogram_snapshot::bucket_lowest(b) < histogram_snapshot::bucket_width(b));
    if (v >= 2048) CHECK(histogram_snapshot::bucket_width(b) * 1024 <= histogram_snapshot::bucket_lowest(b));
  }
  for (std::uint32_t b = 0; b < 40000; ++b)
    CHECK(histogram_snapshot::bucket_lowest(b + 1) ==
          histogram_snapshot::bucket_lowest(b) + histogram_snapshot::bucket_width(b));
}

TEST_CASE("histogram: percentiles of 1M random samples are within value/2048 of the exact ones") {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> lat(std::log(2e6), 1.2);  // about 2 ms, heavy tail
  frugal::cost::log_linear_histogram h;
  std::vector<std::uint64_t> xs(1'000'000);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    // Some exact small values too, where the histogram must be exact.
    xs[i] = i % 10 == 0 ? rng() % 3000 : static_cast<std::uint64_t>(lat(rng));
    h.record(xs[i]);
  }
  const auto s = h.snapshot();
  REQUIRE(s.count == xs.size());
  std::sort(xs.begin(), xs.end());
  for (double q : {0.0, 0.001, 0.05, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0}) {
    CAPTURE(q);
    const auto rank =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * double(xs.size()))));
    const std::uint64_t exact = xs[rank - 1];
    const std::uint64_t approx = s.value_at(q);
    CAPTURE(exact);
    CAPTURE(approx);
    const std::uint64_t err = approx > exact ? approx - exact : exact - approx;
    if (exact < 2048)
      CHECK(err == 0);
    else
      CHECK(double(err) <= double(exact) / 2048.0);
  }
  std::uint64_t sum = 0;
  for (auto x : xs) sum += x;
  CHECK(s.sum == sum);
}

TEST_CASE("histogram: coordinated omission correction records the held-back requests") {
  frugal::cost::log_linear_histogram h;
  h.record_corrected(100, 10);  // 100, then 90, 80, ..., 10
  auto s = h.snapshot();
  CHECK(s.count == 10);
  CHECK(s.value_at(0.0) == 10);
  CHECK(s.value_at(1.0) == 100);
  h.record_corrected(5, 10);
  CHECK(h.snapshot().count == 11);
  frugal::cost::log_linear_histogram small(4096);
  small.record(1'000'000);
  CHECK(small.clamped() == 1);
  CHECK(small.snapshot().value_at(1.0) >= 4095);
  CHECK_THROWS_AS(frugal::cost::log_linear_histogram(10), std::invalid_argument);
  CHECK_THROWS_AS((void)s.value_at(1.5), std::invalid_argument);
}

TEST_CASE("histogram: merging saturates the count and the sum instead of wrapping below a part") {
  frugal::cost::histogram_snapshot a, b;
  a.buckets = {{1, 1}};
  a.count = 1;
  a.sum = UINT64_MAX - 5;
  b.buckets = {{1, 2}, {3, 1}};
  b.count = UINT64_MAX;
  b.sum = 10;
  a.merge(b);
  CHECK(a.sum == UINT64_MAX);
  CHECK(a.count == UINT64_MAX);
  REQUIRE(a.buckets.size() == 2);
  CHECK(a.buckets[0] == std::pair<std::uint32_t, std::uint64_t>{1, 3});
  frugal::cost::histogram_snapshot c;
  c.count = 2;
  c.sum = 7;
  c.merge(frugal::cost::histogram_snapshot{.buckets = {}, .count = 3, .sum = 5});
  CHECK(c.count == 5);
  CHECK(c.sum == 12);
}
