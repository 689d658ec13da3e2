#pragma once

/// @file
/// @brief frugal's dynamic batcher: batcher<Request, Result> groups requests from any thread into batches
/// for a model loop the user owns, with deadlines, cancellation, priorities, bounded queues, fixed-window
/// and adaptive policies, and stats() whose latency percentiles agree with the cost ledger's, with their
/// Prometheus text.

#include "frugal/batcher/batch.hpp"
#include "frugal/batcher/batcher.hpp"
#include "frugal/batcher/errors.hpp"
#include "frugal/batcher/export.hpp"
#include "frugal/batcher/light_future.hpp"
#include "frugal/batcher/options.hpp"
#include "frugal/batcher/policy.hpp"
