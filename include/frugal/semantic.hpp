#pragma once

/// @file
/// @brief frugal's semantic cache: results for similar inputs, keyed by embeddings, with an exact key
/// tried first. Needs hnswlib's headers (target frugal::semantic).

#include "frugal/semantic/semantic_cache.hpp"
