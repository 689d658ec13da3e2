// frugal::cost alone: a ledger prices a batch and exports Prometheus text.
#include <chrono>
#include <cstdio>
#include <string>

#include <frugal/cost.hpp>

int main() {
  using namespace frugal::cost;
  ledger<> l{{.prices = {{.gpu_class = "L4", .on_demand = rate::per_hour(money::parse("$0.80"))}},
              .devices = {{.gpu_class = "L4"}}}};
  const feature_id feature = l.feature("embed");
  l.record_batch({.feature = feature, .busy = std::chrono::milliseconds(5), .batch_size = 4});
  l.record_request(feature, std::chrono::milliseconds(7), outcome::ok);
  const ledger_snapshot s = l.snapshot();
  if (s.total.batches != 1 || s.total.requests != 1) return 1;
  if (to_prometheus(s).find("frugal_") == std::string::npos) return 1;
  std::printf("frugal cost consumer ok\n");
  return 0;
}
