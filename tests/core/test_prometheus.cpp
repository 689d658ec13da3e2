#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "../support/errors.hpp"
#include "../support/prometheus.hpp"
#include "frugal/prometheus.hpp"

using frugal::prometheus_type;
using frugal_test::what_of;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("prometheus: a family declared by two instances has one HELP and TYPE and its samples together") {
  frugal::prometheus_writer w;
  for (const char* name : {"a", "b"}) {
    w.family("x_hits_total", prometheus_type::counter, "Hits.");
    w.sample("x_hits_total", {{"cache", name}}, std::uint64_t{3});
    w.family("x_entries", prometheus_type::gauge, "Entries.");
    w.sample("x_entries", {{"cache", name}}, 1.5);
  }
  CHECK(w.str() ==
        "# HELP x_hits_total Hits.\n# TYPE x_hits_total counter\n"
        "x_hits_total{cache=\"a\"} 3\nx_hits_total{cache=\"b\"} 3\n"
        "# HELP x_entries Entries.\n# TYPE x_entries gauge\n"
        "x_entries{cache=\"a\"} 1.5\nx_entries{cache=\"b\"} 1.5\n");
  FRUGAL_CHECK_PROMTOOL(w.str());
}

TEST_CASE(
    "prometheus: label values are escaped and numbers read back exactly, non-finite ones as Prometheus "
    "spells them") {
  frugal::prometheus_writer w;
  w.family("y", prometheus_type::gauge, "Values.");
  w.sample("y", {{"v", "say \"hi\"\\now\n"}}, 0.1);
  w.sample("y", {{"v", "inf"}}, std::numeric_limits<double>::infinity());
  w.sample("y", {{"v", "nan"}}, std::nan(""));
  w.sample("y", {{"v", "third"}}, 1.0 / 3);
  const std::string t = w.str();
  CHECK(contains(t, "y{v=\"say \\\"hi\\\"\\\\now\\n\"} 0.1\n"));
  CHECK(frugal_test::prom_value(t, "y{v=\"inf\"}") == "+Inf");
  CHECK(frugal_test::prom_value(t, "y{v=\"nan\"}") == "NaN");
  CHECK(std::stod(frugal_test::prom_value(t, "y{v=\"third\"}")) == 1.0 / 3);
  FRUGAL_CHECK_PROMTOOL(t);
  CHECK(frugal::detail::seconds(std::chrono::nanoseconds(1'500'000)) == "0.0015");
  CHECK(frugal::detail::seconds(std::chrono::seconds(2)) == "2.00");
  CHECK(frugal::detail::seconds(std::chrono::milliseconds(-250)) == "-0.25");
}

TEST_CASE("prometheus: what Prometheus would refuse or misread is an invalid_argument naming it") {
  frugal::prometheus_writer w;
  w.family("z_total", prometheus_type::counter, "Z.");
  w.sample("z_total", {{"m", "a"}}, 1.0);
  CHECK(contains(what_of([&] {
                   w.sample("z_total", {{"m", "a"}}, 2.0);
                 }),
                 "series z_total{m=\"a\"} written twice"));
  CHECK(contains(what_of([&] { w.family("z_total", prometheus_type::gauge, "Z."); }),
                 "family z_total declared again with another type"));
  CHECK(contains(what_of([&] { w.family("z_total", prometheus_type::counter, "Other."); }),
                 "family z_total declared again with another help"));
  CHECK(contains(what_of([&] { w.sample("w_total", {}, 1.0); }), "sample w_total has no family"));
  CHECK(
      contains(what_of([&] { w.sample("z_total_bucket", {}, 1.0); }), "sample z_total_bucket has no family"));
  CHECK(contains(what_of([&] { w.family("9lives", prometheus_type::gauge, "N."); }),
                 "\"9lives\" is not a valid metric name"));
  CHECK(contains(what_of([&] {
                   w.sample("z_total", {{"a-b", "x"}}, 1.0);
                 }),
                 "\"a-b\" on z_total is not a valid label name"));
  CHECK(contains(what_of([&] { w.sample("z_total", {{"__x", "x"}}, 1.0); }), "\"__x\" on z_total"));
  CHECK(contains(what_of([&] {
                   w.sample("z_total", {{"m", "b"}, {"m", "c"}}, 1.0);
                 }),
                 "label \"m\" repeats on z_total"));
  CHECK(contains(what_of([&] { w.family("h", prometheus_type::gauge, "two\nlines"); }), "line break"));
  // Nothing refused was written.
  CHECK(w.str() == "# HELP z_total Z.\n# TYPE z_total counter\nz_total{m=\"a\"} 1\n");
}
