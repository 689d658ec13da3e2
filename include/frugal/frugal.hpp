#pragma once

/// @brief Every host component of frugal. Nothing here needs nvcc; CUDA lives in <frugal/cuda/...>.
#include "frugal/config.hpp"
