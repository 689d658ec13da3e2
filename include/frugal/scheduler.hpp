#pragma once

/// @file
/// @brief frugal's iteration-level scheduler for decoders: sequences submitted from any thread join and
/// leave a user-owned model loop between steps; each step runs every due decode token first, then prefill
/// chunks, within a token budget, over a paged kv_cache with prefix sharing; preemption by recompute when
/// blocks run out; priorities, deadlines, cancellation, stop tokens; seeded sampling (greedy, temperature,
/// top-p) reproducible per sequence; stats with time-to-first-token and inter-token latency, as Prometheus
/// text. Model-agnostic.

#include "frugal/scheduler/errors.hpp"
#include "frugal/scheduler/export.hpp"
#include "frugal/scheduler/options.hpp"
#include "frugal/scheduler/sampling.hpp"
#include "frugal/scheduler/scheduler.hpp"
#include "frugal/scheduler/step.hpp"
