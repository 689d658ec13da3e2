#pragma once

/// @file
/// @brief Every host component of frugal. Nothing here needs nvcc; CUDA lives in <frugal/cuda/...>.
#include "frugal/batcher.hpp"
#include "frugal/cache.hpp"
#include "frugal/clock.hpp"
#include "frugal/cost.hpp"
#include "frugal/element_type.hpp"
#include "frugal/kv.hpp"
#include "frugal/namespace.hpp"
#include "frugal/pool.hpp"
#include "frugal/prometheus.hpp"
#include "frugal/quant.hpp"
#include "frugal/version.hpp"

// Faces with a dependency of their own come in where its headers are found; their targets link its library.
#if __has_include(<nlohmann/json.hpp>)
#  include "frugal/job.hpp"
#endif
#if __has_include(<nlohmann/json.hpp>) && __has_include(<utf8proc.h>)
#  include "frugal/model.hpp"
#endif
#if __has_include(<hiredis/hiredis.h>)
#  include "frugal/redis.hpp"
#endif
#if __has_include(<hnswlib/hnswlib.h>)
#  include "frugal/semantic.hpp"
#endif
