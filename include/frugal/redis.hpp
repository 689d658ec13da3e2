#pragma once

/// @file
/// @brief frugal's shared result tier for replicas: redis_tier, the in-process LRU in front of a Redis
/// that every replica shares, with versioned values, pipelined batches, cross-replica single flight, and
/// a circuit breaker so that Redis faults never reach the caller, and its stats as Prometheus text. Needs
/// hiredis: link frugal::redis.

#include "frugal/redis/client.hpp"
#include "frugal/redis/codec.hpp"
#include "frugal/redis/errors.hpp"
#include "frugal/redis/export.hpp"
#include "frugal/redis/options.hpp"
#include "frugal/redis/tier.hpp"
