#pragma once

/// @brief frugal's cost accounting: money and rates, a ledger of GPU time per feature that the inference loop
/// feeds, snapshots with utilization, idle cost and savings, Prometheus/JSON/table exports, and advisors.
#include "frugal/cost/advisors.hpp"
#include "frugal/cost/catalog.hpp"
#include "frugal/cost/export.hpp"
#include "frugal/cost/histogram.hpp"
#include "frugal/cost/ledger.hpp"
#include "frugal/cost/money.hpp"
#include "frugal/cost/snapshot.hpp"
