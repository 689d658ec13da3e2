#pragma once

/// @brief Every host component of frugal. Nothing here needs nvcc; CUDA lives in <frugal/cuda/...>.
#include "frugal/batcher.hpp"
#include "frugal/cache.hpp"
#include "frugal/clock.hpp"
#include "frugal/config.hpp"
#include "frugal/cost.hpp"
#include "frugal/pool.hpp"
#include "frugal/prometheus.hpp"
#include "frugal/quant.hpp"
