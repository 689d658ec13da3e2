#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frugal/cost/money.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace cost {

/// @brief One GPU type a deployment could run on.
struct gpu_type {
  std::string name;
  std::uint64_t memory_bytes = 0;
  double relative_throughput = 1.0;  ///< inference throughput relative to one A100 40GB
  rate on_demand{};                  ///< per hour
  rate spot{};                       ///< per hour; zero where no spot market is assumed
};

/// @brief A catalog of common GPU types. THE PRICES ARE EXAMPLES, rough public cloud list prices per GPU-hour
/// as of 2024-2025, and the throughputs rough ratios for transformer inference; they are not quotes. Replace
/// the catalog with your own contract prices and measured throughputs before trusting a recommendation.
inline std::vector<gpu_type> default_catalog() {
  constexpr std::uint64_t gib = 1ull << 30;
  auto hr = [](const char* price) { return rate::per_hour(money::parse(price)); };
  return {
      {"T4", 16 * gib, 0.25, hr("$0.35"), hr("$0.12")},
      {"L4", 24 * gib, 0.45, hr("$0.80"), hr("$0.30")},
      {"A10G", 24 * gib, 0.50, hr("$1.01"), hr("$0.40")},
      {"L40S", 48 * gib, 1.10, hr("$1.80"), hr("$0.85")},
      {"A100-40GB", 40 * gib, 1.00, hr("$2.90"), hr("$1.20")},
      {"A100-80GB", 80 * gib, 1.15, hr("$3.70"), hr("$1.60")},
      {"H100-80GB", 80 * gib, 2.50, hr("$4.50"), hr("$2.20")},
      {"H200-141GB", 141 * gib, 3.00, hr("$5.50"), hr("$2.80")},
  };
}

}  // namespace cost
FRUGAL_END_NAMESPACE
